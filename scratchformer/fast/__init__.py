"""The fast lane: faster forms of a few ops and of AdamW, each equal to its reference in `ops/`
or `optim/` (bit for bit where the arithmetic is the same, within float32 rounding otherwise;
tests/ops/test_fast_lane.py proves each pair equal).

The reference is the code a reader checks against the paper: `ops/attention.py` is
scores -> mask -> softmax -> weights @ v, a sum is `x.sum(-1, keepdims=True)`, AdamW is the
update per parameter. Each op that has a faster form asks `fast.enabled` before its formula and
hands over to the function of the same name in this package:

    reductions.py   sums as BLAS matrix-vector products, a short row's max through a transposed copy
    softmax.py      softmax and log-softmax with those reductions; log-softmax in one array
    layernorm.py    layer norm and its backward in two (..., C) arrays instead of seven
    linear.py       the bias gradient as one BLAS sum; a big weight's gradient added in blocks
    activations.py  float32 GELU: Phi interpolated in a table, its derivative computed in place,
                    a cache-sized block at a time
    attention.py    attention over the batch in cache-sized pieces; big weights recomputed in the backward
    optim.py        AdamW on one flat buffer, in cache-sized in-place pieces; clip_grad_norm on it

What each buys is measured in docs/performance.md.

The switch, one flag for the whole process: `enabled` is True unless the environment sets
SCRATCHFORMER_REFERENCE to anything but "0" or "" (read once, at import; forked workers
inherit the flag).
`use_reference()` / `use_reference(False)` flips it in a running process, and
`with reference():` runs a block in the reference lane. An optimiser takes its lane when it is
built (the flat buffer is a layout of the parameters), an op at each call. A run is
reproducible bit for bit within a lane; the two lanes differ by float rounding.
"""

from __future__ import annotations

import contextlib
import os

__all__ = ["enabled", "reference", "use_reference"]

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
