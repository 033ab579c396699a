# learner bug (gelu): the tanh approximation's derivative
# expect: tanh approximation
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
        x = self.x
        k = np.sqrt(2.0 / np.pi)
        u = k * (x + 0.044715 * x**3)
        t = np.tanh(u)
        return dy * (0.5 * (1 + t) + 0.5 * x * (1 - t**2) * k * (1 + 3 * 0.044715 * x**2))
