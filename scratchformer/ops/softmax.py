"""Softmax and log-softmax over the last axis, numerically stable, with backwards."""

from __future__ import annotations

import numpy as np

from scratchformer.ops.reductions import max_last, sum_last


def softmax_forward(x: np.ndarray) -> np.ndarray:
    """y = exp(x - max x) / sum exp(x - max x) over the last axis. Any shape (..., N)."""
    e = np.exp(x - max_last(x))
    e /= sum_last(e)
    return e


def softmax_backward(dy: np.ndarray, y: np.ndarray) -> np.ndarray:
    # dx_i = y_i * (dy_i - sum_j dy_j y_j)   (the Jacobian diag(y) - y y^T applied to dy)
    return y * (dy - sum_last(dy * y))


def log_softmax_forward(x: np.ndarray) -> np.ndarray:
    """y = x - logsumexp(x) over the last axis. Any shape (..., N)."""
    shifted = x - max_last(x)
    return shifted - np.log(sum_last(np.exp(shifted)))


def log_softmax_backward(dy: np.ndarray, y: np.ndarray) -> np.ndarray:
    # dx_i = dy_i - softmax_i * sum_j dy_j,  with softmax = exp(y)
    return dy - np.exp(y) * sum_last(dy)
