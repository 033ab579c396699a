"""One GPT training step through the public API only (GPT, make_adamw, param_groups,
clip_grad_norm), timed in any two checkouts side by side:

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/ab_step.py names --against 2cbb3b4
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/ab_step.py shakespeare-cpu --against main --pairs 7
    python benchmarks/ab_step.py names shakespeare-cpu --against 2cbb3b4 --commit main   # both, main against 2cbb3b4
    python benchmarks/ab_step.py names --against 2cbb3b4 --commit HEAD~3   # two commits, neither checked out
    python benchmarks/ab_step.py names --against 2cbb3b4 --instructions    # instructions a step, counted (valgrind)
    python benchmarks/ab_step.py names                                     # one process: one JSON line

With --against OLD, each commit is exported with `git archive` (NEW, --commit: default this
checkout's working tree, uncommitted changes included), and fresh processes run this file's step
(the same code for both: only the library differs) in one tree and the other, `--pairs` pairs.
The two processes of a pair are alive together and take turns, 10 steps at a time (OLD NEW, then
NEW OLD, ...; the first pair starts with OLD, the next with NEW): a shared machine's slow seconds
fall on both sides alike. (One process after the other, a step's median moved by up to 30% from one
process to the next on a quiet 2-core VM, and by as much from one 50-step stretch to the next
inside one process.) Printed: each pair's median milliseconds and its ratio OLD /
NEW (> 1: NEW is faster), the median of the ratios (wall clock, and the processes' CPU time beside
it: a busy machine's descheduling shows in the wall clock only), the CPU, the BLAS kernel each
process ran (threadpoolctl) and the OpenBLAS variables.
Several configs are compared one after the other, on the same two exported trees.

--instructions counts instead of timing: the instructions one step executes in each tree, by
valgrind's cachegrind with one OpenBLAS thread (those of 3 steps less those of 1, halved), the
same on a busy machine as on a quiet one; a step's Python and NumPy work, not its memory stalls.

One process: random tokens, no dropout, 60 steps of which the first 10 are warm-up (medium: 16 and
4; long-1024: 10 and 2; --steps / --warmup); prints {"ms": ..., "cpu_ms": ..., "peak_rss_mib": ...,
"blas": ...} (the median step, wall and CPU, and the process's peak resident memory).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

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
CHUNK = 10  # steps one process runs while the other waits, in --against's pairs
HERE = Path(__file__).resolve()
REPO = HERE.parents[1]


def _trainer(name: str):
    """The config's GPT and AdamW, built with the library on sys.path; returns one_step(), which
    runs a training step on fresh random tokens and returns its (wall, CPU) seconds."""
    import numpy as np

    from scratchformer.models import GPT, GPTConfig
    from scratchformer.optim import clip_grad_norm, param_groups

    try:
        from scratchformer.optim import make_adamw  # the lane's AdamW: FlatAdamW, bound, in the fast lane
    except ImportError:  # a checkout from before FlatAdamW, whose AdamW took the fast lane itself
        from scratchformer.optim import AdamW as make_adamw

    try:
        from scratchformer.allocator import keep_freed_memory
    except ImportError:  # a checkout from before the allocator module: a layer made this call when built
        keep_freed_memory = None
    V, L, H, C, T, B = CONFIGS[name]
    if keep_freed_memory is not None:
        keep_freed_memory()  # as train() and the CLI do
    model = GPT(GPTConfig(vocab_size=V, block_size=T, n_layer=L, n_head=H, n_embd=C), seed=0)
    opt = make_adamw(param_groups(model, 0.1), lr=1e-3)
    rng = np.random.default_rng(0)

    def one_step() -> tuple[float, float]:
        idx = rng.integers(0, V, size=(B, T + 1))
        t0, c0 = time.perf_counter(), time.process_time()
        model(idx[:, :-1], idx[:, 1:])
        model.backward()
        clip_grad_norm(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad()
        return time.perf_counter() - t0, time.process_time() - c0

    return one_step


def _summary(name: str, times: list[tuple[float, float]]) -> dict:
    """The median step (wall and CPU, ms) of `times`, the peak memory and the BLAS."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB
    return {
        "config": name,
        "ms": 1000 * statistics.median(w for w, _ in times),
        "cpu_ms": 1000 * statistics.median(c for _, c in times),
        "peak_rss_mib": round(peak, 1),
        "blas": _blas(),
    }


def step_times(name: str, steps: int, warmup: int) -> dict:
    """Train the config's GPT for `steps` steps in this process (the library on sys.path)."""
    one_step = _trainer(name)
    times = [one_step() for _ in range(steps)]
    return _summary(name, times[warmup:])


