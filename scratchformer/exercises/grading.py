"""Grading a learner's backward: finite differences in float64, the layer contract, a likely cause.

    grade = check("linear", "linear.py")
    print(grade.report())          # "right: ..." or "wrong: ..." and "likely cause: ..."
    grade.passed                   # True / False

The learner's file is imported and run in a child process (`isolation.py`) with a time limit and
a memory limit: a file that loops forever, allocates without bound, calls exit() or ends its own
process gets a one-line verdict, never a hang or a traceback; the verdict comes back as JSON
over a pipe. The reference's finite differences are computed here, before the child starts.

The learner's class is graded on each of the exercise's cases in turn (`catalogue.Case`:
different shapes, 2-D to 4-D where the stub allows `...`, odd batch and head counts, each with
its own seed): forward, then backward of a random upstream gradient R (the loss is
sum(out * R); a number output gets R = 0.7). It is right when, on every case,
  - its parameters are the stub's (one more is refused: the check has nothing to compare it with),
  - the forward is the one the stub gave (the check needs it),
  - backward returns what the contract says: None when the inputs are all integers, one array
    for one float input, else a tuple in the forward's argument order, each of its input's shape,
  - backward leaves its argument unchanged,
  - every returned array and every parameter's .grad is finite and matches central finite
    differences of the given forward (relative error at most TOLERANCE, as
    `scratchformer.gradcheck` measures it),
  - and a second backward ADDS into .grad (starting from a non-zero .grad).
An exercise of another kind (`Exercise.kind`: "bpe", "diagnose", "induction") is graded by the
module of that name (`grade(answer, progress) -> Verdict`, run in the same child); a known
mistake that gets the same verdict names the cause, where the grader itself names none.

When a backward is wrong, the first wrong element of the first failing case is named, and the cause is
looked up: each known mistake of the exercise (`catalogue.py`, edits of the reference solution)
is run on that case, and one that fails exactly as the learner's did names the cause; else a
file right on an earlier case and wrong on a later one depends on the shape; else generic
checks (sign, a constant factor, a transpose, one batch row only, a shape with an extra axis).
"""

from __future__ import annotations

import contextlib
import importlib.util
import inspect
import linecache
import math
import re
import traceback
import types
import warnings
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from scratchformer.errors import ConfigError, DataError
from scratchformer.exercises.catalogue import EXERCISES, MISSING_BATCH_SUM, Case, Exercise, Verdict
from scratchformer.gradcheck import numerical_gradient, relative_error

SOLUTIONS = Path(__file__).resolve().parent / "solutions"
SOLUTION_BLOCK = re.compile(r"^( *)# BEGIN SOLUTION\n.*?^\1# END SOLUTION\n", re.S | re.M)  # the stub's hole
TOLERANCE = 1e-6  # float64 central differences (eps 1e-6) agree to 1e-8 on these sizes
FD_EPS = 1e-6
SCALAR_UPSTREAM = 0.7  # dloss for a forward that returns a number (not 1, so a missing factor shows)
TIME_LIMIT = 60.0  # seconds for grading one file, the learner's code and the cause's look-up together
MEMORY_LIMIT = 2 << 30  # bytes the child may map beyond what it starts with; an exercise needs a few MB


# -- the files ---------------------------------------------------------------------------------
def exercise(name: str) -> Exercise:
    if name not in EXERCISES:
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
    module = types.ModuleType(f"scratchformer_exercise_{abs(hash(filename))}")
    module.__file__ = filename
    exec(compile(source, filename, "exec"), module.__dict__)
    return module.__dict__[class_name]


def _missing_file(path: Path, ex: Exercise) -> DataError:
    return DataError(
        f"{path}: no such file (write the stub with 'scratchformer exercise {ex.name} --out {path}')"
    )


def load_class(path: str | Path, ex: Exercise) -> type:
    """The class the exercise asks for, from the learner's file imported by its path (their own
    code: run it in the child, `check` does)."""
    cls = load_answer(path, ex)
    if not isinstance(cls, type):
        raise DataError(f"{path} defines no class {ex.class_name}: keep the stub's class name")
    return cls


