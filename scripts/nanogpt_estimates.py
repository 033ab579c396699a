"""Validation loss of a text run, read two ways: on the whole split, and as nanoGPT reads it.

    python scripts/nanogpt_estimates.py out/bars/shakespeare [--draws 100] [--seed 0]

nanoGPT's `estimate_loss` averages the loss of `eval_iters` random batches (its CPU
configuration: 20 batches of 12 blocks of 64 characters, 15,360 characters). This script
prints the whole-split loss of the run's best checkpoint, then the mean, standard deviation,
lowest value and fraction <= --bar of `--draws` such 20-batch estimates, so a published
20-batch number can be compared with a whole-split number.
"""

from __future__ import annotations

import argparse

import numpy as np
from _oneline import run  # scripts/_oneline.py: a library error is one line, exit code 2

from scratchformer.training.jobs import load_job


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", help="a run directory (its best/ checkpoint is read)")
    ap.add_argument("--draws", type=int, default=100, help="how many 20-batch estimates")
    ap.add_argument("--eval-iters", type=int, default=20, help="batches per estimate (nanoGPT CPU: 20)")
    ap.add_argument("--batch-size", type=int, default=12, help="blocks per batch (nanoGPT CPU: 12)")
    ap.add_argument("--bar", type=float, default=1.88, help="report the fraction of estimates <= this")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    job = load_job(f"{args.dir.rstrip('/')}/best")
    job.model.eval()
    whole = job.evaluate("val")["loss"]
    rng = np.random.default_rng(args.seed)
    estimates = []
    for _ in range(args.draws):
        losses = [job.model(*job.dataset.val.batch(rng, args.batch_size))[1] for _ in range(args.eval_iters)]
        estimates.append(float(np.mean(losses)))
    est = np.array(estimates)
    print(f"whole val split: {whole:.4f}")
    print(
        f"{args.draws} estimates of {args.eval_iters} batches x {args.batch_size}: mean {est.mean():.4f}, "
        f"sd {est.std(ddof=1):.4f}, lowest {est.min():.4f}, highest {est.max():.4f}, "
        f"<= {args.bar}: {np.mean(est <= args.bar):.0%}"
    )


if __name__ == "__main__":
    run(main)
