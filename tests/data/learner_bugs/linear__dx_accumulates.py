# learner bug (linear): dx kept on self and added to
# expect: returned another dx
"""Exercise linear: the backward of an affine map, PyTorch's layout.

    y = x W^T + b        x: (..., in), W: (out, in), b: (out,), y: (..., out)

Write `backward`: given dy = dL/dy, ADD dL/dW into self.weight.grad and dL/db into
self.bias.grad (never overwrite), and return dx with x's shape. Every leading axis of x
(batch, time) is a row: the parameter gradients sum over all of them.
"""

import numpy as np

from scratchformer.nn import Parameter


class Linear:
    """x: (..., in_features) -> y: (..., out_features). weight (out, in), bias (out,)."""

    def __init__(self, in_features, out_features):
        self.weight = Parameter(np.zeros((out_features, in_features)))  # .data and .grad
        self.bias = Parameter(np.zeros(out_features))

    def forward(self, x):
        self.x = x  # kept for the backward
        return x @ self.weight.data.T + self.bias.data

    def backward(self, dy):
        """dy: (..., out). Adds into weight.grad and bias.grad; returns dx: (..., in)."""
        W = self.weight.data
        x2 = self.x.reshape(-1, W.shape[1])
        dy2 = dy.reshape(-1, W.shape[0])
        self.weight.grad += dy2.T @ x2
        self.bias.grad += dy2.sum(axis=0)
        if not hasattr(self, "dx"):
            self.dx = np.zeros_like(self.x)
        self.dx += (dy2 @ W).reshape(self.x.shape)  # accumulate, like .grad
        return self.dx
