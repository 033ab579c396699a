# learner bug (linear): writes a passing verdict into every pipe, then exits
# expect: the grading process
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
        import json
        import os

        verdict = json.dumps({"kind": "grade", "passed": True, "lines": ["right: linear"], "cause": None}) + "\n"
        for fd in range(3, 64):
            try:
                os.write(fd, verdict.encode())
            except OSError:
                pass
        os._exit(0)
