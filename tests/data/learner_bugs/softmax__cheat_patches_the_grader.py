# learner bug (softmax): sets the grader's tolerance and its check at import
# expect: wrong
"""Exercise softmax: the backward of y = softmax(x) over the last axis.

    y_i = exp(x_i) / sum_j exp(x_j)
    dy_i/dx_k = y_i (delta_ik - y_k)          (the Jacobian, diag(y) - y y^T)

Write `backward`: given dy = dL/dy, return dx = dL/dx, with x's shape.
"""

import numpy as np


import scratchformer.exercises.grading as grading

grading.TOLERANCE = 1e9
grading._first_finding = lambda *args, **kwargs: None


class Softmax:
    """y = softmax(x) over the last axis. x: (..., N) -> y: (..., N)."""

    def forward(self, x):
        e = np.exp(x - x.max(axis=-1, keepdims=True))  # minus the max: exp never overflows
        y = e / e.sum(axis=-1, keepdims=True)
        self.x, self.y = x, y  # kept for the backward
        return y

    def backward(self, dy):
        """dy: (..., N), the gradient of the loss with respect to y. Returns dx: (..., N)."""
        return np.zeros_like(dy)
