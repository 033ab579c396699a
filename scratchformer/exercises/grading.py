"""Grading a learner's backward, in this process: finite differences in float64, the layer
contract, and a cause named only where it is measured.

    grade = check("linear", "linear.py")
    print(grade.report())          # "right: ..." or "wrong: ..." and "likely cause: ..."
    grade.passed                   # True / False

The learner's code runs in a child process that only runs it (`isolation.Learner`: a fresh
interpreter in its own process group and scratch directory, with a time and a memory limit,
the reference solutions out of its reach): this process sends it each graded input and judges
the arrays it sends back. Nothing the child says is a verdict, and nothing it could change
here (this module, NumPy, the expected arrays) exists in its memory.

A backward exercise is graded on each of its cases in turn (`catalogue.Case`: different shapes,
2-D to 4-D where the stub allows `...`, odd batch and head counts, each with its own seed) and
on RANDOM_CASES more whose shapes this process draws afresh on every check (so a file fitted
to the fixed shapes fails): forward, then backward of a random upstream gradient R (the loss
is sum(out * R); a number output gets R = 0.7). It is right when, on every case,
  - its parameters are the stub's (one more is refused: the check has nothing to compare it with),
  - the forward is the one the stub gave (the check needs it),
  - backward returns what the contract says: None when the inputs are all integers, one array
    for one float input, else a tuple in the forward's argument order, each of its input's
    shape, float64 (the inputs are),
  - backward changes nothing in place: not its argument, not the inputs, not the forward's
    output, not an array forward saved on the object,
  - every returned array and every parameter's .grad is finite and matches the five-point
    finite differences of the given forward (relative error at most TOLERANCE, as
    `scratchformer.gradcheck` measures it: float64's own error, far below float32's),
  - a second forward and backward returns the same gradients (nothing kept from the first call
    is added in) and ADDS into .grad (starting from a non-zero .grad).
An exercise of another kind (`Exercise.kind`: "bpe", "diagnose", "induction") is graded by the
module of that name (`grade(answer, progress) -> Verdict`), here, with `answer` calling the
learner's function in the child.

When a backward is wrong, the first wrong element of the first failing case is named, and a
cause only where it is measured: a known mistake of the exercise (`catalogue.py`, edits of the
reference solution) that, run here on the same input, gives the same gradients or the same
error (one cause among the mistakes that do); the same backward right on another draw of an
earlier case's shapes and wrong on another draw of this one's (it depends on the shape); or a
relation measured between the learner's gradient and the right one (the sign, a constant
factor, a transpose, one batch row's share, zeros).
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import linecache
import math
import re
import secrets
import types
import warnings
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from scratchformer.errors import ConfigError, DataError
from scratchformer.exercises.catalogue import EXERCISES, MISSING_BATCH_SUM, Case, Exercise, Verdict
from scratchformer.exercises.isolation import ChildFailed, Foreign, Learner, LearnerRaised
from scratchformer.exercises.runner import parameters, run_case
from scratchformer.gradcheck import numerical_gradient, relative_error

SOLUTIONS = Path(__file__).resolve().parent / "solutions"
SOLUTION_BLOCK = re.compile(r"^( *)# BEGIN SOLUTION\n.*?^\1# END SOLUTION\n", re.S | re.M)  # the stub's hole
# The references agree with five-point differences (FD_EPS 3e-4) to 1e-11 at worst on every case
# (float64's own error in these sums, and the stencil's: tests/exercises asserts TOLERANCE / 20);
# a backward computed in float32 rounds each entry at 6e-8 and lands at 1e-8 and above.
TOLERANCE = 1e-9
FD_EPS = 3e-4
FD_POINTS = 4  # the five-point stencil (gradcheck.numerical_gradient)
RANDOM_CASES = 2  # cases of random shapes drawn on every check, after the fixed ones
# the seed of those shapes when a check names none; None: fresh ones every time. A test session
# fixes it (tests/exercises/conftest.py), so each process computes their references once.
RANDOM_SEED: int | None = None
SCALAR_UPSTREAM = 0.7  # dloss for a forward that returns a number (not 1, so a missing factor shows)
TIME_LIMIT = 60.0  # seconds the learner's code may run in one check, every case and the cause's runs
MEMORY_LIMIT = 2 << 30  # bytes the child may map beyond what it starts with; an exercise needs a few MB


# -- the files ---------------------------------------------------------------------------------
def exercise(name: str) -> Exercise:
    if not isinstance(name, str) or name not in EXERCISES:
        raise ConfigError(f"no exercise named {name!r}; the exercises are: {', '.join(EXERCISES)}")
    return EXERCISES[name]


def solution_source(name: str) -> str:
    """The reference solution: the stub's forward with the backward written."""
    exercise(name)
    return (SOLUTIONS / f"{name}.py").read_text(encoding="utf-8")


def stub_source(name: str, path: str = "FILE") -> str:
    """The file a learner starts from: the solution with the part between its BEGIN SOLUTION and
    END SOLUTION markers (the backward's body, or the function's) taken out (`path`: where it
    will be, for the command that checks it)."""
    source, ex = solution_source(name), exercise(name)
    m = SOLUTION_BLOCK.search(source)
    pad = m.group(1)
    todo = (
        f"{pad}# your code here; then: scratchformer exercise {name} --check {path}\n"
        f"{pad}# (stuck? scratchformer exercise {name} --hint)\n"
        f'{pad}raise NotImplementedError("{ex.todo}")\n'
    )
    return source[: m.start()] + todo + source[m.end() :]


