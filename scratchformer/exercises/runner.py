"""Running one class the way the layer contract calls it: what the grader sends the learner's
code through, and what it runs the reference and the known mistakes through.

    outcome = run_case(cls, spec, filename)

`spec` is one graded input, chosen by the grader: {"args": the constructor's arguments,
"params": {name: value} for each of the stub's parameters, "inputs": the forward's arguments,
"upstream": dL/d(output), "prefill": {name: the .grad a second backward starts from}}. The
outcome holds what the code did, never a judgement of it (the grader, in its own process,
judges): the parameters' names and the shapes the constructor gave them; the forward's
output; what backward returned; every parameter's .grad ("weight.grad"); what the inputs, the
upstream gradient, the forward's output and the arrays forward saved on the object held after
the backward (the same array objects: an in-place change shows); then a second
forward (on fresh copies of the inputs) and backward from the prefilled .grad: what it
returned and the .grad after. The first exception ends the run: ("phase", "Type: message",
" (line N: code)").

It imports NumPy and scratchformer.nn only: the learner's process (isolation.py) runs it.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable

import numpy as np

PHASES = ("constructor", "forward", "backward", "second backward")


def parameters(obj) -> list[tuple[str, object]]:
    """(name, Parameter) of the object's attributes, and of its scratchformer Module attributes."""
    from scratchformer.nn import Module, Parameter

    found = []
    for name, value in vars(obj).items():
        if isinstance(value, Parameter):
            found.append((name, value))
        elif isinstance(value, Module):
            found += [(f"{name}.{n}", p) for n, p in value.named_parameters()]
    return found


def message(e: BaseException) -> str:
    """'Type: message' of what the learner's code raised, one line."""
    if isinstance(e, SystemExit):
        return f"SystemExit: exit() or sys.exit() was called (code {e.code!r})"
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text[:300]}"


def where(exc: BaseException, filename: str) -> str:
    """' (line N: code)' of the innermost frame of `exc` in `filename`, or ''."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == filename]
    return f" (line {frames[-1].lineno}: {' '.join((frames[-1].line or '').split())[:200]})" if frames else ""


def _copy(value):
    """A copy of what the code returned: arrays copied (a later call must not change them)."""
    if isinstance(value, np.ndarray):
        return np.array(value, copy=True)
    if isinstance(value, tuple):
        return tuple(_copy(v) for v in value)
    return value


def _quiet(_where: str) -> None:
    pass


def run_case(cls: type, spec: dict, filename: str, progress: Callable[[str], None] = _quiet) -> dict:
    """Run `cls` on one graded input (see the module docstring) -> its outcome, a dict."""
    o: dict = {"error": None, "params": []}
    phase = "constructor"
    try:
        progress(phase)
        obj = cls(*spec["args"])
        params = parameters(obj)
        o["params"] = [n for n, _ in params]
        o["param_shapes"] = {n: list(np.shape(p.data)) for n, p in params}  # as the constructor made them
        for name, p in params:
            if name in spec["params"]:
                p.data = np.array(spec["params"][name], copy=True)
            p.grad = np.zeros_like(np.asarray(p.data, dtype=np.float64))
        inputs = [np.array(a, copy=True) for a in spec["inputs"]]
        phase = "forward"
        progress(phase)
        out = obj.forward(*inputs)
        o["out"] = _copy(out)
        saved = {k: v for k, v in vars(obj).items() if isinstance(v, np.ndarray)}
        o["saved"] = {k: np.array(v, copy=True) for k, v in saved.items()}
        upstream = spec["upstream"]
        dy = np.array(upstream, copy=True) if isinstance(upstream, np.ndarray) else upstream
        phase = "backward"
        progress(phase)
        o["returned"] = _copy(obj.backward(dy))
        o["grads"] = {f"{name}.grad": _copy(p.grad) for name, p in params}
        o["inputs_after"] = [np.array(a, copy=True) for a in inputs]
        o["dy_after"] = _copy(dy)
        o["out_after"] = _copy(out)
        o["saved_after"] = {k: np.array(v, copy=True) for k, v in saved.items()}
        phase = "second backward"
        progress(phase)
        for name, p in params:
            if name in spec["prefill"]:
                p.grad = np.array(spec["prefill"][name], copy=True)
        obj.forward(*[np.array(a, copy=True) for a in spec["inputs"]])
        again = np.array(upstream, copy=True) if isinstance(upstream, np.ndarray) else upstream
        o["returned_again"] = _copy(obj.backward(again))
        o["accumulated"] = {f"{name}.grad": _copy(p.grad) for name, p in params}
    except BaseException as e:  # noqa: BLE001 - the code's own failure, exit() included, is the finding
        o["error"] = (phase, message(e), where(e, filename))
    return o
