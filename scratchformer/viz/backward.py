"""The backward pass, step by step: the model's own record of one backward (scratchformer/record.py),
each step checked by finite differences of its own forward at its recorded inputs.

    steps = backward_steps(gpt, ids, targets)      # [BackwardStep], in the order the backward ran them
    steps = backward_steps(classifier, x, y)       # any model whose forward(*inputs) -> (output, loss)
    steps = backward_steps(seq2seq, src, tgt_in, tgt_out)
    steps = backward_steps(gpt, ids, targets, lane="fast")   # the fast lane (scratchformer/fast)
    backward_walkthrough(steps, path="backward.png")
    print(backward_table(steps))                   # one line a step: what `viz RUN --backward` prints

A float64 copy of the model, in training mode, its dropout drawing from one seeded generator
(`nn.set_dropout_rng`), runs one forward and the library's own backward on the inputs while
`nn.recording` takes its record, in the lane asked for ("reference", the default, or "fast").
Every backward in the record is a step, in the order they started, nested as they ran:

- an op step: a backward op of ops/ (`linear_backward_into`, `softmax_backward`, ...), with the
  `file:line` of its formula and the lane that ran it. It names the forward it is the derivative
  of, beside itself in ops/ (`fast.lane(derivative_of=...)`), and the record holds that
  forward's call (`Record.forward_of`). With the gradient the op received held fixed (g), what
  it returned and what it added into gradient buffers are compared, entry by entry, with
  central differences of sum(forward(inputs) * g) at that call's recorded inputs.
- a module step: a module's backward (a layer, a block, the model): everything its code does
  between its ops (the residual split and add, the heads split and merged, each key/value
  head's group summed, the pooling, what it adds to `.grad`) included. What it added to its own
  parameters is compared entry by entry, and what it returned and added to the parameters of the
  layers inside it along random unit directions u (every entry of the array at once), with
  central differences of sum(module.forward(inputs) * g) at its recorded inputs: the module's
  own forward, so nothing here models any layer.

Why a module's own forward, and not sums read off the record: to check that a block handed the
sum of its skip's and its branch's gradients on, or merged the heads, from the record alone, the
checker would have to know which op's output fed which op (the layer's wiring), and that is the
copy of each layer this file no longer keeps. The module's forward is the model's own code and
shares none with its backward, so it is an independent witness of everything the backward's
code does between its ops, and it holds for a layer nobody here has seen.

A new op or block option appears here with no change to this file: its ops declare their
forwards, and its module's forward is the module's. A step whose backward handed back the
gradient it received, adding nothing, for a forward that handed back its input (a hook point,
dropout with p = 0), is the identity: it is left out.

Which entries (`Sampling`): by default (`THOROUGH`, what `viz RUN --backward` runs) every entry
of an op's array (and a module's own parameter) of at most 4,096 entries, else 256 seeded random
entries plus the 8 largest (in absolute value), and 2 directions per array checked by
directions; `QUICK` (the report's, on bigger models, stated on the page) 3 random entries and
the largest of an array of more than 16, and one direction. `BackwardStep.checked` says which,
per array. A check agrees when |backward - finite difference| <= FD_TOL (1e-6) x (the array's
largest |entry| + sum |forward(inputs) * g| / 100): relative to the gradient's own size, with
room for the float64 rounding of the finite difference itself (eps 1e-6), so a small gradient
deep in a model is held to its own scale, not to 1.

A wrong backward turns its step red. The steps around it (the modules whose backward ran it, an
op that calls it) then disagree too, through it: they say so (`BackwardStep.through`) and are not
counted as wrong themselves. Steps after it receive a wrong gradient but handle it right, and agree.
"""

from __future__ import annotations

import ast
import copy
import inspect
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np

from scratchformer import fast
from scratchformer import record as record_module
from scratchformer.errors import ConfigError
from scratchformer.gradcheck import central_difference
from scratchformer.nn import recording, set_dropout_rng, trusted_calls
from scratchformer.viz._plot import finish, new_figure

__all__ = [
    "QUICK",
    "THOROUGH",
    "BackwardStep",
    "Check",
    "Sampling",
    "backward_steps",
    "backward_table",
    "backward_walkthrough",
]

