"""Layer normalisation over the last axis, with its closed-form backward."""

from __future__ import annotations

import numpy as np


def layernorm_forward(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None, eps: float = 1e-5):
    """y = (x - mean) * rstd * weight + bias, with rstd = 1 / sqrt(var + eps) over the last axis.

    x: (..., C); weight: (C,); bias: (C,) or None (no shift, as nanoGPT's bias=False).
    Returns (y, xhat, rstd) -- xhat (..., C) and rstd (..., 1) are the cache the backward needs.
    """
    mean = x.mean(axis=-1, keepdims=True)
    xc = x - mean
    var = (xc * xc).mean(axis=-1, keepdims=True)  # biased variance, as PyTorch
    rstd = 1.0 / np.sqrt(var + eps)
    xhat = xc * rstd
    y = xhat * weight
    if bias is not None:
        y += bias
    return y, xhat, rstd


def layernorm_backward(dy, xhat, rstd, weight):
    """Returns (dx, dweight, dbias).

    With g = dy * weight:  dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
    (the mean and variance both depend on x, hence the two subtracted means).
    """
    C = xhat.shape[-1]
    dweight = (dy * xhat).reshape(-1, C).sum(axis=0)
    dbias = dy.reshape(-1, C).sum(axis=0)
    g = dy * weight
    dx = rstd * (g - g.mean(axis=-1, keepdims=True) - xhat * (g * xhat).mean(axis=-1, keepdims=True))
    return dx, dweight, dbias
