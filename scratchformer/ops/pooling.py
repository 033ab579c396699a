"""Pooling a sequence into one vector: a weighted sum over the positions, and its backward.

    pooled = sum_t w_t h_t        h: (B, T, C), w: (B, T)  ->  (B, C)

Mean pooling over the real tokens: w_t = 1 / (number of real tokens) on a real token, 0 on
padding. [CLS] pooling: w = 1 at position 0, 0 elsewhere. The backward spreads the (B, C)
gradient back over the T positions, each scaled by its weight: dh_t = w_t dpooled.
"""

from __future__ import annotations

import numpy as np

from scratchformer import fast

__all__ = ["pool_backward", "pool_forward"]


@fast.lane()
def pool_forward(h: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """h (B, T, C), weights (B, T) -> (B, C): sum over t of weights[b, t] h[b, t]."""
    return np.einsum("bt,btc->bc", weights, h)


@fast.lane(derivative_of=pool_forward, grads=("h",))
def pool_backward(dpooled: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """dpooled (B, C), weights (B, T) -> dh (B, T, C) = weights[b, t] dpooled[b]: each position
    receives the pooled gradient in proportion to its share of the pool."""
    return weights[:, :, None] * dpooled[:, None, :]
