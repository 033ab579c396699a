"""Fast lane of `ops/linear.py`: the bias gradient as one BLAS sum (`fast/reductions.py`)."""

from __future__ import annotations

import numpy as np

from scratchformer.fast.reductions import sum_leading


def linear_backward(dy: np.ndarray, x: np.ndarray, weight: np.ndarray, need_bias: bool = True):
    dy2 = dy.reshape(-1, dy.shape[-1])  # (N, out)
    x2 = x.reshape(-1, x.shape[-1])  # (N, in)
    dx = (dy2 @ weight).reshape(x.shape)
    dweight = dy2.T @ x2
    dbias = sum_leading(dy2) if need_bias else None
    return dx, dweight, dbias
