"""Olsson et al. 2022's in-context learning score on tinyshakespeare, before and after heads form.

docs/results.md, "After the heads form": the 2-layer attention-only model of
scripts/icl_shakespeare.sh, trained through the library's API on tinyshakespeare windows in
which a span of the play is read twice (as Olsson et al.'s diagnostics read random tokens
twice), so that copying from earlier in the context pays. Read at 512 tokens from the start, no
head formed in 3,000 steps: a head spreads its weight over the whole context, and the place to
copy from gets too little of it to be learned. So the first --short-steps read windows
of --short-len tokens (64: 64 windows a step, the same 4,096 tokens), where the heads form in
minutes; the windows of 512 after them carry the heads to longer distances. The score is
measured as the paper defines it on the validation text, unmodified (no repeats), at each --at:

    python scripts/icl_repeats.py --at 0 500 1000 1500 2000 [--ablate] [--short-steps 0 --short-len 512]

--tokenizer bpe (the default) is scripts/icl_shakespeare.sh's byte-level BPE of 1,024 ids trained
on the training split; char reads characters. --ablate: after the last step, each head zeroed in
turn (lens.head_ablation) and the score's change printed.

Each line: the step, the CPU seconds of training so far, the validation loss, the in-context
learning score (loss on token 500 minus on token 50, every window of the validation split
starting every 128 tokens, training/induction.py `icl_score`) and the best head's
prefix-matching score (lens.head_scores "induction" on 16 random blocks of tokens read twice:
32 tokens while the model has read short windows only, whose distances are all it knows with
rotary positions, 100 after).
"""

from __future__ import annotations

import time

import numpy as np
from _oneline import run  # scripts/_oneline.py: a library error is one line, exit code 2
from icl_score import REPEATED, prefix_matching  # scripts/icl_score.py: the heads' score, as text

from scratchformer import lens
from scratchformer.allocator import keep_freed_memory
from scratchformer.cli.main import Parser
from scratchformer.nn import eval_mode
from scratchformer.optim import clip_grad_norm, make_adamw, param_groups
from scratchformer.training.induction import ICL_EARLY, ICL_LATE, icl_score, token_losses
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
BATCH, LR, WEIGHT_DECAY = 8, 1e-2, 0.1