def _class_from_source(source: str, class_name: str, filename: str) -> type:
    """What `source` (trusted: the reference or an edit of it) defines under `class_name`."""
    module = types.ModuleType(f"scratchformer_exercise_{abs(hash(filename))}")
    module.__file__ = filename
    linecache.cache[filename] = (
        len(source),
        None,
        source.splitlines(True),
        filename,
    )  # for tracebacks' lines
    exec(compile(source, filename, "exec"), module.__dict__)
    return module.__dict__[class_name]


def _missing_file(path: Path, ex: Exercise) -> DataError:
    return DataError(
        f"{path}: no such file (write the stub with 'scratchformer exercise {ex.name} --out {path}')"
    )


# -- the graded inputs and their right answers -------------------------------------------------
def _input_names(cls: type) -> list[str]:
    return [p for p in inspect.signature(cls.forward).parameters if p != "self"]


def _is_float(a) -> bool:
    return isinstance(a, np.ndarray) and np.issubdtype(a.dtype, np.floating)


@dataclass
class Reference:
    """One graded input and its right answers: the spec the child runs (`runner.run_case`), the
    reference's outcome on it, and the finite-difference gradients (by name: dx, weight.grad)."""

    case: Case
    spec: dict
    outcome: dict
    expected: dict[str, np.ndarray]


def _spec(ref_cls: type, case: Case) -> dict:
    """The input `case` describes, as the child is sent it: parameter values (float64, each
    seeded by its name, so the order a constructor makes them in does not matter), the forward's
    inputs, the upstream gradient and the .grad a second backward starts from."""
    obj = ref_cls(*case.args)
    params = {}
    for name, p in parameters(obj):
        rng = np.random.default_rng([case.seed + 1, zlib.crc32(name.encode())])
        params[name] = rng.standard_normal(np.shape(p.data)) * 0.5
        p.data = params[name].copy()
    inputs = list(case.inputs(np.random.default_rng(case.seed)))
    out = obj.forward(*[np.array(a, copy=True) for a in inputs])
    upstream = (
        np.random.default_rng(case.seed + 2).standard_normal(out.shape)
        if isinstance(out, np.ndarray)
        else SCALAR_UPSTREAM
    )
    prefill = np.random.default_rng(case.seed + 3)
    return {
        "args": tuple(case.args),
        "params": params,
        "inputs": inputs,
        "upstream": upstream,
        "prefill": {name: prefill.standard_normal(v.shape) for name, v in params.items()},
    }


def finite_differences(ref_cls: type, spec: dict) -> dict[str, np.ndarray]:
    """d(sum(forward * R))/d(every float input and parameter) of the reference's forward on
    `spec`, by the five-point stencil in float64."""
    obj = ref_cls(*spec["args"])
    for name, p in parameters(obj):
        p.data = np.array(spec["params"][name], copy=True)
    inputs = [np.array(a, copy=True) for a in spec["inputs"]]
    R = spec["upstream"]

    def loss() -> float:
        return float(np.sum(obj.forward(*inputs) * R))

    grads = {}
    for name, a in zip(_input_names(ref_cls), inputs):
        if _is_float(a):
            grads["d" + name] = numerical_gradient(loss, a, FD_EPS, points=FD_POINTS)
    for name, p in parameters(obj):
        grads[f"{name}.grad"] = numerical_gradient(loss, p.data, FD_EPS, points=FD_POINTS)
    return grads


_REFERENCES: dict[tuple, Reference] = {}
_CLASSES: dict[str, type] = {}


def reference_class(ex: Exercise) -> type:
    if ex.name not in _CLASSES:
        _CLASSES[ex.name] = _class_from_source(solution_source(ex.name), ex.class_name, _solution_file(ex))
    return _CLASSES[ex.name]


def _solution_file(ex: Exercise) -> str:
    return str(SOLUTIONS / f"{ex.name}.py")


def reference(ex: Exercise, case: Case) -> Reference:
    """The spec, the reference's outcome and the finite differences of one case (computed once
    per process for each case: its constructor arguments, seed and input shapes)."""
    shapes = tuple(np.shape(a) for a in case.inputs(np.random.default_rng(case.seed)))
    key = (ex.name, tuple(case.args), case.seed, shapes)
    if key not in _REFERENCES:
        ref_cls = reference_class(ex)
        with _quiet_numpy():
            spec = _spec(ref_cls, case)
            outcome = run_case(ref_cls, spec, _solution_file(ex))
            _REFERENCES[key] = Reference(case, spec, outcome, finite_differences(ref_cls, spec))
    return _REFERENCES[key]


def graded_cases(ex: Exercise, seed: int | None = None) -> list[Case]:
    """The exercise's cases and RANDOM_CASES of random shapes, drawn from `seed` (None:
    RANDOM_SEED, or a fresh one, as every check draws)."""
    if ex.random_case is None:
        return list(ex.cases)
    seed = RANDOM_SEED if seed is None else seed
    rng = np.random.default_rng(secrets.randbits(64) if seed is None else seed)
    return [*ex.cases, *(ex.random_case(rng) for _ in range(RANDOM_CASES))]