def load_answer(path: str | Path, ex: Exercise):
    """What the learner's file defines under the stub's name (`ex.class_name`)."""
    path, class_name = Path(path), ex.class_name
    if not path.is_file():
        raise _missing_file(path, ex)
    spec = importlib.util.spec_from_file_location(f"scratchformer_exercise_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except SyntaxError as e:
        raise DataError(f"{path}, line {e.lineno}: syntax error: {e.msg}") from None
    except BaseException as e:  # noqa: BLE001 - the learner's module-level code, exit() included: one line
        raise DataError(f"{path} does not load: {_message(e)}{_where(e, module.__file__)}") from None
    if not hasattr(module, class_name):
        raise DataError(
            f"{path} defines no {'class ' if ex.kind == 'backward' else ''}{class_name}: keep the stub's name"
        )
    return getattr(module, class_name)


def _message(e: BaseException) -> str:
    """'Type: message' of what the learner's code raised, one line."""
    if isinstance(e, SystemExit):
        return f"SystemExit: exit() or sys.exit() was called (code {e.code!r})"
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text[:300]}"


def _where(exc: BaseException, filename: str) -> str:
    """' (line N: code)' of the innermost frame of `exc` in `filename`, or ''."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == filename]
    return f" (line {frames[-1].lineno}: {frames[-1].line})" if frames else ""


# -- running one class -------------------------------------------------------------------------
def _parameters(obj) -> list[tuple[str, object]]:
    """(name, Parameter) of the object's attributes, and of its scratchformer Module attributes."""
    from scratchformer.nn import Module, Parameter

    found = []
    for name, value in vars(obj).items():
        if isinstance(value, Parameter):
            found.append((name, value))
        elif isinstance(value, Module):
            found += [(f"{name}.{n}", p) for n, p in value.named_parameters()]
    return found


@dataclass
class Outcome:
    """What one class did on one case."""

    error: tuple[str, str, str] | None = None  # (phase, "Type: message", where) if something raised
    params: list[str] = field(default_factory=list)  # its parameters' names
    out: object = None  # the forward's output
    returned: object = None  # what backward returned
    dy_changed: bool = False
    grads: dict[str, np.ndarray] = field(default_factory=dict)  # parameter name + ".grad" -> after backward
    accumulated: dict[str, np.ndarray] = field(default_factory=dict)  # after a backward from prefilled .grad
    prefill: dict[str, np.ndarray] = field(default_factory=dict)


def _setup(cls: type, case: Case):
    """An instance with the case's parameter values (float64, each seeded by its name, so the
    order the constructor makes them in does not matter), and its inputs."""
    obj = cls(*case.args)
    for name, p in _parameters(obj):
        rng = np.random.default_rng([case.seed + 1, zlib.crc32(name.encode())])
        p.data = rng.standard_normal(np.shape(p.data)) * 0.5
        p.grad = np.zeros_like(p.data)
    return obj, case.inputs(np.random.default_rng(case.seed))


def _upstream(out, case: Case):
    if isinstance(out, np.ndarray):
        return np.random.default_rng(case.seed + 2).standard_normal(out.shape)
    return SCALAR_UPSTREAM


def _quiet(_where: str) -> None:
    pass


def _run(
    cls: type, case: Case, filename: str, upstream=None, progress: Callable[[str], None] = _quiet
) -> Outcome:
    o = Outcome()
    phase = "constructor"
    try:
        progress(phase)
        obj, inputs = _setup(cls, case)
        o.params = [n for n, _ in _parameters(obj)]
        phase = "forward"
        progress(phase)
        o.out = obj.forward(*inputs)
        dy = _upstream(o.out, case) if upstream is None else upstream
        dy_given = np.copy(dy)
        phase = "backward"
        progress(phase)
        o.returned = obj.backward(dy_given)
        o.dy_changed = not np.array_equal(dy_given, dy)
        params = _parameters(obj)
        o.grads = {f"{n}.grad": np.array(p.grad, copy=True) for n, p in params}
        # a second forward and backward, from a non-zero .grad: it must add, not overwrite
        phase = "second backward"
        progress(phase)
        rng = np.random.default_rng(case.seed + 3)
        for n, p in params:
            if isinstance(p.grad, np.ndarray) and p.grad.shape == np.shape(p.data):
                p.grad = rng.standard_normal(p.grad.shape)
                o.prefill[f"{n}.grad"] = p.grad.copy()
        obj.forward(*inputs)
        obj.backward(np.copy(dy))
        o.accumulated = {f"{n}.grad": np.array(p.grad, copy=True) for n, p in params}
    except BaseException as e:  # noqa: BLE001 - the learner's code: whatever it raised (exit() too) is the finding
        o.error = (phase, _message(e), _where(e, filename))
    return o


