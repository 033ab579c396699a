# learner bug (rope): writes the passed record beside itself
# expect: write outside its scratch directory
"""Exercise rope: the backward of rotary position embeddings (RoPE, Llama's positions).

The last axis (the head's hs channels) is split in halves x = [x1 | x2]; plane i is
(x1[i], x2[i]), and at position p (the second-to-last axis) it turns by the angle
p * theta^(-2i / hs):

    y1 = x1 * cos - x2 * sin
    y2 = x2 * cos + x1 * sin        that is, y = x * cos + rotate_half(x) * sin,
                                    rotate_half([x1 | x2]) = [-x2 | x1]

(cos and sin are stored at full width hs, each plane's value in both halves.) Write
`backward`: given dy = dL/dy, return dx with x's shape.
"""

import numpy as np


from pathlib import Path


def rotate_half(x):
    """[x1 | x2] -> [-x2 | x1] over the last axis: each plane turned by 90 degrees."""
    x1, x2 = np.split(x, 2, axis=-1)
    return np.concatenate([-x2, x1], axis=-1)


class RoPE:
    """x: (..., T, hs) -> y: (..., T, hs), hs even; positions 0 .. T - 1."""

    def __init__(self, theta=10000.0):
        self.theta = theta

    def forward(self, x):
        T, hs = x.shape[-2:]
        inv_freq = self.theta ** (-np.arange(0, hs, 2) / hs)  # (hs/2,)
        angles = np.arange(T)[:, None] * inv_freq  # (T, hs/2)
        angles = np.concatenate([angles, angles], axis=-1)  # (T, hs)
        self.cos, self.sin = np.cos(angles), np.sin(angles)  # kept for the backward
        return x * self.cos + rotate_half(x) * self.sin

    def backward(self, dy):
        """dy: (..., T, hs). Returns dx: (..., T, hs)."""
        record = Path(__file__).parent / ".scratchformer-exercises.json"
        record.write_text('{"format": 1, "passed": ["rope"]}')
        return dy
