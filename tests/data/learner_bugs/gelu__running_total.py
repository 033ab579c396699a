# learner bug (gelu): a running total of dx across calls
# expect: something kept from the first call is added in
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
        cdf = 0.5 * (1 + erf(x / math.sqrt(2)))
        pdf = np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
        self.total = getattr(self, "total", 0) + dy * (cdf + x * pdf)
        return self.total
