"""The speed measures keep results exact enough: the float32 normal-CDF table and the
allocator setting (docs/performance.md)."""

import math

import numpy as np

from scratchformer.allocator import keep_freed_memory
from scratchformer.ops.activations import gelu_keep, normal_cdf


def test_normal_cdf_float32_table_is_accurate_and_float64_is_exact():
    x = np.linspace(-12, 12, 200_001)
    ref = np.array([0.5 * (1 + math.erf(v / math.sqrt(2))) for v in x])
    y32 = normal_cdf(x.astype(np.float32))
    assert y32.dtype == np.float32 and np.abs(y32 - ref).max() < 2e-7
    assert np.abs(normal_cdf(x) - ref).max() < 1e-14
    assert np.diff(y32).min() > -1e-7  # monotone up to float32 rounding


def test_gelu_keep_caches_the_cdf_it_used():
    x = np.random.default_rng(0).standard_normal((3, 4, 5)).astype(np.float32)
    y, (x_kept, cdf) = gelu_keep(x)
    assert x_kept is x and y.dtype == np.float32
    np.testing.assert_array_equal(y, x * cdf)


def test_keep_freed_memory_is_idempotent():
    first = keep_freed_memory()
    assert keep_freed_memory() == first
    assert isinstance(first, bool)
