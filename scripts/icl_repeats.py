"""Olsson et al. 2022's in-context learning score of a text model before and after its induction
heads form (docs/results.md, "In-context learning on tinyshakespeare"): the 2-layer attention-only
model of scripts/icl_shakespeare.sh, trained through the library's API on tinyshakespeare
windows of which a share repeats its own first half (a span of the play read twice, as Olsson et
al.'s repeated-token diagnostics read random tokens twice), so that copying from earlier in the
context pays and the heads form within minutes on 2 cores. The score is measured as the paper
defines it on the validation text, unmodified (no repeats), at each --at step:

    python scripts/icl_repeats.py --at 0 250 500 1000 2000 [--tokenizer bpe] [--repeat-share 0.5] [--seed 1337]

--tokenizer bpe (the default) is scripts/icl_shakespeare.sh's byte-level BPE of 1,024 ids trained
on the training split; char reads characters (where one character recurs every few positions, so
the token before a repeat names no single earlier place to copy from).

Each line: the step, the in-context learning score (loss on token 500 minus on token 50, every
window of the validation split starting every 128 tokens, training/induction.py `icl_score`),
the best head's prefix-matching score (lens.head_scores "induction" on 16 random blocks of 100
characters read twice) and the validation loss, with the CPU seconds of training so far.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from _oneline import run  # scripts/_oneline.py: a library error is one line, exit code 2
from icl_score import prefix_matching  # scripts/icl_score.py: the heads' score, as text

from scratchformer.allocator import keep_freed_memory
from scratchformer.optim import clip_grad_norm, make_adamw, param_groups
from scratchformer.training.induction import icl_score
from scratchformer.training.lm import LMJob

T = 512  # the context: the 500th token is predicted from the 499 before it
MODEL = dict(
    n_layer=2,
    n_head=4,
    n_embd=64,
    attn_only=True,
    positional="rope",
    init="pytorch",
    tie_weights=False,
    dropout=0.0,
)  # scripts/icl_shakespeare.sh's model
BATCH, LR, WEIGHT_DECAY = 8, 3e-3, 0.1


def batch(ids: np.ndarray, rng: np.random.Generator, repeat_share: float) -> tuple[np.ndarray, np.ndarray]:
    """(x, y), each (BATCH, T): windows of T + 1 tokens of `ids`; in a `repeat_share` of them the
    second half is the first half again (the span read twice)."""
    starts = rng.integers(0, len(ids) - T - 1, size=BATCH)
    windows = np.stack([ids[s : s + T + 1] for s in starts])
    half = (T + 1) // 2 + 1
    for row in np.flatnonzero(rng.random(BATCH) < repeat_share):
        windows[row, half:] = windows[row, : T + 1 - half]
    return windows[:, :-1], windows[:, 1:]


def measure(model, val_ids: np.ndarray, seed: int) -> str:
    starts = range(0, len(val_ids) - T, T // 4)
    score = icl_score(model, np.stack([val_ids[s : s + T + 1] for s in starts]))
    return (
        f"in-context learning score {score['icl_score']:+.3f} nats (token 500 {score['loss_late']:.3f}, "
        f"token 50 {score['loss_early']:.3f}, {score['windows']} windows); " + prefix_matching(model, seed)
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--at", type=int, nargs="+", required=True, help="the steps to measure at (0: untrained)")
    ap.add_argument(
        "--repeat-share", type=float, default=0.5, help="share of windows read twice (default: 0.5)"
    )
    ap.add_argument("--seed", type=int, default=1337, help="the weights' and batches' seed (default: 1337)")
    ap.add_argument("--tokenizer", choices=["bpe", "char"], default="bpe", help="default: bpe (1,024 ids)")
    args = ap.parse_args()
    if sorted(set(args.at)) != args.at or args.at[0] < 0:
        ap.error("--at takes increasing steps, each >= 0")
    if not 0 <= args.repeat_share <= 1:
        ap.error("--repeat-share is a share: between 0 and 1")
    keep_freed_memory()  # as train() does
    data = {"path": "shakespeare", "tokenizer": args.tokenizer, "block_size": T, "split_seed": 1337}
    data["vocab_size"] = 1024 if args.tokenizer == "bpe" else None
    job = LMJob.create("text", MODEL, data, seed=args.seed)
    model, train_ids, val_ids = job.model, job.dataset.train.ids, job.dataset.val.ids
    opt = make_adamw(param_groups(model, WEIGHT_DECAY), lr=LR, betas=(0.9, 0.99), weight_decay=WEIGHT_DECAY)
    rng, cpu, step = np.random.default_rng(args.seed), 0.0, 0
    for target in args.at:
        start = time.process_time()
        while step < target:
            x, y = batch(train_ids, rng, args.repeat_share)
            opt.zero_grad()
            model(x, y)
            model.backward()
            clip_grad_norm(model.parameters(), 1.0)
            opt.step()
            step += 1
        cpu += time.process_time() - start
        val = job.evaluate("val", batches=8)["loss"]
        print(f"step {step} ({cpu:.0f} s CPU): val loss {val:.3f}; {measure(model, val_ids, 0)}", flush=True)


if __name__ == "__main__":
    run(main)
