"""Affine map y = x W^T + b with PyTorch's weight layout (out_features, in_features).

Each op is its formula, dispatched by `@fast.lane` (where the lane is chosen and the record
taken); `linear_backward` and `linear_backward_into` have faster forms
(`scratchformer/fast/linear.py`: the bias gradient as a BLAS sum; a big weight's gradient added
in blocks of rows), and declare `linear_forward` as what they differentiate."""

from __future__ import annotations

import numpy as np

from scratchformer import fast
from scratchformer.checks import DOOR, check_bool, op_fits, op_float
from scratchformer.fast import linear as fast_linear


def check_affine(op: str, x, weight, bias, fits, weight_ndim: int = 2) -> None:
    """The checks of an op's (x, weight, bias or None) arguments: float arrays, weight of
    `weight_ndim` axes, bias of one, then `fits()` (the op's own shape rule, asked once they
    are arrays) true."""
    op_float(op, "x", x)
    op_float(op, "weight", weight, ndim=weight_ndim)
    if bias is not None:
        op_float(op, "bias", bias, ndim=1)
    op_fits(op, fits(), x=x, weight=weight, bias=bias)


@fast.lane()
def linear_forward(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    """x: (..., in); weight: (out, in); bias: (out,) or None -> (..., out).

    Leading axes are flattened so the product is one 2-D GEMM."""
    if not DOOR.inside:  # a direct call: check the arguments (a layer's call was checked at its door)
        check_affine(
            "linear_forward",
            x,
            weight,
            bias,
            lambda: x.shape[-1] == weight.shape[1] and (bias is None or bias.shape == weight.shape[:1]),
        )
    y = x.reshape(-1, x.shape[-1]) @ weight.T
    if bias is not None:
        y += bias
    return y.reshape(*x.shape[:-1], weight.shape[0])


def _check_backward(dy, x, weight, need_bias=True):
    op_float("linear_backward", "dy", dy)
    op_float("linear_backward", "x", x)
    op_float("linear_backward", "weight", weight, ndim=2)
    check_bool("need_bias", need_bias)
    op_fits(
        "linear_backward",
        x.shape[-1] == weight.shape[1] and dy.shape == (*x.shape[:-1], weight.shape[0]),
        dy=dy,
        x=x,
        weight=weight,
    )


@fast.lane(fast_linear, check=_check_backward, derivative_of=linear_forward, grads=("x", "weight", "bias"))
def linear_backward(dy: np.ndarray, x: np.ndarray, weight: np.ndarray, need_bias: bool = True):
    """Returns (dx, dweight, dbias): dx = dy W, dW = dy^T x, db = sum of dy over rows."""
    dy2 = dy.reshape(-1, dy.shape[-1])  # (N, out)
    x2 = x.reshape(-1, x.shape[-1])  # (N, in)
    dx = (dy2 @ weight).reshape(x.shape)
    dweight = dy2.T @ x2
    dbias = dy2.sum(axis=0) if need_bias else None
    return dx, dweight, dbias


@fast.lane(
    fast_linear,
    derivative_of=linear_forward,
    grads=("x",),
    into={"weight": "weight_grad", "bias": "bias_grad"},
)
def linear_backward_into(
    dy: np.ndarray,
    x: np.ndarray,
    weight: np.ndarray,
    weight_grad: np.ndarray,
    bias_grad: np.ndarray | None = None,
) -> np.ndarray:
    """`linear_backward`, with dW added into weight_grad (out, in) and db into bias_grad (out,)
    (None: no bias), as a layer accumulates them. Returns dx (..., in)."""
    dx, dweight, dbias = linear_backward(dy, x, weight, bias_grad is not None)
    weight_grad += dweight
    if bias_grad is not None:
        bias_grad += dbias
    return dx
