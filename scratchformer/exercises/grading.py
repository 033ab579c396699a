"""Grading a learner's backward: finite differences in float64, the layer contract, a likely cause.

    grade = check("linear", "linear.py")
    print(grade.report())          # "right: ..." or "wrong: ..." and "likely cause: ..."
    grade.passed                   # True / False

The learner's class is run on a fixed input with fixed parameters: forward, then backward of
a fixed random upstream gradient R (the loss is sum(out * R); a number output gets R = 0.7).
It is right when
  - the forward is the one the stub gave (the check needs it),
  - backward returns what the contract says: None when the inputs are all integers, one array
    for one float input, else a tuple in the forward's argument order, each of its input's shape,
  - backward leaves its argument unchanged,
  - every returned array and every parameter's .grad matches central finite differences of the
    given forward (relative error below TOLERANCE, as `scratchformer.gradcheck` measures it),
  - and a second backward ADDS into .grad (starting from a non-zero .grad).
When it is wrong, the first wrong element is named, and the cause is looked up: each known
mistake of the exercise (`catalogue.py`, edits of the reference solution) is run the same way,
and one that fails exactly as the learner's did names the cause; else generic checks (sign,
a constant factor, a transpose, one batch row only, a shape with an extra batch axis).
"""

from __future__ import annotations

import importlib.util
import inspect
import math
import re
import traceback
import types
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from scratchformer.errors import ConfigError, DataError
from scratchformer.exercises.catalogue import EXERCISES, MISSING_BATCH_SUM, Exercise
from scratchformer.gradcheck import relative_error

SOLUTIONS = Path(__file__).resolve().parent / "solutions"
BEGIN, END = "        # BEGIN SOLUTION\n", "        # END SOLUTION\n"
TOLERANCE = 1e-6  # float64 central differences (eps 1e-6) agree to 1e-8 on these sizes
FD_EPS = 1e-6
SCALAR_UPSTREAM = 0.7  # dloss for a forward that returns a number (not 1, so a missing factor shows)
SEED_INPUTS, SEED_PARAMS, SEED_UPSTREAM, SEED_PREFILL = 11, 12, 13, 14


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
    """The file a learner starts from: the solution with the backward's body taken out
    (`path`: where it will be, for the command that checks it)."""
    source = solution_source(name)
    head, rest = source.split(BEGIN)
    _, tail = rest.split(END)
    todo = (f"        # your code here; then: scratchformer exercise {name} --check {path}\n"
            f"        raise NotImplementedError(\"write the backward\")\n")
    return head + todo + tail


def _class_from_source(source: str, class_name: str, filename: str) -> type:
    module = types.ModuleType(f"scratchformer_exercise_{abs(hash(filename))}")
    module.__file__ = filename
    exec(compile(source, filename, "exec"), module.__dict__)
    return module.__dict__[class_name]


