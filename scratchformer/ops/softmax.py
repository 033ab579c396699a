"""Softmax and log-softmax over the last axis, numerically stable, with backwards."""

from __future__ import annotations

import numpy as np


def softmax_forward(x: np.ndarray) -> np.ndarray:
    """y = exp(x - max x) / sum exp(x - max x) over the last axis. Any shape (..., N)."""
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    e /= e.sum(axis=-1, keepdims=True)
    return e


def softmax_backward(dy: np.ndarray, y: np.ndarray) -> np.ndarray:
    # dx_i = y_i * (dy_i - sum_j dy_j y_j)   (the Jacobian diag(y) - y y^T applied to dy)
    return y * (dy - (dy * y).sum(axis=-1, keepdims=True))


def log_softmax_forward(x: np.ndarray) -> np.ndarray:
    """y = x - logsumexp(x) over the last axis. Any shape (..., N)."""
    shifted = x - x.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def log_softmax_backward(dy: np.ndarray, y: np.ndarray) -> np.ndarray:
    # dx_i = dy_i - softmax_i * sum_j dy_j,  with softmax = exp(y)
    return dy - np.exp(y) * dy.sum(axis=-1, keepdims=True)
