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

Where the lane is chosen, for an op: here, in `lane` and nowhere else. An op of `ops/` with a
faster form is written as its formula alone and decorated `@fast.lane(module)`; the decorator
registers the pair in `VARIANTS` and returns the op the rest of the library calls, which checks a
direct call's arguments, then runs the formula or, while `enabled`, the function of the same
name in `module`. A backward that takes its forward's cache runs in the lane its forward ran in
(a fast forward's cache holds lane="fast"), whatever the switch says by then. For the optimiser
the trainer chooses: `optim.make_adamw` builds `FlatAdamW` (bound to the model in one explicit
step) in the fast lane and the per-parameter `AdamW` in the reference lane.

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

from scratchformer.checks import DOOR

__all__ = ["VARIANTS", "Variant", "current_lane", "enabled", "lane", "lane_of", "reference", "use_reference"]

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


def current_lane() -> str:
    """ "fast" or "reference": the lane an op called now runs in (for tools that report it)."""
    return "fast" if enabled else "reference"


def lane_of(cache: dict) -> str:
    """ "fast" or "reference": the lane the forward that made `cache` ran in (its backward runs
    in the same)."""
    return "fast" if cache.get("lane") == "fast" else "reference"


def lane(module, *, name: str | None = None, check=None, serves=None, by_cache: bool = False):
    """Decorator for a formula of ops/ that has a faster form, the function `name` (default: the
    formula's own name) of `module` (a module of this package), with the same parameters.

    check(*args, **kwargs): raises on bad arguments; run on a direct call only (a layer's call
    was checked at its door, checks.DOOR). serves(*args, **kwargs) -> bool: the inputs the
    faster form takes (None: all); the others run the formula in either lane. by_cache: a
    backward whose second argument is its forward's cache; it runs the faster form exactly when
    that cache came from the faster forward (cache["lane"] == "fast").
    """

    def decorate(formula):
        variant = Variant(formula, module, name or formula.__name__)
        if not callable(getattr(module, variant.name, None)):
            raise AttributeError(
                f"{module.__name__} has no function {variant.name} for {formula.__qualname__}"
            )
        VARIANTS[f"{formula.__module__}.{formula.__qualname__}"] = variant
        fast_name = variant.name

        if by_cache:
            if check is not None or serves is not None:
                raise TypeError("lane(by_cache=True): the forward checked the arguments and chose the lane")
            cache_name = formula.__code__.co_varnames[1]  # its second parameter

            @functools.wraps(formula)
            def op(*args, **kwargs):
                cache = args[1] if len(args) > 1 else kwargs[cache_name]
                if cache.get("lane") == "fast":  # the lane its forward ran in
                    return getattr(module, fast_name)(*args, **kwargs)
                return formula(*args, **kwargs)
        else:

            @functools.wraps(formula)
            def op(*args, **kwargs):
                if check is not None and not DOOR.inside:
                    check(*args, **kwargs)
                if enabled and (serves is None or serves(*args, **kwargs)):  # the lane, chosen per call
                    return getattr(module, fast_name)(*args, **kwargs)
                return formula(*args, **kwargs)

        op.variant = variant
        return op

    return decorate
