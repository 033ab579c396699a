"""Layer normalisation over the last axis, with its closed-form backward.

Each op below is its formula; `@fast.lane` runs its faster form in the fast lane
(`scratchformer/fast/layernorm.py`: the same arithmetic in place, BLAS sums), checks a direct
call's arguments with `check=`, and records the backward as the derivative of the forward
above it. The lane is chosen in `fast.lane` alone."""

from __future__ import annotations

import numpy as np

from scratchformer import fast
from scratchformer.checks import check_eps
from scratchformer.fast import layernorm as fast_layernorm
from scratchformer.ops.linear import check_affine


def _check_forward(x, weight, bias, eps=1e-5):
    check_affine(
        "layernorm_forward",
        x,
        weight,
        bias,
        lambda: weight.shape == x.shape[-1:] and (bias is None or bias.shape == weight.shape),
        weight_ndim=1,
    )
    check_eps("eps", eps)


@fast.lane(fast_layernorm, check=_check_forward)
def layernorm_forward(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None, eps: float = 1e-5):
    """y = (x - mean) * rstd * weight + bias, with rstd = 1 / sqrt(var + eps) over the last axis.

    x: (..., C); weight: (C,); bias: (C,) or None (no shift, as nanoGPT's bias=False).
    Returns (y, xhat, rstd) -- xhat (..., C) and rstd (..., 1) are the cache the backward needs.
    """
    C = x.shape[-1]
    xc = x - x.sum(axis=-1, keepdims=True) / C  # centred: (..., C)
    var = (xc * xc).sum(axis=-1, keepdims=True) / C  # biased variance, as PyTorch: (..., 1)
    rstd = 1.0 / np.sqrt(var + eps)
    xhat = xc * rstd
    y = xhat * weight if bias is None else xhat * weight + bias
    return y, xhat, rstd


@fast.lane(fast_layernorm, derivative_of=layernorm_forward, grads=("x", "weight", "bias"))
def layernorm_backward(dy, xhat, rstd, weight):
    """Returns (dx, dweight, dbias).

    With g = dy * weight:  dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
    (the mean and variance both depend on x, hence the two subtracted means).
    """
    C = xhat.shape[-1]
    g = dy * weight
    dx = rstd * (g - g.sum(axis=-1, keepdims=True) / C - xhat * ((g * xhat).sum(axis=-1, keepdims=True) / C))
    dweight = (dy * xhat).reshape(-1, C).sum(axis=0)  # summed over every position
    dbias = dy.reshape(-1, C).sum(axis=0)
    return dx, dweight, dbias