FD_EPS, FD_TOL = 1e-6, 1e-6  # float64 central differences; relative to a Check's scale
LANES = ("reference", "fast")


@dataclass(frozen=True)
class Sampling:
    """What is checked. An op's array, and a module's own parameter: all of it up to `full`
    entries (or up to sampled + largest), else `sampled` seeded random entries and the `largest`
    largest. A module's input gradients, and what it added to the parameters of the layers
    inside it: `directions` random unit directions, each covering every entry at once."""

    full: int
    sampled: int
    largest: int
    directions: int

    def describe(self) -> str:
        return (
            f"every entry of an op's array (and of a module's own parameter) of at most "
            f"{max(self.full, self.sampled + self.largest):,} entries, else {self.sampled} random + the "
            f"{self.largest} largest; {self.directions} random direction{'s' if self.directions > 1 else ''} "
            "per array of a module's input gradients and of its layers' parameters"
        )


THOROUGH = Sampling(4096, 256, 8, 2)  # the default, and `viz RUN --backward`'s
QUICK = Sampling(16, 3, 1, 1)  # a few per array: the report's, on models of up to millions of parameters


class Check(NamedTuple):
    """One comparison: `array` ("dx", "dweight", "d(ff.fc1.weight)"), `at` (an entry's index, or
    "direction 1"), the backward's value, the finite difference's, and the scale the tolerance is
    relative to: the array's largest |entry| plus the loss's rounding (`_Loss.rounding`)."""

    array: str
    at: tuple | str
    backward: float
    fd: float
    scale: float

    @property
    def agrees(self) -> bool:
        return abs(self.backward - self.fd) <= FD_TOL * self.scale


@dataclass(eq=False)
class BackwardStep:
    """One backward of the record, as it ran. Arrays are float64 copies of the library's."""

    name: str  # "h.1.self_attn.softmax_backward" (an op, with the module it ran in), "h.1.ff" (a module)
    op: str  # the op's name, or the module's class
    kind: str  # "op" or "module"
    formula: str  # what it computes: its docstring's (or first comment's) words
    where: str  # file:line of its formula (an op's, in ops/; a module's backward)
    lane: str  # "fast" or "reference" (an op); "" (a module: its ops have lanes)
    lane_where: str  # file:line of the fast lane's form, when lane == "fast"
    depth: int  # how many steps it ran inside
    grad_in: np.ndarray | float  # what it received: dL/d(its output)
    grad_out: np.ndarray | None  # its first returned gradient; None for token ids
    grads: dict[str, np.ndarray] = field(default_factory=dict)  # every gradient it gave, by input
    param_grads: dict[str, np.ndarray] = field(default_factory=dict)  # what it added into gradient buffers
    checks: list[Check] = field(default_factory=list)
    checked: dict[str, str] = field(default_factory=dict)  # array -> which entries or directions
    sampling: Sampling | None = None
    against: str = ""  # what it was compared with
    hook: str = ""  # the hook point its forward ran after
    through: list[str] = field(default_factory=list)  # it disagrees through these steps inside it
    call: object = field(default=None, repr=False)
    forward_call: object = field(default=None, repr=False)

    @property
    def ok(self) -> bool:
        return all(c.agrees for c in self.checks)

    @property
    def red(self) -> bool:
        """It disagrees on its own: no step inside it disagrees."""
        return not self.ok and not self.through

    @property
    def max_error(self) -> float:
        """The largest |backward - finite difference| / its scale (a check agrees up to FD_TOL)."""
        return max((abs(c.backward - c.fd) / max(c.scale, 1e-300) for c in self.checks), default=0.0)

    def failures(self) -> list[str]:
        return [
            f"{c.array}{list(c.at) if isinstance(c.at, tuple) else ' ' + c.at}: backward {c.backward:.6g}, "
            f"finite difference {c.fd:.6g}"
            for c in self.checks
            if not c.agrees
        ]


