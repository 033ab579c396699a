# learner bug (gelu): asks the grader module for the solution's source
# expect: read the reference solutions
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
        from scratchformer.exercises.grading import solution_source

        namespace = {}
        exec(solution_source("gelu"), namespace)
        return namespace["GELU"].backward(self, dy)
