"""Multi-head attention (Vaswani et al. 2017, section 3.2.2), self- and cross-attention.

Projections are fused: one (3 n_embd, n_embd) matrix holds [W_q; W_k; W_v], the layout of
`torch.nn.MultiheadAttention.in_proj_weight`, so self-attention is one GEMM for q, k and v.
Cross-attention uses the first third on `x` and the last two thirds on `context`.

With `n_kv_head` < `n_head` (grouped-query attention, as Llama 2 70B and Mistral), self-attention
projects fewer key/value heads and each serves n_head / n_kv_head query heads (the KV cache holds
only those); in_proj_weight is then ((n_head + 2 n_kv_head) head_size, n_embd) = [W_q; W_k; W_v].

With `rope_theta` set, self-attention rotates each head's queries and keys by their positions
(rotary embeddings, scratchformer/ops/rope.py) before the scores; with a KV cache the new
tokens' positions start at the cache's length, and the cache holds rotated keys.

With `alibi=True`, causal self-attention adds ALiBi's linear biases to its scores (Press et al.
2022, scratchformer/ops/alibi.py): head h's score for key j from the query at position i gets
-m_h (i - j). With a KV cache the new queries sit at positions cache length .. cache length + T - 1
(the bias is aligned at the end of the keys, as the causal mask). One slope per query head, so
grouped-query attention needs nothing more: the scores are (B, n_head, Tq, Tk) either way.
"""

from __future__ import annotations

import math

import numpy as np

from scratchformer.checks import check_bool, check_float_array, check_heads, check_probability
from scratchformer.errors import ConfigError, HookError, ShapeError
from scratchformer.nn import init
from scratchformer.nn.hooks import HookPoint
from scratchformer.nn.layers import DrawsDropout, Linear
from scratchformer.nn.module import DEFAULT_DTYPE, Module, Parameter
from scratchformer.ops import (
    alibi_bias,
    attention_backward,
    attention_forward,
    attention_mask,
    linear_backward_into,
    linear_forward,
    rope_backward,
    rope_forward,
    rope_tables,
)
from scratchformer.ops.attention import attention_scores, masked_softmax


