"""Mutation target "_lens_checks": the lens target (lens.py), every case run, a wrong result
counted as caught only by a printed check.

The same mutants, cases and outputs as "lens", but a case where the lens stops with an error does
not end a mutant: it runs every case it reaches. A mutant is then
- caught by a check: a check that held unmutated prints FAILED in some case;
- caught by an error only: every case whose output it changed stopped with an error (no result
  came back for a check to read: a dropped argument, a crash);
- missed: some case returned a changed result that no check flagged, even if another case
  stopped with an error (the "lens" target, which stops at the first catching case, cheapest
  first, counts that one caught).
The detail of each says which. A measurement, not in CI (its name starts with "_"):

    nice -n 10 python scripts/mutants.py _lens_checks --sample 200 --seed 1
"""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path

_path = Path(__file__).resolve().parent / "lens.py"
_spec = importlib.util.spec_from_file_location("mutant_targets.lens", _path)
lens = sys.modules.get(_spec.name) or importlib.util.module_from_spec(_spec)
if _spec.name not in sys.modules:
    sys.modules[_spec.name] = lens
    _spec.loader.exec_module(lens)
lens.STOP_AT_ERROR = False


_LAST: dict = {}  # the outputs of the last mutant, by case


def output(m):
    result = lens.output(m)
    _LAST.clear()
    _LAST.update(result if m is not None else {})
    return result


def check(m) -> tuple[bool, str]:
    """See the module docstring: (caught, "by a check: ..." / "by an error only: ..." / why missed)."""
    cases = lens._cases_of(m)
    said = [s for case in cases if (s := lens._caught_in(case))]
    checks = [s for s in said if "FAILED" in s]
    if checks:
        return True, "by a check: " + "; ".join(checks[:3])
    silent = [
        c.name
        for c in cases
        if c.name in _LAST
        and lens.VERDICTS.get(c.name) != "raised"
        and not lens._same_case(c.name, _LAST[c.name], lens.BASELINE[c.name])
    ]
    if silent:
        return False, "a changed result no check flagged: " + "; ".join(silent[:3])
    return True, "by an error only: " + "; ".join(said[:3])


TARGET = dataclasses.replace(
    lens.TARGET,
    name="_lens_checks",
    output=output,
    check=check,
    description="the lens, against the checks it prints alone (an error is no catch)",
)
