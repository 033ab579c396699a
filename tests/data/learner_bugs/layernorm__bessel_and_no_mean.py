# learner bug (layernorm): two mistakes: Bessel's n - 1 and no mean term
# expect: wrong, no cause named
"""Exercise layernorm: the backward of LayerNorm over the last axis.

    mean = mean_c x_c;  var = mean_c (x_c - mean)^2;  rstd = 1 / sqrt(var + eps)
    xhat = (x - mean) * rstd
    y = xhat * weight + bias

Write `backward`: given dy = dL/dy, ADD dL/dweight into self.weight.grad and dL/dbias into
self.bias.grad (never overwrite: a parameter can be used twice), and return dx with x's shape.
Remember that the mean and the variance both depend on every x_c.
"""

import numpy as np

from scratchformer.nn import Parameter


class LayerNorm:
    """x: (..., C) -> y: (..., C). Parameters: weight (C,), bias (C,)."""

    def __init__(self, C, eps=1e-5):
        self.eps = eps
        self.weight = Parameter(np.ones(C))  # .data and .grad, both (C,)
        self.bias = Parameter(np.zeros(C))

    def forward(self, x):
        mean = x.mean(axis=-1, keepdims=True)
        var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
        rstd = 1.0 / np.sqrt(var + self.eps)
        xhat = (x - mean) * rstd
        self.xhat, self.rstd = xhat, rstd  # kept for the backward
        return xhat * self.weight.data + self.bias.data

    def backward(self, dy):
        """dy: (..., C). Adds into weight.grad and bias.grad; returns dx: (..., C)."""
        xhat, rstd = self.xhat, self.rstd
        C = xhat.shape[-1]
        self.weight.grad += (dy * xhat).reshape(-1, C).sum(axis=0)
        self.bias.grad += dy.reshape(-1, C).sum(axis=0)
        g = dy * self.weight.data
        return rstd * (g - xhat * (g * xhat).sum(axis=-1, keepdims=True) / (C - 1))
