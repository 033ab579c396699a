"""The floor under a training step: its matrix products alone, timed as DataParallel runs them.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/gemm_floor.py names shakespeare-cpu

For each config (the suite's TRAIN_CONFIGS), every process of a `DataParallel(GPT, workers)` step
trains on batch / workers rows. This script runs exactly the matrix products of such a slice's
forward and backward -- per linear layer x W^T, dy W and dy^T x; per attention q k^T, w v and
their four backward products -- on random float32 arrays of the same shapes and layouts, with one
BLAS thread, in `--workers` processes at once (as DataParallel does: the cores share caches,
memory and the package's power budget), and prints the median milliseconds per slice, next to scratchformer's own forward and backward
of the same slice (a GPT, timed the same way). No step
can be shorter than this (plus the optimiser and the messages between processes), whatever the
elementwise code around the products does; docs/performance.md ("The floor") sets it
against PyTorch's step.

Each run prints the BLAS kernel (threadpoolctl) and one JSON line per config.
"""  # noqa: E501

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from suite import TRAIN_CONFIGS  # noqa: E402  (benchmarks/ is not a package)


def step_products(config: str, workers: int):
    """The (a, b) operand pairs of one slice's forward and backward products, allocated once."""
    V, L, H, C, T, B = TRAIN_CONFIGS[config]
    rows = (B // workers) * T  # tokens in a slice
    rng = np.random.default_rng(0)

    def rand(*shape):
        return rng.standard_normal(shape, dtype=np.float32)

    pairs = []
    linears = [(C, 3 * C), (C, C), (C, 4 * C), (4 * C, C)] * L + [
        (C, V)
    ]  # (in, out); the last is the tied head
    for n_in, n_out in linears:
        x, w, dy = rand(rows, n_in), rand(n_out, n_in), rand(rows, n_out)
        pairs += [(x, w.T), (dy, w), (dy.T, x)]  # forward, dx, dW (weights kept (out, in) as nn.Linear)
    bh, hd = (B // workers) * H, C // H
    for _ in range(L):
        q, k, v, w, dout = rand(bh, T, hd), rand(bh, T, hd), rand(bh, T, hd), rand(bh, T, T), rand(bh, T, hd)
        kt = k.transpose(0, 2, 1)
        pairs += [
            (q, kt),
            (w, v),  # forward: scores, output
            (dout, v.transpose(0, 2, 1)),
            (w.transpose(0, 2, 1), dout),  # dw, dv
            (w, k),
            (w.transpose(0, 2, 1), q),
        ]  # dq, dk
    return pairs


def slice_step(config: str, workers: int):
    """One slice's real forward and backward: scratchformer's GPT on batch / workers rows."""
    from scratchformer.models import GPT, GPTConfig

    V, L, H, C, T, B = TRAIN_CONFIGS[config]
    model = GPT(GPTConfig(vocab_size=V, block_size=T, n_layer=L, n_head=H, n_embd=C), seed=0)
    x, y = np.random.default_rng(0).integers(0, V, size=(2, B // workers, T))

    def step():
        model(x, y)
        model.backward()

    return step


def _time_slice(config: str, workers: int, reps: int, what: str, start, out) -> None:
    from threadpoolctl import threadpool_limits

    threadpool_limits(1)
    if what == "products":
        pairs = step_products(config, workers)

        def work():
            for a, b in pairs:
                a @ b
    else:
        work = slice_step(config, workers)
    for _ in range(5):  # warm-up
        work()
    start.wait()  # every process starts timing together
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        work()
        times.append(time.perf_counter() - t0)
    out.put(1000 * statistics.median(times))


def slice_ms(config: str, workers: int, processes: int, reps: int, what: str = "products") -> list[float]:
    """Median ms of a 1/workers slice's products (what="products") or real forward and backward
    (what="step"), in each of `processes` processes running at once."""
    ctx = multiprocessing.get_context("fork")
    start, out = ctx.Barrier(processes), ctx.Queue()
    procs = [
        ctx.Process(target=_time_slice, args=(config, workers, reps, what, start, out))
        for _ in range(processes)
    ]
    for p in procs:
        p.start()
    results = [out.get() for _ in procs]
    for p in procs:
        p.join()
    return sorted(results)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    ap.add_argument(
        "configs", nargs="*", default=["names", "shakespeare-cpu"], help=f"any of {', '.join(TRAIN_CONFIGS)}"
    )
    ap.add_argument("--workers", type=int, default=2, help="processes at once, each one BLAS thread")
    ap.add_argument("--reps", type=int, default=200, help="timed repetitions of the slice's products")
    args = ap.parse_args(argv)
    bad = [c for c in args.configs if c not in TRAIN_CONFIGS]
    if bad or args.workers < 1 or args.reps < 1:
        ap.exit(
            2,
            f"gemm_floor.py: error: configs are {', '.join(TRAIN_CONFIGS)}; --workers and --reps "
            "must be positive\n",
        )
    from threadpoolctl import threadpool_info

    print(
        "BLAS:",
        [(i["internal_api"], i.get("architecture"), i.get("version")) for i in threadpool_info()],
        {v: os.environ.get(v) for v in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")},
    )
    for config in args.configs:
        row = {"config": config, "workers": args.workers}
        for what in ("products", "step"):  # the floor, then scratchformer's own slice for scale
            row[f"{what}_ms_alone"] = round(slice_ms(config, args.workers, 1, args.reps, what)[0], 3)
            together = slice_ms(config, args.workers, args.workers, args.reps, what)
            row[f"{what}_ms_together"] = [round(t, 3) for t in together]
        print(json.dumps(row))


if __name__ == "__main__":
    main()
