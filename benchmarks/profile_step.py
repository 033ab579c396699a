"""cProfile of scratchformer training steps (forward + backward + clip + AdamW), as the suite
runs them: where the time of a step goes, by function (own time).

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/profile_step.py --config names
    python benchmarks/profile_step.py --config shakespeare-cpu --steps 50 --top 30

Prints the top entries by own time (tottime) with their share of the profiled steps.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from suite import TRAIN_CONFIGS  # noqa: E402

from scratchformer.models import GPT, GPTConfig  # noqa: E402
from scratchformer.optim import AdamW, clip_grad_norm, param_groups  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", choices=list(TRAIN_CONFIGS), default="names")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    V, L, H, C, T, B = TRAIN_CONFIGS[args.config]
    rng = np.random.default_rng(0)
    x, y = rng.integers(0, V, size=(B, T)), rng.integers(0, V, size=(B, T))
    model = GPT(GPTConfig(vocab_size=V, block_size=T, n_layer=L, n_head=H, n_embd=C), seed=0)
    opt = AdamW(param_groups(model, 0.1), lr=1e-3, betas=(0.9, 0.99), weight_decay=0.1)
    params = model.parameters()

    def step():
        opt.zero_grad()
        model(x, y)
        model.backward()
        clip_grad_norm(params, 1.0)
        opt.step()

    for _ in range(5):
        step()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(args.steps):
        step()
    prof.disable()
    stats = pstats.Stats(prof)
    total = stats.total_tt
    print(f"{args.config}: {args.steps} steps, {total / args.steps * 1e3:.2f} ms/step under cProfile")
    print(f"{'own %':>6} {'own ms/step':>11} {'cum ms/step':>11} {'calls/step':>10}  function")
    rows = sorted(stats.stats.items(), key=lambda kv: -kv[1][2])[:args.top]
    for (file, line, fn), (cc, nc, tt, ct, _) in rows:
        where = f"{Path(file).name}:{line}({fn})" if line else fn
        print(f"{tt / total:6.1%} {tt / args.steps * 1e3:11.3f} {ct / args.steps * 1e3:11.3f} "
              f"{nc / args.steps:10.1f}  {where}")


if __name__ == "__main__":
    main()
