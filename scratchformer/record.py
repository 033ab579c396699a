"""The model's own record: what a model ran, op by op and module by module, forward and backward.

Every op of ops/ goes through the one dispatch, `fast.lane`, and every module's forward and
backward through nn/module.py. Each asks one flag, `ACTIVE`: None (the default) is off, and that
one test is all the record costs (no allocation, no other check). `nn.recording(model)` turns it
on for one model and gives the `Record`:

    with nn.recording(model) as record:
        logits, loss = model(ids, targets)
        model.backward()
    record.calls         # [Call], in the order they started

A `Call` is one op or one module's forward or backward: what ran (the op, or the module), the
module path and the hook point it ran in, the lane, its arguments and result as they were (float
arrays copied in float64 when the call starts and ends: `values`, `result_values`), what a
backward added into gradient buffers (`added`), and the calls nested inside it.

A backward op declares, beside itself in ops/, the forward it differentiates
(`fast.lane(derivative_of=..., grads=...)`, a `Derivative`); `Record.forward_of(call)` finds that
forward's call: the one that made (or took) the arrays the backward was handed. So a checker
needs no model of any layer: `scratchformer.viz.backward` compares each recorded backward with
central differences of its own forward at that forward's recorded inputs.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field

import numpy as np

__all__ = ["ACTIVE", "HELD", "Call", "Derivative", "Record", "detached", "hold"]

ACTIVE: Record | None = None  # the record being taken (nn.recording), or None: off
# While a check runs a recorded forward again: the values its detached calls returned when it was
# recorded (`Record.held`), in order, which `detached` hands back instead; None otherwise.
HELD: list | None = None


def hold(values: list | None) -> None:
    """Set `HELD`: the values the detached calls of the forward about to run again hand back
    (`Record.held`), or None: none held."""
    global HELD
    HELD = None if values is None else list(values)


def detached(x: np.ndarray) -> np.ndarray:
    """x's value as a constant of the derivative (the formula of `ops.detach`, PyTorch's
    .detach()): a copy of x, through which no gradient flows. While a check runs a recorded
    forward again (`HELD`), the value the recorded call returned instead, so that a finite
    difference of that forward holds it fixed, as its backward does."""
    if ACTIVE is not None and ACTIVE._open:
        ACTIVE._open[-1].detached = True
    if HELD:
        return np.array(HELD.pop(0), dtype=np.asarray(x).dtype)
    return np.array(x, copy=True)


@dataclass(frozen=True)
class Derivative:
    """What a backward op is the derivative of, declared once beside it (`fast.lane`).

    of: the forward op(s) it differentiates (dispatched ops of ops/). grads: the names of that
    forward's parameters whose gradients the backward returns, in its return order.
    into: forward parameter -> the backward's parameter its gradient is added into (a layer's
    `.grad`). received: the backward's parameter holding the gradient it received (default:
    its first); the gradient is of the forward's output, or of its element `output` (default
    0) when the forward returns a tuple. also: the backward's other received gradients, each
    backward parameter -> where in the forward's result the output it is the gradient of
    lies (a path of indices and keys: (2, "norms") is result[2]["norms"]); None passed for one
    means no gradient from there.
    """

    of: tuple
    grads: tuple[str, ...] = ()
    into: dict = field(default_factory=dict)
    received: str | None = None
    output: int = 0
    also: dict = field(default_factory=dict)

    def outputs(self, result) -> tuple:
        """The forward's outputs the gradients are of, in the order (received, *also)."""
        main = result[self.output] if isinstance(result, tuple) else result
        return (main, *(_at(result, path) for path in self.also.values()))


def _at(result, path: tuple):
    for key in path:
        result = result[key]
    return result