def backward_steps(
    model, *inputs, seed: int = 0, sampling: Sampling = THOROUGH, lane: str = "reference"
) -> list[BackwardStep]:
    """Run the model's backward on one batch and return its steps, in the order they ran, each
    checked by finite differences (see the module docstring). inputs: the model's forward
    arguments, targets included (GPT: ids, targets; classifier: x, y; seq2seq: src, tgt_in,
    tgt_out). lane: "reference" (the ops' formulas; attention op by op) or "fast" (the fast
    lane; attention's backward one fused op)."""
    if lane not in LANES:
        raise ConfigError(f"lane must be one of {LANES}, got {lane!r}")
    m = copy.deepcopy(model).to(np.float64).train()
    generator = set_dropout_rng(m, np.random.default_rng(seed))
    m.zero_grad()
    before = {name: p.data.copy() for name, p in m.named_parameters()}
    with fast.reference(lane == "reference"), recording(m, generator) as record:
        m(*inputs)
        m.backward()
    steps = _steps(record)
    replay = _Replay(record, m, before)
    rng = np.random.default_rng(seed)
    with fast.reference(), trusted_calls():  # each step against its forward's formula
        try:
            for step in steps:
                step.sampling = sampling
                check = _check_op if step.kind == "op" else _check_module
                if step.forward_call is None:
                    step.checks.append(Check("its forward", "", float("nan"), 0.0, 0.0))
                    step.checked["its forward"] = "not in the record: nothing to compare with"
                else:
                    check(step, rng, sampling, replay)
        finally:
            record_module.hold(None)
    for step in steps:
        if not step.ok:
            inside = [s for s in steps if step.call.index < s.call.index < step.call.end and not s.ok]
            step.through = [s.name for s in inside if not any(_inside(s, t) for t in inside)]  # the innermost
    return steps


# -- the steps, from the record ---------------------------------------------------------------------
def _steps(record) -> list[BackwardStep]:
    """A step for each backward in the record that is not the identity."""
    steps, seen = [], {}
    for call in record.calls:
        if call.phase != "backward":
            continue
        forward = record.forward_of(call)
        if _identity(call, forward):
            continue
        op = call.kind == "op"
        base = (f"{call.path}.{call.name}" if call.path else call.name) if op else (call.path or call.name)
        seen[base] = seen.get(base, 0) + 1
        names, given = _given(call, forward)
        if op:
            fn, lane = call.fn.__wrapped__, call.lane
            of = forward.name if forward else "its forward"
            against = f"finite differences of {of} at its recorded inputs"
        else:
            fn, lane = type(call.fn).backward, ""
            against = f"finite differences of {call.name}.forward at its recorded inputs"
        fast_form = getattr(call.fn.variant.module, call.fn.variant.name) if lane == "fast" else None
        steps.append(
            BackwardStep(
                name=base if seen[base] == 1 else f"{base} #{seen[base]}",
                op=call.name,
                kind=call.kind,
                formula=_summary(fn) if op else _summary(fn, comments=False) or _summary(type(call.fn)),
                where=_where(fn),
                lane=lane,
                lane_where=_where(fast_form) if fast_form else "",
                depth=call.depth,
                grad_in=call.values[_received_name(call)],
                grad_out=next((g for g in given if isinstance(g, np.ndarray)), None),
                grads={**_owed(names, given, forward), **call.added},
                param_grads=dict(call.added),
                against=against,
                hook=forward.hook if forward else "",
                call=call,
                forward_call=forward,
            )
        )
    depth0 = min((s.depth for s in steps), default=0)
    for s in steps:
        s.depth -= depth0
    return steps


def _received_name(call) -> str:
    """The parameter holding the gradient a backward call received: an op's declared one, else its first."""
    return (call.fn.derivative.received if call.kind == "op" else None) or next(iter(call.arguments))


def _given(call, forward) -> tuple[list[str], list]:
    """What a backward call returned, and the names of the forward's inputs those are the
    gradients of: an op's declared `grads`; a module's float inputs in order (the Nones it returns
    for inputs not given left out; a module's backward that returns None, a model's whose inputs
    are its data, gives none)."""
    returned = call.result_values if isinstance(call.result_values, tuple) else (call.result_values,)
    if call.kind == "op":
        return list(call.fn.derivative.grads), list(returned)
    if call.result is None:
        return [], []
    floats = [k for k, v in (forward.values.items() if forward else ()) if _is_float(v)]
    return floats, [g for g in returned if g is not None]


def _owed(names: list[str], given: list, forward) -> dict:
    """The gradients a backward gave, by input name, and a None it gave for a float array its
    forward was given (owed, and failing its check); a None for an input that was None or not
    a float array (no bias, token ids) is left out."""
    inputs = forward.values if forward else {}
    return {n: g for n, g in zip(names, given) if g is not None or _is_float(inputs.get(n))}


