"""The fast lane: faster forms of a few ops and of AdamW, each equal to its reference in `ops/`
or `optim/` (bit for bit where the arithmetic is the same, within float32 rounding otherwise;
tests/ops/test_fast_lane.py proves each pair equal).

The reference is the code a reader checks against the paper: `ops/attention.py` is
scores -> mask -> softmax -> weights @ v, a sum is `x.sum(-1, keepdims=True)`, the embedding's
gradient is `np.add.at`, AdamW is the update per parameter. The faster forms, each under the name
of the op it replaces:

    reductions.py   sums as BLAS matrix-vector products, a short row's max through a transposed copy
    softmax.py      softmax and log-softmax with those reductions; log-softmax in one array
    layernorm.py    layer norm and its backward in two (..., C) arrays instead of seven
    linear.py       the bias gradient as one BLAS sum; a big weight's gradient added in blocks
    activations.py  float32 GELU: Phi interpolated in a table, its derivative computed in place,
                    a cache-sized block at a time
    attention.py    attention over the batch in cache-sized pieces; big weights recomputed in the backward
                    (when to keep them is this lane's rule: KEEP_WEIGHTS_BYTES)
    embedding.py    the embedding's gradient as one one-hot product (small vocabularies) or by sorted
                    runs (one `np.add.reduceat`) instead of `np.add.at`
    optim.py        the kernels of optim.FlatAdamW (AdamW on one flat buffer, in cache-sized in-place
                    pieces) and clip_grad_norm on that buffer

What each buys is measured in docs/performance.md.

Where the lane is chosen: here, in `lane` and `chosen`, and nowhere else. Every op of `ops/` is
written as its formula alone and decorated `@fast.lane(...)`: the one dispatch. For an op with a
faster form (`@fast.lane(module)`) the decorator registers the pair in `VARIANTS` and returns the
op the rest of the library calls, which checks a direct call's arguments, then runs the formula
or, while `enabled`, the function of the same name in `module`; an op without one
(`@fast.lane()`) runs its formula. A backward that takes its forward's cache runs in the lane its
forward ran in (a fast forward's cache holds lane="fast"), whatever the switch says by then. Each
wrapper is made once, for its kind of choice, and tests only what that choice needs. The
dispatch is also where the model's record is taken (scratchformer/record.py): one test of
`record.ACTIVE` a call, and nothing more while no record is taken. A backward op declares there
what it is the derivative of (`derivative_of=`), for the record's checks. For the optimiser:
`optim.make_adamw` takes `chosen(FlatAdamW, AdamW)` (FlatAdamW bound to the model in one
explicit step) and `optim.clip_grad_norm` is dispatched as an op.

The switch, one flag for the whole process: `enabled` is True unless the environment sets
SCRATCHFORMER_REFERENCE to anything but "0" or "" (read once, at import; forked workers
inherit the flag).
`use_reference()` / `use_reference(False)` flips it in a running process, and
`with reference():` runs a block in the reference lane. A run is reproducible bit for bit
within a lane; the two lanes differ by float rounding.
"""

from __future__ import annotations

import contextlib
import functools
import os
from typing import NamedTuple

from scratchformer import record
from scratchformer.checks import DOOR

__all__ = ["VARIANTS", "Variant", "chosen", "enabled", "lane", "reference", "same_op", "use_reference"]

enabled: bool = os.environ.get("SCRATCHFORMER_REFERENCE", "0").strip() in ("", "0")


def use_reference(on: bool = True) -> None:
    """Run the reference ops everywhere (on=True), or the fast lane again (on=False)."""
    global enabled
    enabled = not on


@contextlib.contextmanager
def reference(on: bool = True):
    """`with reference():` runs the block in the reference lane (on=False: in the fast lane),
    and restores the lane it found, even on an error."""
    global enabled
    before = enabled
    enabled = not on
    try:
        yield
    finally:
        enabled = before


class Variant(NamedTuple):
    """One op with a faster form: `formula` (the reference, in ops/), run in the fast lane as
    `module.<name>` (looked up at each call, so a test may replace it)."""

    formula: object
    module: object
    name: str


VARIANTS: dict[str, Variant] = {}  # "ops module.op name" -> its variant, filled as ops/ is imported


def chosen(fast_form, reference):
    """The lane's choice between two things that are not ops (the optimiser's class, for
    `optim.make_adamw`): `fast_form` in the fast lane, else `reference`."""
    return fast_form if enabled else reference