def describe_case(ex: Exercise, case: Case, names: list[str]) -> str:
    """'Linear(5, 2) on x (7, 5)': the constructor call and each input's shape."""
    inputs = case.inputs(np.random.default_rng(case.seed))
    shapes = ", ".join(f"{n} {tuple(np.shape(a))}" for n, a in zip(names, inputs))
    return f"{ex.class_name}({', '.join(map(repr, case.args))}) on {shapes}"


def _short(ex: Exercise, case: Case, names: list[str]) -> str:
    """describe_case without a constructor call that has no arguments: 'x (2, 3, 5)'."""
    text = describe_case(ex, case, names)
    return text if case.args else text.split(" on ", 1)[1]


# -- the verdict -------------------------------------------------------------------------------
@dataclass
class Finding:
    """The first thing wrong: `what` for the learner, `key` to compare with a known mistake's."""

    what: str
    key: object
    tensor: str | None = None  # the wrong gradient's name, for a finding about values
    cause: str | None = None  # the likely cause, where the finding itself shows it (a shape's)


@dataclass
class Grade:
    name: str
    passed: bool
    lines: list[str]
    cause: str | None = None

    def report(self) -> str:
        return "\n".join(self.lines)


def _wrong_grade(name: str, what: str, cause: str | None, unknown: str = "") -> Grade:
    return Grade(
        name,
        False,
        [
            f"wrong: {name}: {what}",
            f"likely cause: {cause}" if cause else f"likely cause: not one this checker knows{unknown}",
        ],
        cause,
    )


def _describe(r) -> str:
    if isinstance(r, np.ndarray):
        return f"an array of shape {r.shape}"
    if isinstance(r, tuple):
        return f"a tuple of {len(r)}"
    if isinstance(r, Foreign):
        return f"a {r.type_name}"
    return "None" if r is None else f"a {type(r).__name__}"


def _returned_gradients(
    o: dict, ref: Reference, names: list[str]
) -> tuple[dict[str, np.ndarray], Finding | None]:
    """The gradients backward returned, by name (dx, dq, ...), or what breaks the contract."""
    floats = [(n, a) for n, a in zip(names, ref.spec["inputs"]) if _is_float(a)]
    r = o.get("returned")
    if not floats:
        if r is not None:
            return {}, Finding(
                f"backward returned {_describe(r)}; the inputs are integer ids, which have no gradient: "
                "return None",
                ("returned", "not None"),
            )
        return {}, None
    if len(floats) == 1:
        if not isinstance(r, np.ndarray):
            return {}, Finding(
                f"backward returned {_describe(r)}; it must return d{floats[0][0]}, one array of "
                f"{floats[0][0]}'s shape {floats[0][1].shape}",
                ("returned", _describe(r)),
            )
        got = {"d" + floats[0][0]: r}
    else:
        want = ", ".join("d" + n for n, _ in floats)
        if not isinstance(r, tuple) or len(r) != len(floats) or not all(isinstance(g, np.ndarray) for g in r):
            return {}, Finding(
                f"backward returned {_describe(r)}; it must return the tuple ({want})",
                ("returned", _describe(r)),
            )
        shapes = [g.shape for g in r]
        wanted = [a.shape for _, a in floats]
        if shapes != wanted and sorted(shapes) == sorted(wanted):
            return {}, Finding(
                f"backward returned arrays of shapes {shapes}: the gradients are in the wrong order; "
                f"return ({want}), shapes {wanted}",
                ("order", tuple(shapes)),
            )
        got = {"d" + n: g for (n, _), g in zip(floats, r)}
    for (n, a), (gname, g) in zip(floats, got.items()):
        if g.shape != a.shape:
            cause = _shape_cause(g.shape, a.shape)
            return got, Finding(
                f"{gname} has shape {g.shape}, {n} has shape {a.shape}: {cause}",
                ("shape", gname, g.shape),
                cause=cause,
            )
        finding = _dtype_finding(gname, g)
        if finding:
            return got, finding
    return got, None


def _dtype_finding(name: str, g: np.ndarray) -> Finding | None:
    if g.dtype == np.float64:
        return None
    if np.issubdtype(g.dtype, np.floating):
        return Finding(
            f"{name} has dtype {g.dtype}: the inputs are float64 and the gradient must be too "
            f"({g.dtype} rounds every entry at {np.finfo(g.dtype).eps:.0e} of its size)",
            ("dtype", name, str(g.dtype)),
            cause=f"a computation in {g.dtype} (an astype, or an array made with dtype={g.dtype})",
        )
    return Finding(
        f"{name} has dtype {g.dtype}; it must be a floating array (float64)", ("dtype", name, str(g.dtype))
    )


def _shape_cause(got: tuple, want: tuple) -> str:
    if len(got) > 1 and got == want[::-1]:
        return "a transposed product (the shape is reversed)"
    if len(got) > len(want) and got[len(got) - len(want) :] == want:
        return MISSING_BATCH_SUM
    if sorted(got) == sorted(want):
        return (
            "the right axes in another order: a transpose (or swapaxes) is missing or extra; "
            "a reshape would mix entries"
        )
    if math.prod(got) == math.prod(want):
        return f"the right number of entries in the wrong shape: reshape to {want}"
    return "a wrong shape"


