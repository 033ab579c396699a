"""What every example shares: its command line (--out, --quick), one BLAS thread and a plain training loop.

Each example is a script (python examples/NAME.py [--quick] [--out DIR]) whose cells are
marked `# %%`, so editors that know the marker (VS Code, Jupytext, Spyder) open it as a notebook;
scripts/make_notebooks.py writes each one as examples/notebooks/NAME.ipynb, this file pasted in.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from scratchformer.nn import eval_mode
from scratchformer.optim import AdamW, clip_grad_norm, cosine_lr, param_groups

EXAMPLES = Path(__file__).resolve().parent if "__file__" in globals() else Path.cwd()


def setup(name: str, doc: str) -> tuple[Path, bool]:
    """Parse --out and --quick; return (figure folder, quick). The folder defaults to
    examples/out/NAME (git ignores it)."""
    p = argparse.ArgumentParser(prog=f"{name}.py", description=(doc or name).strip().splitlines()[0])
    p.add_argument(
        "--out", type=Path, default=EXAMPLES / "out" / name, help="figure folder (default: examples/out/NAME)"
    )
    p.add_argument("--quick", action="store_true", help="tiny sizes and steps: a smoke run of a few seconds")
    # A notebook's kernel has no command line of ours: the defaults, or the quick run where
    # SCRATCHFORMER_QUICK=1 (the notebook tests set it).
    in_notebook = "ipykernel" in sys.modules
    args = p.parse_args([] if in_notebook else None)
    quick = args.quick or (in_notebook and os.environ.get("SCRATCHFORMER_QUICK") == "1")
    try:
        args.out.mkdir(parents=True, exist_ok=True)
    except OSError as e:  # a file of that name, a folder it may not write: one line, as every command
        what = "is a file, not a folder" if args.out.is_file() else f"cannot be made ({e.strerror})"
        print(f"{name}.py: error: --out {args.out} {what}: give a folder", file=sys.stderr)
        raise SystemExit(2) from None
    # NumPy's BLAS on one thread from here on: the examples' products are small, where
    # OpenBLAS's second thread costs far more than it saves, most of all on a shared machine (60
    # steps of example d's training: 1.6-1.9 s of CPU on one thread, 21.8 s on OpenBLAS's default
    # two, on a 2-core AMD EPYC at load average ~9). The library's worker processes run one each.
    threadpool_limits(1, user_api="blas")
    return args.out, quick


def train(
    model,
    next_batch,
    steps: int,
    lr: float,
    weight_decay: float = 0.01,
    warmup: int = 50,
    log_every: int = 50,
    held_out=None,
) -> list[dict]:
    """AdamW with warmup and cosine decay, gradient clipping at 1. next_batch(rng) -> the
    arguments of model(...) (inputs and targets). held_out: the arguments of one held-out batch,
    whose loss is logged as val_loss beside each train_loss. Returns log rows as
    `viz.training_curves` reads them."""
    opt = AdamW(param_groups(model, weight_decay), lr=lr, betas=(0.9, 0.98))
    rng = np.random.default_rng(0)
    model.train()
    rows = []
    for step in range(steps):
        opt.lr = cosine_lr(step, lr, lr / 10, min(warmup, steps // 10), steps)
        _, loss = model(*next_batch(rng))
        model.backward()  # the hand-written backward of every layer
        norm = clip_grad_norm(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad()
        if step % log_every == 0 or step == steps - 1:
            rows.append({"step": step, "lr": opt.lr, "train_loss": float(loss), "grad_norm": float(norm)})
            if held_out is not None:
                with eval_mode(model):
                    rows[-1]["val_loss"] = float(model(*held_out)[1])
    model.eval()
    return rows
