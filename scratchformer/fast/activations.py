"""Fast lane of `ops/activations.py`: exact GELU in float32 (and smaller) with Phi from a
table, and its derivative computed in place. float64 has nothing faster than the reference's
erf polynomial (`ops/numerics.py`): `serves` says which inputs come here (`fast.lane` asks it).

Phi for float32 (and other low precisions): linear interpolation in a table.
    Phi(x) = (1 + erf(x / sqrt 2)) / 2 sampled on [-9, 9] with step 1/512 from `math.erf`;
    between grid points Phi is a straight line, error < 2e-7 (float32's resolution). Five
    times faster than the erf polynomial, which made GELU a third of a training step.

Non-finite input: NaN gives NaN (its table index is clipped into the table, and the NaN
fraction of the step makes the result NaN); +-inf gives Phi = 1 or 0.

`gelu_with_grad` is the reference's formula written in place, a block of elements at a time:
the same arithmetic in the same order, so bit-identical to the reference given the same Phi.
"""

from __future__ import annotations

import math

import numpy as np

INV_SQRT2 = 1 / math.sqrt(2)
INV_SQRT_2PI = 1 / math.sqrt(2 * math.pi)
CDF_STEPS = 512  # grid points per unit of x
CDF_HALF = 512 * 9  # grid points on each side of 0: the table covers [-9, 9]
BLOCK = 1 << 16  # elements gelu_with_grad computes at a time

_CDF_TABLES: dict[np.dtype, tuple[np.ndarray, np.ndarray]] = {}


def _cdf_table(dtype) -> tuple[np.ndarray, np.ndarray]:
    """(values, slopes), each (2 * CDF_HALF,): Phi at each grid point and the rise to the next."""
    if dtype not in _CDF_TABLES:
        grid = np.arange(-CDF_HALF, CDF_HALF + 1) / CDF_STEPS
        phi = np.array([0.5 * (1 + math.erf(v * INV_SQRT2)) for v in grid])
        _CDF_TABLES[dtype] = (phi[:-1].astype(dtype), np.diff(phi).astype(dtype))
    return _CDF_TABLES[dtype]


def normal_cdf(x: np.ndarray) -> np.ndarray:
    """Phi(x) = (1 + erf(x / sqrt 2)) / 2, elementwise, in x's dtype (float32 or smaller)."""
    values, slopes = _cdf_table(x.dtype)
    s = x * CDF_STEPS  # position on the grid, in steps from 0 (kept small: exact fractions)
    np.clip(s, -CDF_HALF, CDF_HALF - 0.01, out=s)  # NaN stays NaN
    below = np.floor(s)
    s -= below  # fraction of the step, in [0, 1); NaN for NaN
    below += CDF_HALF  # the table index, still a float (an integer below 2^24: exact)
    with np.errstate(invalid="ignore"):  # NaN cast to int gives some integer ...
        i = below.astype(np.intp)  # intp, not int32: take() would convert int32 indices (3x slower)
    y = values.take(i, mode="clip")  # ... which mode="clip" keeps inside the table
    d = slopes.take(i, mode="clip", out=below)  # below's buffer is free again
    d *= s  # NaN for NaN input, so y is NaN too: NaN in, NaN out
    y += d
    return y


def serves(x: np.ndarray) -> bool:
    """True for the inputs this module's GELU takes: float32 and smaller (not float64)."""
    return x.dtype != np.float64


def gelu_forward(x: np.ndarray) -> np.ndarray:
    """x * Phi(x), computed BLOCK elements at a time (as `gelu_with_grad`): Phi's passes over a
    block stay in the core's cache, where one pass over a whole feed-forward activation
    (inference on a batch: megabytes) would go to memory ten times."""
    flat = x.reshape(-1)
    y = np.empty(x.shape, dtype=x.dtype)
    y_flat = y.reshape(-1)
    for start in range(0, flat.size, BLOCK):
        block = slice(start, start + BLOCK)
        np.multiply(flat[block], normal_cdf(flat[block]), out=y_flat[block])
    return y


def gelu_with_grad(x: np.ndarray):
    """(y, dy/dx), each in an array shaped as x, computed BLOCK elements at a time: the dozen
    passes over a block stay in the core's cache, and no temporary is the size of x
    (docs/performance.md, "The fast lane")."""
    flat = x.reshape(-1)
    y, grad = np.empty(x.shape, dtype=x.dtype), np.empty(x.shape, dtype=x.dtype)
    y_flat, grad_flat = y.reshape(-1), grad.reshape(-1)
    for start in range(0, flat.size, BLOCK):
        block = slice(start, start + BLOCK)
        _gelu_with_grad_block(flat[block], y_flat[block], grad_flat[block])
    return y, grad


def _gelu_with_grad_block(x, y, grad) -> None:
    # dy/dx = Phi(x) + x * phi(x),  phi(x) = exp(-x^2 / 2) / sqrt(2 pi)
    cdf = normal_cdf(x)
    np.multiply(x, x, out=grad)  # in place in one array (same arithmetic, same order)
    grad *= -0.5
    np.exp(grad, out=grad)  # exp(-x^2 / 2)
    grad *= INV_SQRT_2PI  # phi(x)
    grad *= x
    grad += cdf
    np.multiply(x, cdf, out=y)
