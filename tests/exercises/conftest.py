"""The exercises' tests draw the grader's random shapes from one seed: each test process then
computes their references (finite differences) once, not on every check. The test of fresh draws
(test_grading_in_the_parent.py) sets the seed back to None itself."""

import pytest

from scratchformer.exercises import grading


@pytest.fixture(autouse=True)
def one_seed_for_the_random_shapes(monkeypatch):
    monkeypatch.setattr(grading, "RANDOM_SEED", 20240)
