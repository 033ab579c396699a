"""The grokking step: one full-batch training step of `train --task modadd` (the paper's preset)
in scratchformer, in PyTorch running the same model, and the floor its matrix products set.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/modadd_step.py            # the table's row
    python benchmarks/modadd_step.py --quick                     # smoke run (tests/docs/test_benchmarks.py)

Thousands of such steps make a grokking run, so the step's time is the run's time. The shapes are
RUN_DEFAULTS["modadd"]'s (Nanda et al. 2023): p = 113, round(0.3 p^2) = 3,831 training pairs of 3
positions (`a b =`), one block of width 128 with 4 heads, a ReLU MLP of 512, no normalisation,
learned positions, an untied head over p + 1 tokens, float32; the loss read at '=' only
(IGNORE_INDEX elsewhere); AdamW lr 1e-3, betas (0.9, 0.98), weight decay 1.0 on every parameter,
no clipping. Three measurements, each in a fresh process, alternating (`--pairs`):

- scratchformer: the job `build_job("modadd")` makes, stepped as the trainer steps it with
  `--workers 1` (`job.forward_backward` on `job.train_batch`, then the trainer's AdamW over
  `param_groups(model, 1.0, decay_embeddings=True)`): forward, backward and optimiser ms.
- PyTorch: the same model written in torch (below), loaded with scratchformer's initial weights
  (its step-0 loss is printed beside scratchformer's: they must agree to float32 rounding),
  the logits at every position and `cross_entropy(ignore_index=-100)` as the library computes
  them, `torch.optim.AdamW(fused=True)`.
- the GEMM floor: every matrix product of the step -- per linear layer (rows = pairs x 3) the
  forward x W^T, dx = dy W and dW = dy^T x -- timed on random float32 arrays of those shapes and
  layouts with NumPy's BLAS (`floor_ms`: their summed medians; `gemm_gflops`: the step's GEMM
  FLOPs over that time), in the scratchformer worker; the same with torch.mm in the PyTorch
  worker (`torch_floor_ms`). The attention's products (3 x 3 per head and pair, about 0.4% of
  the FLOPs) are counted in the FLOPs at the rate of the linear layers; no step of either
  library can be shorter than the floor plus the elementwise work and the optimiser.

Each process uses `--threads` threads (OPENBLAS_NUM_THREADS / OMP_NUM_THREADS and
torch.set_num_threads). The first line names the CPU, NumPy's BLAS kernel (threadpoolctl),
PyTorch's BLAS and the OpenBLAS variables (unset them: this project's machines set
OPENBLAS_CORETYPE=Haswell, which slows NumPy's GEMMs; benchmarks/suite.py). One JSON object is
written (`--json`); no figure is asserted anywhere (speed belongs in this output, not in tests).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
from suite import _blas, _environment_line, environment, gemm_ms  # noqa: E402  (benchmarks/ is not a package)

PAPER = dict(modulus=113, train_fraction=0.3)  # RUN_DEFAULTS["modadd"]'s data
QUICK = dict(modulus=13, train_fraction=0.3)  # --quick: the same step at p = 13
STEPS, WARMUP = 20, 3


def _job(modulus: int, train_fraction: float):
    """The modadd job of RUN_DEFAULTS (the paper's model) on p = modulus, and its TrainConfig."""
    from scratchformer.training.jobs import build_job

    return build_job(
        "modadd", train={"workers": 1}, data=dict(modulus=modulus, train_fraction=train_fraction)
    )


def gemm_shapes(rows: int, C: int, inner: int, V: int) -> list[tuple[tuple[int, int], tuple[int, int], bool]]:
    """The step's dense products as ((M, K), (K, N), transposed-operand flag) per product: for
    each linear layer (in, out) of the block and the head, x W^T, dy W and dy^T x (weights kept
    (out, in), as the library and nn.Linear keep them)."""
    out = []
    for n_in, n_out in [(C, 3 * C), (C, C), (C, inner), (inner, C), (C, V)]:
        out += [
            ((rows, n_in), (n_in, n_out), True),
            ((rows, n_out), (n_out, n_in), False),
            ((n_out, rows), (rows, n_in), True),
        ]
    return out


def step_gflop(pairs: int, T: int, C: int, inner: int, V: int, H: int) -> tuple[float, float]:
    """(all, dense) GEMM GFLOP of one step: the linear layers' 3 products each (dense), plus
    attention's 6 batched products of (T x T) scores per head and pair."""
    dense = sum(2 * a[0] * a[1] * b[1] for a, b, _ in gemm_shapes(pairs * T, C, inner, V))
    attention = 6 * 2 * pairs * H * T * T * (C // H)
    return (dense + attention) / 1e9, dense / 1e9


def floor_ms(rows: int, C: int, inner: int, V: int, lib: str, reps: int) -> float:
    """Summed median ms of the step's dense products on random float32 arrays, in the layouts
    the step reads them (NumPy or torch.mm: suite.gemm_ms)."""
    shapes = [(m, k, n, transposed) for (m, k), (_, n), transposed in gemm_shapes(rows, C, inner, V)]
    return sum(gemm_ms(shapes, lib, reps))


def torch_model(config, state: dict):
    """The modadd GPT in PyTorch: token + learned position embeddings, one block
    x + attn(x), x + fc2(relu(fc1(x))) with no normalisation, causal softmax attention
    (scaled_dot_product_attention), an untied bias-free head; weights copied from scratchformer's
    `state` (name -> array, both in (out, in) layout)."""
    import torch
    import torch.nn as tnn
    import torch.nn.functional as F

    C, H, V, T = config.n_embd, config.n_head, config.vocab_size, config.block_size

    class Model(tnn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = tnn.Embedding(V, C), tnn.Embedding(T, C)
            self.in_proj, self.out_proj = tnn.Linear(C, 3 * C), tnn.Linear(C, C)
            self.fc1, self.fc2 = tnn.Linear(C, config.inner_size), tnn.Linear(config.inner_size, C)
            self.lm_head = tnn.Linear(C, V, bias=False)

        def forward(self, idx, targets):
            B, t = idx.shape
            x = self.wte(idx) + self.wpe(torch.arange(t))
            q, k, v = (a.view(B, t, H, C // H).transpose(1, 2) for a in self.in_proj(x).split(C, dim=2))
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.out_proj(a.transpose(1, 2).reshape(B, t, C))
            x = x + self.fc2(F.relu(self.fc1(x)))
            logits = self.lm_head(x)
            return F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), ignore_index=-100)

    model = Model()
    names = {
        "wte.weight": "wte.weight",
        "wpe.weight": "wpe.weight",
        "in_proj.weight": "h.0.self_attn.in_proj_weight",
        "in_proj.bias": "h.0.self_attn.in_proj_bias",
        "out_proj.weight": "h.0.self_attn.out_proj.weight",
        "out_proj.bias": "h.0.self_attn.out_proj.bias",
        "fc1.weight": "h.0.ff.fc1.weight",
        "fc1.bias": "h.0.ff.fc1.bias",
        "fc2.weight": "h.0.ff.fc2.weight",
        "fc2.bias": "h.0.ff.fc2.bias",
        "lm_head.weight": "lm_head.weight",
    }
    with torch.no_grad():
        for ours, theirs in names.items():
            model.get_parameter(ours).copy_(torch.from_numpy(state[theirs]))
    return model


def _time(phases, steps: int, warmup: int) -> dict:
    """Median ms of each (name, fn) phase and of the whole step, after `warmup` steps."""
    for _ in range(warmup):
        for _, fn in phases:
            fn()
    times, totals = {name: [] for name, _ in phases}, []
    for _ in range(steps):
        t_step = time.perf_counter()
        for name, fn in phases:
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
        totals.append(time.perf_counter() - t_step)
    out = {f"{name}_ms": 1e3 * statistics.median(ts) for name, ts in times.items()}
    out["step_ms"] = 1e3 * statistics.median(totals)
    return out


def worker(lib: str, modulus: int, train_fraction: float, steps: int, threads: int) -> dict:
    """One side's step, timed in this process; -> its JSON row."""
    import numpy as np

    from scratchformer.optim import make_adamw, param_groups

    job, cfg = _job(modulus, train_fraction)
    model, c = job.model, job.model.config
    batch = job.train_batch(np.random.default_rng(cfg.seed), cfg.batch_size)  # the whole training split
    pairs = len(batch[0])
    state = {name: p.data.copy() for name, p in model.named_parameters()}
    row = {
        "lib": lib,
        "pairs": pairs,
        "positions": int(batch[0].shape[1]),
        "n_embd": c.n_embd,
        "n_head": c.n_head,
        "n_inner": c.inner_size,
        "vocab": c.vocab_size,
        "dtype": c.dtype,
        "threads": threads,
    }
    if lib == "scratchformer":
        opt = make_adamw(  # the lane's AdamW, as the trainer builds it (FlatAdamW in the fast lane)
            param_groups(model, cfg.weight_decay, cfg.decay_embeddings),
            lr=cfg.lr,
            betas=(cfg.beta1, cfg.beta2),
            eps=1e-8,
            weight_decay=cfg.weight_decay,
        )
        row["loss_at_init"] = float(model(*batch)[1])
        losses = []

        def forward():
            opt.zero_grad()
            losses.append(model(*batch)[1])

        phases = [("forward", forward), ("backward", model.backward), ("optimiser", opt.step)]
        row.update(_time(phases, steps, WARMUP))
        row["floor_ms"] = floor_ms(
            pairs * 3, c.n_embd, c.inner_size, c.vocab_size, "numpy", reps=max(5, steps)
        )
        row["blas"] = _blas()
    else:
        import torch

        torch.set_num_threads(threads)
        tm = torch_model(c, state)
        opt = torch.optim.AdamW(
            tm.parameters(),
            lr=cfg.lr,
            betas=(cfg.beta1, cfg.beta2),
            eps=1e-8,
            weight_decay=cfg.weight_decay,
            fused=True,
        )
        x, y = (torch.from_numpy(np.ascontiguousarray(a)) for a in batch)
        with torch.no_grad():
            row["loss_at_init"] = float(tm(x, y))
        held = {}

        def forward():
            opt.zero_grad(set_to_none=True)
            held["loss"] = tm(x, y)

        phases = [
            ("forward", forward),
            ("backward", lambda: held["loss"].backward()),
            ("optimiser", opt.step),
        ]
        row.update(_time(phases, steps, WARMUP))
        row["floor_ms"] = floor_ms(
            pairs * 3, c.n_embd, c.inner_size, c.vocab_size, "torch", reps=max(5, steps)
        )
    gflop, dense = step_gflop(pairs, 3, c.n_embd, c.inner_size, c.vocab_size, c.n_head)
    row["step_gflop"] = gflop
    row["gemm_gflops"] = dense / (row["floor_ms"] / 1e3)  # the BLAS rate at these shapes
    row["floor_ms"] = gflop / row["gemm_gflops"] * 1e3  # the attention's FLOPs at the same rate
    return row


def run_worker(lib: str, data: dict, steps: int, threads: int) -> dict:
    env = dict(
        os.environ,
        OPENBLAS_NUM_THREADS=str(threads),
        OMP_NUM_THREADS=str(threads),
        PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    )
    proc = subprocess.run(
        [
            sys.executable,
            str(Path(__file__).resolve()),
            "--worker",
            lib,
            str(data["modulus"]),
            str(data["train_fraction"]),
            str(steps),
            str(threads),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"the {lib} worker failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    ap.add_argument("--pairs", type=int, default=3, help="alternating scratchformer / PyTorch process pairs")
    ap.add_argument(
        "--steps", type=int, default=STEPS, help="timed steps per process (after 3 warm-up steps)"
    )
    ap.add_argument("--threads", type=int, default=2, help="BLAS / torch threads per process")
    ap.add_argument("--quick", action="store_true", help="smoke run: p = 13, 1 pair, 3 steps")
    ap.add_argument("--json", default="modadd_step.json", help="where to write the results")
    ap.add_argument("--worker", nargs=5, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        lib, p, frac, steps, threads = args.worker
        print(json.dumps(worker(lib, int(p), float(frac), int(steps), int(threads))))
        return
    if args.pairs < 1 or args.steps < 1 or args.threads < 1:
        ap.exit(2, "modadd_step.py: error: --pairs, --steps and --threads must be positive\n")
    data = QUICK if args.quick else PAPER
    if args.quick:
        args.pairs, args.steps = 1, 3
    env = environment()
    print(
        f"{_environment_line(env)}; {' '.join(f'{k}={v}' for k, v in env['env'].items())}; "
        f"load {env['loadavg_at_start'][0]:.2f}",
        flush=True,
    )
    ours, theirs = [], []
    for _ in range(args.pairs):
        ours.append(run_worker("scratchformer", data, args.steps, args.threads))
        theirs.append(run_worker("torch", data, args.steps, args.threads))
    med = lambda runs, key: statistics.median(r[key] for r in runs)  # noqa: E731
    s = ours[0]
    print(
        f"modadd step: p = {data['modulus']}, {s['pairs']:,} pairs x {s['positions']} positions, width "
        f"{s['n_embd']}, MLP {s['n_inner']}, {s['n_head']} heads, {s['dtype']}, {args.threads} threads; "
        f"{s['step_gflop']:.2f} GEMM GFLOP per step"
    )
    print(
        f"loss at init: scratchformer {s['loss_at_init']:.6f}, PyTorch {theirs[0]['loss_at_init']:.6f} "
        "(the same weights)"
    )
    for name, runs in (("scratchformer", ours), ("PyTorch", theirs)):
        print(
            f"{name:13s} step {med(runs, 'step_ms'):8.2f} ms  (forward {med(runs, 'forward_ms'):.2f}, backward "
            f"{med(runs, 'backward_ms'):.2f}, optimiser {med(runs, 'optimiser_ms'):.2f}); GEMM floor "
            f"{med(runs, 'floor_ms'):.2f} ms at {med(runs, 'gemm_gflops'):.0f} GFLOP/s"
        )
    ratio = statistics.median(a["step_ms"] / b["step_ms"] for a, b in zip(ours, theirs))
    floor = med(ours, "floor_ms")
    print(
        f"scratchformer / PyTorch step time: {ratio:.2f}x (median of {args.pairs} pairs); scratchformer / "
        f"NumPy's GEMM floor: {med(ours, 'step_ms') / floor:.2f}x"
    )
    results = {
        "environment": env,
        "data": data,
        "pairs": args.pairs,
        "steps": args.steps,
        "threads": args.threads,
        "quick": args.quick,
        "scratchformer": ours,
        "torch": theirs,
        "time_ratio": ratio,
        "scratchformer_over_floor": med(ours, "step_ms") / floor,
        "loadavg_at_end": os.getloadavg(),
    }
    Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    print(f"results in {args.json}")


if __name__ == "__main__":
    main()
