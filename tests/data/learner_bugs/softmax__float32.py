# learner bug (softmax): the backward computed in float32, cast back
# expect: float32
"""Exercise softmax: the backward of y = softmax(x) over the last axis.

    y_i = exp(x_i) / sum_j exp(x_j)
    dy_i/dx_k = y_i (delta_ik - y_k)          (the Jacobian, diag(y) - y y^T)

Write `backward`: given dy = dL/dy, return dx = dL/dx, with x's shape.
"""

import numpy as np


class Softmax:
    """y = softmax(x) over the last axis. x: (..., N) -> y: (..., N)."""

    def forward(self, x):
        e = np.exp(x - x.max(axis=-1, keepdims=True))  # minus the max: exp never overflows
        y = e / e.sum(axis=-1, keepdims=True)
        self.x, self.y = x, y  # kept for the backward
        return y

    def backward(self, dy):
        """dy: (..., N), the gradient of the loss with respect to y. Returns dx: (..., N)."""
        y = self.y.astype(np.float32)
        g = dy.astype(np.float32)
        return (y * (g - (g * y).sum(axis=-1, keepdims=True))).astype(np.float64)
