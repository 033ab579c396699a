"""Activations: ReLU, exact GELU (erf) and the tanh approximation, with their backwards.

NumPy has no `erf`, so `erf` here is a piecewise polynomial: on each of twelve intervals of
width 0.5 covering [0, 6) it is the Chebyshev interpolant of `math.erf`, computed once at
import (no magic constants); beyond 6, erf is 1 to double precision. The degree follows the
dtype: 14 in float64 (worst error below 1e-14, tested), 6 in float32 (below 1e-7, float32's
own rounding), which makes the float32 erf twice as fast.
"""

from __future__ import annotations

import math

import numpy as np

# ---------------------------------------------------------------------------------------------
# erf
_ERF_WIDTH = 0.5
_ERF_PIECES = 12  # covers [0, 6)
_ERF_DEGREE = {np.dtype(np.float64): 14}
_ERF_DEGREE_LOW = 6  # float32 and smaller


def _erf_table(degree: int) -> np.ndarray:
    """(degree + 1, pieces): power-series coefficients in u = (t - centre) / half_width."""
    half = _ERF_WIDTH / 2
    table = np.empty((_ERF_PIECES, degree + 1))
    for i in range(_ERF_PIECES):
        centre = (i + 0.5) * _ERF_WIDTH
        cheb = np.polynomial.chebyshev.Chebyshev.interpolate(
            lambda u, c=centre: np.array([math.erf(c + half * v) for v in np.atleast_1d(u)]), degree
        )
        table[i] = np.polynomial.chebyshev.cheb2poly(cheb.coef)
    return np.ascontiguousarray(table.T)


_ERF_TABLES: dict[np.dtype, np.ndarray] = {}


def erf(x: np.ndarray) -> np.ndarray:
    """Error function, elementwise, computed in x's float dtype (any shape)."""
    x = np.asarray(x)
    if x.dtype not in _ERF_TABLES:
        _ERF_TABLES[x.dtype] = _erf_table(_ERF_DEGREE.get(x.dtype, _ERF_DEGREE_LOW)).astype(x.dtype)
    table = _ERF_TABLES[x.dtype]
    degree = table.shape[0] - 1
    t = np.abs(x)
    start = np.minimum(np.floor(t * (1 / _ERF_WIDTH)), _ERF_PIECES - 1)  # piece index, as a float
    piece = start.astype(np.intp)
    u = t * (2 / _ERF_WIDTH) - (2 * start + 1)  # (t - centre) / half_width, in [-1, 1]
    y = table[degree].take(piece)
    for k in range(degree - 1, -1, -1):  # Horner, one coefficient row per step
        y *= u
        y += table[k].take(piece)
    y = np.where(t >= _ERF_PIECES * _ERF_WIDTH, 1, y).astype(x.dtype, copy=False)
    return np.copysign(y, x)


# ---------------------------------------------------------------------------------------------
# Each activation comes as a pair for layers: `*_keep(x) -> (y, cache)` and
# `*_from_cache(dy, cache) -> dx`, so a backward reuses what its forward computed (GELU's erf
# is the expensive part); `*_forward(x)` / `*_backward(dy, x)` are the plain functional forms.

# ReLU: y = max(x, 0)
def relu_keep(x: np.ndarray):
    return np.maximum(x, 0), x


def relu_from_cache(dy: np.ndarray, x: np.ndarray) -> np.ndarray:
    # dy/dx = 1 where x > 0, else 0
    return dy * (x > 0)


# GELU, exact: y = x * Phi(x),  Phi(x) = (1 + erf(x / sqrt 2)) / 2
_INV_SQRT2 = 1 / math.sqrt(2)
_INV_SQRT_2PI = 1 / math.sqrt(2 * math.pi)


