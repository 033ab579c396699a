# learner bug (gqa): dscores computed in float32
# expect: float32
"""Exercise gqa: the backward of causal grouped-query attention (Llama 2 70B's, Mistral's).

H query heads share Hkv key/value heads, each kv head serving a group of H / Hkv consecutive
query heads (query head h reads kv head h // (H / Hkv)):

    k' = repeat(k, H / Hkv, axis=1),  v' = repeat(v, H / Hkv, axis=1)    (B, H, T, d)
    S = q k'^T / sqrt(d)               (B, H, T, T), a query sees itself and earlier keys only
    W = softmax(S) over the keys       future keys get weight exactly 0
    out = W v'                         (B, H, T, d)

Write `backward`: given dout = dL/dout, return the tuple (dq, dk, dv), each with its input's
shape: dk and dv are (B, Hkv, T, d), not (B, H, T, d).
"""

import numpy as np


class GroupedQueryAttention:
    """q: (B, H, T, d); k, v: (B, Hkv, T, d), H a multiple of Hkv."""

    def forward(self, q, k, v):
        group = q.shape[1] // k.shape[1]
        k_all, v_all = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)  # (B, H, T, d)
        T, scale = q.shape[2], 1.0 / np.sqrt(q.shape[-1])
        scores = q @ k_all.swapaxes(-1, -2) * scale  # (B, H, T, T)
        masked = np.where(np.tri(T, dtype=bool), scores, -np.inf)
        e = np.exp(masked - masked.max(axis=-1, keepdims=True))
        weights = e / e.sum(axis=-1, keepdims=True)
        self.q, self.k, self.v, self.scale = q, k_all, v_all, scale  # kept for the backward (k, v repeated)
        self.group = group
        self.scores, self.weights = scores, weights
        return weights @ v_all

    def backward(self, dout):
        """dout: (B, H, T, d). Returns (dq, dk, dv)."""
        q, k, v, s = self.q, self.k, self.v, self.scale
        w = self.weights.astype(np.float32)
        dv = w.swapaxes(-1, -2) @ dout
        dw = (dout @ v.swapaxes(-1, -2)).astype(np.float32)
        dscores = w * (dw - (dw * w).sum(axis=-1, keepdims=True))
        dq = dscores @ k * s
        dk = dscores.swapaxes(-1, -2) @ q * s
        B, H, T, d = q.shape
        g = self.group
        dk, dv = (t.reshape(B, H // g, g, T, d).sum(axis=2) for t in (dk, dv))
        return dq, dk, dv
