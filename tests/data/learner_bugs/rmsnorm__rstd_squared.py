# learner bug (rmsnorm): rstd squared in front
# expect: wrong, no cause named
"""Exercise rmsnorm: the backward of RMSNorm over the last axis (Llama's, T5's normalisation).

    rstd = 1 / sqrt(mean_c x_c^2 + eps)
    xhat = x * rstd
    y = xhat * weight

LayerNorm without the centring and without the bias. Write `backward`: given dy = dL/dy, ADD
dL/dweight into self.weight.grad (never overwrite: a parameter can be used twice), and return
dx with x's shape. Remember that rstd depends on every x_c.
"""

import numpy as np

from scratchformer.nn import Parameter


class RMSNorm:
    """x: (..., C) -> y: (..., C). Parameter: weight (C,)."""

    def __init__(self, C, eps=1e-6):
        self.eps = eps
        self.weight = Parameter(np.ones(C))  # .data and .grad, both (C,)

    def forward(self, x):
        rstd = 1.0 / np.sqrt((x * x).mean(axis=-1, keepdims=True) + self.eps)  # (..., 1)
        xhat = x * rstd
        self.xhat, self.rstd = xhat, rstd  # kept for the backward
        return xhat * self.weight.data

    def backward(self, dy):
        """dy: (..., C). Adds into weight.grad; returns dx: (..., C)."""
        xhat, rstd = self.xhat, self.rstd
        C = xhat.shape[-1]
        self.weight.grad += (dy * xhat).reshape(-1, C).sum(axis=0)
        g = dy * self.weight.data
        return rstd**2 * (g - xhat * (g * xhat).mean(axis=-1, keepdims=True))
