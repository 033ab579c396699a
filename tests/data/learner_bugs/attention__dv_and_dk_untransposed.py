# learner bug (attention): two products without their transpose
# expect: dv = W^T dout
"""Exercise attention: the backward of scaled dot-product attention with a mask.

    S = q k^T / sqrt(d)                     (B, H, Tq, Tk)  scores
    S' = S where mask, else -inf            mask: True = this query may attend to this key
    W = softmax(S') over the keys           masked keys get weight exactly 0
    out = W v                               (B, H, Tq, d)

Write `backward`: given dout = dL/dout, return the tuple (dq, dk, dv), each with its input's
shape. The softmax's backward: dS = W * (dW - sum_j dW_j W_j) over the keys; a masked key
must get no gradient.
"""

import numpy as np


class ScaledDotProductAttention:
    """q: (B, H, Tq, d); k, v: (B, H, Tk, d); mask: (Tq, Tk) bool, True = may attend."""

    def forward(self, q, k, v, mask):
        scale = 1.0 / np.sqrt(q.shape[-1])
        scores = q @ k.swapaxes(-1, -2) * scale  # (B, H, Tq, Tk)
        masked = np.where(mask, scores, -np.inf)
        e = np.exp(masked - masked.max(axis=-1, keepdims=True))
        weights = e / e.sum(axis=-1, keepdims=True)
        self.q, self.k, self.v, self.mask, self.scale = q, k, v, mask, scale  # kept for the backward
        self.scores, self.weights = scores, weights
        return weights @ v

    def backward(self, dout):
        """dout: (B, H, Tq, d). Returns (dq, dk, dv)."""
        q, k, v, w, s = self.q, self.k, self.v, self.weights, self.scale
        dv = w @ dout
        dw = dout @ v.swapaxes(-1, -2)
        dscores = w * (dw - (dw * w).sum(axis=-1, keepdims=True))
        return dscores @ k * s, dscores @ q * s, dv