def _unchanged(a, b) -> bool:
    """Equal values, NaN where the other has NaN (an in-place change shows)."""
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        return a.shape == b.shape and bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))
    return type(a) is type(b) and (a == b or (isinstance(a, float) and math.isnan(a) and math.isnan(b)))


def _in_place(o: dict, ref: Reference, names: list[str]) -> Finding | None:
    """What backward changed in place: its argument, an input, the forward's output, an array
    forward saved on the object."""
    if not _unchanged(o.get("dy_after"), ref.spec["upstream"]):
        return Finding(
            "backward changed its argument in place (e.g. dy *= ...): the caller may still need it; "
            "compute into a new array",
            ("dy changed",),
            cause="an in-place operation on the argument (dy *= ..., dy -= ..., dy[...] = ...)",
        )
    for name, before, after in zip(names, ref.spec["inputs"], o.get("inputs_after", [])):
        if not _unchanged(after, before):
            return Finding(
                f"backward changed the input {name} in place: the caller's array now holds other values; "
                "compute into a new array",
                ("input changed", name),
                cause=f"an in-place operation on {name}, or on an attribute that is {name} itself",
            )
    if isinstance(o.get("out"), np.ndarray) and not _unchanged(o.get("out_after"), o.get("out")):
        return Finding(
            "backward changed the forward's output in place: the caller holds that array; compute into a "
            "new array",
            ("output changed",),
            cause="an in-place operation on an array the forward returned (kept as self.y and changed in backward)",
        )
    for attr, before in o.get("saved", {}).items():
        after = o.get("saved_after", {}).get(attr)
        if not _unchanged(after, before):
            return Finding(
                f"backward changed self.{attr}, which forward saved, in place: a second backward (or whoever "
                "holds that array) sees other values; compute into a new array",
                ("saved changed", attr),
                cause=f"an in-place operation on self.{attr} (self.{attr} *= ..., np.multiply(..., out=self.{attr}))",
            )
    return None


def _first_finding(o: dict, ex: Exercise, ref: Reference, names: list[str]) -> Finding | None:
    """The first way `o` breaks the exercise on `ref`'s input, in the order the module docstring lists."""
    error = o.get("error")
    if error and error[0] == "constructor":
        return _given_raised(error)
    extra = [n for n in o["params"] if n not in ref.outcome["params"]]
    missing = [n for n in ref.outcome["params"] if n not in o["params"]]
    if extra or missing:
        parts = ([f"your class has parameter(s) the stub's has not: {', '.join(extra)}"] if extra else []) + (
            [f"it lacks the stub's parameter(s) {', '.join(missing)}"] if missing else []
        )
        return Finding(
            "; ".join(parts) + ": the check sets and compares the stub's parameters by name (a gradient "
            "for any other has nothing to be compared with); keep the stub's constructor",
            ("params", tuple(extra), tuple(missing)),
            cause="a parameter added to the stub's class, or one renamed: the grader sets each of the stub's "
            "parameters by name and compares its .grad",
        )
    for name, shape in o.get("param_shapes", {}).items():
        want = ref.outcome["param_shapes"][name]
        if list(shape) != list(want):
            return Finding(
                f"your constructor makes {name} of shape {tuple(shape)}; the stub's is {tuple(want)}: the check "
                "sets each parameter to the stub's shape, so keep the stub's constructor",
                ("param shape", name, tuple(shape)),
                cause=f"{name} is made with another shape than the stub's {tuple(want)}",
            )
    if error and error[0] == "forward":
        return _given_raised(error)
    if not _same_output(o.get("out"), ref.outcome["out"]):
        return Finding(
            "your forward's output differs from the given forward's: the check needs the stub's forward "
            f"as it was given (take it again with 'scratchformer exercise {ex.name}')",
            ("forward",),
        )
    if error and error[0] == "backward":
        _, message, where = error
        return Finding(f"backward raised {message}{where}", ("raised", message))
    got, finding = _returned_gradients(o, ref, names)
    if finding:
        return finding
    for name, g in o["grads"].items():
        want = ref.expected[name].shape
        if not isinstance(g, np.ndarray):
            return Finding(
                f"{name} is {_describe(g)}; it must be an array of shape {want}", ("grad type", name)
            )
        if g.shape != want:
            cause = _shape_cause(g.shape, want)
            return Finding(
                f"{name} has shape {g.shape}, expected {want}: {cause}", ("shape", name, g.shape), cause=cause
            )
        finding = _dtype_finding(name, g)
        if finding:
            return finding
    finding = _in_place(o, ref, names)
    if finding:
        return finding
    for name, want in ref.expected.items():
        g = got[name] if name in got else o["grads"][name]
        finite = np.isfinite(g)
        if not finite.all():  # NaN compares False with anything: it gets its own check
            i = np.unravel_index(int(np.argmin(finite.reshape(-1))), g.shape)
            index = ", ".join(str(int(j)) for j in i)
            return Finding(
                f"{name}[{index}] is {float(g[i])}: every gradient must be finite ({int((~finite).sum())} "
                f"of {g.size} entries are not; finite differences give {float(want[i]):.6g} there)",
                ("non-finite", name, int((~finite).sum())),
                tensor=name,
            )
        if not relative_error(g, want) <= TOLERANCE:
            return Finding(_first_wrong_element(name, g, want), ("values",), tensor=name)
    if error:  # the second backward raised
        _, message, where = error
        return Finding(f"a second forward and backward raised {message}{where}", ("raised", message))
    again, finding = _returned_gradients({"returned": o.get("returned_again")}, ref, names)
    if finding is None:
        for name, g in again.items():
            if not relative_error(g, got[name]) <= TOLERANCE:
                finding = Finding(
                    f"a second forward and backward on the same input returned another {name} "
                    f"(relative difference {relative_error(g, got[name]):.2e}): a backward's result must "
                    "depend on this call alone",
                    ("again", name),
                    cause="something kept from the first call is added in: a gradient stored on self and "
                    "added to (self.dx += ...), or a cache changed by the first backward",
                )
                break
    else:
        finding = Finding(f"a second backward: {finding.what}", ("again", finding.key))
    if finding:
        return finding
    for name, g in o["accumulated"].items():
        want = ref.spec["prefill"][name.removesuffix(".grad")] + ref.expected[name]
        if not isinstance(g, np.ndarray) or g.shape != want.shape or not relative_error(g, want) <= TOLERANCE:
            if (
                isinstance(g, np.ndarray)
                and g.shape == want.shape
                and relative_error(g, ref.expected[name]) <= TOLERANCE
            ):
                return Finding(
                    f"{name} is overwritten instead of accumulated: a backward must ADD into .grad "
                    "(+=), as a parameter used twice gets the sum of both gradients",
                    ("overwritten", name),
                    cause="`.grad = ...` where `.grad += ...` belongs",
                )
            return Finding(
                f"{name} after a second backward is not the earlier .grad plus this gradient: "
                "a backward must add its gradient into .grad and nothing else",
                ("accumulate", name),
            )
    return None


