"""Fast lane of `ops/layernorm.py`: the same formulas in place, in two (..., C) arrays instead
of seven, with the sums of `fast/reductions.py`. Bit-identical to the reference given the same
sums; the BLAS sums round differently from `x.sum`.
"""

from __future__ import annotations

import numpy as np

from scratchformer.fast.reductions import sum_last, sum_leading


def layernorm_forward(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None, eps: float = 1e-5):
    # mean = x.mean(-1); xc = x - mean; var = (xc * xc).mean(-1); rstd = 1 / sqrt(var + eps)
    # xhat = xc * rstd; y = xhat * weight + bias -- the same arithmetic with two (..., C) arrays
    C = x.shape[-1]
    mean = sum_last(x)
    mean /= C  # what np.mean does, without its Python overhead
    xhat = x - mean  # xc for now
    y = np.multiply(xhat, xhat)  # scratch for xc^2, then the output
    var = sum_last(y)
    var /= C  # biased variance, as PyTorch
    var += eps
    rstd = np.sqrt(var, out=var)
    np.divide(1.0, rstd, out=rstd)
    xhat *= rstd
    np.multiply(xhat, weight, out=y)
    if bias is not None:
        y += bias
    return y, xhat, rstd


def layernorm_backward(dy, xhat, rstd, weight):
    # the same arithmetic as the formula above, in two (..., C) arrays instead of seven
    C = xhat.shape[-1]
    scratch = np.multiply(dy, xhat)
    dweight = sum_leading(scratch)
    dbias = sum_leading(dy)
    dx = np.multiply(dy, weight)  # g
    np.multiply(dx, xhat, out=scratch)
    mean_gx = sum_last(scratch)
    mean_gx /= C
    mean_g = sum_last(dx)
    mean_g /= C
    dx -= mean_g
    np.multiply(xhat, mean_gx, out=scratch)
    dx -= scratch
    dx *= rstd
    return dx, dweight, dbias