def serve(name: str, warmup: int) -> None:
    """A worker for --against: builds the model, runs `warmup` steps, prints "ready"; then for
    each line k on stdin runs k steps and prints their (wall, CPU) seconds as one JSON line; at
    the end of stdin prints the summary (`_summary`) of all the timed steps."""
    one_step = _trainer(name)
    for _ in range(warmup):
        one_step()
    print("ready", flush=True)
    times = []
    for line in sys.stdin:
        chunk = [one_step() for _ in range(int(line))]
        times += chunk
        print(json.dumps(chunk), flush=True)
    print(json.dumps(_summary(name, times)), flush=True)


def _blas() -> str:
    """The BLAS NumPy runs, as threadpoolctl names it: library, kernel (architecture), threads."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "unknown (threadpoolctl not installed)"
    return "; ".join(
        f"{d.get('internal_api')} {d.get('version')} {d.get('architecture')}, {d.get('num_threads')} threads"
        for d in threadpool_info()
        if d.get("user_api") == "blas"
    )


def _cpu_name() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text()
        return next(
            line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("model name")
        )
    except (OSError, StopIteration):
        import platform

        return platform.processor() or "unknown CPU"


def export(commit: str, into: Path) -> tuple[Path, str]:
    """The tree of `commit` ("." for this checkout's working tree) and its short name."""
    if commit == ".":
        return REPO, "working tree"
    rev = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--verify", "--short", f"{commit}^{{commit}}"],
        capture_output=True,
        text=True,
    )
    if rev.returncode != 0:
        raise ValueError(f"{commit!r} is not a commit of {REPO}: give a commit, branch or tag")
    short = rev.stdout.strip()
    tar = subprocess.run(["git", "-C", str(REPO), "archive", short], capture_output=True, check=True).stdout
    tree = into / short
    with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
        archive.extractall(tree, filter="data")
    return tree, short


class Worker:
    """A fresh process timing the step with `tree`'s library (this file's step code, `serve`)."""

    def __init__(self, tree: Path, name: str, warmup: int):
        self.tree = tree
        self.errors = tempfile.TemporaryFile("w+")  # a file, not a pipe: a full pipe would block it
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE), name, "--serve", "--warmup", str(warmup)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.errors,
            text=True,
            cwd=tree,
            env=dict(os.environ, PYTHONPATH=str(tree)),
        )

    def _line(self) -> str:
        line = self.proc.stdout.readline()
        if not line:
            self.proc.kill()
            raise SystemExit(f"ab_step.py: the step failed in {self.tree}:\n{self._errors()}")
        return line

    def _errors(self) -> str:
        self.proc.wait()
        self.errors.seek(0)
        return self.errors.read()[-3000:]

    def ready(self) -> None:
        self._line()  # "ready": built and warmed up

    def run(self, steps: int) -> None:
        self.proc.stdin.write(f"{steps}\n")
        self.proc.stdin.flush()
        self._line()  # the chunk's times; the summary at the end has them all

    def finish(self) -> dict:
        self.proc.stdin.close()
        summary = json.loads(self._line())
        self.proc.wait()
        return summary


def instructions(tree: Path, name: str) -> float:
    """The instructions one step executes with `tree`'s library: valgrind's count (cachegrind, one
    OpenBLAS thread) for 3 steps less that for 1, halved (the imports and the model cancel)."""
    counts = []
    for steps in (1, 3):
        proc = subprocess.run(
            ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null"]
            + [sys.executable, str(HERE), name, "--steps", str(steps), "--warmup", "0"],
            capture_output=True,
            text=True,
            cwd=tree,
            env=dict(os.environ, PYTHONPATH=str(tree), OPENBLAS_NUM_THREADS="1"),
        )
        found = re.search(r"I\s+refs:\s+([\d,]+)", proc.stderr)
        if proc.returncode != 0 or found is None:
            raise ValueError(f"valgrind did not count the step in {tree}: {proc.stderr[-500:]}")
        counts.append(int(found.group(1).replace(",", "")))
    return (counts[1] - counts[0]) / 2


def compare_instructions(name: str, old: tuple[Path, str], new: tuple[Path, str]) -> dict:
    """Instructions a step of OLD and of NEW (each (tree, name)) executes; prints and returns them
    and their ratio."""
    (old_tree, old_name), (new_tree, new_name) = old, new
    counts = {"old": instructions(old_tree, name), "new": instructions(new_tree, name)}
    ratio = counts["old"] / counts["new"]
    print(
        f"{name}: instructions a step, one OpenBLAS thread (valgrind): {old_name} {counts['old'] / 1e6:.2f} M, "
        f"{new_name} {counts['new'] / 1e6:.2f} M; old/new {ratio:.4f} (> 1: {new_name} does less); CPU: {_cpu_name()}"
    )
    return {"config": name, "old": old_name, "new": new_name, "instructions": counts, "ratio": ratio}


