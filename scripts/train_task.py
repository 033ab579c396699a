#!/usr/bin/env python
"""Train a model on a toy task and report held-out accuracy and wall time.

    python scripts/train_task.py --task majority    # TransformerClassifier, accuracy on 400
    python scripts/train_task.py --task copy        # Seq2SeqTransformer, greedy exact match on 1000
    python scripts/train_task.py --task reverse --steps 3000 --beam 4

Defaults come from scratchformer.data.tasks.TASK_DEFAULTS (the settings that reach the 99%
bars); any training setting can be overridden on the command line.
"""

from __future__ import annotations

import os

# These models multiply small matrices: one BLAS thread is faster than several (and far faster
# on a busy machine, where spinning BLAS threads fight for cores). Set the variables to override.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse
import json
import sys
import time

import numpy as np

from scratchformer.data.tasks import (
    BOS,
    EOS,
    MAJORITY_SYMBOLS,
    PAD,
    SEQ2SEQ_TASKS,
    TASKS,
    VOCAB_SIZE,
    exact_match,
    make_split,
    task_defaults,
)
from scratchformer.inference import beam_search, greedy_decode
from scratchformer.models import (
    ClassifierConfig,
    Seq2SeqConfig,
    Seq2SeqTransformer,
    TransformerClassifier,
)
from scratchformer.nn import manual_seed
from scratchformer.optim import AdamW, clip_grad_norm, cosine_lr, param_groups


def build_model(task: str, model_kw: dict, max_len: int):
    if task in SEQ2SEQ_TASKS:
        cfg = Seq2SeqConfig(src_vocab_size=VOCAB_SIZE, tgt_vocab_size=VOCAB_SIZE, max_len=max_len + 1,
                            pad_id=PAD, bos_id=BOS, eos_id=EOS, **model_kw)
        return Seq2SeqTransformer(cfg)
    cfg = ClassifierConfig(vocab_size=MAJORITY_SYMBOLS, n_classes=MAJORITY_SYMBOLS, max_len=max_len, **model_kw)
    return TransformerClassifier(cfg)


def evaluate(task: str, model, data, beam: int = 1, batch_size: int = 500) -> float:
    """Held-out accuracy: classification accuracy, or exact match of greedy (beam) decoding."""
    correct = []
    for i in range(0, len(data), batch_size):
        part = data.subset(slice(i, i + batch_size))
        if task in SEQ2SEQ_TASKS:
            if beam > 1:
                pred = beam_search(model, part.src, beam_width=beam)
            else:
                pred = greedy_decode(model, part.src)
            correct.append(exact_match(pred, part.tgt_out))
        else:
            correct.append(model.predict(part.x) == part.y)
    return float(np.concatenate(correct).mean())


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", required=True, choices=TASKS)
    for name, typ in [("steps", int), ("batch_size", int), ("lr", float), ("min_lr", float),
                      ("warmup_steps", int), ("weight_decay", float), ("grad_clip", float),
                      ("n_train", int), ("n_test", int), ("max_len", int), ("seed", int)]:
        p.add_argument(f"--{name.replace('_', '-')}", dest=name, type=typ, default=None)
    p.add_argument("--model", default="{}", help="JSON overrides of the model config, e.g. '{\"d_model\": 32}'")
    p.add_argument("--beam", type=int, default=1, help="beam width for the seq2seq evaluation (1 = greedy)")
    p.add_argument("--log-every", type=int, default=100)
    args = p.parse_args(argv)

    d = task_defaults(args.task)
    tr = d["train"]
    tr.update({k: v for k, v in vars(args).items() if k in tr and v is not None})
    model_kw = {**d["model"], **json.loads(args.model)}
    print(f"task={args.task} model={model_kw} train={tr}", flush=True)

    t0 = time.perf_counter()
    train, test = make_split(args.task, tr["n_train"], tr["n_test"], seed=tr["seed"], max_len=tr["max_len"])
    manual_seed(tr["seed"])
    model = build_model(args.task, model_kw, tr["max_len"])
    opt = AdamW(param_groups(model, tr["weight_decay"]), lr=tr["lr"], betas=(0.9, tr["beta2"]), weight_decay=tr["weight_decay"])
    rng = np.random.default_rng(tr["seed"] + 1000)
    print(f"{model.num_parameters():,} parameters, {len(train)} train / {len(test)} held-out examples", flush=True)

    seq2seq = args.task in SEQ2SEQ_TASKS
    running = None
    for step in range(tr["steps"]):
        opt.lr = cosine_lr(step, tr["lr"], tr["min_lr"], tr["warmup_steps"], tr["steps"])
        b = train.subset(rng.integers(0, len(train), size=tr["batch_size"]))
        _, loss = model(*b) if seq2seq else model(b.x, b.y)
        model.zero_grad()
        model.backward()
        if tr["grad_clip"]:
            clip_grad_norm(model.parameters(), tr["grad_clip"])
        opt.step()
        running = loss if running is None else 0.95 * running + 0.05 * loss
        if (step + 1) % args.log_every == 0 or step == 0:
            print(f"step {step + 1:5d}  loss {loss:.4f}  (avg {running:.4f})  lr {opt.lr:.2e}  "
                  f"{time.perf_counter() - t0:6.1f}s", flush=True)
    train_time = time.perf_counter() - t0
    acc = evaluate(args.task, model, test, beam=args.beam)
    total = time.perf_counter() - t0
    how = "accuracy" if not seq2seq else ("greedy exact match" if args.beam == 1 else f"beam-{args.beam} exact match")
    print(f"RESULT task={args.task} held-out {how} = {acc:.4f} on {len(test)} "
          f"(train {train_time:.1f}s, total {total:.1f}s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