def _given_raised(error) -> Finding:
    phase, message, where = error
    return Finding(
        f"your {phase} raised {message}{where}; the check needs the stub's {phase} as it was given",
        ("raised", phase, message),
    )


def _same_output(a, b) -> bool:
    if isinstance(b, np.ndarray):
        return (
            isinstance(a, np.ndarray)
            and a.shape == b.shape
            and a.dtype.kind in "fc"
            and bool(np.allclose(a, b, rtol=1e-12, atol=1e-12))
        )
    try:
        return not isinstance(a, (np.ndarray, Foreign)) and math.isclose(
            float(a), float(b), rel_tol=1e-12, abs_tol=1e-12
        )
    except (TypeError, ValueError):
        return False


def _first_wrong_element(name: str, got: np.ndarray, want: np.ndarray) -> str:
    scale = max(float(np.max(np.abs(want), initial=0)), float(np.max(np.abs(got), initial=0)), 1e-12)
    bad = ~(np.abs(got - want) <= TOLERANCE * scale)
    i = np.unravel_index(int(np.argmax(bad.reshape(-1))), want.shape)
    index = ", ".join(str(int(j)) for j in i)
    return (
        f"{name}[{index}] is {float(got[i]):.6g}, finite differences give {float(want[i]):.6g} "
        f"({int(bad.sum())} of {bad.size} entries wrong; relative error {relative_error(got, want):.2e})"
    )


def _gradients(o: dict, ref: Reference, names: list[str]) -> dict[str, np.ndarray]:
    got, _ = _returned_gradients(o, ref, names)
    return {**got, **{k: v for k, v in o["grads"].items() if isinstance(v, np.ndarray)}}


def _same_failure(mine: Finding, theirs: Finding | None, o: dict, m: dict, ref: Reference, names) -> bool:
    """Whether a known mistake failed exactly as the learner's file did: the same finding and,
    for wrong or non-finite values, the same gradients (NaN where NaN)."""
    if theirs is None or mine.key != theirs.key:
        return False
    if mine.key[0] not in ("values", "non-finite"):
        return True
    a, b = _gradients(o, ref, names), _gradients(m, ref, names)
    return a.keys() == b.keys() and all(
        a[k].shape == b[k].shape
        and np.array_equal(np.isfinite(a[k]), np.isfinite(b[k]))
        and relative_error(np.nan_to_num(a[k]), np.nan_to_num(b[k])) <= TOLERANCE
        for k in a
    )