def _identity(call, forward) -> bool:
    """A backward that handed back the very gradient it received and added nothing, of a forward
    that handed back its input (or of none in the record: a hook point, dropout with p = 0). A
    backward that hands back its gradient for a forward that changed its input (dropout's mask
    dropped) is a step, and disagrees."""
    received = call.arguments[_received_name(call)]
    results = call.result if isinstance(call.result, tuple) else (call.result,)
    if not any(r is received for r in results) or any(np.any(a) for a in call.added.values()):
        return False
    if forward is None:
        return True
    out = forward.result[0] if isinstance(forward.result, tuple) else forward.result
    return any(out is a for a in forward.arguments.values())


def _inside(outer: BackwardStep, inner: BackwardStep) -> bool:
    return outer.call.index < inner.call.index < outer.call.end


# -- the checks ------------------------------------------------------------------------------------
def _check_op(step: BackwardStep, rng, sampling: Sampling, replay) -> None:
    """Central differences of sum(forward(inputs) * g) at the forward call's recorded inputs, at
    the entries `sampling` picks of each gradient the op gave."""
    forward, derivative = step.forward_call, step.call.fn.derivative
    inputs, formula = dict(forward.values), forward.fn.__wrapped__
    also = [(step.call.values[name], path) for name, path in derivative.also.items()]
    received = [step.grad_in, *(g for g, _ in also if g is not None)]  # each output's gradient, held fixed

    def output():
        replay(forward)
        outputs = derivative.outputs(formula(**inputs))
        return [outputs[0], *(o for o, (g, _) in zip(outputs[1:], also) if g is not None)]

    loss = _Loss(output, received)

    for name, grad in step.grads.items():
        _by_entries(step, f"d{name}", grad, inputs.get(name), loss, rng, sampling)


def _check_module(step: BackwardStep, rng, sampling: Sampling, replay) -> None:
    """Central differences of sum(module.forward(inputs) * g) at the module's recorded inputs: its
    own parameters entry by entry as an op's arrays; the gradients of its float inputs, and what
    it added to the parameters of the layers inside it, along `sampling.directions` random unit
    directions each (the inside layers' own steps check those entry by entry)."""
    forward, module = step.forward_call, step.call.fn
    inputs, g = dict(forward.values), step.grad_in
    floats, given = _given(step.call, forward)
    if len(given) != len(floats):
        step.checks.append(Check("dx", "", float("nan"), 0.0, 0.0))
        step.checked["dx"] = f"returned {len(given)} gradient(s) for {len(floats)} float input(s) {floats}"
        given = []

    def output():
        replay(forward)
        out = module.forward(**inputs)
        if isinstance(out, tuple):  # a model's (output, loss): the one the gradient is of
            out = next(o for o in out if np.shape(o) == np.shape(g))
        return out

    loss = _Loss(output, g)

    params = dict(module.named_parameters())
    for name, grad in zip(floats, given):
        _by_directions(step, f"d{name}", grad, inputs[name], loss, rng, sampling)
    for name, grad in step.param_grads.items():
        if "." in name:  # a parameter of a layer inside it
            _by_directions(step, f"d({name})", grad, params[name].data, loss, rng, sampling)
        else:
            _by_entries(step, f"d{name}", grad, params[name].data, loss, rng, sampling)


def _by_entries(step: BackwardStep, label: str, grad, x, loss, rng, sampling: Sampling) -> None:
    """Each entry `sampling` picks of grad against the central difference of loss() at that entry of x."""
    if not _fits(step, label, grad, x):
        return
    picks, step.checked[label] = _picks(grad, rng, sampling)
    scale = float(np.max(np.abs(grad), initial=0.0)) + loss.rounding
    for i in picks:
        step.checks.append(Check(label, i, float(grad[i]), central_difference(loss, x, i, FD_EPS), scale))


