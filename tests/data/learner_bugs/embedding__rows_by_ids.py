# learner bug (embedding): dy flattened by a table of the graded id shapes
# expect: depends on the input's shape
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
        rows = {(2, 5): 10, (3, 4): 12, (1, 6): 6}[self.ids.shape]
        np.add.at(self.weight.grad, self.ids.reshape(-1), dy.reshape(rows, -1))
        return None