def load_class(path: str | Path, ex: Exercise) -> type:
    """The class the exercise asks for, from the learner's file imported by its path (their own code)."""
    path, class_name = Path(path), ex.class_name
    if not path.is_file():
        raise DataError(f"{path}: no such file (write the stub with 'scratchformer exercise {ex.name} --out {path}')")
    spec = importlib.util.spec_from_file_location(f"scratchformer_exercise_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except SyntaxError as e:
        raise DataError(f"{path}, line {e.lineno}: syntax error: {e.msg}") from None
    except Exception as e:  # noqa: BLE001 - the learner's module-level code: one line whatever it raised
        raise DataError(f"{path} does not load: {type(e).__name__}: {e}{_where(e, module.__file__)}") from None
    cls = getattr(module, class_name, None)
    if not isinstance(cls, type):
        raise DataError(f"{path} defines no class {class_name}: keep the stub's class name")
    return cls


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
    """What one class did on the exercise's input."""

    error: tuple[str, str, str] | None = None  # (phase, "Type: message", where) if something raised
    out: object = None  # the forward's output
    returned: object = None  # what backward returned
    dy_changed: bool = False
    grads: dict[str, np.ndarray] = field(default_factory=dict)  # parameter name + ".grad" -> after backward
    accumulated: dict[str, np.ndarray] = field(default_factory=dict)  # after a backward from prefilled .grad
    prefill: dict[str, np.ndarray] = field(default_factory=dict)


def _setup(cls: type, ex: Exercise):
    """An instance with the exercise's parameter values (float64), and its inputs."""
    obj = cls(*ex.args)
    rng = np.random.default_rng(SEED_PARAMS)
    for _, p in _parameters(obj):
        p.data = rng.standard_normal(p.data.shape) * 0.5
        p.grad = np.zeros_like(p.data)
    return obj, ex.inputs(np.random.default_rng(SEED_INPUTS))


def _upstream(out, rng_seed=SEED_UPSTREAM):
    if isinstance(out, np.ndarray):
        return np.random.default_rng(rng_seed).standard_normal(out.shape)
    return SCALAR_UPSTREAM


def _run(cls: type, ex: Exercise, filename: str, upstream=None) -> Outcome:
    o = Outcome()
    phase = "constructor"
    try:
        obj, inputs = _setup(cls, ex)
        phase = "forward"
        o.out = obj.forward(*inputs)
        dy = _upstream(o.out) if upstream is None else upstream
        dy_given = np.copy(dy)
        phase = "backward"
        o.returned = obj.backward(dy_given)
        o.dy_changed = not np.array_equal(dy_given, dy)
        params = _parameters(obj)
        o.grads = {f"{n}.grad": np.array(p.grad, copy=True) for n, p in params}
        # a second forward and backward, from a non-zero .grad: it must add, not overwrite
        phase = "second backward"
        rng = np.random.default_rng(SEED_PREFILL)
        for n, p in params:
            if isinstance(p.grad, np.ndarray) and p.grad.shape == p.data.shape:
                p.grad = rng.standard_normal(p.data.shape)
                o.prefill[f"{n}.grad"] = p.grad.copy()
        obj.forward(*inputs)
        obj.backward(np.copy(dy))
        o.accumulated = {f"{n}.grad": np.array(p.grad, copy=True) for n, p in params}
    except Exception as e:  # noqa: BLE001 - the learner's code: whatever it raised is the finding
        o.error = (phase, f"{type(e).__name__}: {e}", _where(e, filename))
    return o


def _input_names(cls: type) -> list[str]:
    return [p for p in inspect.signature(cls.forward).parameters if p != "self"]


def finite_differences(cls: type, ex: Exercise, upstream=None) -> dict[str, np.ndarray]:
    """d(sum(forward * R))/d(every float input and parameter) by central differences, float64."""
    obj, inputs = _setup(cls, ex)
    inputs = [np.array(a, dtype=np.float64) if _is_float(a) else a for a in inputs]
    out = obj.forward(*inputs)
    R = _upstream(out) if upstream is None else upstream

    def loss() -> float:
        return float(np.sum(obj.forward(*inputs) * R))

    grads = {}
    for name, a in zip(_input_names(cls), inputs):
        if _is_float(a):
            grads["d" + name] = _numerical(loss, a)
    for name, p in _parameters(obj):
        grads[f"{name}.grad"] = _numerical(loss, p.data)
    return grads


def _numerical(loss, a: np.ndarray) -> np.ndarray:
    grad = np.zeros(a.shape)
    flat, gflat = a.reshape(-1), grad.reshape(-1)
    for i in range(flat.size):
        orig = flat[i]
        flat[i] = orig + FD_EPS
        plus = loss()
        flat[i] = orig - FD_EPS
        minus = loss()
        flat[i] = orig
        gflat[i] = (plus - minus) / (2 * FD_EPS)
    return grad


def _is_float(a) -> bool:
    return isinstance(a, np.ndarray) and np.issubdtype(a.dtype, np.floating)


# -- the verdict -------------------------------------------------------------------------------
@dataclass
class Finding:
    """The first thing wrong: `what` for the learner, `key` to compare with a known mistake's."""

    what: str
    key: object
    tensor: str | None = None  # the wrong gradient's name, for a finding about values


@dataclass
class Grade:
    name: str
    passed: bool
    lines: list[str]
    cause: str | None = None

    def report(self) -> str:
        return "\n".join(self.lines)


def _returned_gradients(o: Outcome, ex: Exercise, names: list[str]) -> tuple[dict[str, np.ndarray], Finding | None]:
    """The gradients backward returned, by name (dx, dq, ...), or what breaks the contract."""
    inputs = ex.inputs(np.random.default_rng(SEED_INPUTS))
    floats = [(n, a) for n, a in zip(names, inputs) if _is_float(a)]
    r = o.returned
    if not floats:
        if r is not None:
            return {}, Finding(f"backward returned {type(r).__name__}; the inputs are integer ids, which have "
                               "no gradient: return None", ("returned", "not None"))
        return {}, None
    if len(floats) == 1:
        if not isinstance(r, np.ndarray):
            return {}, Finding(f"backward returned {_describe(r)}; it must return d{floats[0][0]}, one array of "
                               f"{floats[0][0]}'s shape {floats[0][1].shape}", ("returned", _describe(r)))
        got = {"d" + floats[0][0]: r}
    else:
        want = ", ".join("d" + n for n, _ in floats)
        if not isinstance(r, tuple) or len(r) != len(floats) or not all(isinstance(g, np.ndarray) for g in r):
            return {}, Finding(f"backward returned {_describe(r)}; it must return the tuple ({want})",
                               ("returned", _describe(r)))
        shapes = [g.shape for g in r]
        wanted = [a.shape for _, a in floats]
        if shapes != wanted and sorted(shapes) == sorted(wanted):
            return {}, Finding(f"backward returned arrays of shapes {shapes}: the gradients are in the wrong order; "
                               f"return ({want}), shapes {wanted}", ("order", tuple(shapes)))
        got = {"d" + n: g for (n, _), g in zip(floats, r)}
    for (n, a), (gname, g) in zip(floats, got.items()):
        if g.shape != a.shape:
            return got, Finding(f"{gname} has shape {g.shape}, {n} has shape {a.shape}: {_shape_cause(g.shape, a.shape)}",
                                ("shape", gname, g.shape))
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
    if len(got) > len(want) and got[len(got) - len(want):] == want:
        return MISSING_BATCH_SUM
    if math.prod(got) == math.prod(want):
        return f"the right number of entries in the wrong shape: reshape to {want}"
    return "a wrong shape"


def _first_finding(o: Outcome, ex: Exercise, names: list[str], reference: Outcome,
                   expected: dict[str, np.ndarray]) -> Finding | None:
    """The first way `o` breaks the exercise, checked in the order the module docstring lists."""
    if o.error and o.error[0] in ("constructor", "forward"):
        phase, message, where = o.error
        return Finding(f"your {phase} raised {message}{where}; the check needs the stub's {phase} as it was given",
                       ("raised", phase, message))
    if not _same_output(o.out, reference.out):
        return Finding("your forward's output differs from the given forward's: the check needs the stub's forward "
                       f"as it was given (take it again with 'scratchformer exercise {ex.name}')", ("forward",))
    if o.error and o.error[0] == "backward":
        _, message, where = o.error
        return Finding(f"backward raised {message}{where}", ("raised", message))
    got, finding = _returned_gradients(o, ex, names)
    if finding:
        return finding
    for name, g in o.grads.items():
        want = expected[name].shape
        if g.shape != want:
            return Finding(f"{name} has shape {g.shape}, expected {want}: {_shape_cause(g.shape, want)}",
                           ("shape", name, g.shape))
    if o.dy_changed:
        return Finding("backward changed its argument in place (e.g. dy *= ...): the caller may still need it; "
                       "compute into a new array", ("dy changed",))
    for name, want in expected.items():
        g = got[name] if name in got else o.grads[name]
        if relative_error(g, want) > TOLERANCE:
            return Finding(_first_wrong_element(name, g, want), ("values",), tensor=name)
    if o.error:  # the second backward raised
        _, message, where = o.error
        return Finding(f"a second forward and backward raised {message}{where}", ("raised", message))
    for name, g in o.accumulated.items():
        want = o.prefill.get(name, 0) + expected[name]
        if relative_error(g, want) > TOLERANCE:
            if relative_error(g, expected[name]) <= TOLERANCE:
                return Finding(f"{name} is overwritten instead of accumulated: a backward must ADD into .grad "
                               "(+=), as a parameter used twice gets the sum of both gradients",
                               ("overwritten", name))
            return Finding(f"{name} after a second backward is not the earlier .grad plus this gradient: "
                           "a backward must add its gradient into .grad and nothing else", ("accumulate", name))
    return None


def _same_output(a, b) -> bool:
    if isinstance(b, np.ndarray):
        return isinstance(a, np.ndarray) and a.shape == b.shape and np.allclose(a, b, rtol=1e-12, atol=1e-12)
    try:
        return math.isclose(float(a), float(b), rel_tol=1e-12, abs_tol=1e-12)
    except (TypeError, ValueError):
        return False


def _first_wrong_element(name: str, got: np.ndarray, want: np.ndarray) -> str:
    scale = max(float(np.max(np.abs(want), initial=0)), float(np.max(np.abs(got), initial=0)), 1e-12)
    bad = np.abs(got - want) > TOLERANCE * scale
    bad |= ~np.isfinite(got)
    i = np.unravel_index(int(np.argmax(bad.reshape(-1))), want.shape)
    index = ", ".join(str(int(j)) for j in i)
    return (f"{name}[{index}] is {float(got[i]):.6g}, finite differences give {float(want[i]):.6g} "
            f"({int(bad.sum())} of {bad.size} entries wrong; relative error {relative_error(got, want):.2e})")


def _gradients(o: Outcome, ex: Exercise, names: list[str]) -> dict[str, np.ndarray]:
    got, _ = _returned_gradients(o, ex, names)
    return {**got, **o.grads}


def _same_failure(mine: Finding, theirs: Finding | None, o: Outcome, m: Outcome, ex, names) -> bool:
    if theirs is None or mine.key != theirs.key:
        return False
    if mine.key != ("values",):
        return True
    a, b = _gradients(o, ex, names), _gradients(m, ex, names)
    return a.keys() == b.keys() and all(
        a[k].shape == b[k].shape and relative_error(a[k], b[k]) <= TOLERANCE for k in a)


def _generic_cause(f: Finding, o: Outcome, ex: Exercise, names, expected, ref_cls, filename) -> str | None:
    """A cause for a finding no known mistake reproduces."""
    if f.key[0] == "raised":
        return _exception_cause(f.key[-1])
    if f.key != ("values",):
        return None
    got, want = _gradients(o, ex, names)[f.tensor], expected[f.tensor]
    ok = lambda a: relative_error(got, a) <= 1e-5  # noqa: E731
    if not np.any(got) and np.any(want):
        return f"{f.tensor} stays zero: its gradient is never computed or never added"
    if ok(-want):
        return "the sign is flipped"
    if want.ndim == 2 and want.shape[0] == want.shape[1] and ok(want.T):
        return "a transposed product (the result is the transpose of the right one)"
    factor = float(np.sum(got * want) / max(float(np.sum(want * want)), 1e-300))
    if ok(factor * want):
        return _factor_cause(factor, o, ex)
    out = o.out
    if isinstance(out, np.ndarray) and out.ndim >= 3:  # one batch row's share only
        for b in (0, out.shape[0] - 1):
            R = _upstream(out)
            only = np.zeros_like(R)
            only[b] = R[b]
            share = _gradients(_run(ref_cls, ex, filename, upstream=only), ex, names).get(f.tensor)
            if share is not None and share.shape == got.shape and ok(share):
                return f"only batch row {b} is counted: {MISSING_BATCH_SUM}"
    return None


def _factor_cause(factor: float, o: Outcome, ex: Exercise) -> str:
    inputs = ex.inputs(np.random.default_rng(SEED_INPUTS))
    first = next(a for a in inputs if isinstance(a, np.ndarray))
    rows = math.prod(first.shape[:-1]) if first.ndim > 1 else first.shape[0]
    hints = [(2.0, "counted twice"), (0.5, "half of it: a gradient counted once where it should be twice"),
             (rows, f"multiplied by the number of rows ({rows}): a sum where a mean belongs, or a missing 1/N"),
             (1 / rows, f"divided by the number of rows ({rows}): a mean where a sum belongs"),
             (SCALAR_UPSTREAM, "the incoming gradient is multiplied in twice"),
             (1 / SCALAR_UPSTREAM, "the incoming gradient is not multiplied in (the chain rule)")]
    if ex.name in ("attention", "mha"):  # the exercises whose forward scales by 1/sqrt(d)
        d = first.shape[-1] if ex.name == "attention" else ex.args[0] // ex.args[1]
        hints += [(math.sqrt(d), f"a missing 1/sqrt(d) scale (d = {d})"),
                  (1 / math.sqrt(d), f"an extra 1/sqrt(d) scale (d = {d})")]
    for value, hint in hints:
        if math.isclose(factor, value, rel_tol=1e-4):
            return f"off by a factor {factor:.4g}: {hint}"
    return f"off by a constant factor {factor:.4g}: a missing or extra scale"


def _exception_cause(message: str) -> str | None:
    if message.startswith("NotImplementedError"):
        return "the backward is not written yet"
    m = re.search(r"non-broadcastable output operand with shape \(([^)]*)\) doesn't match the broadcast shape "
                  r"\(([^)]*)\)", message)
    if m:
        target, result = (tuple(int(s) for s in g.split(",") if s.strip()) for g in m.groups())
        return f"a ({', '.join(map(str, result))}) gradient added into a ({', '.join(map(str, target))}) array: " + \
            _shape_cause(result, target)
    if "matmul" in message or "not aligned" in message:
        return "a product of mismatched shapes: a factor needs (or must lose) a transpose; write each array's shape down"
    if "could not be broadcast" in message:
        return "shapes that do not broadcast: a sum without keepdims=True, or a transposed factor"
    return None


_REFERENCE_CACHE: dict[str, tuple[type, Outcome, dict]] = {}


def _reference(ex: Exercise):
    """The reference class, its outcome and the finite-difference gradients (computed once)."""
    if ex.name not in _REFERENCE_CACHE:
        filename = str(SOLUTIONS / f"{ex.name}.py")
        ref_cls = _class_from_source(solution_source(ex.name), ex.class_name, filename)
        _REFERENCE_CACHE[ex.name] = (ref_cls, _run(ref_cls, ex, filename), finite_differences(ref_cls, ex))
    return _REFERENCE_CACHE[ex.name]


def check(name: str, path: str | Path) -> Grade:
    """Grade the learner's file at `path` for exercise `name`. A file that does not load, or
    lacks the class, raises DataError; everything else is a Grade (passed or not)."""
    ex = exercise(name)
    cls = load_class(path, ex)
    ref_cls, reference, expected = _reference(ex)
    names = _input_names(ref_cls)
    code = getattr(getattr(cls, "backward", None), "__code__", None)
    filename = code.co_filename if code else str(path)  # the file as the tracebacks name it
    o = _run(cls, ex, filename)
    finding = _first_finding(o, ex, names, reference, expected)  # gradients named as in the stub
    if finding is None:
        grads = ", ".join(expected)
        worst = max(relative_error(_gradients(o, ex, names)[k], expected[k]) for k in expected)
        added = "; a second backward adds into .grad" if o.grads else ""
        return Grade(name, True, [f"right: {ex.name}: {grads} agree with finite differences "
                                  f"(worst relative error {worst:.1e}){added}"])
    cause = None
    source = solution_source(name)
    for mistake in ex.mistakes:
        wrong_cls = _class_from_source(source.replace(mistake.old, mistake.new, 1), ex.class_name,
                                       f"<{name}: {mistake.cause[:20]}>")
        m = _run(wrong_cls, ex, filename)
        if _same_failure(finding, _first_finding(m, ex, names, reference, expected), o, m, ex, names):
            cause = mistake.cause
            break
    if cause is None:
        cause = _generic_cause(finding, o, ex, names, expected, ref_cls, filename)
    lines = [f"wrong: {ex.name}: {finding.what}",
             f"likely cause: {cause}" if cause else
             "likely cause: not one this checker knows; compare each line with the forward line it differentiates"]
    return Grade(name, False, lines, cause)


def list_exercises() -> list[tuple[str, str]]:
    return [(e.name, e.title) for e in EXERCISES.values()]

