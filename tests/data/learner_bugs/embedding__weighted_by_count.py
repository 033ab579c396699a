# learner bug (embedding): each row's gradient multiplied by its id's count
# expect: wrong, no cause named
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
        C = dy.shape[-1]
        counts = np.bincount(self.ids.reshape(-1), minlength=len(self.weight.grad))
        np.add.at(self.weight.grad, self.ids.reshape(-1), dy.reshape(-1, C))
        self.weight.grad *= np.maximum(counts, 1)[:, None]
        return None