@dataclass(eq=False)
class Call:
    """One recorded call. `fn`: the op (its dispatched function) or the module; `phase`:
        "forward" or "backward" (an op is a backward when it declares a Derivative).
        `arguments` / `result`: the objects as passed and returned; `values` / `result_values`:
        the same with every float array copied in float64 at the time (what a check reads).
        `added`: name -> what a backward added into a gradient buffer (an op's `into`, a module's
        parameters). `rng_state`: the record's generator's state when the call started (None
        without one); `draws`: whether the call drew from it; `detached`: its result is a constant of
    the derivative (an `ops.detach`). `end`: the index after the last call
        nested inside this one."""

    kind: str  # "op" or "module"
    fn: object
    phase: str
    path: str  # the module it ran in ("" for the model itself, or outside any module)
    hook: str  # the last hook point passed before it started
    lane: str  # "fast" or "reference" for an op; "" for a module
    run: object  # the function that ran (an op's formula or its fast form; a module's method)
    arguments: dict
    values: dict
    depth: int
    index: int
    rng_state: dict | None = None
    draws: bool = False  # it drew from the record's generator (its dropout)
    detached: bool = False  # its result is a constant of the derivative (`detached`)
    result: object = None
    result_values: object = None
    added: dict = field(default_factory=dict)
    end: int = -1

    @property
    def name(self) -> str:
        """The op's name, or the module's class."""
        return self.fn.__name__ if self.kind == "op" else type(self.fn).__name__


class Record:
    """The calls of one run (see the module docstring). names: id(module) -> its path in the
    model; generator: the random generator the model draws its dropout from, whose state each
    call keeps (so a check can draw the same masks again), or None."""

    def __init__(self, names: dict[int, str], generator: np.random.Generator | None = None):
        self.calls: list[Call] = []
        self.names = names
        self.generator = generator
        self.hook = ""
        self._open: list[Call] = []
        self._paired: list[Call] = []  # the forward calls forward_of has given a backward

    # -- taking the record (the dispatch and nn/module.py call these while ACTIVE is self) --------
    def passed(self, hook_point) -> None:
        """A hook point was passed: the calls that start after it ran after it."""
        self.hook = self.names.get(id(hook_point), "")

    def op(self, op, run, args: tuple, kwargs: dict):
        """Run one op of ops/ (`run`: the function the lane chose) and record it."""
        derivative = op.derivative
        path = self._open[-1].path if self._open else ""
        call = self._start(
            "op", op, "backward" if derivative else "forward", path, run, op.__wrapped__, args, kwargs
        )
        call.lane = "reference" if run is op.__wrapped__ else "fast"
        into = {} if derivative is None else {p: call.arguments.get(b) for p, b in derivative.into.items()}
        before = {p: np.array(a, dtype=np.float64) for p, a in into.items() if a is not None}
        try:
            result = run(*args, **kwargs)
        finally:
            self._finish(call)
        call.added = {p: np.asarray(into[p], dtype=np.float64) - b for p, b in before.items()}
        call.result, call.result_values = result, _value(result)
        return result

    def module_forward(self, module, run, args: tuple, kwargs: dict):
        """Run a module's forward (`run`: its call through the door) and record it."""
        return self._module("forward", module, run, module.forward, args, kwargs, None)

    def module_backward(self, module, run, args: tuple, kwargs: dict, parameters):
        """Run a module's backward and record it with what it added to each parameter's
        gradient (parameters(): the module's named parameters). A subclass's backward that calls
        its parent's (super().backward) is one call."""
        top = self._open[-1] if self._open else None
        if top is not None and top.fn is module and top.phase == "backward":
            return run(*args, **kwargs)
        return self._module("backward", module, run, run, args, kwargs, parameters)

    def _module(self, phase, module, run, signature_of, args, kwargs, parameters):
        path = self.names.get(id(module), type(module).__name__)
        call = self._start("module", module, phase, path, run, signature_of, args, kwargs)
        params = dict(parameters()) if parameters is not None else {}
        before = {name: p.grad.astype(np.float64) for name, p in params.items()}
        try:
            result = run(*args, **kwargs)
        finally:
            self._finish(call)
        call.added = {name: p.grad.astype(np.float64) - before[name] for name, p in params.items()}
        call.result, call.result_values = result, _value(result)
        return result

    def _start(self, kind, fn, phase, path, run, signature_of, args, kwargs) -> Call:
        arguments = _bind(signature_of, args, kwargs)
        call = Call(
            kind=kind,
            fn=fn,
            phase=phase,
            path=path,
            hook=self.hook,
            lane="",
            run=run,
            arguments=arguments,
            values={k: _value(v) for k, v in arguments.items()},
            depth=len(self._open),
            index=len(self.calls),
            rng_state=None if self.generator is None else self.generator.bit_generator.state,
        )
        self.calls.append(call)
        self._open.append(call)
        return call

    def _finish(self, call: Call) -> None:
        self._open.pop()
        call.end = len(self.calls)
        if self.generator is not None:
            call.draws = self.generator.bit_generator.state != call.rng_state

    # -- reading it ----------------------------------------------------------------------------
    def inside(self, call: Call) -> list[Call]:
        """The calls that ran nested inside `call`, in the order they started."""
        return self.calls[call.index + 1 : call.end]

    def held(self, call: Call) -> list:
        """The results of the detached calls within `call` (itself included), in order: what a
        check hands back (`HELD`) when it runs that call's forward again."""
        return [c.result for c in self.calls[call.index : call.end] if c.detached]

    def forward_of(self, call: Call) -> Call | None:
        """The forward call a backward call differentiates, or None when the record holds none.

        A module's backward: the module's last forward before it. A backward op: among the calls
        of the forwards it declares whose output has the shape of the gradient it received, the
        one that shares the most arrays with the arrays (and objects, such as a cache) the
        backward was handed, other than that gradient and the buffers it adds into; of equals,
        one no other backward took yet, the latest.
        """
        earlier = self.calls[: call.index]
        if call.kind == "module":
            return next((c for c in reversed(earlier) if c.fn is call.fn and c.phase == "forward"), None)
        derivative = call.fn.derivative
        received = derivative.received or next(iter(call.arguments))
        skip = {received, *derivative.into.values(), *derivative.also}
        handed = [v for k, v in call.arguments.items() if k not in skip and _pairable(v)]
        taken = {id(c) for c in self._paired}
        best, best_key = None, (0, False)
        shape = np.shape(call.arguments[received])  # the gradient is of the forward's output
        for c in reversed(earlier):
            if c.kind != "op" or c.fn not in derivative.of:
                continue
            if np.shape(derivative.outputs(c.result)[0]) != shape:
                continue
            made = [*c.arguments.values(), *(c.result if isinstance(c.result, tuple) else (c.result,))]
            shared = sum(any(_same(h, m) for m in made) for h in handed)
            key = (shared, id(c) not in taken)
            if shared and key > best_key:
                best, best_key = c, key
        if best is not None:
            self._paired.append(best)
        return best


