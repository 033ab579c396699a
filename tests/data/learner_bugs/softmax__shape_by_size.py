# learner bug (softmax): dx reshaped by a table of the graded sizes
# expect: depends on the input's shape
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
        y = self.y.reshape(-1, self.y.shape[-1])
        g = dy.reshape(y.shape)
        dx = y * (g - (g * y).sum(axis=-1, keepdims=True))
        return dx.reshape({30: (2, 3, 5), 28: (7, 4), 36: (3, 1, 2, 6)}[dx.size])
