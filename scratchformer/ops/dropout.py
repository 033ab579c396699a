"""Inverted dropout: zero each element with probability p, scale survivors by 1 / (1 - p)."""

from __future__ import annotations

import numpy as np


def dropout_forward(x: np.ndarray, p: float, rng: np.random.Generator, training: bool = True):
    """Returns (y, mask). mask is None when nothing is dropped (eval mode or p == 0), so
    eval mode is exactly the identity. Otherwise mask holds 0 or 1 / (1 - p), x's dtype."""
    if not training or p == 0.0:
        return x, None
    mask = (rng.random(x.shape, dtype=np.float64 if x.dtype == np.float64 else np.float32) >= p)
    mask = mask.astype(x.dtype) * np.asarray(1.0 / (1.0 - p), dtype=x.dtype)
    return x * mask, mask


def dropout_backward(dy: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
    # y = x * mask  =>  dx = dy * mask
    return dy if mask is None else dy * mask