class KVCache:
    """Keys and values of earlier steps for incremental decoding: `k`, `v` are
    (B, H, length, head_size) views of buffers that hold `capacity` positions.

    Self-attention appends each step's keys/values in place (`append`): the buffers are
    allocated once (capacity: a hint, e.g. prompt + new tokens; doubled if it runs out), so a
    step copies only its own keys, not the whole past as concatenating would (O(T) per step
    instead of O(T^2) over a generation). Cross-attention stores the memory's keys/values
    once (`store`) and reuses them."""

    def __init__(self, capacity: int = 0):
        self.capacity = capacity
        self.length = 0
        self._k: np.ndarray | None = None  # (B, H, capacity, head_size)
        self._v: np.ndarray | None = None

    @property
    def k(self) -> np.ndarray | None:
        return None if self._k is None else self._k[:, :, : self.length]

    @property
    def v(self) -> np.ndarray | None:
        return None if self._v is None else self._v[:, :, : self.length]

    def store(self, k: np.ndarray, v: np.ndarray) -> None:
        """Hold k, v (B, H, T, head_size) as they are (cross-attention's memory)."""
        self._k, self._v, self.length = k, v, k.shape[2]
        self.capacity = self.length

    def append(self, k: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Write this step's k, v (B, H, T, head_size) after the past; returns all keys and
        values so far, (B, H, length, head_size) views."""
        end = self.length + k.shape[2]
        if self._k is None or end > self._k.shape[2]:  # first call, or full: a larger buffer
            size = max(end, self.capacity) if self._k is None else max(end, 2 * self._k.shape[2])
            grown_k = np.empty(k.shape[:2] + (size, k.shape[3]), dtype=k.dtype)
            grown_v = np.empty_like(grown_k)
            if self._k is not None:
                grown_k[:, :, : self.length] = self.k
                grown_v[:, :, : self.length] = self.v
            self._k, self._v = grown_k, grown_v
        self._k[:, :, self.length : end] = k
        self._v[:, :, self.length : end] = v
        self.length = end
        return self.k, self.v

    def select(self, rows: np.ndarray) -> None:
        """Keep the batch rows `rows` (in that order, repeats allowed): beam search's reorder."""
        if self._k is not None:
            self._k, self._v = self._k[rows], self._v[rows]


class MultiHeadAttention(Module, DrawsDropout):
    """x: (B, Tq, n_embd), context: (B, Tk, n_embd) or None -> (B, Tq, n_embd).

    After each forward, `attn_weights` (B, H, Tq, Tk) holds the attention weights (for plots),
    except in the fast lane after a training-mode forward whose weights take more than
    fast/attention.py's KEEP_WEIGHTS_BYTES (4 MB): those are not kept, the backward recomputes
    them, and `attn_weights` is None (run the model in eval mode to look at them).

    rope_theta: None (default) for no positions inside attention; a base such as 10000.0 for
    rotary position embeddings on self-attention (head_size must then be even).
    n_kv_head: key/value heads of self-attention (None: n_head); must divide n_head.
    alibi: ALiBi's linear biases on causal self-attention's scores (the forward must then be
    called with causal=True; no parameters, nothing to load).
    """

    def __init__(
        self,
        n_embd: int,
        n_head: int,
        bias: bool = True,
        dropout: float = 0.0,
        dtype=DEFAULT_DTYPE,
        rng=None,
        rope_theta: float | None = None,
        n_kv_head: int | None = None,
        alibi: bool = False,
    ):
        super().__init__()
        check_heads(n_embd, n_head)
        if not isinstance(alibi, bool):
            raise ConfigError(f"alibi must be True or False, got {alibi!r}")
        self.alibi = alibi
        check_probability("dropout", dropout)
        self.n_embd, self.n_head, self.head_size = n_embd, n_head, n_embd // n_head
        if rope_theta is not None and (self.head_size % 2 or not rope_theta > 0):
            raise ConfigError(
                f"rotary positions need an even head size and rope_theta > 0, got head size "
                f"{self.head_size} (n_embd {n_embd} / n_head {n_head}) and rope_theta {rope_theta}"
            )
        self.rope_theta = rope_theta
        self.n_kv_head = n_head if n_kv_head is None else n_kv_head
        if not (
            isinstance(self.n_kv_head, int) and 0 < self.n_kv_head <= n_head and n_head % self.n_kv_head == 0
        ):
            raise ConfigError(f"n_kv_head must divide n_head={n_head}, got {n_kv_head!r}")
        self.dropout_p = dropout  # on the attention weights, as torch.nn.MultiheadAttention
        self.rng = np.random.default_rng(init.get_rng(rng).integers(2**63))  # attention dropout
        bound = math.sqrt(6 / (n_embd + n_embd))  # xavier_uniform on each third, as PyTorch
        rows = (n_head + 2 * self.n_kv_head) * self.head_size  # [W_q; W_k; W_v]: 3 n_embd without GQA
        self.in_proj_weight = Parameter(init.uniform((rows, n_embd), bound, dtype, rng))
        self.in_proj_bias = Parameter(np.zeros(rows, dtype=dtype)) if bias else None
        self.out_proj = Linear(n_embd, n_embd, bias=bias, dtype=dtype, rng=rng)
        if bias:
            self.out_proj.bias.data[...] = 0
        self.attn_weights: np.ndarray | None = None
        # hook points (scratchformer.lens): q (B, H, T, head_size), k and v (B, n_kv_head, T,
        # head_size), rotated when the positions are rotary; the scores (-inf at hidden keys) and
        # the pattern (B, H, Tq, Tk); each head's output (B, H, Tq, head_size); the output after
        # the projection (B, Tq, n_embd)
        self.hook_q, self.hook_k, self.hook_v = HookPoint(), HookPoint(), HookPoint()
        self.hook_scores, self.hook_pattern = HookPoint(), HookPoint()
        self.hook_head_out, self.hook_out = HookPoint(), HookPoint()

    @property
    def dropout_rate(self) -> float:  # DrawsDropout: dropout on the attention weights
        return self.dropout_p

    @dropout_rate.setter
    def dropout_rate(self, p: float) -> None:
        self.dropout_p = p

    def _split_heads(self, t: np.ndarray) -> np.ndarray:  # (B, T, n_embd) -> (B, H, T, head_size)
        B, T, _ = t.shape
        return t.reshape(B, T, self.n_head, self.head_size).transpose(0, 2, 1, 3)

    def _merge_heads(self, t: np.ndarray) -> np.ndarray:  # (B, H, T, head_size) -> (B, T, n_embd)
        B, H, T, hs = t.shape
        return t.transpose(0, 2, 1, 3).reshape(B, T, H * hs)

    def _bias(self, part: slice):
        return None if self.in_proj_bias is None else self.in_proj_bias.data[part]

    def _bias_grad(self, part: slice):
        return None if self.in_proj_bias is None else self.in_proj_bias.grad[part]

    def check_input(self, x, context=None, mask=None, causal=False, kv_cache=None) -> None:
        check_float_array(x, "attention input x", ndim=3, last_dim=self.n_embd)
        check_bool("causal", causal)
        if x.shape[1] == 0:
            raise ShapeError(f"attention input x has 0 positions (shape {x.shape}): give at least one")
        if context is not None and (
            self.rope_theta is not None or self.n_kv_head != self.n_head or self.alibi
        ):
            raise ShapeError(
                "rotary positions, ALiBi and grouped-query attention apply to self-attention only: "
                "build the cross-attention with rope_theta=None, n_kv_head=None and alibi=False"
            )
        if self.alibi and not causal:
            raise ShapeError(
                "ALiBi's biases -m (i - j) are defined for causal self-attention (keys j <= i): "
                "call it with causal=True, or build it with alibi=False"
            )
        if context is not None:
            check_float_array(context, "attention context", ndim=3, last_dim=self.n_embd)
            if context.shape[1] == 0:
                raise ShapeError(
                    f"attention context has 0 positions (shape {context.shape}): give at least one"
                )
            if context.shape[0] != x.shape[0]:
                raise ShapeError(f"context must be (B={x.shape[0]}, Tk, {self.n_embd}), got {context.shape}")

    def self_qkv(self, x: np.ndarray, offset: int = 0):
        """Self-attention's q (B, H, T, head_size) and k, v (B, n_kv_head, T, head_size) for
        x (B, T, n_embd): what the scores are made of (query head h reads key/value head
        h // (H / n_kv_head), see `expand_kv`). With rotary positions, q and k are rotated for
        the positions offset .. offset + T - 1."""
        qkv = linear_forward(x, self.in_proj_weight.data, self._bias(slice(None)))  # (B, T, (H + 2 Hkv) hs)
        B, T, _ = qkv.shape  # q, k, v: (B, heads, T, head_size) views, split_heads of each part
        heads = qkv.reshape(B, T, -1, self.head_size).transpose(0, 2, 1, 3)  # (B, H + 2 Hkv, T, hs)
        H, Hkv = self.n_head, self.n_kv_head
        q, k, v = heads[:, :H], heads[:, H : H + Hkv], heads[:, H + Hkv :]
        if self.rope_theta is not None:
            cos, sin = rope_tables(offset, T, self.head_size, self.rope_theta, q.dtype)  # (T, head_size)
            q, k = rope_forward(q, cos, sin), rope_forward(k, cos, sin)
        return q, k, v

    def score_bias(self, Tq: int, Tk: int, dtype=DEFAULT_DTYPE) -> np.ndarray | None:
        """What self-attention adds to its scaled scores q k^T / sqrt(d) for Tq queries at the
        last Tq of Tk positions: ALiBi's (n_head, Tq, Tk) read-only bias, or None (no bias). A
        tool that recomputes a head's weights from `self_qkv` adds this to get the model's own."""
        return alibi_bias(self.n_head, Tq, Tk, dtype) if self.alibi else None

    def expand_kv(self, t: np.ndarray) -> np.ndarray:
        """(B, n_kv_head, T, hs) -> (B, n_head, T, hs): each key/value head repeated for its group
        of query heads (Hugging Face's repeat_kv); the identity without grouped-query attention."""
        group = self.n_head // self.n_kv_head
        return t if group == 1 else np.repeat(t, group, axis=1)

    def _sum_groups(self, g: np.ndarray) -> np.ndarray:
        """expand_kv's backward: (B, n_head, T, hs) -> (B, n_kv_head, T, hs), each group's
        gradients added into the key/value head they share."""
        group = self.n_head // self.n_kv_head
        if group == 1:
            return g
        B, _, T, hs = g.shape
        return g.reshape(B, self.n_kv_head, group, T, hs).sum(axis=2)

    def forward(self, x, context=None, mask=None, causal=False, kv_cache: KVCache | None = None):
        d, W = self.n_embd, self.in_proj_weight.data
        offset = 0  # position of x's first token: the tokens already in the cache
        if context is None:
            offset = 0 if kv_cache is None else kv_cache.length
            q, k, v = self.self_qkv(x, offset)  # q, k rotated when the positions are rotary
            q, k, v = self.hook_q(q), self.hook_k(k), self.hook_v(v)
            if kv_cache is not None:  # append this step's keys/values to the past
                k, v = kv_cache.append(k, v)
            k, v = self.expand_kv(k), self.expand_kv(v)
        else:
            q = self.hook_q(self._split_heads(linear_forward(x, W[:d], self._bias(slice(0, d)))))
            if kv_cache is not None and kv_cache.k is not None:
                k, v = kv_cache.k, kv_cache.v
            else:
                kv = linear_forward(context, W[d:], self._bias(slice(d, None)))  # (B, Tk, 2d)
                k, v = (self._split_heads(t) for t in np.split(kv, 2, axis=-1))
                k, v = self.hook_k(k), self.hook_v(v)
                if kv_cache is not None:
                    kv_cache.store(k, v)
        # ALiBi (self-attention only): queries at positions offset .. offset + Tq - 1 of the Tk keys
        bias = self.score_bias(q.shape[2], k.shape[2], q.dtype) if context is None else None
        out, att_cache = attention_forward(
            q,
            k,
            v,
            mask=mask,
            causal=causal,
            dropout_p=self.dropout_p,
            rng=self.rng,
            training=self.training,
            bias=bias,
        )
        if self.hook_scores.active or self.hook_pattern.active:
            out = self._hooked_weights(q, k, v, mask, causal, bias, att_cache, out)
        self.attn_weights = att_cache["weights"]
        self._save(x=x, context=context, att=att_cache, offset=offset)
        return self.hook_out(self.out_proj(self._merge_heads(self.hook_head_out(out))))

    def _hooked_weights(self, q, k, v, mask, causal, bias, att_cache: dict, out: np.ndarray) -> np.ndarray:
        """Show the masked scores and then the weights (B, H, Tq, Tk) to their hooks; returns the
        output (B, H, Tq, head_size). Left as they were, the output is the one attention_forward
        computed (bit for bit); changed, the weights are the softmax of the new scores (the
        hidden keys masked again) and out = weights @ v, which the backward cannot follow: eval
        mode only."""
        weights = att_cache["weights"]
        if weights is None:  # the fast lane's training forward over KEEP_WEIGHTS_BYTES keeps none
            raise HookError(
                "this training-mode forward keeps no attention weights to show (they are recomputed "
                "in the backward): read attn.scores and attn.pattern in eval mode"
            )
        if self.hook_scores.active:  # the scores with -inf at every hidden key, as TransformerLens's
            allowed = attention_mask(mask, causal, q.shape[2], k.shape[2])
            scores = attention_scores(q, k, bias)
            scores = scores if allowed is None else np.where(allowed, scores, -np.inf)
            new = self.hook_scores(scores)
            if not np.array_equal(new, scores, equal_nan=True):
                self._refuse_in_training("scores")
                weights = masked_softmax(new, allowed)  # a hidden key stays hidden whatever it holds
        if self.hook_pattern.active:
            new = self.hook_pattern(weights)
            if not np.array_equal(new, weights, equal_nan=True):
                self._refuse_in_training("pattern")
                weights = new
        if weights is att_cache["weights"]:
            return out
        att_cache["weights"] = weights
        return weights @ v

    def _refuse_in_training(self, what: str) -> None:
        if self.training:
            raise HookError(
                f"replacing attn.{what} needs eval mode (the backward would use the old "
                "pattern): call model.eval() or use scratchformer.lens.run_with_hooks"
            )

    def backward(self, grad):
        """Returns (dx, dcontext); dcontext is None for self-attention (no context given)."""
        c = self._pop_cache()
        x, context = c["x"], c["context"]
        d, W = self.n_embd, self.in_proj_weight.data
        dout = self._split_heads(self.out_proj.backward(grad))
        dq, dk, dv = attention_backward(dout, c["att"])  # (B, H, T, head_size) each
        if context is None:
            dk, dv = self._sum_groups(dk), self._sum_groups(dv)  # k, v = expand_kv(k0), expand_kv(v0)
            if (
                self.rope_theta is not None
            ):  # q, k = rope(q0), rope(k0)  =>  dq0, dk0 = rope^T(dq), rope^T(dk)
                cos, sin = rope_tables(c["offset"], dq.shape[2], self.head_size, self.rope_theta, dq.dtype)
                dq, dk = rope_backward(dq, cos, sin), rope_backward(dk, cos, sin)
            # qkv = x W^T + b with W = [W_q; W_k; W_v]; dqkv = concat of merge_heads(dq, dk, dv)
            B, H, T, hs = dq.shape
            Hkv = self.n_kv_head
            dqkv = np.empty((B, T, H + 2 * Hkv, hs), dtype=dq.dtype)
            for heads, grad in ((slice(0, H), dq), (slice(H, H + Hkv), dk), (slice(H + Hkv, None), dv)):
                dqkv[:, :, heads] = grad.transpose(0, 2, 1, 3)
            dx = linear_backward_into(
                dqkv.reshape(B, T, -1), x, W, self.in_proj_weight.grad, self._bias_grad(slice(None))
            )
            return dx, None
        # q = x W_q^T + b_q ;  [k, v] = context [W_k; W_v]^T + [b_k, b_v]
        dq, dk, dv = self._merge_heads(dq), self._merge_heads(dk), self._merge_heads(dv)
        dWq, dWkv = self.in_proj_weight.grad[:d], self.in_proj_weight.grad[d:]  # views: added into in place
        dx = linear_backward_into(dq, x, W[:d], dWq, self._bias_grad(slice(0, d)))
        dctx = linear_backward_into(
            np.concatenate([dk, dv], axis=-1), context, W[d:], dWkv, self._bias_grad(slice(d, None))
        )
        return dx, dctx
