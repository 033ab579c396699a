"""Softmax and log-softmax over the last axis, numerically stable, with backwards.

Each op below is its formula; `@fast.lane` runs its faster form in the fast lane
(`scratchformer/fast/softmax.py`: the same formulas with BLAS sums), checks a direct call's
arguments with the `_check_*` function above it, and records each backward as the derivative of
its forward. The lane is chosen in `fast.lane` alone. `masked_softmax` (attention's weights, a
row with no key allowed at 0) has no faster form: the fast lane's attention fuses its own."""

from __future__ import annotations

import numpy as np

from scratchformer import fast
from scratchformer.checks import op_fits, op_float
from scratchformer.fast import softmax as fast_softmax


def _check_forward(fn: str):
    def check(x):
        op_float(fn, "x", x)
        op_fits(fn, x.shape[-1] > 0, x=x)

    return check


def _check_backward(fn: str):
    def check(dy, y):
        op_float(fn, "dy", dy)
        op_float(fn, "y", y)
        op_fits(fn, dy.shape == y.shape, dy=dy, y=y)

    return check


@fast.lane(fast_softmax, check=_check_forward("softmax_forward"))
def softmax_forward(x: np.ndarray) -> np.ndarray:
    """y = exp(x - max x) / sum exp(x - max x) over the last axis. Any shape (..., N)."""
    e = np.exp(x - x.max(axis=-1, keepdims=True))  # the shift leaves y unchanged and exp finite
    return e / e.sum(axis=-1, keepdims=True)


@fast.lane()
def masked_softmax(x: np.ndarray, allowed: np.ndarray | None) -> np.ndarray:
    """softmax over the last axis of x where `allowed` (bool, broadcastable to x; None: every
    entry) is True; the others get weight exactly 0, and a row with none allowed gets zeros
    (never 0 / 0). Attention's weights (ops/attention.py): x the scores, allowed the mask."""
    if allowed is not None:
        x = np.where(allowed, x, -np.inf)  # a hidden entry gets exp(-inf) = 0
    row_max = x.max(axis=-1, keepdims=True)
    row_max[np.isneginf(row_max)] = 0  # a row with nothing allowed: exp(-inf - 0) = 0, not inf - inf
    e = np.exp(x - row_max)
    denom = e.sum(axis=-1, keepdims=True)
    return e / np.where(denom == 0, 1, denom)  # ... and its weights 0, not 0 / 0


@fast.lane(
    fast_softmax,
    check=_check_backward("softmax_backward"),
    derivative_of=(softmax_forward, masked_softmax),
    grads=("x",),
)
def softmax_backward(dy: np.ndarray, y: np.ndarray) -> np.ndarray:
    # dx_i = y_i * (dy_i - sum_j dy_j y_j)   (the Jacobian diag(y) - y y^T applied to dy)
    return y * (dy - (dy * y).sum(axis=-1, keepdims=True))


@fast.lane(fast_softmax, check=_check_forward("log_softmax_forward"))
def log_softmax_forward(x: np.ndarray) -> np.ndarray:
    """y = x - logsumexp(x) over the last axis. Any shape (..., N)."""
    shifted = x - x.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


@fast.lane(
    fast_softmax,
    check=_check_backward("log_softmax_backward"),
    derivative_of=log_softmax_forward,
    grads=("x",),
)
def log_softmax_backward(dy: np.ndarray, y: np.ndarray) -> np.ndarray:
    # dx_i = dy_i - softmax_i * sum_j dy_j,  with softmax = exp(y)
    return dy - np.exp(y) * dy.sum(axis=-1, keepdims=True)