def normal_cdf(x: np.ndarray) -> np.ndarray:
    """Phi(x) = (1 + erf(x / sqrt 2)) / 2, elementwise, in x's dtype.

    float64 uses `erf` (error < 1e-14). Lower precisions interpolate linearly in a table of
    Phi on [-9, 9] with step 1/512, built once from `math.erf` (error < 2e-7, float32's own
    resolution): five times faster than the polynomial, which made GELU a third of a step.
    """
    if x.dtype == np.float64:
        return 0.5 * (1 + erf(x * _INV_SQRT2))
    values, slopes = _cdf_table(x.dtype)
    s = x * _CDF_STEPS  # position on the grid, in steps from 0 (kept small: exact fractions)
    np.clip(s, -_CDF_HALF, _CDF_HALF - 0.01, out=s)
    below = np.floor(s)
    s -= below  # fraction of the step, in [0, 1)
    i = below.astype(np.int32)
    i += _CDF_HALF
    y = values.take(i)
    d = slopes.take(i)
    d *= s
    y += d
    return y


_CDF_STEPS, _CDF_HALF = 512, 512 * 9  # 512 steps per unit, over [-9, 9]
_CDF_TABLES: dict[np.dtype, tuple[np.ndarray, np.ndarray]] = {}


def _cdf_table(dtype) -> tuple[np.ndarray, np.ndarray]:
    if dtype not in _CDF_TABLES:
        grid = np.arange(-_CDF_HALF, _CDF_HALF + 1) / _CDF_STEPS
        phi = np.array([0.5 * (1 + math.erf(v * _INV_SQRT2)) for v in grid])
        _CDF_TABLES[dtype] = (phi[:-1].astype(dtype), np.diff(phi).astype(dtype))
    return _CDF_TABLES[dtype]


def gelu_keep(x: np.ndarray):
    cdf = normal_cdf(x)
    return x * cdf, (x, cdf)


def gelu_from_cache(dy: np.ndarray, cache) -> np.ndarray:
    # dy/dx = Phi(x) + x * phi(x),  phi(x) = exp(-x^2 / 2) / sqrt(2 pi)
    x, cdf = cache
    pdf = np.exp(-0.5 * x * x) * _INV_SQRT_2PI
    return dy * (cdf + x * pdf)


# GELU, tanh approximation (GPT-2): y = x/2 * (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
_GELU_C = math.sqrt(2 / math.pi)


def gelu_tanh_keep(x: np.ndarray):
    th = np.tanh(_GELU_C * (x + 0.044715 * x**3))
    return 0.5 * x * (1 + th), (x, th)


def gelu_tanh_from_cache(dy: np.ndarray, cache) -> np.ndarray:
    # dy/dx = (1 + tanh u)/2 + x/2 * (1 - tanh^2 u) * du/dx,  du/dx = sqrt(2/pi) (1 + 3*0.044715 x^2)
    x, th = cache
    du = _GELU_C * (1 + 3 * 0.044715 * x * x)
    return dy * (0.5 * (1 + th) + 0.5 * x * (1 - th * th) * du)


ACTIVATIONS = {
    "relu": (relu_keep, relu_from_cache),
    "gelu": (gelu_keep, gelu_from_cache),
    "gelu_tanh": (gelu_tanh_keep, gelu_tanh_from_cache),
}


# The plain functional forms (the backward recomputes what the forward would have kept).
def relu_forward(x: np.ndarray) -> np.ndarray:
    return relu_keep(x)[0]


def relu_backward(dy: np.ndarray, x: np.ndarray) -> np.ndarray:
    return relu_from_cache(dy, x)


def gelu_forward(x: np.ndarray) -> np.ndarray:
    return gelu_keep(x)[0]


def gelu_backward(dy: np.ndarray, x: np.ndarray) -> np.ndarray:
    return gelu_from_cache(dy, gelu_keep(x)[1])


def gelu_tanh_forward(x: np.ndarray) -> np.ndarray:
    return gelu_tanh_keep(x)[0]


def gelu_tanh_backward(dy: np.ndarray, x: np.ndarray) -> np.ndarray:
    return gelu_tanh_from_cache(dy, gelu_tanh_keep(x)[1])
