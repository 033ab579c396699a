"""The tiny core every layer builds on: `Parameter` and `Module`.

A `Parameter` is an array of weights (`.data`) with a gradient buffer of the same shape
(`.grad`). Backward passes **add** into `.grad` (as llm.c does), so a parameter used twice
(weight tying) or a residual fan-out needs no special case; `zero_grad()` resets the sums.

A `Module` finds its parameters and sub-modules by looking at its own attributes (plain
attributes, lists and tuples of them), in the order they were assigned, so names come out
as in PyTorch: ``blocks.0.self_attn.in_proj_weight``.

Contract of every layer (forward/backward pairs, llm.c style):
- ``forward(...)`` in training mode keeps in ``self._cache`` what ``backward`` needs;
  in eval mode it keeps nothing.
- ``backward(grad_out)`` adds parameter gradients into ``.grad`` and returns the gradient of
  the loss with respect to the forward's float inputs: one array when the forward takes one,
  always a tuple in the forward's argument order when it takes several (None for an input
  that was not given). It consumes the cache: a second backward needs a second forward.
- ``check_input(...)`` (same arguments as forward) validates a user's input. `__call__` runs
  it only at the door -- the outermost call -- so the layers inside a model trust the model,
  which checked its own input once.

While a record is taken (`nn.recording`, scratchformer/record.py), every module's call and every
backward (a subclass's `backward` is wrapped once, when the class is made) is recorded with the
module; otherwise each asks the one flag `record.ACTIVE` and goes on.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import numpy as np

from scratchformer import record
from scratchformer.checks import DOOR, FLOAT_DTYPES, check_bool, check_module
from scratchformer.errors import BackwardError, DTypeError, StateDictError

__all__ = [
    "DEFAULT_DTYPE",
    "Module",
    "Parameter",
    "door",
    "eval_mode",
    "trusted_calls",
    "BackwardError",
    "StateDictError",
]

DEFAULT_DTYPE = np.float32


class Parameter:
    """A trainable array and its accumulated gradient.

    Attributes:
        data: ndarray of any shape, the weights.
        grad: ndarray of the same shape and dtype; backward passes add into it.
    """

    __slots__ = ("data", "grad")

    def __init__(self, data: np.ndarray):
        data = np.asarray(data)
        if not np.issubdtype(data.dtype, np.floating):
            raise DTypeError(f"Parameter needs a floating-point array, got dtype {data.dtype}")
        self.data = np.ascontiguousarray(data)
        self.grad = np.zeros_like(self.data)

    @property
    def shape(self) -> tuple[int, ...]:
        return self.data.shape

    def zero_grad(self) -> None:
        self.grad[...] = 0

    def __repr__(self) -> str:
        return f"Parameter(shape={self.data.shape}, dtype={self.data.dtype})"


class Module:
    """Base class: parameter discovery, state dicts, train/eval, dtype conversion."""

    training: bool = True

    def __init__(self) -> None:
        self.training = True
        self._cache = None

    def __init_subclass__(cls, **kwargs):
        """A layer's own backward, made recordable (`_recordable`): the record sees every backward."""
        super().__init_subclass__(**kwargs)
        if "backward" in vars(cls):
            cls.backward = _recordable(vars(cls)["backward"])

    # -- running ---------------------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        """forward(), after check_input() when this is the door (not a call from inside a model)."""
        if record.ACTIVE is None:
            if DOOR.inside:  # called from inside a model: the model checked its input
                return self.forward(*args, **kwargs)
            return _at_the_door(self.check_input, self.forward, args, kwargs)
        return record.ACTIVE.module_forward(self, functools.partial(_call, self), args, kwargs)

    def check_input(self, *args, **kwargs) -> None:
        """Raise a typed error for input a user should not pass; layers override this."""

    def forward(self, *args, **kwargs):  # pragma: no cover - abstract
        raise NotImplementedError(f"{type(self).__name__} does not implement forward")

    def backward(self, grad_out):  # pragma: no cover - abstract
        raise NotImplementedError(f"{type(self).__name__} does not implement backward")

    def _save(self, **tensors) -> None:
        """Keep what backward needs, only in training mode (eval mode caches nothing)."""
        self._cache = tensors if self.training else None

    def _pop_cache(self) -> dict:
        """Hand the forward's cache to backward, exactly once."""
        cache = getattr(self, "_cache", None)
        if cache is None:
            raise BackwardError(
                f"{type(self).__name__}.backward() called without a matching forward in "
                "training mode: call module.train() and run forward first (each backward "
                "consumes one forward)"
            )
        self._cache = None
        return cache

    # -- discovery -------------------------------------------------------------------------
    def _children(self) -> Iterator[tuple[str, object]]:
        attrs = vars(self)  # only the attributes that can hold parts reach Python code (a user's
        # loop asks for the parameters every step; a layer has many plain attributes)
        for name, value in itertools.compress(attrs.items(), map(isinstance, attrs.values(), _HOLDERS)):
            if name[0] == "_":
                continue
            if isinstance(value, (list, tuple)):
                for i, item in enumerate(value):
                    if isinstance(item, (Parameter, Module)):
                        yield f"{name}.{i}", item
            else:
                yield name, value

    def named_modules(self, prefix: str = "") -> Iterator[tuple[str, Module]]:
        yield prefix, self
        for name, child in self._children():
            if isinstance(child, Module):
                yield from child.named_modules(f"{prefix}.{name}" if prefix else name)

    def modules(self) -> Iterator[Module]:
        for _, m in self.named_modules():
            yield m

    def named_parameters(self, prefix: str = "") -> Iterator[tuple[str, Parameter]]:
        """Each distinct Parameter once, under the first name it is reached by."""
        seen: set[int] = set()
        yield from self._named_parameters(prefix, seen)

    def _named_parameters(self, prefix: str, seen: set[int]):
        for name, child in self._children():
            full = f"{prefix}.{name}" if prefix else name
            if isinstance(child, Parameter):
                if id(child) not in seen:
                    seen.add(id(child))
                    yield full, child
            else:
                yield from child._named_parameters(full, seen)

    def parameters(self) -> list[Parameter]:
        return [p for _, p in self.named_parameters()]

    def num_parameters(self) -> int:
        return sum(p.data.size for p in self.parameters())

    # -- state -----------------------------------------------------------------------------
    def train(self, mode: bool = True) -> Module:
        for m in self.modules():
            m.training = mode
            if not mode:
                m._cache = None
        return self

    def eval(self) -> Module:
        return self.train(False)

    def zero_grad(self) -> None:
        for p in self.parameters():
            p.zero_grad()

    def to(self, dtype) -> Module:
        """Convert every parameter (and gradient) to `dtype` ("float32" or "float64", the
        dtypes the layers compute in) in place; returns self."""
        try:
            dtype = np.dtype(dtype)
        except TypeError:
            raise DTypeError(
                f"to() needs a floating dtype, one of {list(FLOAT_DTYPES)}, got {dtype!r}"
            ) from None
        if dtype.name not in FLOAT_DTYPES:
            raise DTypeError(f"to() needs a floating dtype, one of {list(FLOAT_DTYPES)}, got {dtype}")
        for m in self.modules():
            m._convert_buffers(dtype)
        for p in self.parameters():
            p.data = p.data.astype(dtype)
            p.grad = p.grad.astype(dtype)
        return self

    def _convert_buffers(self, dtype: np.dtype) -> None:
        """Convert fixed (non-Parameter) float arrays. A module whose buffers are computed
        (sinusoid tables) overrides this to recompute them in the new dtype instead."""
        for name, value in list(vars(self).items()):
            if isinstance(value, np.ndarray) and np.issubdtype(value.dtype, np.floating):
                setattr(self, name, value.astype(dtype))

    @property
    def dtype(self) -> np.dtype:
        """The first parameter's dtype (a model's backward asks at every step: the walk stops there)."""
        first = next(self.named_parameters(), None)
        return first[1].data.dtype if first is not None else np.dtype(DEFAULT_DTYPE)

    def state_dict(self) -> dict[str, np.ndarray]:
        """Name -> copy of each parameter's data (shared parameters appear once)."""
        return {name: p.data.copy() for name, p in self.named_parameters()}

    def load_state_dict(self, state_dict: dict[str, np.ndarray], strict: bool = True) -> None:
        """Copy arrays into the parameters, keeping each parameter's dtype.

        With strict=True, missing or unexpected keys are an error; a wrong shape always is, and
        so is an array that is not real floating point (int, bool, complex: a cast would
        silently change the weights).
        """
        if not isinstance(state_dict, Mapping) or not all(isinstance(k, str) for k in state_dict):
            raise StateDictError(
                f"state_dict must be a dict of name -> array (model.state_dict()), "
                f"got {type(state_dict).__name__}"
            )
        check_bool("strict", strict)
        own = dict(self.named_parameters())
        missing = sorted(set(own) - set(state_dict))
        unexpected = sorted(set(state_dict) - set(own))
        if strict and (missing or unexpected):
            parts = []
            if missing:
                parts.append(f"missing keys {_first_few(missing)}")
            if unexpected:
                parts.append(f"unexpected keys {_first_few(unexpected)}")
            raise StateDictError(f"load_state_dict: {'; '.join(parts)}")
        bad = [
            f"{k}: expected {own[k].shape}, got {tuple(np.shape(v))}"
            for k, v in state_dict.items()
            if k in own and tuple(np.shape(v)) != own[k].shape
        ]
        if bad:
            raise StateDictError(f"load_state_dict: wrong shapes: {_first_few(bad, '; ')}")
        not_float = [
            f"{k}: {np.asarray(v).dtype}"
            for k, v in state_dict.items()
            if k in own and np.asarray(v).dtype.kind != "f"
        ]
        if not_float:
            raise DTypeError(
                f"load_state_dict needs floating-point arrays, got {_first_few(not_float, '; ')}"
            )
        for k, v in state_dict.items():
            if k in own:
                own[k].data[...] = np.asarray(v, dtype=own[k].data.dtype)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.num_parameters():,} parameters)"


