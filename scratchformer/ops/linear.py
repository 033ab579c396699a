"""Affine map y = x W^T + b with PyTorch's weight layout (out_features, in_features).

Fast lane: `scratchformer/fast/linear.py` (the bias gradient as a BLAS sum; a big weight's
gradient added in blocks of rows)."""

from __future__ import annotations

import numpy as np

from scratchformer import fast
from scratchformer.fast import linear as fast_linear


def linear_forward(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    """x: (..., in); weight: (out, in); bias: (out,) or None -> (..., out).

    Leading axes are flattened so the product is one 2-D GEMM."""
    y = x.reshape(-1, x.shape[-1]) @ weight.T
    if bias is not None:
        y += bias
    return y.reshape(*x.shape[:-1], weight.shape[0])


def linear_backward(dy: np.ndarray, x: np.ndarray, weight: np.ndarray, need_bias: bool = True):
    """Returns (dx, dweight, dbias): dx = dy W, dW = dy^T x, db = sum of dy over rows."""
    if fast.enabled:
        return fast_linear.linear_backward(dy, x, weight, need_bias)
    dy2 = dy.reshape(-1, dy.shape[-1])  # (N, out)
    x2 = x.reshape(-1, x.shape[-1])  # (N, in)
    dx = (dy2 @ weight).reshape(x.shape)
    dweight = dy2.T @ x2
    dbias = dy2.sum(axis=0) if need_bias else None
    return dx, dweight, dbias


def linear_backward_into(dy: np.ndarray, x: np.ndarray, weight: np.ndarray, weight_grad: np.ndarray,
                         bias_grad: np.ndarray | None = None) -> np.ndarray:
    """`linear_backward`, with dW added into weight_grad (out, in) and db into bias_grad (out,)
    (None: no bias), as a layer accumulates them. Returns dx (..., in)."""
    if fast.enabled:
        return fast_linear.linear_backward_into(dy, x, weight, weight_grad, bias_grad)
    dx, dweight, dbias = linear_backward(dy, x, weight, bias_grad is not None)
    weight_grad += dweight
    if bias_grad is not None:
        bias_grad += dbias
    return dx
