"""The numerics behind exact GELU: `erf` and the normal CDF `Phi`, in NumPy.

NumPy has no erf, so we build one from `math.erf` (scalar, exact to double precision).

erf (float64 and any dtype): a piecewise polynomial.
    On each of the twelve intervals [0, 0.5), [0.5, 1), ..., [5.5, 6) we interpolate erf at
    Chebyshev points (`Chebyshev.interpolate`, computed once at import: no magic constants)
    and turn the result into power-series coefficients in u = (t - centre) / half_width,
    u in [-1, 1], evaluated by Horner's rule. Beyond 6, erf is 1 to double precision, and
    erf(-t) = -erf(t). The degree follows the dtype: 14 in float64 (worst error below 1e-14,
    tested), 6 in float32 (below 1e-7, float32's own rounding).

Phi(x) = (1 + erf(x / sqrt 2)) / 2. The fast lane interpolates float32 Phi in a table instead
(`scratchformer/fast/activations.py`).

Non-finite input: NaN gives NaN; +-inf gives erf = +-1, Phi = 1 or 0.
"""

from __future__ import annotations

import math

import numpy as np

# -- erf: piecewise Chebyshev polynomials ---------------------------------------------------------
ERF_WIDTH = 0.5  # width of each interval
ERF_PIECES = 12  # intervals covering [0, 6); erf(t >= 6) = 1 in double precision
ERF_DEGREE = {np.dtype(np.float64): 14}
ERF_DEGREE_LOW = 6  # float32 and smaller

_ERF_TABLES: dict[np.dtype, np.ndarray] = {}


def _erf_table(degree: int) -> np.ndarray:
    """(degree + 1, pieces): power-series coefficients in u = (t - centre) / half_width."""
    half = ERF_WIDTH / 2
    table = np.empty((ERF_PIECES, degree + 1))
    for i in range(ERF_PIECES):
        centre = (i + 0.5) * ERF_WIDTH
        cheb = np.polynomial.chebyshev.Chebyshev.interpolate(
            lambda u, c=centre: np.array([math.erf(c + half * v) for v in np.atleast_1d(u)]), degree
        )
        table[i] = np.polynomial.chebyshev.cheb2poly(cheb.coef)
    return np.ascontiguousarray(table.T)


def erf(x: np.ndarray) -> np.ndarray:
    """Error function, elementwise, computed in x's float dtype (any shape)."""
    x = np.asarray(x)
    if x.dtype not in _ERF_TABLES:
        _ERF_TABLES[x.dtype] = _erf_table(ERF_DEGREE.get(x.dtype, ERF_DEGREE_LOW)).astype(x.dtype)
    table = _ERF_TABLES[x.dtype]
    degree = table.shape[0] - 1
    t = np.abs(x)
    # piece index as a float; fmin (not minimum) maps NaN to the last piece, a valid index
    start = np.fmin(np.floor(t * (1 / ERF_WIDTH)), ERF_PIECES - 1)
    piece = start.astype(np.intp)
    u = t * (2 / ERF_WIDTH) - (2 * start + 1)  # (t - centre) / half_width, in [-1, 1]; NaN stays NaN
    y = table[degree].take(piece)
    for k in range(degree - 1, -1, -1):  # Horner, one coefficient row per step
        y *= u
        y += table[k].take(piece)
    y = np.where(t >= ERF_PIECES * ERF_WIDTH, 1, y).astype(x.dtype, copy=False)
    return np.copysign(y, x)


# -- Phi: the standard normal CDF ----------------------------------------------------------------
INV_SQRT2 = 1 / math.sqrt(2)


def normal_cdf(x: np.ndarray) -> np.ndarray:
    """Phi(x) = (1 + erf(x / sqrt 2)) / 2, elementwise, in x's dtype."""
    return 0.5 * (1 + erf(x * INV_SQRT2))
