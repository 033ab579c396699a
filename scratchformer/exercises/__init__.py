"""Graded exercises: write the backward of a layer whose forward is given, and have it checked;
and three beyond the backward: one BPE merge step (`bpe.py` grades it), diagnosing four recorded
runs (`diagnose.py`) and finding an induction head by ablation (`induction.py`).

    scratchformer exercise                        # the list
    scratchformer exercise linear --out linear.py # the stub: forward given, backward to write
    scratchformer exercise linear --check linear.py

From Python: `stub_source(name)`, `check(name, path) -> Grade` (`.passed`, `.report()`,
`.cause`). The grader is `grading.py`, run on the learner's file in a child process with a time
and a memory limit by `isolation.py`; the exercises, the inputs they are graded on and their
known mistakes are `catalogue.py`; the reference solutions are `solutions/NAME.py`; an
exercise of another kind than "backward" is graded by the module its kind names. No PyTorch
involved.
"""

from scratchformer.exercises.catalogue import EXERCISES, Case, Exercise, Mistake
from scratchformer.exercises.grading import Grade, check, list_exercises, solution_source, stub_source

__all__ = [
    "EXERCISES",
    "Case",
    "Exercise",
    "Grade",
    "Mistake",
    "check",
    "list_exercises",
    "solution_source",
    "stub_source",
]