def _input_names(cls: type) -> list[str]:
    return [p for p in inspect.signature(cls.forward).parameters if p != "self"]


def finite_differences(cls: type, case: Case, upstream=None) -> dict[str, np.ndarray]:
    """d(sum(forward * R))/d(every float input and parameter) by central differences, float64."""
    obj, inputs = _setup(cls, case)
    inputs = [np.array(a, dtype=np.float64) if _is_float(a) else a for a in inputs]
    out = obj.forward(*inputs)
    R = _upstream(out, case) if upstream is None else upstream

    def loss() -> float:
        return float(np.sum(obj.forward(*inputs) * R))

    grads = {}
    for name, a in zip(_input_names(cls), inputs):
        if _is_float(a):
            grads["d" + name] = numerical_gradient(loss, a, FD_EPS)
    for name, p in _parameters(obj):
        grads[f"{name}.grad"] = numerical_gradient(loss, p.data, FD_EPS)
    return grads


def _is_float(a) -> bool:
    return isinstance(a, np.ndarray) and np.issubdtype(a.dtype, np.floating)


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


def _returned_gradients(
    o: Outcome, case: Case, names: list[str]
) -> tuple[dict[str, np.ndarray], Finding | None]:
    """The gradients backward returned, by name (dx, dq, ...), or what breaks the contract."""
    inputs = case.inputs(np.random.default_rng(case.seed))
    floats = [(n, a) for n, a in zip(names, inputs) if _is_float(a)]
    r = o.returned
    if not floats:
        if r is not None:
            return {}, Finding(
                f"backward returned {type(r).__name__}; the inputs are integer ids, which have "
                "no gradient: return None",
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
        if not np.issubdtype(g.dtype, np.floating):
            return got, Finding(f"{gname} has dtype {g.dtype}; it must be floating", ("dtype", gname))
    return got, None


def _describe(r) -> str:
    if isinstance(r, np.ndarray):
        return f"an array of shape {r.shape}"
    if isinstance(r, tuple):
        return f"a tuple of {len(r)}"
    return "None" if r is None else f"a {type(r).__name__}"


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


def _first_finding(
    o: Outcome,
    ex: Exercise,
    case: Case,
    names: list[str],
    reference: Outcome,
    expected: dict[str, np.ndarray],
) -> Finding | None:
    """The first way `o` breaks the exercise on `case`, in the order the module docstring lists."""
    if o.error and o.error[0] == "constructor":
        return _given_raised(o)
    extra = [n for n in o.params if n not in reference.params]
    missing = [n for n in reference.params if n not in o.params]
    if extra or missing:
        parts = ([f"your class has parameter(s) the stub's has not: {', '.join(extra)}"] if extra else []) + (
            [f"it lacks the stub's parameter(s) {', '.join(missing)}"] if missing else []
        )
        return Finding(
            "; ".join(parts) + ": the check sets and compares the stub's parameters by name (a gradient "
            "for any other has nothing to be compared with); keep the stub's constructor",
            ("params", tuple(extra), tuple(missing)),
        )
    if o.error and o.error[0] == "forward":
        return _given_raised(o)
    if not _same_output(o.out, reference.out):
        return Finding(
            "your forward's output differs from the given forward's: the check needs the stub's forward "
            f"as it was given (take it again with 'scratchformer exercise {ex.name}')",
            ("forward",),
        )
    if o.error and o.error[0] == "backward":
        _, message, where = o.error
        return Finding(f"backward raised {message}{where}", ("raised", message))
    got, finding = _returned_gradients(o, case, names)
    if finding:
        return finding
    for name, g in o.grads.items():
        want = expected[name].shape
        if g.shape != want:
            cause = _shape_cause(g.shape, want)
            return Finding(
                f"{name} has shape {g.shape}, expected {want}: {cause}", ("shape", name, g.shape), cause=cause
            )
        if not np.issubdtype(g.dtype, np.floating):
            return Finding(f"{name} has dtype {g.dtype}; it must be a floating array", ("dtype", name))
    if o.dy_changed:
        return Finding(
            "backward changed its argument in place (e.g. dy *= ...): the caller may still need it; "
            "compute into a new array",
            ("dy changed",),
        )
    for name, want in expected.items():
        g = got[name] if name in got else o.grads[name]
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
    if o.error:  # the second backward raised
        _, message, where = o.error
        return Finding(f"a second forward and backward raised {message}{where}", ("raised", message))
    for name, g in o.accumulated.items():
        want = o.prefill.get(name, 0) + expected[name]
        if g.shape != want.shape or not relative_error(g, want) <= TOLERANCE:
            if g.shape == want.shape and relative_error(g, expected[name]) <= TOLERANCE:
                return Finding(
                    f"{name} is overwritten instead of accumulated: a backward must ADD into .grad "
                    "(+=), as a parameter used twice gets the sum of both gradients",
                    ("overwritten", name),
                )
            return Finding(
                f"{name} after a second backward is not the earlier .grad plus this gradient: "
                "a backward must add its gradient into .grad and nothing else",
                ("accumulate", name),
            )
    return None


def _given_raised(o: Outcome) -> Finding:
    phase, message, where = o.error
    return Finding(
        f"your {phase} raised {message}{where}; the check needs the stub's {phase} as it was given",
        ("raised", phase, message),
    )


def _same_output(a, b) -> bool:
    if isinstance(b, np.ndarray):
        return isinstance(a, np.ndarray) and a.shape == b.shape and np.allclose(a, b, rtol=1e-12, atol=1e-12)
    try:
        return math.isclose(float(a), float(b), rel_tol=1e-12, abs_tol=1e-12)
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


def _gradients(o: Outcome, case: Case, names: list[str]) -> dict[str, np.ndarray]:
    got, _ = _returned_gradients(o, case, names)
    return {**got, **o.grads}


def _same_failure(mine: Finding, theirs: Finding | None, o: Outcome, m: Outcome, case: Case, names) -> bool:
    if theirs is None or mine.key != theirs.key:
        return False
    if mine.key != ("values",):
        return True
    a, b = _gradients(o, case, names), _gradients(m, case, names)
    return a.keys() == b.keys() and all(
        a[k].shape == b[k].shape and relative_error(a[k], b[k]) <= TOLERANCE for k in a
    )


def _generic_cause(
    f: Finding, o: Outcome, ex: Exercise, case: Case, names, expected, ref_cls, filename
) -> str | None:
    """A cause for a finding no known mistake reproduces."""
    if f.cause:
        return f.cause
    if f.key[0] == "raised":
        return _exception_cause(f.key[-1])
    if f.key[0] == "overwritten":
        return "`.grad = ...` where `.grad += ...` belongs"
    if f.key[0] == "accumulate":
        return ".grad changed by something besides adding this backward's gradient (scaled, reset, or added twice)"
    if f.key[0] == "dy changed":
        return "an in-place operation on the argument (dy *= ..., dy -= ..., dy[...] = ...)"
    if f.key[0] == "params":
        return (
            "a parameter added to the stub's class, or one renamed: the grader sets each of the stub's "
            "parameters by name and compares its .grad"
        )
    if f.key[0] == "non-finite":
        return (
            "a division by zero, a log of 0, an overflowing exp or an inf from the mask: compute the gradient "
            "from the cached forward values, with the same max-subtraction and masking the forward used"
        )
    if f.key != ("values",):
        return None
    got, want = _gradients(o, case, names)[f.tensor], expected[f.tensor]
    ok = lambda a: relative_error(got, a) <= 1e-5  # noqa: E731
    if not np.any(got) and np.any(want):
        return f"{f.tensor} stays zero: its gradient is never computed or never added"
    if ok(-want):
        return "the sign is flipped"
    if want.ndim == 2 and want.shape[0] == want.shape[1] and ok(want.T):
        return "a transposed product (the result is the transpose of the right one)"
    factor = float(np.sum(got * want) / max(float(np.sum(want * want)), 1e-300))
    if ok(factor * want):
        return _factor_cause(factor, ex, case)
    out = o.out
    if isinstance(out, np.ndarray) and out.ndim >= 3:  # one batch row's share only
        for b in (0, out.shape[0] - 1):
            R = _upstream(out, case)
            only = np.zeros_like(R)
            only[b] = R[b]
            share = _gradients(_run(ref_cls, case, filename, upstream=only), case, names).get(f.tensor)
            if share is not None and share.shape == got.shape and ok(share):
                return f"only batch row {b} is counted: {MISSING_BATCH_SUM}"
    return None


def _factor_cause(factor: float, ex: Exercise, case: Case) -> str:
    inputs = case.inputs(np.random.default_rng(case.seed))
    first = next(a for a in inputs if isinstance(a, np.ndarray))
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
        d = case.args[0] // case.args[1] if ex.name == "mha" else first.shape[-1]
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


_REFERENCE_CACHE: dict[str, tuple[type, list[tuple[Outcome, dict]]]] = {}


def _reference(ex: Exercise):
    """The reference class and, per case, its outcome and the finite-difference gradients
    (computed once per process)."""
    if ex.name not in _REFERENCE_CACHE:
        filename = str(SOLUTIONS / f"{ex.name}.py")
        ref_cls = _class_from_source(solution_source(ex.name), ex.class_name, filename)
        with _quiet_numpy():
            _REFERENCE_CACHE[ex.name] = (
                ref_cls,
                [(_run(ref_cls, case, filename), finite_differences(ref_cls, case)) for case in ex.cases],
            )
    return _REFERENCE_CACHE[ex.name]


def grade_file(name: str, path: str | Path, progress: Callable[[str], None] = _quiet) -> Grade:
    """Grade the learner's file in THIS process: their code runs here, unguarded. `check` runs
    this in a child with limits; call it directly only on trusted files. `progress` is told
    where the grading is ("your backward on Linear(4, 3) on x (2, 3, 4)"), for a verdict on a kill."""
    ex = exercise(name)
    if ex.kind != "backward":
        return _grade_other(ex, path, progress)
    ref_cls, references = _reference(ex)
    names = _input_names(ref_cls)
    progress("loading your file")
    cls = load_class(path, ex)
    code = getattr(getattr(cls, "backward", None), "__code__", None)
    filename = code.co_filename if code else str(path)  # the file as the tracebacks name it
    worst = 0.0
    for k, case in enumerate(ex.cases):
        where = describe_case(ex, case, names)
        o = _run(
            cls, case, filename, progress=lambda phase, where=where: progress(f"your {phase} on {where}")
        )
        finding = _first_finding(o, ex, case, names, *references[k])  # gradients named as in the stub
        if finding is not None:
            progress("looking up the likely cause")
            return _wrong(ex, k, finding, o, names, ref_cls, filename)
        got = _gradients(o, case, names)
        worst = max([worst] + [relative_error(got[n], want) for n, want in references[k][1].items()])
    grads = ", ".join(references[0][1])
    added = "; a second backward adds into .grad" if references[0][0].grads else ""
    shapes = "; ".join(_short(ex, c, names) for c in ex.cases)
    return Grade(
        name,
        True,
        [
            f"right: {ex.name}: {grads} agree with finite differences on {len(ex.cases)} inputs "
            f"({shapes}; worst relative error {worst:.1e}){added}"
        ],
    )


def _wrong(ex: Exercise, k: int, finding: Finding, o: Outcome, names, ref_cls, filename) -> Grade:
    case = ex.cases[k]
    reference, expected = _reference(ex)[1][k]
    matches = []  # (known mistake, the line it raised at)
    source = solution_source(ex.name)
    for i, mistake in enumerate(ex.mistakes):
        wrong = source.replace(mistake.old, mistake.new, 1)
        wrong_file = f"<{ex.name}: known mistake {i}>"
        linecache.cache[wrong_file] = (
            len(wrong),
            None,
            wrong.splitlines(True),
            wrong_file,
        )  # for _where's line
        with _quiet_numpy():  # a known mistake's warnings (log of a negative, ...) are not the learner's
            m = _run(_class_from_source(wrong, ex.class_name, wrong_file), case, wrong_file)
        if _same_failure(finding, _first_finding(m, ex, case, names, reference, expected), o, m, case, names):
            matches.append((mistake, m.error[2] if m.error else ""))
            if finding.key[0] != "raised":
                break
    # the same error from several mistakes (two products of the same mismatched shapes): the one
    # whose failing line reads most like the learner's
    words = lambda line: set(re.findall(r"\w+", line.partition(": ")[2]))  # noqa: E731
    mine = words(o.error[2]) if o.error else set()
    cause = max(
        matches, key=lambda mw: len(mine & words(mw[1])) / max(1, len(mine | words(mw[1]))), default=(None,)
    )[0]
    cause = cause.cause if cause else None
    if cause is None and k > 0:
        right_on = "; ".join(_short(ex, c, names) for c in ex.cases[:k])
        cause = (
            f"right on {right_on}, wrong here: the backward depends on the input's shape, a size or an axis "
            "count written into the code (a fixed reshape, a sum or an einsum over exactly these axes, an axis "
            "counted from the front); take every size from the arrays, and the axes from the end"
        )
    if cause is None:
        cause = _generic_cause(finding, o, ex, case, names, expected, ref_cls, filename)
    on = "" if k == 0 else f"on {_short(ex, case, names)}: "
    lines = [
        f"wrong: {ex.name}: {on}{finding.what}",
        f"likely cause: {cause}"
        if cause
        else "likely cause: not one this checker knows; compare each line with the forward line it differentiates",
    ]
    return Grade(ex.name, False, lines, cause)


# -- the exercises of other kinds: a grader module's verdict ---------------------------------------
def setup(name: str, stub: Path) -> str | None:
    """Make what the exercise needs beside its stub (its grader module's `setup`), and say what."""
    ex = exercise(name)
    if ex.kind == "backward" or not hasattr(_grader(ex), "setup"):
        return None
    return _grader(ex).setup(Path(stub))


def _grader(ex: Exercise):
    return importlib.import_module(f"scratchformer.exercises.{ex.kind}")


def _verdict(ex: Exercise, answer, filename: str, progress: Callable[[str], None] = _quiet) -> Verdict:
    """The grader's verdict on `answer`; what the learner's code raised is a wrong verdict."""
    try:
        with _quiet_numpy():
            return _grader(ex).grade(answer, progress)
    except BaseException as e:  # noqa: BLE001 - the learner's code: whatever it raised is the finding
        message, where = _message(e), _where(e, filename)
        if not where:  # raised by the grader on what the learner's code returned
            return Verdict(False, f"what your {ex.class_name} returned cannot be graded: {message}", None)
        cause = (
            f"{ex.class_name} is not written yet"
            if message.startswith("NotImplementedError")
            else _exception_cause(message)
        )
        return Verdict(False, f"your {ex.class_name} raised {message}{where}", cause)


def _grade_other(ex: Exercise, path, progress: Callable[[str], None]) -> Grade:
    """Grade an exercise of a kind other than "backward"; a known mistake (an edit of the
    solution) that gets the same verdict names the cause."""
    progress("loading your file")
    answer = load_answer(path, ex)
    code = getattr(answer, "__code__", None)
    verdict = _verdict(ex, answer, code.co_filename if code else str(path), progress)
    if verdict.right:
        return Grade(ex.name, True, [f"right: {ex.name}: {verdict.text}"])
    cause = verdict.cause
    if cause is None:
        progress("looking up the likely cause")
        source = solution_source(ex.name)
        for i, mistake in enumerate(ex.mistakes):
            wrong_file = f"<{ex.name}: known mistake {i}>"
            known = _class_from_source(source.replace(mistake.old, mistake.new, 1), ex.class_name, wrong_file)
            if _verdict(ex, known, wrong_file).text == verdict.text:
                cause = mistake.cause
                break
    return Grade(
        ex.name,
        False,
        [
            f"wrong: {ex.name}: {verdict.text}",
            f"likely cause: {cause}"
            if cause
            else "likely cause: not one this checker knows; " + _grader(ex).UNKNOWN,
        ],
        cause,
    )


def check(
    name: str, path: str | Path, *, time_limit: float = TIME_LIMIT, memory_limit: int = MEMORY_LIMIT
) -> Grade:
    """Grade the learner's file at `path` for exercise `name`, in a child process limited to
    `time_limit` seconds and `memory_limit` bytes more than it starts with. A file that does not
    load, or lacks the class, raises DataError; everything else is a Grade (passed or not), a
    file that hangs, exhausts its memory or ends its process included."""
    from scratchformer.exercises.isolation import run_isolated

    ex = exercise(name)
    if not (isinstance(time_limit, (int, float)) and 0 < time_limit <= 3600):
        raise ConfigError(f"time_limit must be a number of seconds in (0, 3600], got {time_limit!r}")
    if not (isinstance(memory_limit, int) and (64 << 20) <= memory_limit <= (1 << 40)):
        raise ConfigError(
            f"memory_limit must be a number of bytes from 64 MiB to 1 TiB, got {memory_limit!r}"
        )
    path = Path(path)
    if not path.is_file():
        raise _missing_file(path, ex)
    if ex.kind == "backward":
        _reference(ex)  # here, before the child starts: it inherits the cache, or computes its own
    elif hasattr(_grader(ex), "prepare"):
        _grader(ex).prepare()  # likewise: the trainer's merges, the ablations
    return run_isolated(name, path, time_limit, memory_limit)


def list_exercises() -> list[tuple[str, str]]:
    return [(e.name, e.title) for e in EXERCISES.values()]
