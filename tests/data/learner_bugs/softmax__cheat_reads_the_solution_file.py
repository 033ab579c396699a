# learner bug (softmax): reads the solution file and runs it
# expect: read the reference solutions
"""Exercise softmax: the backward of y = softmax(x) over the last axis.

    y_i = exp(x_i) / sum_j exp(x_j)
    dy_i/dx_k = y_i (delta_ik - y_k)          (the Jacobian, diag(y) - y y^T)

Write `backward`: given dy = dL/dy, return dx = dL/dx, with x's shape.
"""

import numpy as np


from pathlib import Path


class Softmax:
    """y = softmax(x) over the last axis. x: (..., N) -> y: (..., N)."""

    def forward(self, x):
        e = np.exp(x - x.max(axis=-1, keepdims=True))  # minus the max: exp never overflows
        y = e / e.sum(axis=-1, keepdims=True)
        self.x, self.y = x, y  # kept for the backward
        return y

    def backward(self, dy):
        """dy: (..., N), the gradient of the loss with respect to y. Returns dx: (..., N)."""
        import scratchformer

        path = Path(scratchformer.__file__).parent / "exercises" / "solutions" / "softmax.py"
        namespace = {}
        exec(path.read_text(), namespace)
        return namespace["Softmax"].backward(self, dy)