def _generic_cause(f: Finding, o: dict, ex: Exercise, ref: Reference, names) -> str | None:
    """A cause measured from the learner's gradient and the right one (or from the finding itself)."""
    if f.cause:
        return f.cause
    if f.key[0] == "raised":
        return _exception_cause(f.key[-1])
    if f.key != ("values",):
        return None
    got, want = _gradients(o, ref, names)[f.tensor], ref.expected[f.tensor]
    ok = lambda a: relative_error(got, a) <= 1e-5  # noqa: E731
    error = relative_error(got, want)
    if error < 1e-5:  # right to float32's precision, not float64's
        return (
            f"{f.tensor} agrees with finite differences to {error:.0e} only, float32's precision (float64 "
            "agrees to 1e-11 here): a computation in float32 (an astype(np.float32), or an array made with "
            "dtype=np.float32)"
        )
    if not np.any(got) and np.any(want):
        return f"{f.tensor} stays zero: its gradient is never computed or never added"
    if ok(-want):
        return "the sign is flipped"
    if want.ndim == 2 and want.shape[0] == want.shape[1] and ok(want.T):
        return "a transposed product (the result is the transpose of the right one)"
    factor = float(np.sum(got * want) / max(float(np.sum(want * want)), 1e-300))
    if ok(factor * want):
        return _factor_cause(factor, ex, ref)
    out = o.get("out")
    if isinstance(out, np.ndarray) and out.ndim >= 3:  # one batch row's share only
        ref_cls = reference_class(ex)
        for b in (0, out.shape[0] - 1):
            only = np.zeros_like(ref.spec["upstream"])
            only[b] = ref.spec["upstream"][b]
            with _quiet_numpy():
                share_run = run_case(ref_cls, {**ref.spec, "upstream": only}, _solution_file(ex))
            share = _gradients(share_run, ref, names).get(f.tensor)
            if share is not None and share.shape == got.shape and ok(share):
                return f"only batch row {b} is counted: {MISSING_BATCH_SUM}"
    return None


def _factor_cause(factor: float, ex: Exercise, ref: Reference) -> str:
    first = next(a for a in ref.spec["inputs"] if isinstance(a, np.ndarray))
    rows = math.prod(first.shape[:-1]) if first.ndim > 1 else first.shape[0]
    hints = [
        (2.0, "counted twice"),
        (0.5, "half of it: a gradient counted once where it should be twice"),
        (rows, f"multiplied by the number of rows ({rows}): a sum where a mean belongs, or a missing 1/N"),
        (1 / rows, f"divided by the number of rows ({rows}): a mean where a sum belongs"),
        (SCALAR_UPSTREAM, "the incoming gradient is multiplied in twice"),
        (1 / SCALAR_UPSTREAM, "the incoming gradient is not multiplied in (the chain rule)"),
    ]
    if ex.name in ("attention", "gqa", "mha"):  # the exercises whose forward scales by 1/sqrt(d)
        d = ref.case.args[0] // ref.case.args[1] if ex.name == "mha" else first.shape[-1]
        hints += [
            (math.sqrt(d), f"a missing 1/sqrt(d) scale (d = {d})"),
            (1 / math.sqrt(d), f"an extra 1/sqrt(d) scale (d = {d})"),
        ]
    for value, hint in hints:
        if math.isclose(factor, value, rel_tol=1e-4):
            return f"off by a factor {factor:.4g}: {hint}"
    return f"off by a constant factor {factor:.4g}: a missing or extra scale"


def _exception_cause(message: str) -> str | None:
    if message.startswith("NotImplementedError"):
        return "the backward is not written yet"
    if message.startswith("SystemExit"):
        return "the backward ends the program (exit() or sys.exit()) instead of returning its gradient"
    if message.startswith("MemoryError"):
        return (
            "an array far larger than the exercise needs (the grader allows "
            f"{MEMORY_LIMIT >> 30} GiB): a product of the wrong arrays, or an outer product where a sum belongs"
        )
    if message.startswith("EOFError"):
        return "the backward reads input (input()): the grader gives it none"
    if message.startswith("RecursionError"):
        return "a function that calls itself without end: backward calling backward (or forward) again"
    if message.startswith("PermissionError: the grader does not let the code it grades "):
        what = message.split(" grades ", 1)[1].split(" (")[0]
        return (
            f"your code tries to {what}, which the grader does not allow: a backward needs nothing but its "
            "arguments and what its forward saved"
        )
    m = re.search(
        r"non-broadcastable output operand with shape \(([^)]*)\) doesn't match the broadcast shape "
        r"\(([^)]*)\)",
        message,
    )
    if m:
        target, result = (tuple(int(s) for s in g.split(",") if s.strip()) for g in m.groups())
        return (
            f"a ({', '.join(map(str, result))}) gradient added into a ({', '.join(map(str, target))}) array: "
            + _shape_cause(result, target)
        )
    if "matmul" in message or "not aligned" in message:
        return "a product of mismatched shapes: a factor needs (or must lose) a transpose; write each array's shape down"  # noqa: E501
    if "could not be broadcast" in message:
        return "shapes that do not broadcast: a sum without keepdims=True, or a transposed factor"
    return None


@contextlib.contextmanager
def _quiet_numpy():
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        yield


