# learner bug (embedding): the rows of the positions
# expect: positional embedding
"""Exercise embedding: the backward of a lookup table.

    y[b, t] = W[ids[b, t]]        ids: (B, T) int, W: (V, C), y: (B, T, C)

Write `backward`: given dy = dL/dy, ADD dL/dW into self.weight.grad (never overwrite). Return
None: token ids have no gradient. An id that occurs several times gets the sum of its rows.
"""

import numpy as np

from scratchformer.nn import Parameter


class Embedding:
    """ids: (B, T) ints in [0, V) -> (B, T, C). weight: (V, C)."""

    def __init__(self, V, C):
        self.weight = Parameter(np.zeros((V, C)))  # .data and .grad

    def forward(self, ids):
        self.ids = ids  # kept for the backward
        return self.weight.data[ids]

    def backward(self, dy):
        """dy: (B, T, C). Adds into weight.grad; returns None."""
        T = self.ids.shape[1]
        self.weight.grad[:T] += dy.sum(axis=0)
