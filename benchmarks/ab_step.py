"""Median milliseconds of one GPT training step through the public API only (GPT, make_adamw,
param_groups, clip_grad_norm), so the same file times any two checkouts against each other:

    for i in 1 2 3 4; do
      (cd OLD && env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE PYTHONPATH=$PWD python NEW/benchmarks/ab_step.py names)
      (cd NEW && env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE PYTHONPATH=$PWD python benchmarks/ab_step.py names)
    done

Random tokens, no dropout, 60 steps of which the first 10 are warm-up (medium: 16 and 4; long-1024: 10 and 2);
prints {"ms": ..., "peak_rss_mib": ...} (the process's peak resident memory).
"""

import json
import resource
import sys
import time

import numpy as np

from scratchformer.allocator import keep_freed_memory
from scratchformer.models import GPT, GPTConfig
from scratchformer.optim import clip_grad_norm, param_groups

try:
    from scratchformer.optim import make_adamw  # the lane's AdamW: FlatAdamW, bound, in the fast lane
except ImportError:  # a checkout from before FlatAdamW, whose AdamW took the fast lane itself
    from scratchformer.optim import AdamW as make_adamw

CONFIGS = {
    "names": (27, 4, 4, 64, 16, 32),
    "shakespeare-cpu": (65, 4, 4, 128, 64, 12),  # V, L, H, C, T, B
    "medium": (65, 6, 6, 384, 256, 16),
    "long-1024": (65, 4, 4, 128, 1024, 4),
}  # long: suite.py's LONG_CONFIGS
STEPS = {
    "names": (60, 10),
    "shakespeare-cpu": (60, 10),
    "medium": (16, 4),
    "long-1024": (10, 2),
}  # (steps, of which warm-up)


def main(name: str) -> None:
    V, L, H, C, T, B = CONFIGS[name]
    keep_freed_memory()  # as train() and the CLI do (older checkouts made this call when a layer was built)
    model = GPT(GPTConfig(vocab_size=V, block_size=T, n_layer=L, n_head=H, n_embd=C), seed=0)
    opt = make_adamw(param_groups(model, 0.1), lr=1e-3)
    rng = np.random.default_rng(0)
    times = []
    steps, warmup = STEPS[name]
    for _ in range(steps):
        idx = rng.integers(0, V, size=(B, T + 1))
        t0 = time.perf_counter()
        model(idx[:, :-1], idx[:, 1:])
        model.backward()
        clip_grad_norm(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad()
        times.append(time.perf_counter() - t0)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB
    print(
        json.dumps(
            {"config": name, "ms": 1000 * float(np.median(times[warmup:])), "peak_rss_mib": round(peak, 1)}
        )
    )


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in CONFIGS:
        print(f"usage: python benchmarks/ab_step.py {{{'|'.join(CONFIGS)}}}", file=sys.stderr)
        sys.exit(2)
    main(sys.argv[1])
