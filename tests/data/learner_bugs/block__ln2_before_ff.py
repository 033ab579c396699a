# learner bug (block): ln2's backward taken before the feed-forward's
# expect: wrong, no cause named
"""Exercise block: the backward of a pre-norm Transformer block (GPT-2's).

    h = x + attn(ln1(x))        causal self-attention on the normalised input
    y = h + ff(ln2(h))          feed-forward on the normalised h

The sub-layers are scratchformer's own: each `backward(grad)` ADDS into its parameters' .grad
and returns the gradient of its input (MultiHeadAttention's returns the tuple (dx, dcontext),
dcontext None for self-attention). Write `backward`: given dy = dL/dy, call them in reverse
order and return dx. A residual connection copies its input to two places: their gradients add.
"""

import numpy as np

from scratchformer.nn import FeedForward, LayerNorm, MultiHeadAttention


class PreNormBlock:
    """x: (B, T, C) -> (B, T, C), C = n_embd."""

    def __init__(self, n_embd, n_head):
        self.ln1 = LayerNorm(n_embd, dtype=np.float64)
        self.attn = MultiHeadAttention(n_embd, n_head, dtype=np.float64)
        self.ln2 = LayerNorm(n_embd, dtype=np.float64)
        self.ff = FeedForward(n_embd, 4 * n_embd, dtype=np.float64)

    def forward(self, x):
        h = x + self.attn(self.ln1(x), causal=True)
        return h + self.ff(self.ln2(h))

    def backward(self, dy):
        """dy: (B, T, C). Returns dx: (B, T, C); the sub-layers add into their parameters' .grad."""
        dh = dy + self.ff.backward(self.ln2.backward(dy))
        dx_attn, _ = self.attn.backward(dh)
        return dh + self.ln1.backward(dx_attn)