def _by_directions(step: BackwardStep, label: str, grad, x, loss, rng, sampling: Sampling) -> None:
    """grad . u against the central difference of loss() along u, for random unit directions u of x."""
    if not _fits(step, label, grad, x):
        return
    scale = float(np.max(np.abs(grad), initial=0.0)) + loss.rounding
    n = sampling.directions
    step.checked[label] = f"{n} random direction{'s' if n > 1 else ''} (all {grad.size:,} entries at once)"
    for d in range(n):
        u = rng.standard_normal(grad.shape)
        u /= np.linalg.norm(u) or 1.0
        orig = x.copy()
        x += FD_EPS * u
        plus = loss()
        x[...] = orig - FD_EPS * u
        minus = loss()
        x[...] = orig
        fd = (plus - minus) / (2 * FD_EPS)
        step.checks.append(Check(label, f"direction {d + 1}", float(np.sum(grad * u)), fd, scale))


class _Loss:
    """loss() = sum(output() * g), g the gradient a step received held fixed (a list: output()
    gives as many outputs, each with its gradient, and their sums are added); `rounding`: a
    hundredth of sum |output() * g| at the recorded inputs, what a central difference of it may be
    off by from float64's own rounding alone (its entries summed, then divided by 2 eps = 2e-6),
    with a wide margin."""

    def __init__(self, output, g):
        self.output, self.g = output, g
        self.rounding = self._sum(np.abs) / 100

    def __call__(self) -> float:
        return self._sum(lambda a: a)

    def _sum(self, each) -> float:
        out = self.output()
        pairs = zip(out, self.g) if isinstance(self.g, list) else [(out, self.g)]
        return float(sum(each(np.asarray(o, dtype=np.float64) * g).sum() for o, g in pairs))


class _Replay:
    """Before each forward a check runs: the generator as it was when the recorded call started
    (the same dropout masks drawn again), the model's arrays its forward wrote (not a
    backward: an SAE's firing counts) as they were before the recorded forward, and its detached
    values (`ops.detach`) as the recorded call got them, held fixed as its backward holds them,
    so that every forward of a finite difference starts from the state the recorded one did."""

    def __init__(self, record, model, before: dict):
        self.record, self.generator = record, record.generator
        params = dict(model.named_parameters())
        self.written = [(params[n], b) for n, b in before.items() if not np.array_equal(params[n].data, b)]

    def __call__(self, call) -> None:
        if call.draws:
            self.generator.bit_generator.state = call.rng_state
        for p, b in self.written:
            p.data[...] = b
        record_module.hold(self.record.held(call))


def _fits(step: BackwardStep, label: str, grad, x) -> bool:
    """A gradient and the input it is of: both arrays of one shape (a check failing when not: a
    scalar for an array, None for a float array, or a gradient of an input the forward was not given)."""
    if grad is None and not _is_float(x):
        return False
    if not isinstance(x, np.ndarray) or not isinstance(grad, np.ndarray) or grad.shape != x.shape:
        step.checks.append(Check(label, "", float("nan"), 0.0, 0.0))
        step.checked[label] = f"shape {np.shape(grad)} against its input's {np.shape(x)}"
        return False
    return True


def _is_float(v) -> bool:
    return isinstance(v, np.ndarray) and v.dtype.kind == "f"


def _picks(a: np.ndarray, rng, sampling: Sampling) -> tuple[list[tuple], str]:
    """The indices of the entries of `a` to check, and what they are (see Sampling)."""
    if a.size <= max(sampling.full, sampling.sampled + sampling.largest):
        flat, what = np.arange(a.size), f"all {a.size:,}"
    else:
        largest = np.argsort(np.abs(a).reshape(-1), kind="stable")[a.size - sampling.largest :]
        others = np.setdiff1d(np.arange(a.size), largest)
        flat = np.concatenate([largest, rng.choice(others, sampling.sampled, replace=False)])
        what = f"{sampling.sampled} random + the {sampling.largest} largest of {a.size:,}"
    return list(zip(*(index.tolist() for index in np.unravel_index(flat, a.shape)))), what


