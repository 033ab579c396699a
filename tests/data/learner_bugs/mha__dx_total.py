# learner bug (mha): dx summed across calls
# expect: returned another dx
"""Exercise mha: the backward of causal multi-head self-attention.

    [q, k, v] = x W_in^T + b_in             W_in = in_proj_weight (3C, C) = [W_q; W_k; W_v]
    q, k, v -> (B, H, T, d) heads           d = C / H
    a = softmax(q k^T / sqrt(d) + causal mask) v        per head
    y = merge_heads(a) W_out^T + b_out      W_out = out_proj_weight (C, C)

Write `backward`: given dy = dL/dy, ADD each parameter's gradient into its .grad (never
overwrite) and return dx with x's shape. Go through the forward in reverse: the output
projection, the heads' merge, the attention (mask included), the heads' split, the input
projection.
"""

import numpy as np

from scratchformer.nn import Parameter


class MultiHeadAttention:
    """Causal self-attention. x: (B, T, C) -> (B, T, C); C = n_embd, H = n_head."""

    def __init__(self, n_embd, n_head):
        C = n_embd
        self.n_head = n_head
        self.in_proj_weight = Parameter(np.zeros((3 * C, C)))  # [W_q; W_k; W_v], .data and .grad
        self.in_proj_bias = Parameter(np.zeros(3 * C))
        self.out_proj_weight = Parameter(np.zeros((C, C)))
        self.out_proj_bias = Parameter(np.zeros(C))

    def split_heads(self, t):  # (B, T, C) -> (B, H, T, d)
        B, T, C = t.shape
        return t.reshape(B, T, self.n_head, C // self.n_head).transpose(0, 2, 1, 3)

    def merge_heads(self, t):  # (B, H, T, d) -> (B, T, C)
        B, H, T, d = t.shape
        return t.transpose(0, 2, 1, 3).reshape(B, T, H * d)

    def forward(self, x):
        B, T, C = x.shape
        qkv = x @ self.in_proj_weight.data.T + self.in_proj_bias.data  # (B, T, 3C)
        q, k, v = (self.split_heads(t) for t in np.split(qkv, 3, axis=-1))  # (B, H, T, d) each
        scale = 1.0 / np.sqrt(C // self.n_head)
        mask = np.tril(np.ones((T, T), dtype=bool))  # True = may attend: key j <= query i
        scores = q @ k.swapaxes(-1, -2) * scale  # (B, H, T, T)
        masked = np.where(mask, scores, -np.inf)
        e = np.exp(masked - masked.max(axis=-1, keepdims=True))
        weights = e / e.sum(axis=-1, keepdims=True)
        a = self.merge_heads(weights @ v)  # (B, T, C)
        self.x, self.q, self.k, self.v, self.mask, self.scale = (
            x,
            q,
            k,
            v,
            mask,
            scale,
        )  # kept for the backward
        self.scores, self.weights, self.a = scores, weights, a
        return a @ self.out_proj_weight.data.T + self.out_proj_bias.data

    def backward(self, dy):
        """dy: (B, T, C). Adds into every parameter's .grad; returns dx: (B, T, C)."""
        B, T, C = dy.shape
        q, k, v, w, s = self.q, self.k, self.v, self.weights, self.scale
        self.out_proj_weight.grad += dy.reshape(-1, C).T @ self.a.reshape(-1, C)
        self.out_proj_bias.grad += dy.reshape(-1, C).sum(axis=0)
        da = self.split_heads(dy @ self.out_proj_weight.data)
        dv = w.swapaxes(-1, -2) @ da
        dw = da @ v.swapaxes(-1, -2)
        dscores = w * (dw - (dw * w).sum(axis=-1, keepdims=True))
        dq = dscores @ k * s
        dk = dscores.swapaxes(-1, -2) @ q * s
        dqkv = np.concatenate([self.merge_heads(t) for t in (dq, dk, dv)], axis=-1)
        self.in_proj_weight.grad += dqkv.reshape(-1, 3 * C).T @ self.x.reshape(-1, C)
        self.in_proj_bias.grad += dqkv.reshape(-1, 3 * C).sum(axis=0)
        self.dx_total = getattr(self, "dx_total", 0) + dqkv @ self.in_proj_weight.data
        return self.dx_total