_HOLDERS = itertools.repeat((Parameter, Module, list, tuple))  # what an attribute holding a part is


def _first_few(items: list[str], sep: str | None = None, n: int = 3) -> str:
    """A one-line list: the first n items (as a list, or joined by sep) and how many more (a
    mismatched model has hundreds)."""
    more = f" and {len(items) - n} more" if len(items) > n else ""
    return (str(items[:n]) if sep is None else sep.join(items[:n])) + more


@contextmanager
def trusted_calls():
    """Run module calls without input checks (a door already checked). Models use it around
    public methods other than __call__ (generate, encode, decode) after checking their input."""
    outer, DOOR.inside = DOOR.inside, True  # checks.DOOR: the ops below nn read it too
    try:
        yield
    finally:
        DOOR.inside = outer


def _call(module: Module, *args, **kwargs):
    return _at_the_door(module.check_input, module.forward, args, kwargs)


def _recordable(backward):
    """backward, recorded (with what it adds to each parameter's gradient) while a record is taken."""

    @functools.wraps(backward)
    def recordable(self, *args, **kwargs):
        if record.ACTIVE is None:
            return backward(self, *args, **kwargs)
        return record.ACTIVE.module_backward(
            self, backward.__get__(self), args, kwargs, self.named_parameters
        )

    return recordable


def _at_the_door(check, run, args, kwargs):
    if DOOR.inside:  # called from inside a model: the model checked its input
        return run(*args, **kwargs)
    check(*args, **kwargs)
    with trusted_calls():
        return run(*args, **kwargs)


def door(check):
    """Decorator giving a public method other than forward (encode, decode ...) the same door
    as `__call__`: `check(self, *args, **kwargs)` runs only when a user calls the method."""

    def wrap(method):
        @functools.wraps(method)
        def checked(self, *args, **kwargs):
            return _at_the_door(functools.partial(check, self), functools.partial(method, self), args, kwargs)

        return checked

    return wrap


@contextmanager
def eval_mode(module: Module):
    """Run a block in eval mode and restore the module's previous mode, even on an error."""
    check_module("module", module)
    was_training = module.training
    module.eval()
    try:
        yield module
    finally:
        module.train(was_training)
