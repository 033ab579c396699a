"""Softmax and log-softmax over the last axis, numerically stable, with backwards.

Fast lane: `scratchformer/fast/softmax.py` (the same formulas with BLAS sums)."""

from __future__ import annotations

import numpy as np

from scratchformer import fast
from scratchformer.checks import DOOR, op_fits, op_float
from scratchformer.fast import softmax as fast_softmax


def softmax_forward(x: np.ndarray) -> np.ndarray:
    """y = exp(x - max x) / sum exp(x - max x) over the last axis. Any shape (..., N)."""
    if not DOOR.inside:  # a direct call: check the arguments (a layer's call was checked at its door)
        op_float("softmax_forward", "x", x)
        op_fits("softmax_forward", x.shape[-1] > 0, x=x)
    if fast.enabled:
        return fast_softmax.softmax_forward(x)
    e = np.exp(x - x.max(axis=-1, keepdims=True))  # the shift leaves y unchanged and exp finite
    return e / e.sum(axis=-1, keepdims=True)


def softmax_backward(dy: np.ndarray, y: np.ndarray) -> np.ndarray:
    # dx_i = y_i * (dy_i - sum_j dy_j y_j)   (the Jacobian diag(y) - y y^T applied to dy)
    if not DOOR.inside:  # a direct call: check the arguments (a layer's call was checked at its door)
        op_float("softmax_backward", "dy", dy)
        op_float("softmax_backward", "y", y)
        op_fits("softmax_backward", dy.shape == y.shape, dy=dy, y=y)
    if fast.enabled:
        return fast_softmax.softmax_backward(dy, y)
    return y * (dy - (dy * y).sum(axis=-1, keepdims=True))


def log_softmax_forward(x: np.ndarray) -> np.ndarray:
    """y = x - logsumexp(x) over the last axis. Any shape (..., N)."""
    if not DOOR.inside:  # a direct call: check the arguments (a layer's call was checked at its door)
        op_float("log_softmax_forward", "x", x)
        op_fits("log_softmax_forward", x.shape[-1] > 0, x=x)
    if fast.enabled:
        return fast_softmax.log_softmax_forward(x)
    shifted = x - x.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def log_softmax_backward(dy: np.ndarray, y: np.ndarray) -> np.ndarray:
    # dx_i = dy_i - softmax_i * sum_j dy_j,  with softmax = exp(y)
    if not DOOR.inside:  # a direct call: check the arguments (a layer's call was checked at its door)
        op_float("log_softmax_backward", "dy", dy)
        op_float("log_softmax_backward", "y", y)
        op_fits("log_softmax_backward", dy.shape == y.shape, dy=dy, y=y)
    if fast.enabled:
        return fast_softmax.log_softmax_backward(dy, y)
    return dy - np.exp(y) * dy.sum(axis=-1, keepdims=True)
