"""The embedding: y = W[ids], a lookup (`embedding_forward`), and its backward, which adds dy into
the rows of W's gradient that the ids picked.

`embedding_backward_into` is its formula, `np.add.at` (unbuffered: an id that occurs several
times gets every one of its rows of dy); `@fast.lane` runs its faster form in the fast lane
(`scratchformer/fast/embedding.py`: each id's rows summed by one one-hot product for a small
vocabulary, by sorted runs with one `np.add.reduceat` otherwise, then added once). The lane is
chosen in `fast.lane` alone."""

from __future__ import annotations

import numpy as np

from scratchformer import fast
from scratchformer.fast import embedding as fast_embedding

__all__ = ["embedding_backward_into", "embedding_forward"]


@fast.lane()
def embedding_forward(weight: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """weight (V, D), ids: integers in [0, V), any shape (...) -> (..., D): row ids of weight."""
    return weight[ids]


@fast.lane(fast_embedding, derivative_of=embedding_forward, into={"weight": "weight_grad"})
def embedding_backward_into(dy: np.ndarray, ids: np.ndarray, weight_grad: np.ndarray) -> None:
    """dW[i] += the sum of dy over the positions where ids == i.

    dy: (..., D); ids: integers (...), dy's leading shape; weight_grad: (V, D), added into."""
    np.add.at(weight_grad, ids.reshape(-1), dy.reshape(-1, weight_grad.shape[-1]))
