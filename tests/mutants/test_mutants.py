"""The mutation harness (scripts/mutants.py) and every target's fixed sample.

The harness is tested on a toy file whose mutants' fates are known; each target in
scripts/mutant_targets/ then runs its fixed sample (about 30 mutants) and must meet its goal:
the share of output-changing mutants its check catches. The full runs are the script's
(`python scripts/mutants.py`), their tables in docs/mutants.md."""

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import mutants  # noqa: E402

TOY = """
def double(x):
    return x * 2 + 0 * x


def spin(n):
    i = 0
    while i < n:
        i += 1
    return i
"""


@pytest.fixture
def toy(tmp_path):
    path = tmp_path / "toy_for_mutants.py"
    path.write_text(TOY)
    spec = importlib.util.spec_from_file_location("toy_for_mutants", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return path, module


def _toy_target(path, module, check):
    def output(m):
        if m is None:
            return [module.double(np.arange(3.0)), module.spin(3)]
        with m.patched(module):
            return [module.double(np.arange(3.0)), module.spin(3)]

    return mutants.Target(
        name="toy", sources=lambda: [(path, None)], output=output, check=check, time_limit=2
    )


def test_every_mutant_of_a_function_is_made_and_patched_in_and_out(toy):
    path, module = toy
    found = mutants.mutants_of(path)
    assert {m.function for m in found} == {"double", "spin"}
    assert all(m.source != m.original and m.source.count("\n") == TOY.count("\n") for m in found)
    minus = next(m for m in found if m.after == "return x * 2 - 0 * x")
    assert minus.line == 3 and minus.before == "return x * 2 + 0 * x"
    times = next(m for m in found if m.after == "return x / 2 + 0 * x")
    with times.patched(module):
        assert module.double(4.0) == 2.0
    assert module.double(4.0) == 8.0  # restored
    only = mutants.mutants_of(path, lambda name: name == "spin")
    assert {m.function for m in only} == {"spin"}


def test_mutants_are_sorted_equivalent_caught_or_missed(toy):
    path, module = toy

    def check(m):  # a check that sees only what double returns at 1.0
        with m.patched(module):
            try:
                return module.double(1.0) != 2.0, "double(1)"
            except Exception as e:  # noqa: BLE001
                return True, type(e).__name__

    target = _toy_target(path, module, check)
    found = target.mutants()
    results = mutants.run(target, found)
    fate = {(m.before, m.after): r.category for m, r in zip(found, results)}
    assert (
        fate[("return x * 2 + 0 * x", "return x * 2 - 0 * x")] == "equivalent"
    )  # 0 * x: the same everywhere
    assert fate[("i = 0", "i = 1")] == "equivalent"  # spin(3) still counts to 3
    assert fate[("return x * 2 + 0 * x", "return x / 2 + 0 * x")] == "caught"
    assert fate[("i += 1", "i += 2")] == "missed"  # spin(3) becomes 4; the check never calls spin
    assert fate[("while i < n:", "while i <= n:")] == "missed"
    assert fate[("i += 1", "i = 1")] == "missed"  # spin never ends: the output's time limit, a change


def test_a_check_that_hangs_is_a_miss_and_the_next_mutant_still_runs(toy):
    path, module = toy

    def check(m):
        if m.before == "i += 1":
            while True:
                pass
        return True, "seen"

    target = _toy_target(path, module, check)
    target = mutants.Target(**{**target.__dict__, "time_limit": 2})
    loops = next(m for m in target.mutants() if (m.before, m.after) == ("i += 1", "i = 1"))
    halves = next(m for m in target.mutants() if m.after == "return x / 2 + 0 * x")
    results = mutants.run(target, [loops, halves])
    assert [r.category for r in results] == ["missed", "caught"]
    assert "no verdict within 2 s" in results[0].detail


def test_same_compares_floats_within_rounding_and_structure_exactly():
    a = np.array([1.0, 2.0, np.nan])
    assert mutants.same(a, a + 1e-15) and not mutants.same(a, a + 1e-9)
    assert not mutants.same(a, a[:2]) and not mutants.same((1, 2), [1, 2])
    assert mutants.same({"x": (1.0, None)}, {"x": (1.0 + 1e-16, None)})
    assert not mutants.same(np.array([1, 2]), np.array([1.0, 2.0]))


def test_the_sample_is_fixed(toy):
    path, _ = toy
    found = mutants.mutants_of(path)
    assert [m.id for m in mutants.sample(found, 4)] == [m.id for m in mutants.sample(found, 4)]
    assert len(mutants.sample(found, 4)) == 4 and len(mutants.sample(found, 999)) == len(found)


@pytest.mark.parametrize("name", mutants.target_names())
def test_each_targets_fixed_sample_meets_its_goal(name):
    target = mutants.load_target(name)
    chosen = mutants.sample(target.mutants(), target.sample)
    assert len(chosen) == target.sample
    results = mutants.run(target, chosen)
    missed = [f"{r.mutant} [{r.detail}]" for r in results if r.category == "missed"]
    assert mutants.caught_share(results) >= target.goal, "\n".join(missed)


def test_a_backward_that_gives_none_for_a_float_input_turns_its_step_red():
    """Found by the full ops_backward run: a backward op returning None for a gradient its
    forward's float input is owed (l1_penalty_backward's dacts) was left out unchecked."""
    target = mutants.load_target("ops_backward")
    chosen = [
        m
        for m in target.mutants()
        if m.function == "l1_penalty_backward" and m.after in ("dacts = None", "dnorms = None")
    ]
    assert len(chosen) == 2
    assert [r.category for r in mutants.run(target, chosen)] == ["caught", "caught"]