def _known_mistake_cause(
    ex: Exercise, refs: list[Reference], runs: list[tuple[dict, Finding | None]], names
) -> str | None:
    """The cause of the known mistakes that, run here on every input the learner's file was run
    on, fail exactly as it did on each (the same finding and, for values, the same gradients; right
    where it was right); None when none does, or when mistakes of different causes all do (and the
    learner's failing line is not one of theirs)."""
    source = solution_source(ex.name)
    failing = next(k for k, (_, f) in enumerate(runs) if f is not None)
    matches = []  # (cause, the line it raised at)
    for i, mistake in enumerate(ex.mistakes):
        wrong_file = f"<{ex.name}: known mistake {i}>"
        wrong_cls = _class_from_source(source.replace(mistake.old, mistake.new, 1), ex.class_name, wrong_file)
        line, same = "", True
        for k, (o, finding) in enumerate(runs):
            with _quiet_numpy():  # a known mistake's warnings (log of a negative, ...) are not the learner's
                m = run_case(wrong_cls, refs[k].spec, wrong_file)
            if k == failing:
                if _is_reference(m, refs[k]):  # no mistake on this input (a sum over axis 0 of a 2-D array)
                    same = False
                    break
                line = _line_of(m.get("error"))
            theirs = _first_finding(m, ex, refs[k], names)
            if finding is None:
                same = theirs is None
            else:
                same = _same_failure(finding, theirs, o, m, refs[k], names)
            if not same:
                break
        if same:
            matches.append((mistake.cause, line))
    causes = {cause for cause, _ in matches}
    if len(causes) == 1:
        return causes.pop()
    mine = _line_of(runs[failing][0].get("error"))
    same_line = {cause for cause, line in matches if mine and line == mine}
    return same_line.pop() if len(same_line) == 1 else None


def _is_reference(m: dict, ref: Reference) -> bool:
    """Whether a known mistake computes what the reference does on this input (returns, .grad,
    the second call), so it is no mistake there."""
    keys = ("error", "returned", "grads", "returned_again", "accumulated")
    return all(_close(m.get(k), ref.outcome.get(k)) for k in keys)


def _close(a, b) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (
            isinstance(a, np.ndarray)
            and isinstance(b, np.ndarray)
            and a.shape == b.shape
            and bool(np.allclose(a, b, rtol=1e-12, atol=1e-300, equal_nan=True))
        )
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def _line_of(error) -> str:
    """What the line an error was raised at assigns ("dk" of "dk = ds @ q * s"), or the whole
    line, spaces dropped ('' if none): two mistakes that raise the same error are told apart by
    the value they were computing."""
    if not error:
        return ""
    m = re.search(r"\(line \d+: (.*)\)$", error[2])
    if not m:
        return ""
    code = m.group(1)
    target = re.match(r"\s*([\w.\[\], ]+?)\s*(?:\+|-|\*|/)?=(?!=)", code)
    return re.sub(r"\s+", "", target.group(1) if target else code)


def _shape_dependence(
    ex: Exercise, learner: Learner, names, refs: list[Reference], k: int, passed: list[int]
) -> str | None:
    """Measured: right on a second draw of a case it passed, wrong on a second draw of case k's
    shapes (other values, the same shapes) -> the backward depends on the input's shape."""
    if not passed:
        return None
    again = [Case(c.args, c.inputs, c.seed + 7919) for c in (refs[passed[0]].case, refs[k].case)]
    findings = []
    for case in again:
        ref = reference(ex, case)
        outcome = learner.run({**ref.spec, "shown": describe_case(ex, case, names)})
        findings.append(_first_finding(outcome, ex, ref, names))
    if findings[0] is None and findings[1] is not None:
        return (
            f"right on {_short(ex, again[0], names)} (two draws), wrong on {_short(ex, again[1], names)} (two "
            "draws): the backward depends on the input's shape, a size or an axis count written into the code "
            "(a fixed reshape, a sum or an einsum over exactly these axes, an axis counted from the front); take "
            "every size from the arrays, and the axes from the end"
        )
    return None


def _grade_backward(ex: Exercise, learner: Learner, refs: list[Reference]) -> Grade:
    """Run the learner's class on every graded input; the first failing input is the verdict,
    and the cause is looked up over every input (a known mistake must fail alike on each)."""
    names = _input_names(reference_class(ex))
    runs: list[tuple[dict, Finding | None]] = []
    for ref in refs:
        try:
            o = learner.run({**ref.spec, "shown": describe_case(ex, ref.case, names)})
        except ChildFailed:
            if any(f for _, f in runs):  # a later input hangs or kills it: the first finding stands
                break
            raise
        runs.append((o, _first_finding(o, ex, ref, names)))
    failing = next((k for k, (_, f) in enumerate(runs) if f is not None), None)
    if failing is not None:
        if learner.progress is not None:
            learner.progress("looking up the likely cause")
        (o, finding), ref = runs[failing], refs[failing]
        passed = [k for k, (_, f) in enumerate(runs[: len(ex.cases)]) if f is None]  # fixed cases
        cause = _known_mistake_cause(ex, refs, runs, names)
        if cause is None and finding.key == ("values",):  # a relation measured on the gradient itself
            cause = _generic_cause(finding, o, ex, ref, names)
        if cause is None:
            cause = _shape_dependence(ex, learner, names, refs, failing, passed)
        if cause is None:
            cause = _generic_cause(finding, o, ex, ref, names)
        on = "" if failing == 0 else f"on {_short(ex, ref.case, names)}: "
        return _wrong_grade(
            ex.name,
            f"{on}{finding.what}",
            cause,
            "; compare each line with the forward line it differentiates",
        )
    worst = 0.0
    for (o, _), ref in zip(runs, refs):
        got = _gradients(o, ref, names)
        worst = max([worst] + [relative_error(got[n], want) for n, want in ref.expected.items()])
    grads = ", ".join(refs[0].expected)
    added = "; a second backward adds into .grad" if refs[0].outcome["grads"] else ""
    fixed = len(ex.cases)
    shapes = "; ".join(_short(ex, r.case, names) for r in refs[:fixed])
    drawn = "; ".join(_short(ex, r.case, names) for r in refs[fixed:])
    return Grade(
        ex.name,
        True,
        [
            f"right: {ex.name}: {grads} agree with finite differences on {len(refs)} inputs "
            f"({shapes}; and {len(refs) - fixed} of random shapes: {drawn}; worst relative error {worst:.1e}){added}"
        ],
    )


