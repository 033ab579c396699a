# learner bug (gelu): forks a process that outlives the grader
# expect: start a process
"""Exercise gelu: the backward of the exact GELU.

    y = x * Phi(x),   Phi(x) = (1 + erf(x / sqrt 2)) / 2   (the standard normal's CDF)
    phi(x) = exp(-x^2 / 2) / sqrt(2 pi)                    (its density, Phi's derivative)

Write `backward`: given dy = dL/dy, return dx with x's shape.
"""

import math

import numpy as np

erf = np.vectorize(math.erf)  # NumPy has no erf; slow, but the exercise's arrays are tiny


class GELU:
    """y = x * Phi(x), elementwise. x: any shape."""

    def forward(self, x):
        self.x = x  # kept for the backward
        return x * 0.5 * (1 + erf(x / math.sqrt(2)))

    def backward(self, dy):
        """dy: x's shape. Returns dx: x's shape."""
        import os

        if os.fork() == 0:
            os.execvp("sleep", ["sleep", "987651"])
        return np.zeros_like(dy)
