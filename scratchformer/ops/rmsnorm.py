"""Root-mean-square normalisation over the last axis (Zhang & Sennrich 2019), with its backward.

LayerNorm without the mean: no centring and no shift, only a rescale by the root mean square.
Llama, T5 and Mistral use it.
"""

from __future__ import annotations

import numpy as np

from scratchformer import fast
from scratchformer.checks import DOOR, check_eps, op_fits, op_float

__all__ = ["rmsnorm_forward", "rmsnorm_backward"]


@fast.lane()
def rmsnorm_forward(x: np.ndarray, weight: np.ndarray, eps: float = 1e-6):
    """y = x * rstd * weight, with rstd = 1 / sqrt(mean(x^2) + eps) over the last axis.

    x: (..., C); weight: (C,). Returns (y, xhat, rstd): xhat = x * rstd (..., C) and
    rstd (..., 1) are the cache the backward needs.
    """
    if not DOOR.inside:  # a direct call: check the arguments (a layer's call was checked at its door)
        op_float("rmsnorm_forward", "x", x)
        op_float("rmsnorm_forward", "weight", weight, ndim=1)
        op_fits("rmsnorm_forward", weight.shape == x.shape[-1:], x=x, weight=weight)
        check_eps("eps", eps)
    rstd = 1.0 / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps)  # (..., 1)
    xhat = x * rstd  # (..., C)
    return xhat * weight, xhat, rstd


@fast.lane(derivative_of=rmsnorm_forward, grads=("x", "weight"))
def rmsnorm_backward(dy: np.ndarray, xhat: np.ndarray, rstd: np.ndarray, weight: np.ndarray):
    """Returns (dx, dweight).

    With g = dy * weight: rstd depends on every x_j through mean(x^2), d rstd / d x_j =
    -rstd^3 x_j / C, so  dx = rstd * (g - xhat * mean(g * xhat)).
    (LayerNorm's formula without the `- mean(g)` term, which came from the centring.)
    """
    C = xhat.shape[-1]
    dweight = (dy * xhat).reshape(-1, C).sum(axis=0)  # (C,): y = xhat * weight
    g = dy * weight
    dx = rstd * (g - xhat * (g * xhat).mean(axis=-1, keepdims=True))
    return dx, dweight