def batch(
    ids: np.ndarray, rng: np.random.Generator, length: int, repeat_share: float, shortest: int
) -> tuple[np.ndarray, np.ndarray]:
    """(x, y), each (BATCH * T // length, length): windows of length + 1 tokens of `ids`, as many
    as make a step of BATCH * T tokens; in a `repeat_share` of them a span of L tokens is read
    again right after itself, L drawn between `shortest` and length // 2, and the text goes on
    after the repeat (so the distance to copy from varies and only the tokens can tell it).
    In windows shorter than T the span starts the window (where the heads formed in the tries of
    docs/results.md); in windows of T tokens it starts anywhere it fits (token 500 is then far
    likelier to be a copy than token 50, which only a span shorter than 50 can reach: the
    control without short windows, --short-steps 0, shares that)."""
    starts = rng.integers(0, len(ids) - length - 1, size=BATCH * T // length)
    windows = np.stack([ids[s : s + length + 1] for s in starts])
    for row in np.flatnonzero(rng.random(len(windows)) < repeat_share):
        span = int(rng.integers(shortest, length // 2 + 1))
        at = int(rng.integers(0, length + 2 - 2 * span)) if length == T else 0
        windows[row, at + span : at + 2 * span] = windows[row, at : at + span]
    return windows[:, :-1], windows[:, 1:]


def val_windows(val_ids: np.ndarray) -> np.ndarray:
    """(n, T + 1): the validation windows the score reads, one starting every T // 4 tokens."""
    return np.stack([val_ids[s : s + T + 1] for s in range(0, len(val_ids) - T, T // 4)])


def measure(model, val_ids: np.ndarray, seed: int, half: int) -> str:
    score = icl_score(model, val_windows(val_ids))
    return (
        f"in-context learning score {score['icl_score']:+.3f} nats (token 500 {score['loss_late']:.3f}, "
        f"token 50 {score['loss_early']:.3f}, {score['windows']} windows); "
        + prefix_matching(model, seed, half)
    )


def ablations(model, val_ids: np.ndarray, windows: int = 64) -> str:
    """Each head zeroed in turn (lens.head_ablation): how the in-context learning score of the
    first `windows` validation windows moves, as text (the same windows with and without, so the
    differences are paired)."""
    w = val_windows(val_ids)[:windows]
    x, y = w[:, :-1], w[:, 1:]

    def score(out) -> float:
        losses = token_losses(out[0] if isinstance(out, tuple) else out, y)
        return float((losses[:, ICL_LATE - 2] - losses[:, ICL_EARLY - 2]).mean())

    with eval_mode(model):
        r = lens.head_ablation(model, (x,), metric=score)
    return f"each head zeroed, the score of {len(w)} windows ({r.baseline:+.3f}) moves by: " + "; ".join(
        f"{label} " + " ".join(f"{v:+.3f}" for v in row) for label, row in zip(r.labels, r.change)
    )


def main() -> None:
    ap = Parser(description=__doc__.splitlines()[0])  # a usage error: one line, exit code 2
    ap.add_argument("--at", type=int, nargs="+", required=True, help="the steps to measure at (0: untrained)")
    ap.add_argument("--tokenizer", choices=["bpe", "char"], default="bpe", help="default: bpe (1,024 ids)")
    ap.add_argument("--lr", type=float, default=LR, help=f"AdamW's learning rate, constant (default: {LR})")
    ap.add_argument(
        "--repeat-share",
        type=float,
        default=1.0,
        help="share of windows with a span read twice (default: 1.0)",
    )
    ap.add_argument(
        "--long-share",
        type=float,
        default=None,
        help=f"share of the {T}-token windows with a span read twice (default: --repeat-share)",
    )
    ap.add_argument("--shortest", type=int, default=8, help="shortest span read twice (default: 8)")
    ap.add_argument(
        "--short-len",
        type=int,
        default=64,
        help="tokens of a window in the first --short-steps (default: 64)",
    )
    ap.add_argument(
        "--short-steps",
        type=int,
        default=1500,
        help=f"steps on short windows before the {T}-token ones (default: 1500)",
    )
    ap.add_argument(
        "--cooldown",
        type=int,
        default=0,
        help="steps before the last --at over which the rate falls linearly to 0 (default: 0: constant)",
    )
    ap.add_argument(
        "--ablate",
        action="store_true",
        help="after the last step, zero each head in turn and print the score's change",
    )
    ap.add_argument("--seed", type=int, default=1337, help="the weights' and batches' seed (default: 1337)")
    args = ap.parse_args()
    if sorted(set(args.at)) != args.at or args.at[0] < 0:
        ap.error("--at takes increasing steps, each >= 0")
    if not 0 <= args.cooldown <= args.at[-1]:
        ap.error("--cooldown is a number of steps, at most the last --at")
    long_share = args.repeat_share if args.long_share is None else args.long_share
    if not (0 <= args.repeat_share <= 1 and 0 <= long_share <= 1):
        ap.error("--repeat-share and --long-share are shares: between 0 and 1")
    if not 2 <= args.short_len <= T or T % args.short_len:
        ap.error(f"--short-len must divide {T} (a step reads {BATCH * T} tokens either way)")
    if not 1 <= args.shortest <= args.short_len // 2:
        ap.error(f"--shortest is a span of 1 to {args.short_len // 2} tokens (half of --short-len)")
    keep_freed_memory()  # as train() does
    data = {"path": "shakespeare", "tokenizer": args.tokenizer, "block_size": T, "split_seed": 1337}
    data["vocab_size"] = 1024 if args.tokenizer == "bpe" else None
    job = LMJob.create("text", MODEL, data, seed=args.seed)
    model, train_ids, val_ids = job.model, job.dataset.train.ids, job.dataset.val.ids
    opt = make_adamw(
        param_groups(model, WEIGHT_DECAY), lr=args.lr, betas=(0.9, 0.99), weight_decay=WEIGHT_DECAY
    )
    rng, cpu, step = np.random.default_rng(args.seed), 0.0, 0
    for target in args.at:
        start = time.process_time()
        while step < target:
            length = args.short_len if step < args.short_steps else T
            opt.lr = args.lr * min(1.0, (args.at[-1] - step) / args.cooldown) if args.cooldown else args.lr
            share = args.repeat_share if length < T else long_share
            x, y = batch(train_ids, rng, length, share, args.shortest)
            opt.zero_grad()
            model(x, y)
            model.backward()
            clip_grad_norm(model.parameters(), 1.0)
            opt.step()
            step += 1
        cpu += time.process_time() - start
        val = job.evaluate("val", batches=8)["loss"]
        trained = args.short_len if step <= args.short_steps else T  # the windows read so far
        heads = measure(model, val_ids, 0, min(REPEATED, trained // 2))
        print(f"step {step} ({cpu:.0f} s CPU): val loss {val:.3f}; {heads}", flush=True)
    if args.ablate:
        print(ablations(model, val_ids), flush=True)


if __name__ == "__main__":
    run(main)
