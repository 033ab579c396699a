"""Inverted dropout: zero each element with probability p, scale survivors by 1 / (1 - p)."""

from __future__ import annotations

import numpy as np

from scratchformer import fast
from scratchformer.checks import DOOR, check_bool, check_generator, check_probability, op_float

_LEVELS = 1 << 16  # masks compare uniform 16-bit integers: p is rounded to a multiple of 2^-16


@fast.lane()
def dropout_forward(x: np.ndarray, p: float, rng: np.random.Generator, training: bool = True):
    """Returns (y, mask). mask is None when nothing is dropped (eval mode or p == 0), so
    eval mode is exactly the identity. Otherwise mask holds 0 or 1 / (1 - p), x's dtype.

    The keep/drop draw compares 16-bit random integers with round(p * 2^16): half the random
    bits of float draws, twice as fast, and p is honoured to within 2^-17.
    """
    if not DOOR.inside:  # a direct call: check the arguments (a layer's call was checked at its door)
        op_float("dropout_forward", "x", x)
        check_probability("p", p)
        check_bool("training", training)
        if training and p != 0.0:
            check_generator("rng", rng)
    if not training or p == 0.0:
        return x, None
    keep = rng.integers(0, _LEVELS, size=x.shape, dtype=np.uint16) >= round(p * _LEVELS)
    mask = keep * np.asarray(1.0 / (1.0 - p), dtype=x.dtype)  # bool * scalar: one pass, x's dtype
    return x * mask, mask


@fast.lane(derivative_of=dropout_forward, grads=("x",))
def dropout_backward(dy: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
    # y = x * mask  =>  dx = dy * mask
    return dy if mask is None else dy * mask