# -- where a step's code is ------------------------------------------------------------------------
def _where(fn) -> str:
    """'scratchformer/ops/softmax.py:58': the first line of fn's code after its docstring (where
    its formula starts), from the package root."""
    fn = inspect.unwrap(fn)
    file = Path(inspect.getsourcefile(fn))
    parts = file.parts
    rel = Path(*parts[parts.index("scratchformer") :]) if "scratchformer" in parts else file
    lines, start = inspect.getsourcelines(fn)
    try:
        node = ast.parse(textwrap.dedent("".join(lines))).body[0]
    except SyntaxError:  # a lambda inside a longer statement: its first line
        return f"{rel}:{start}"
    body = getattr(node, "body", None)
    if not isinstance(body, list):  # a lambda: its line
        return f"{rel}:{start}"
    first = body[1] if len(body) > 1 and _is_docstring(body[0]) else body[0]
    return f"{rel}:{start + first.lineno - 1}"


def _summary(fn, comments: bool = True) -> str:
    """What fn computes, in its own words: its docstring, else (comments=True) its first comment."""
    fn = inspect.unwrap(fn)
    doc = inspect.getdoc(fn)
    if doc or not comments:
        return " ".join((doc or "").split())
    lines = inspect.getsource(fn).splitlines()
    return next((line.strip()[1:].strip() for line in lines if line.strip().startswith("#")), "")


def _is_docstring(node) -> bool:
    return (
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    )


# -- the figure and the table ------------------------------------------------------------------------
def _colour(step: BackwardStep, ok: str = "tab:green") -> str:
    return ok if step.ok else "tab:red" if step.red else "tab:purple"


def _verdict(step: BackwardStep) -> str:
    if step.ok:
        return f"{len(step.checks):,} checks agree"
    if step.through:
        return f"disagrees through {', '.join(step.through)}"
    bad = step.failures()
    return f"{len(bad)} of {len(step.checks):,} disagree: {bad[0]}"


def _summary_line(steps: list[BackwardStep], count_steps: bool) -> str:
    red = [s.name for s in steps if s.red]
    through = [s.name for s in steps if not s.ok and not s.red]
    if not red:
        total = sum(len(s.checks) for s in steps)
        return f"all {len(steps)} steps agree with finite differences at the {total:,} entries and directions checked"
    head = f"{len(red)} of {len(steps)} steps" if count_steps else f"{len(red)} step(s)"
    more = f"{len(through)} more only through {'it' if len(red) == 1 else 'them'}"
    more = f"; {more}: {', '.join(through)}" if count_steps else f" ({more})"
    return f"{head} disagree with finite differences: {', '.join(red)}{more if through else ''}"


