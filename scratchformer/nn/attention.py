"""Multi-head attention (Vaswani et al. 2017, section 3.2.2), self- and cross-attention.

Projections are fused: one (3 n_embd, n_embd) matrix holds [W_q; W_k; W_v], the layout of
`torch.nn.MultiheadAttention.in_proj_weight`, so self-attention is one GEMM for q, k and v.
Cross-attention uses the first third on `x` and the last two thirds on `context`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from scratchformer.checks import check_float_array, check_heads, check_probability
from scratchformer.errors import ShapeError
from scratchformer.nn import init
from scratchformer.nn.layers import Linear
from scratchformer.nn.module import DEFAULT_DTYPE, Module, Parameter
from scratchformer.ops import attention_backward, attention_forward, linear_backward, linear_forward


@dataclass
class KVCache:
    """Keys and values of earlier steps, (B, H, T_past, head_size) each, for incremental decoding.

    For self-attention each call appends the new keys/values; for cross-attention the
    memory's keys/values are computed on the first call and reused after."""

    k: np.ndarray | None = None
    v: np.ndarray | None = None

    @property
    def length(self) -> int:
        return 0 if self.k is None else self.k.shape[-2]


class MultiHeadAttention(Module):
    """x: (B, Tq, n_embd), context: (B, Tk, n_embd) or None -> (B, Tq, n_embd).

    After each forward, `attn_weights` (B, H, Tq, Tk) holds the attention weights (for plots).
    """

    def __init__(self, n_embd: int, n_head: int, bias: bool = True, dropout: float = 0.0,
                 dtype=DEFAULT_DTYPE, rng=None):
        super().__init__()
        check_heads(n_embd, n_head)
        check_probability("dropout", dropout)
        self.n_embd, self.n_head, self.head_size = n_embd, n_head, n_embd // n_head
        self.dropout_p = dropout  # on the attention weights, as torch.nn.MultiheadAttention
        self.rng = np.random.default_rng(init.get_rng(rng).integers(2**63))  # attention dropout
        bound = math.sqrt(6 / (n_embd + n_embd))  # xavier_uniform on each third, as PyTorch
        self.in_proj_weight = Parameter(init.uniform((3 * n_embd, n_embd), bound, dtype, rng))
        self.in_proj_bias = Parameter(np.zeros(3 * n_embd, dtype=dtype)) if bias else None
        self.out_proj = Linear(n_embd, n_embd, bias=bias, dtype=dtype, rng=rng)
        if bias:
            self.out_proj.bias.data[...] = 0
        self.attn_weights: np.ndarray | None = None

    def _split_heads(self, t: np.ndarray) -> np.ndarray:  # (B, T, n_embd) -> (B, H, T, head_size)
        B, T, _ = t.shape
        return t.reshape(B, T, self.n_head, self.head_size).transpose(0, 2, 1, 3)

    def _merge_heads(self, t: np.ndarray) -> np.ndarray:  # (B, H, T, head_size) -> (B, T, n_embd)
        B, H, T, hs = t.shape
        return t.transpose(0, 2, 1, 3).reshape(B, T, H * hs)

    def _bias(self, part: slice):
        return None if self.in_proj_bias is None else self.in_proj_bias.data[part]

    def check_input(self, x, context=None, mask=None, causal=False, kv_cache=None) -> None:
        check_float_array(x, "attention input x", ndim=3, last_dim=self.n_embd)
        if context is not None:
            check_float_array(context, "attention context", ndim=3, last_dim=self.n_embd)
            if context.shape[0] != x.shape[0]:
                raise ShapeError(f"context must be (B={x.shape[0]}, Tk, {self.n_embd}), got {context.shape}")

    def forward(self, x, context=None, mask=None, causal=False, kv_cache: KVCache | None = None):
        d, W = self.n_embd, self.in_proj_weight.data
        if context is None:
            qkv = linear_forward(x, W, self._bias(slice(None)))  # (B, T, 3d)
            q, k, v = (self._split_heads(t) for t in np.split(qkv, 3, axis=-1))
            if kv_cache is not None:  # append this step's keys/values to the past
                if kv_cache.k is not None:
                    k = np.concatenate([kv_cache.k, k], axis=2)
                    v = np.concatenate([kv_cache.v, v], axis=2)
                kv_cache.k, kv_cache.v = k, v
        else:
            q = self._split_heads(linear_forward(x, W[:d], self._bias(slice(0, d))))
            if kv_cache is not None and kv_cache.k is not None:
                k, v = kv_cache.k, kv_cache.v
            else:
                kv = linear_forward(context, W[d:], self._bias(slice(d, None)))  # (B, Tk, 2d)
                k, v = (self._split_heads(t) for t in np.split(kv, 2, axis=-1))
                if kv_cache is not None:
                    kv_cache.k, kv_cache.v = k, v
        out, att_cache = attention_forward(
            q, k, v, mask=mask, causal=causal, dropout_p=self.dropout_p, rng=self.rng, training=self.training
        )
        self.attn_weights = att_cache["weights"]
        self._save(x=x, context=context, att=att_cache)
        return self.out_proj(self._merge_heads(out))

    def backward(self, grad):
        """Returns (dx, dcontext); dcontext is None for self-attention (no context given)."""
        c = self._pop_cache()
        x, context = c["x"], c["context"]
        d, W, has_bias = self.n_embd, self.in_proj_weight.data, self.in_proj_bias is not None
        dout = self._split_heads(self.out_proj.backward(grad))
        dq, dk, dv = attention_backward(dout, c["att"])
        dq, dk, dv = self._merge_heads(dq), self._merge_heads(dk), self._merge_heads(dv)
        if context is None:
            # qkv = x W^T + b with W = [W_q; W_k; W_v]
            dx, dW, db = linear_backward(np.concatenate([dq, dk, dv], axis=-1), x, W, has_bias)
            self.in_proj_weight.grad += dW
            if has_bias:
                self.in_proj_bias.grad += db
            return dx, None
        # q = x W_q^T + b_q ;  [k, v] = context [W_k; W_v]^T + [b_k, b_v]
        dx, dWq, dbq = linear_backward(dq, x, W[:d], has_bias)
        dctx, dWkv, dbkv = linear_backward(np.concatenate([dk, dv], axis=-1), context, W[d:], has_bias)
        self.in_proj_weight.grad[:d] += dWq
        self.in_proj_weight.grad[d:] += dWkv
        if has_bias:
            self.in_proj_bias.grad[:d] += dbq
            self.in_proj_bias.grad[d:] += dbkv
        return dx, dctx
