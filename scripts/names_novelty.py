"""Sample names from a trained run and report how many are new (not in the training list).

    python scripts/names_novelty.py out/bars/names --show 20 -n 1000 --seed 0

Prints `--show` samples (marking the ones that are in names.txt) and the fraction of `-n`
samples that are not in names.txt (any split) and not in the training split.
"""

from __future__ import annotations

import argparse
from importlib import resources

import numpy as np
from _oneline import run  # scripts/_oneline.py: a library error is one line, exit code 2

from scratchformer.training.jobs import load_job


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir")
    ap.add_argument("-n", type=int, default=1000)
    ap.add_argument("--show", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    run = args.dir.rstrip("/")
    job = load_job(f"{run}/best")
    samples = job.samples(args.n, np.random.default_rng(args.seed))
    known = set(resources.files("scratchformer.data").joinpath("names.txt").read_text().split())
    train = set(job.dataset.train.lines)
    for s in samples[: args.show]:
        print(f"{s}{'  (in names.txt)' if s in known else ''}")
    new = sum(s not in known for s in samples) / len(samples)
    not_train = sum(s not in train for s in samples) / len(samples)
    print(f"{len(samples)} samples: {new:.1%} not in names.txt, {not_train:.1%} not in the training split")


if __name__ == "__main__":
    run(main)
