"""Graded exercises: write the backward of a layer whose forward is given, and have it checked.

    scratchformer exercise                        # the list
    scratchformer exercise linear --out linear.py # the stub: forward given, backward to write
    scratchformer exercise linear --check linear.py

From Python: `stub_source(name)`, `check(name, path) -> Grade` (`.passed`, `.report()`,
`.cause`). The grader is `grading.py`, run on the learner's file in a child process with a time
and a memory limit by `isolation.py`; the exercises, the inputs they are graded on and their
known mistakes are `catalogue.py`; the reference solutions are `solutions/NAME.py`. No PyTorch
involved.
"""

from scratchformer.exercises.catalogue import EXERCISES, Case, Exercise, Mistake
from scratchformer.exercises.grading import Grade, check, list_exercises, solution_source, stub_source

__all__ = ["EXERCISES", "Case", "Exercise", "Grade", "Mistake", "check", "list_exercises", "solution_source",
           "stub_source"]