def compare(
    name: str, old: tuple[Path, str], new: tuple[Path, str], pairs: int, steps: int, warmup: int
) -> dict:
    """Alternating fresh processes of OLD and NEW (each (tree, name)), `pairs` pairs; prints and
    returns the ratios."""
    (old_tree, old_name), (new_tree, new_name) = old, new
    openblas = {
        k: os.environ.get(k) for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OPENBLAS_NUM_THREADS")
    }
    print(
        f"{name}: {old_name} (old) against {new_name} (new), {pairs} pairs, {steps} steps of which {warmup} warm-up"
    )
    print(f"CPU: {_cpu_name()}; OpenBLAS variables: {openblas}; load average {os.getloadavg()[0]:.1f}")
    rows = []
    for i in range(pairs):
        trees = {"old": old_tree, "new": new_tree}
        order = ["old", "new"] if i % 2 == 0 else ["new", "old"]
        workers = {who: Worker(trees[who], name, warmup) for who in order}  # both alive, one runs
        for who in order:
            workers[who].ready()
        timed = steps - warmup
        for k, start in enumerate(range(0, timed, CHUNK)):  # OLD NEW, NEW OLD, ... chunk by chunk
            for who in order if k % 2 == 0 else order[::-1]:
                workers[who].run(min(CHUNK, timed - start))
        run = {who: workers[who].finish() for who in order}
        ratio, cpu_ratio = run["old"]["ms"] / run["new"]["ms"], run["old"]["cpu_ms"] / run["new"]["cpu_ms"]
        rows.append({"old": run["old"], "new": run["new"], "ratio": ratio, "cpu_ratio": cpu_ratio})
        print(
            f"pair {i + 1}: old {run['old']['ms']:7.2f} ms (cpu {run['old']['cpu_ms']:7.2f})  "
            f"new {run['new']['ms']:7.2f} ms (cpu {run['new']['cpu_ms']:7.2f})  "
            f"old/new {ratio:5.3f} (cpu {cpu_ratio:5.3f})",
            flush=True,
        )
    blas = sorted({r[who]["blas"] for r in rows for who in ("old", "new")})
    result = {
        "config": name,
        "old": old_name,
        "new": new_name,
        "cpu": _cpu_name(),
        "blas": blas,
        "openblas": openblas,
        "pairs": rows,
        "median_ratio": statistics.median(r["ratio"] for r in rows),
        "median_cpu_ratio": statistics.median(r["cpu_ratio"] for r in rows),
    }
    print(f"BLAS: {' | '.join(blas)}")
    print(
        f"median old/new {result['median_ratio']:.3f} (range {min(r['ratio'] for r in rows):.3f}-"
        f"{max(r['ratio'] for r in rows):.3f}); CPU time {result['median_cpu_ratio']:.3f} "
        f"(> 1: {new_name} is faster)"
    )
    return result


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "configs",
        nargs="+",
        choices=list(CONFIGS),
        metavar="config",
        help=f"the model and batch, one or more of {', '.join(CONFIGS)}",
    )
    ap.add_argument("--against", metavar="OLD", help="a commit to compare with (default: none, one process)")
    ap.add_argument(
        "--commit", metavar="NEW", default=".", help="the other side (default: . = this working tree)"
    )
    ap.add_argument("--pairs", type=int, default=5, help="OLD/NEW process pairs (default: 5)")
    ap.add_argument("--steps", type=int, help="steps a process (default: 60; medium 16; long-1024 10)")
    ap.add_argument(
        "--warmup", type=int, help="of which warm-up, not timed (default: 10; medium 4; long-1024 2)"
    )
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)  # --against's worker
    ap.add_argument(
        "--json", metavar="PATH", help="also write the comparison there (several configs: a list)"
    )
    ap.add_argument(
        "--instructions",
        action="store_true",
        help="count each step's instructions (valgrind) instead of timing",
    )
    args = ap.parse_args(argv)
    plan = []
    for config in args.configs:
        steps = args.steps or STEPS[config][0]
        warmup = args.warmup if args.warmup is not None else STEPS[config][1]
        if not 0 <= warmup < steps or args.pairs < 1:
            ap.error("give --pairs >= 1 and 0 <= --warmup < --steps")
        plan.append((config, steps, warmup))
    if args.serve:
        serve(args.configs[0], plan[0][2])
        return 0
    if args.against is None:
        for config, steps, warmup in plan:
            print(json.dumps(step_times(config, steps, warmup)))
        return 0
    try:
        if args.instructions and shutil.which("valgrind") is None:
            raise ValueError("--instructions needs valgrind (apt-get install valgrind)")
        with tempfile.TemporaryDirectory(prefix="ab_step_") as tmp:
            old, new = export(args.against, Path(tmp)), export(args.commit, Path(tmp))
            results = [
                compare_instructions(config, old, new)
                if args.instructions
                else compare(config, old, new, args.pairs, steps, warmup)
                for config, steps, warmup in plan
            ]
    except ValueError as e:
        ap.error(str(e))
    if args.json:
        Path(args.json).write_text(json.dumps(results[0] if len(results) == 1 else results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