def _bind(fn, args: tuple, kwargs: dict) -> dict:
    """name -> value of fn's parameters for this call (defaults filled in)."""
    bound = _signature(fn).bind(*args, **kwargs)
    bound.apply_defaults()
    return dict(bound.arguments)


_SIGNATURES: dict = {}


def _signature(fn) -> inspect.Signature:
    """fn's signature, made once per function (a bound method: its function's, without self)."""
    key = getattr(fn, "__func__", fn)
    sig = _SIGNATURES.get(key)
    if sig is None:
        sig = _SIGNATURES[key] = inspect.signature(key)
    if key is not fn:  # drop `self`
        sig = sig.replace(parameters=list(sig.parameters.values())[1:])
    return sig


def _value(a):
    """a as a check reads it later: float arrays copied in float64 (a layer may change its arrays
    in place afterwards), tuples element by element, anything else as it is."""
    if isinstance(a, np.ndarray) and a.dtype.kind == "f":
        return a.astype(np.float64)
    if isinstance(a, tuple):
        return tuple(_value(x) for x in a)
    return a


def _pairable(a) -> bool:
    """What identifies a forward's call: an array or a container it made, not a flag or a number."""
    return a is not None and not isinstance(a, (bool, int, float, str, np.generic))


def _same(a, b) -> bool:
    """The same object, or two arrays over the same memory with the same layout (two views
    `w[:d]` made one after the other)."""
    if a is b:
        return True
    return (
        isinstance(a, np.ndarray)
        and isinstance(b, np.ndarray)
        and a.shape == b.shape
        and a.strides == b.strides
        and a.dtype == b.dtype
        and a.size > 0
        and a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
    )
