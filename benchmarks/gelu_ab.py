"""GELU with its derivative in the fast lane (`fast/activations.py`'s gelu_with_grad), this
checkout's against another commit's, alternating in one process, one call at a time per shape:

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OPENBLAS_NUM_THREADS=1 python benchmarks/gelu_ab.py --against 6aa86d6

The other commit's fast/activations.py is read with `git show` and loaded beside this one; the
two take turns (old new, then new old, ...) for --rounds rounds of --calls calls each, on float32
inputs of names' feed-forward shape (512, 256) and shakespeare-cpu's (768, 512). Prints each
shape's median ms a call for both and their ratio old / new (> 1: this checkout is faster).
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from scratchformer.fast import activations as this

REPO = Path(__file__).resolve().parents[1]
SHAPES = [(512, 256), (768, 512)]  # (B T, 4 C) of names and shakespeare-cpu (benchmarks/ab_step.py)


def load_other(commit: str):
    """The module fast/activations.py as it is at `commit`."""
    source = subprocess.run(
        ["git", "-C", str(REPO), "show", f"{commit}:scratchformer/fast/activations.py"],
        capture_output=True,
        text=True,
    )
    if source.returncode != 0:
        raise SystemExit(f"gelu_ab.py: no fast/activations.py at {commit!r}: {source.stderr.strip()}")
    path = Path(tempfile.mkdtemp(prefix="gelu_ab_")) / "activations_other.py"
    path.write_text(source.stdout)
    spec = importlib.util.spec_from_file_location("activations_other", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", metavar="COMMIT", required=True, help="the commit to compare with")
    ap.add_argument("--rounds", type=int, default=21, help="turns of each side (default: 21)")
    ap.add_argument("--calls", type=int, default=50, help="calls a turn (default: 50)")
    args = ap.parse_args(argv)
    other = load_other(args.against)
    rng = np.random.default_rng(0)
    for shape in SHAPES:
        x = rng.standard_normal(shape).astype(np.float32)
        sides = {"old": other.gelu_with_grad, "new": this.gelu_with_grad}
        ms = {"old": [], "new": []}
        for r in range(args.rounds):
            for who in ("old", "new") if r % 2 == 0 else ("new", "old"):
                start = time.perf_counter()
                for _ in range(args.calls):
                    sides[who](x)
                ms[who].append((time.perf_counter() - start) / args.calls * 1e3)
        old, new = statistics.median(ms["old"]), statistics.median(ms["new"])
        print(
            f"gelu_with_grad {shape}: {args.against} {old:.3f} ms, this checkout {new:.3f} ms; old/new {old / new:.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
