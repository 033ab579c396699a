"""Fast lane of `ops/activations.py`: exact GELU in float32 (and smaller) with Phi and phi from
tables, and its derivative computed in place. float64 has nothing faster than the reference's
erf polynomial (`ops/numerics.py`): `serves` says which inputs come here (`fast.lane` asks it).

Phi and phi for float32 (and other low precisions): tables and a Taylor step from the nearest
grid point.
    Phi(x) = (1 + erf(x / sqrt 2)) / 2 and phi(x) = Phi'(x) = exp(-x^2 / 2) / sqrt(2 pi) are
    sampled on [-9, 9] with step h = 1/1024 (from `math.erf` and `math.exp`). For x = x_i + d, x_i
    the nearest grid point (|d| <= h/2), Taylor's series to second order, with phi' = -x phi:
        Phi(x) ~ Phi_i + d phi_i (1 - x d / 2),      phi(x) ~ phi_i (1 - x d)
    (x in place of x_i in the second-order terms changes them by d^3). Error < 2e-7 in Phi
    (float32's resolution) and in phi. Two table reads replace the erf polynomial (five times
    slower) and phi's exp, the GELU derivative's costliest pass.
    Beyond +-9, Phi is 0 or 1 and phi is 0 (the tables' end entries): x * phi(x) stays 0 for
    any finite x, as the reference's exp underflows to 0.

Non-finite input: NaN gives NaN (its table index is clipped into the table, and the NaN
offset d makes the result NaN); +-inf gives Phi = 1 or 0.

`gelu_with_grad` is the reference's formula written in place, a block of elements at a time,
with the tables' Phi and phi: y = x * Phi, dy/dx = Phi + x * phi.
"""

from __future__ import annotations

import math

import numpy as np

GRID_STEPS = 1024  # grid points per unit of x
GRID_HALF = GRID_STEPS * 9  # grid points on each side of 0: the tables cover [-9, 9]
BLOCK = 1 << 16  # elements gelu_forward and gelu_with_grad compute at a time

_TABLES: dict[np.dtype, tuple[np.ndarray, np.ndarray]] = {}


def _tables(dtype) -> tuple[np.ndarray, np.ndarray]:
    """(Phi, phi), each (2 * GRID_HALF + 1,): Phi and its derivative phi at each grid point,
    in `dtype`; the end points hold the limits beyond the grid (Phi 0 and 1, phi 0)."""
    if dtype not in _TABLES:
        grid = np.arange(-GRID_HALF, GRID_HALF + 1) / GRID_STEPS
        cdf = np.array([0.5 * (1 + math.erf(v / math.sqrt(2))) for v in grid])
        pdf = np.array([math.exp(-v * v / 2) / math.sqrt(2 * math.pi) for v in grid])
        cdf[0], cdf[-1], pdf[0], pdf[-1] = 0.0, 1.0, 0.0, 0.0
        _TABLES[dtype] = (cdf.astype(dtype), pdf.astype(dtype))
    return _TABLES[dtype]


def _nearest(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(position, offset, Phi_i, phi_i), each shaped as x: x's position on the grid in steps,
    clipped to the grid (finite for any x but NaN); its offset d from the nearest grid point x_i,
    in steps (0 beyond the grid, NaN for NaN); the tables' entries at x_i."""
    cdf_table, pdf_table = _tables(x.dtype)
    position = x * GRID_STEPS  # exact: a power of 2
    np.clip(position, -GRID_HALF, GRID_HALF, out=position)  # NaN stays NaN
    nearest = np.rint(position)
    offset = position - nearest  # in [-1/2, 1/2]; NaN for NaN
    nearest += GRID_HALF  # the table index, still a float (an integer below 2^24: exact)
    with np.errstate(invalid="ignore"):  # NaN cast to int gives some integer ...
        i = nearest.astype(np.intp)  # intp, not int32: take() would convert int32 indices (3x slower)
    cdf_i = cdf_table.take(i, mode="clip")  # ... which mode="clip" keeps inside the table
    pdf_i = pdf_table.take(i, mode="clip", out=nearest)  # nearest's buffer is free again
    return position, offset, cdf_i, pdf_i


# In steps: d = offset / GRID_STEPS and x d = position * offset / GRID_STEPS^2 (the clipped
# position: 0, not inf * 0, beyond the grid)
def _cdf_from(position, offset, cdf_i, pdf_i, scratch) -> np.ndarray:
    """Phi(x) ~ Phi_i + d phi_i (1 - x d / 2), into cdf_i (returned); scratch: a free array
    shaped as x (may be position)."""
    t = np.multiply(position, offset, out=scratch)
    t *= -0.5 / GRID_STEPS**2
    t += 1  # 1 - x d / 2
    t *= offset
    t *= pdf_i
    t *= 1 / GRID_STEPS
    cdf_i += t
    return cdf_i


def _pdf_from(position, offset, pdf_i) -> np.ndarray:
    """phi(x) ~ phi_i (1 - x d), into pdf_i (returned); offset is overwritten."""
    offset *= position
    offset *= pdf_i
    offset *= 1 / GRID_STEPS**2
    pdf_i -= offset
    return pdf_i


def normal_cdf(x: np.ndarray) -> np.ndarray:
    """Phi(x) = (1 + erf(x / sqrt 2)) / 2, elementwise, in x's dtype (float32 or smaller)."""
    position, offset, cdf_i, pdf_i = _nearest(x)
    return _cdf_from(position, offset, cdf_i, pdf_i, scratch=position)


def normal_pdf(x: np.ndarray) -> np.ndarray:
    """phi(x) = exp(-x^2 / 2) / sqrt(2 pi), elementwise, in x's dtype (float32 or smaller)."""
    position, offset, _, pdf_i = _nearest(x)
    return _pdf_from(position, offset, pdf_i)


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
    # dy/dx = Phi(x) + x * phi(x): Phi and phi as normal_cdf and normal_pdf compute them
    position, offset, cdf_i, pdf_i = _nearest(x)
    cdf = _cdf_from(position, offset, cdf_i, pdf_i, scratch=grad)  # grad: free until the end
    x_pdf = _pdf_from(position, offset, pdf_i)
    x_pdf *= x
    np.add(cdf, x_pdf, out=grad)
    np.multiply(x, cdf, out=y)
