"""The GEMM micro-benchmark and the model FLOPs utilisation (MFU) the trainer logs against it."""

from __future__ import annotations

import math
import time
from functools import lru_cache

import numpy as np

from scratchformer.errors import ConfigError


def model_flops_per_token(model) -> float:
    """FLOPs of one training token, forward and backward: 6 per parameter plus attention's
    12 * layers * width * context (nanoGPT's estimate_mfu; the context is the model's
    maximum, so short names over-count the attention term)."""
    _, L, C, _, T, _ = type(model).sizes(model.config)
    return 6.0 * model.num_parameters() + 12.0 * L * C * T


@lru_cache(maxsize=1)
def gemm_peak_flops(n: int = 512, repeats: int = 3) -> float:
    """float32 matmul FLOP/s on this machine, the best of a few n x n products (measured once
    per process; an estimate of the peak MFU is measured against)."""
    a = np.ones((n, n), dtype=np.float32)
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        a @ a
        best = min(best, time.perf_counter() - t)
    return 2.0 * n**3 / max(best, 1e-9)


def gemm_rate(n: int = 512) -> float:
    """float32 FLOP/s of one n x n matmul, measured now (a few milliseconds)."""
    a = np.ones((n, n), dtype=np.float32)
    t = time.perf_counter()
    a @ a
    return 2.0 * n**3 / max(time.perf_counter() - t, 1e-9)


def mfu(flops_per_token: float, tokens_per_s: float, peak: float) -> float | None:
    """Model FLOPs utilisation: flops_per_token * tokens_per_s / peak, to 3 significant digits.

    None -- no figure -- where it cannot be right: a peak that is not a positive number, or a
    result above 1, which says the training ran faster than the GEMM rate `peak` measured, so
    that measurement was taken under load it no longer has (the trainer measures again and
    writes no MFU until the rate it divides by is at least what the training reached)."""
    for name, value in (("flops_per_token", flops_per_token), ("tokens_per_s", tokens_per_s)):
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float, np.integer, np.floating))
            or value < 0
        ):
            raise ConfigError(f"mfu {name} must be a number >= 0, got {value!r}")
    if isinstance(peak, bool) or not (isinstance(peak, (int, float)) and math.isfinite(peak) and peak > 0):
        return None
    value = flops_per_token * tokens_per_s / peak
    if not (math.isfinite(value) and 0 <= value <= 1):
        return None
    return float(f"{value:.3g}")