# -- the exercises of other kinds: a grader module's verdict ---------------------------------------
def setup(name: str, stub: Path) -> str | None:
    """Make what the exercise needs beside its stub (its grader module's `setup`), and say what."""
    ex = exercise(name)
    if ex.kind == "backward" or not hasattr(_grader(ex), "setup"):
        return None
    return _grader(ex).setup(Path(stub))


def _grader(ex: Exercise):
    return importlib.import_module(f"scratchformer.exercises.{ex.kind}")


def _verdict(ex: Exercise, answer, filename: str, progress: Callable[[str], None] | None = None) -> Verdict:
    """The grader module's verdict on `answer` (the learner's function in the child, or a known
    mistake's here); what the learner's code raised is a wrong verdict."""
    try:
        with _quiet_numpy():
            return _grader(ex).grade(answer, progress or (lambda _where: None))
    except LearnerRaised as e:
        return _raised_verdict(ex, e.message, e.where)
    except ChildFailed:
        raise
    except BaseException as e:  # noqa: BLE001 - a known mistake's code (here), or the grader on a returned value
        from scratchformer.exercises.runner import message, where

        text, line = message(e), where(e, filename)
        if not line:  # raised by the grader on what the code returned
            return Verdict(False, f"what your {ex.class_name} returned cannot be graded: {text}", None)
        return _raised_verdict(ex, text, line)


def _raised_verdict(ex: Exercise, message: str, where: str) -> Verdict:
    cause = (
        f"{ex.class_name} is not written yet"
        if message.startswith("NotImplementedError")
        else _exception_cause(message)
    )
    return Verdict(False, f"your {ex.class_name} raised {message}{where}", cause)


def _grade_other(ex: Exercise, learner: Learner) -> Grade:
    """Grade an exercise of a kind other than "backward"; a known mistake (an edit of the
    solution) that gets the same verdict names the cause."""
    verdict = _verdict(ex, learner, str(learner.path), learner.progress)
    if verdict.right:
        return Grade(ex.name, True, [f"right: {ex.name}: {verdict.text}"])
    cause = verdict.cause
    if cause is None:
        source = solution_source(ex.name)
        causes = set()
        for i, mistake in enumerate(ex.mistakes):
            wrong_file = f"<{ex.name}: known mistake {i}>"
            known = _class_from_source(source.replace(mistake.old, mistake.new, 1), ex.class_name, wrong_file)
            if _verdict(ex, known, wrong_file).text == verdict.text:
                causes.add(mistake.cause)
        cause = causes.pop() if len(causes) == 1 else None
    return _wrong_grade(ex.name, verdict.text, cause, "; " + _grader(ex).UNKNOWN)


def check(
    name: str,
    path: str | Path,
    *,
    time_limit: float = TIME_LIMIT,
    memory_limit: int = MEMORY_LIMIT,
    seed: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> Grade:
    """Grade the learner's file at `path` for exercise `name`: its code runs in a child process
    limited to `time_limit` seconds and `memory_limit` bytes more than it starts with; the
    random shapes are drawn from `seed` (None: fresh ones). A file that does not load, or lacks
    the class, raises DataError; everything else is a Grade (passed or not), a file that hangs,
    exhausts its memory, ends its process or breaks the pipe included."""
    ex = exercise(name)
    if not (
        isinstance(time_limit, (int, float)) and not isinstance(time_limit, bool) and 0 < time_limit <= 3600
    ):
        raise ConfigError(f"time_limit must be a number of seconds in (0, 3600], got {time_limit!r}")
    if not (isinstance(memory_limit, int) and (64 << 20) <= memory_limit <= (1 << 40)):
        raise ConfigError(
            f"memory_limit must be a number of bytes from 64 MiB to 1 TiB, got {memory_limit!r}"
        )
    path = Path(path)
    if not path.is_file():
        raise _missing_file(path, ex)
    refs = []
    if ex.kind == "backward":  # every right answer first, here: the learner's time is its own
        cases = graded_cases(ex, seed)
        refs = [reference(ex, case) for case in cases]
    elif hasattr(_grader(ex), "prepare"):
        _grader(ex).prepare()  # likewise: the trainer's merges, the ablations
    try:
        with Learner(name, ex.class_name, ex.kind, path, time_limit, memory_limit, progress) as learner:
            if ex.kind != "backward":
                return _grade_other(ex, learner)
            if not learner.defines_class:
                raise DataError(f"{path} defines no class {ex.class_name}: keep the stub's class name")
            return _grade_backward(ex, learner, refs)
    except ChildFailed as e:
        return _wrong_grade(name, e.what, e.cause)


def list_exercises() -> list[tuple[str, str]]:
    return [(e.name, e.title) for e in EXERCISES.values()]
