"""Fast lane: reductions over one axis in the form that is fastest at a training step's shapes.
Sums are matrix-vector products with a vector of ones, a short row's max goes through a
transposed copy. The reference writes each as NumPy's reduction:

    sum_last(x)     = x @ ones(n)          (..., n) -> (..., 1)   reference: x.sum(-1, keepdims=True)
    sum_leading(x)  = ones(rows) @ x       (..., n) -> (n,)       reference: x.reshape(-1, n).sum(0)
    max_last(x)     = x.max(-1, keepdims=True), through a transposed copy when rows are short

Why not `x.sum(axis)`: NumPy reduces a short contiguous row with one inner loop per row, so
summing the 64 features of 256 tokens takes 8 us, while BLAS's matrix-vector product does it
in 1.6 us (3-6x faster at every shape a training step has: layer norm, bias gradients, the
softmax's denominators). Past a few megabytes OpenBLAS's GEMV reads memory more slowly than
NumPy's sum on AMD Zen 4, so there large arrays keep `x.sum`; on Intel the GEMV is faster at
every size (measured below and in docs/performance.md). The rule is chosen once, from the CPU's
vendor, so every call of a run takes the same form (the same bits).

A maximum has no BLAS form, but the same inner-loop cost shows: the max over rows of 16
(names-size attention scores) takes 59 us, while copying the (rows, 16) array transposed and
taking the max down its columns takes 17 us. From rows of 64 on the plain max is as fast or
faster (at 128: 156 against 243 us), so the copy is made for rows up to 32 only.

The max is exact. The sums are deterministic (one BLAS call, the same order every time) but
not bit-identical to `x.sum`, which adds pairwise: the two differ by float rounding only.
"""

from __future__ import annotations

import math

import numpy as np


def cpu_vendor(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The CPU's vendor id ("GenuineIntel", "AuthenticAMD", ...), "" where it cannot be read."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("vendor_id"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


# Past a few megabytes, AMD Zen 4's OpenBLAS GEMV reads memory more slowly than NumPy's sum
# (1.8 ms against 2.6 ms at 32768 x 256 float32, 0.5 ms against 0.9 ms at 16384 x 256), so there
# arrays of more elements than GEMV_LIMIT use NumPy's sum. On an Intel Xeon (AVX-512, OpenBLAS's
# SkylakeX kernels) the GEMV is 2-3x faster at every size measured, one thread: down the rows
# 1.6 against 5.4 ms at 32768 x 256 and 1.4 against 2.8 ms at 11493 x 512 (a bias gradient of the
# grokking step), along them 2.3 against 4.3 ms at 32768 x 256; so there it has no limit.
GEMV_LIMIT = 1 << 21


def gemv_max_size(vendor: str) -> float:
    """The most elements a sum takes as a GEMV on a CPU of `vendor` (see above)."""
    return math.inf if vendor == "GenuineIntel" else GEMV_LIMIT


# decided once, at import, from what the machine is: the same form for every call of a run
GEMV_MAX_SIZE = gemv_max_size(cpu_vendor())

_ONES: dict[tuple[int, np.dtype], np.ndarray] = {}


def _ones(n: int, dtype: np.dtype) -> np.ndarray:
    """A read-only vector of n ones, made once per (n, dtype)."""
    key = (n, dtype)
    if key not in _ONES:
        ones = np.ones(n, dtype=dtype)
        ones.flags.writeable = False
        _ONES[key] = ones
    return _ONES[key]


def _use_gemv(x: np.ndarray) -> bool:
    return x.dtype.kind == "f" and x.dtype.itemsize >= 4 and 0 < x.size <= GEMV_MAX_SIZE


def sum_last(x: np.ndarray) -> np.ndarray:
    """Sum over the last axis, kept: (..., n) -> (..., 1)."""
    n = x.shape[-1]
    if not _use_gemv(x):
        return x.sum(axis=-1, keepdims=True)
    return (x.reshape(-1, n) @ _ones(n, x.dtype)).reshape(*x.shape[:-1], 1)


def sum_leading(x: np.ndarray) -> np.ndarray:
    """Sum over every axis but the last: (..., n) -> (n,) (a bias's gradient)."""
    n = x.shape[-1]
    x2 = x.reshape(math.prod(x.shape[:-1]), n)  # not -1: that cannot reshape an empty array
    if not _use_gemv(x):
        return x2.sum(axis=0)
    return _ones(x2.shape[0], x.dtype) @ x2


# rows up to this long take their max through a transposed copy (see the module docstring)
MAX_TRANSPOSED_ROWS = 32


def max_last(x: np.ndarray) -> np.ndarray:
    """Max over the last axis, kept: (..., n) -> (..., 1). NaN in a row gives NaN, as x.max."""
    n = x.shape[-1]
    if n > MAX_TRANSPOSED_ROWS or x.size == 0:
        return x.max(axis=-1, keepdims=True)
    columns = np.ascontiguousarray(x.reshape(-1, n).T)  # (n, rows): each row of x is a column
    return columns.max(axis=0).reshape(*x.shape[:-1], 1)