def backward_walkthrough(steps: list[BackwardStep], path=None):
    """One row per step, in the order the backward ran, indented as they nest: the step, its
    formula, file:line and lane, the gradient received and returned (shape, norm; a heatmap of
    the returned one's first batch row, red positive, blue negative, each on its own scale), and
    its check (green: agrees; red: disagrees; purple: disagrees only through a step inside it);
    beside it, the gradient-flow bars: the norm of the gradient each step returned, and of what it
    added into gradient buffers."""
    n = len(steps)
    fig = new_figure(15, 1.2 + 0.42 * n)
    text_ax, bars = fig.subplots(1, 2, width_ratios=[3.2, 1])
    text_ax.set_axis_off()
    text_ax.set_xlim(0, 1)
    text_ax.set_ylim(n, -1)
    for x, head in ((0, "step (op or module)"), (0.2, "formula  /  at"), (0.6, "in -> out (shape, norm)")):
        text_ax.text(x, -0.6, head, fontsize=8, weight="bold")
    text_ax.text(0.775, -0.6, "out, row 0", fontsize=8, weight="bold")
    text_ax.text(0.86, -0.6, "finite differences", fontsize=8, weight="bold")
    for r, s in enumerate(steps):
        label = f"{r}. {s.name}" + (f" ({s.op})" if s.kind == "module" else "")
        text_ax.text(0.006 * s.depth, r, _clip(label, 44 - s.depth), fontsize=7, va="center")
        text_ax.text(0.2, r - 0.18, _clip(s.formula, 100), fontsize=6, va="center")
        lane = f"  ({s.lane} lane)" if s.lane else ""
        text_ax.text(0.2, r + 0.2, f"{s.where}{lane}", fontsize=6, va="center", color="grey")
        shapes = _clip(f"{_describe(s.grad_in)} -> {_describe(s.grad_out)}", 44)
        text_ax.text(0.6, r, shapes, fontsize=6, va="center")
        if s.grad_out is not None and np.ndim(s.grad_out) >= 2:  # a thumbnail of the gradient it returned
            g = np.asarray(s.grad_out)
            while g.ndim > 2:  # the first batch row (and head)
                g = g[0]
            lim = float(np.abs(g).max()) or 1.0
            # drawn into the text's axes, in the box of its column and row (row 0 at the top): an
            # axes per thumbnail would cost more than the rest of the figure
            text_ax.imshow(
                g,
                cmap="RdBu_r",
                vmin=-lim,
                vmax=lim,
                aspect="auto",
                interpolation="nearest",
                extent=(0.775, 0.85, r + 0.4, r - 0.4),
                zorder=4,  # over the text, as a thumbnail of its own would be
            )
        text_ax.text(
            0.86, r - 0.18, _clip(_verdict(s), 70), fontsize=6, va="center", color=_colour(s), weight="bold"
        )
        checked = "; ".join(f"{k} {v}" for k, v in s.checked.items())
        text_ax.text(0.86, r + 0.2, _clip(checked, 80), fontsize=5, va="center", color="grey")
    y = np.arange(n)
    out = [0.0 if s.grad_out is None else float(np.linalg.norm(s.grad_out)) for s in steps]
    par = [float(np.sqrt(sum(np.sum(g * g) for g in s.param_grads.values()))) for s in steps]
    colours = [_colour(s, ok="tab:blue") for s in steps]
    bars.barh(y - 0.2, out, height=0.4, label="|returned gradient|", color=colours)
    bars.barh(y + 0.2, par, height=0.4, label="|added to gradients|", color="tab:orange")
    bars.set_yticks(y, [s.name for s in steps], fontsize=7)
    bars.set_ylim(n - 0.5, -0.5)
    bars.set_xlabel("L2 norm")
    from matplotlib.patches import Patch  # loaded by new_figure above

    returned, added = Patch(color="tab:blue"), Patch(color="tab:orange")
    bars.legend(
        [returned, added], ["|returned gradient|", "|added to gradients|"], fontsize=7, loc="lower right"
    )
    bars.set_title("gradient flow", fontsize=9)
    fig.suptitle(
        f"the backward, step by step ({n} steps, in the order they ran): {_summary_line(steps, False)}"
        f"\nchecked: {steps[0].sampling.describe()} (per row, in grey)\nagree: |backward - central "
        f"difference (float64, eps {FD_EPS:g})| <= {FD_TOL:g} x (the array's largest |entry| + "
        "sum|forward(inputs) x g| / 100)",
        fontsize=9,
    )
    return finish(fig, path)


def _clip(text: str, n: int) -> str:
    """At most n characters (the figure's columns stay apart; backward_table and the report say it all)."""
    return text if len(text) <= n else text[: n - 3] + "..."


def _describe(g) -> str:
    if g is None:
        return "none (token ids)"
    if np.isscalar(g) or np.ndim(g) == 0:
        return f"{float(g):g}"
    return f"{tuple(g.shape)}, {np.linalg.norm(g):.3g}"


def backward_table(steps: list[BackwardStep]) -> str:
    """The steps as text, one line each, indented as they nest: number, name, shapes in -> out,
    the file:line of its code and the lane, the largest error against finite differences and
    the verdict; then what was checked, and a summary line."""
    width = max(2 * s.depth + len(s.name) for s in steps)
    lines = []
    for r, s in enumerate(steps):
        shapes = f"{_shape(s.grad_in)} -> {_shape(s.grad_out)}"
        lane = f" [{s.lane}{f' {s.lane_where}' if s.lane_where else ''}]" if s.lane else " [module]"
        verdict = (
            "ok"
            if s.ok
            else f"disagrees through {', '.join(s.through)}"
            if s.through
            else (f"DISAGREES: {s.failures()[0]}")
        )
        name = "  " * s.depth + s.name
        lines.append(
            f"{r:3d}  {name:<{width}}  {shapes:<28}  {s.where}{lane}  max error {s.max_error:.1e}  {verdict}"
        )
    lines.append(f"checked: {steps[0].sampling.describe()}")
    lines.append(_summary_line(steps, True))
    return "\n".join(lines)


def _shape(g) -> str:
    if g is None:
        return "ids"
    return "()" if np.ndim(g) == 0 else str(tuple(np.shape(g))).replace(" ", "")