def lane(
    module=None,
    *,
    name: str | None = None,
    check=None,
    serves=None,
    by_cache: bool = False,
    derivative_of=None,
    grads: tuple[str, ...] = (),
    into: dict | None = None,
    received: str | None = None,
    output: int = 0,
    also: dict | None = None,
):
    """Decorator for an op of ops/ (its formula): the one dispatch every op goes through.

    module: a module of this package holding the op's faster form, the function `name`
    (default: the formula's own name) with the same parameters; None: the op has none and runs
    its formula in either lane. check(*args, **kwargs): raises on bad arguments; run on a
    direct call only (a layer's call was checked at its door, checks.DOOR). serves(*args,
    **kwargs) -> bool: the inputs the faster form takes (None: all); the others run the formula
    in either lane. by_cache: a backward whose second argument is its forward's cache; it runs
    the faster form exactly when that cache came from the faster forward (cache["lane"] == "fast").

    A backward op declares what it is the derivative of (`record.Derivative`), so a checker can
    compare it with finite differences of that forward: derivative_of, the forward op (or a
    tuple of them); grads, the names of that forward's parameters whose gradients it returns,
    in order; into, forward parameter -> the backward's parameter that gradient is added into;
    received, the backward's parameter holding the gradient it received (default: its first);
    output, which element of a forward's tuple that gradient is of (default 0); also, the
    backward's other received gradients, each parameter -> where in the forward's result its
    output lies (`record.Derivative`).

    While a record is taken (`record.ACTIVE`, `nn.recording`), the call is recorded; otherwise
    the one test of that flag is all the record costs.
    """
    derivative = None
    if derivative_of is not None:
        of = derivative_of if isinstance(derivative_of, tuple) else (derivative_of,)
        derivative = record.Derivative(of, tuple(grads), dict(into or {}), received, output, dict(also or {}))

    def decorate(formula):
        if module is None:
            if check is not None or serves is not None or by_cache:
                raise TypeError(
                    "lane(): check, serves and by_cache choose between a formula and its fast form"
                )

            @functools.wraps(formula)
            def op(*args, **kwargs):
                if record.ACTIVE is None:
                    return formula(*args, **kwargs)
                return record.ACTIVE.op(op, formula, args, kwargs)

        else:
            variant = Variant(formula, module, name or formula.__name__)
            if not callable(getattr(module, variant.name, None)):
                raise AttributeError(
                    f"{module.__name__} has no function {variant.name} for {formula.__qualname__}"
                )
            VARIANTS[f"{formula.__module__}.{formula.__qualname__}"] = variant
            op = _dispatch(formula, module, variant.name, check, serves, by_cache)
            op.variant = variant
        op.derivative = derivative
        return op

    return decorate


def _dispatch(formula, module, fast_name: str, check, serves, by_cache: bool):
    """The op that runs `formula` or `module.<fast_name>` (looked up at each call, so a test may
    replace it), as the lane says: one wrapper per kind of choice, each testing only what it needs."""
    if by_cache:
        if check is not None or serves is not None:
            raise TypeError("lane(by_cache=True): the forward checked the arguments and chose the lane")
        cache_name = formula.__code__.co_varnames[1]  # its second parameter

        @functools.wraps(formula)
        def op(*args, **kwargs):
            cache = args[1] if len(args) > 1 else kwargs[cache_name]
            run = getattr(module, fast_name) if cache.get("lane") == "fast" else formula  # its forward's lane
            if record.ACTIVE is None:
                return run(*args, **kwargs)
            return record.ACTIVE.op(op, run, args, kwargs)

    elif serves is None:

        @functools.wraps(formula)
        def op(*args, **kwargs):
            if check is not None and not DOOR.inside:
                check(*args, **kwargs)
            run = getattr(module, fast_name) if enabled else formula  # the lane, chosen per call
            if record.ACTIVE is None:
                return run(*args, **kwargs)
            return record.ACTIVE.op(op, run, args, kwargs)

    else:

        @functools.wraps(formula)
        def op(*args, **kwargs):
            if check is not None and not DOOR.inside:
                check(*args, **kwargs)
            run = getattr(module, fast_name) if enabled and serves(*args, **kwargs) else formula
            if record.ACTIVE is None:
                return run(*args, **kwargs)
            return record.ACTIVE.op(op, run, args, kwargs)

    return op


def same_op(op, formula):
    """`formula` dispatched as `op` is: the same lane, check and derivative (a planted bug in a
    test, a mutant), the fast form left out (the formula runs in either lane)."""
    new = lane()(formula)
    new.derivative = op.derivative
    new.__name__, new.__qualname__ = (
        op.__name__,
        op.__qualname__,
    )  # it stands for op (its formula: __wrapped__)
    return new
