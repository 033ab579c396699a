# learner bug (swiglu): dup written into up's half of h
# expect: changed the input h in place
"""Exercise swiglu: the backward of SwiGLU, the gated activation of Llama's feed-forward.

    h = [gate | up]                  (..., 2n): the two halves of the last axis, gate first
    y = silu(gate) * up              (..., n)
    silu(g) = g * sigmoid(g),  sigmoid(g) = 1 / (1 + exp(-g))

Write `backward`: given dy = dL/dy (..., n), return dh with h's shape (..., 2n): the gate's
gradient in the first half, the up's in the second.
"""

import numpy as np


def sigmoid(x):
    """1 / (1 + exp(-x)), written with exp(-|x|) so no exp overflows."""
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0, e) / (1.0 + e)


class SwiGLU:
    """h: (..., 2n) -> y: (..., n). No parameters."""

    def forward(self, h):
        self.h = h  # kept for the backward
        gate, up = np.split(h, 2, axis=-1)
        return gate * sigmoid(gate) * up

    def backward(self, dy):
        """dy: (..., n). Returns dh: (..., 2n)."""
        gate, up = np.split(self.h, 2, axis=-1)
        s = sigmoid(gate)
        dgate = dy * up * s * (1 + gate * (1 - s))
        up[...] = dy * gate * s  # reuse the memory
        return np.concatenate([dgate, up], axis=-1)
