# learner bug (softmax): dx added into a buffer kept between calls
# expect: returned another dx
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
        y = self.y
        if getattr(self, "buffer", None) is None or self.buffer.shape != y.shape:
            self.buffer = np.zeros_like(y)
        self.buffer += y * (dy - (dy * y).sum(axis=-1, keepdims=True))
        return self.buffer
