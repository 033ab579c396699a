"""Encoder and decoder blocks: attention and feed-forward sub-layers wrapped in residuals.

Each sub-layer is wrapped the same way (Vaswani et al. 2017, section 5.4, for dropout):
    pre-norm  (norm_first=True, GPT-2):      x = x + dropout(sublayer(norm(x)))
    post-norm (norm_first=False, Vaswani, BERT): x = norm(x + dropout(sublayer(x)))
`residual_forward` / `residual_backward` implement that wrapper once for every block.
"""

from __future__ import annotations

import numpy as np

from scratchformer.checks import check_float_array
from scratchformer.errors import ShapeError
from scratchformer.nn.attention import KVCache, MultiHeadAttention
from scratchformer.nn.feedforward import FeedForward
from scratchformer.nn.hooks import HookPoint
from scratchformer.nn.layers import Dropout, LayerNorm, make_norm
from scratchformer.nn.module import DEFAULT_DTYPE, Module


def residual_forward(x, norm: LayerNorm, sublayer: Module, drop: Dropout, norm_first: bool, **kwargs):
    if norm_first:
        return x + drop(sublayer(norm(x), **kwargs))
    return norm(x + drop(sublayer(x, **kwargs)))


def _sublayer_backward(sublayer: Module, ds):
    """(dx, dcontext): attention returns both (dcontext None for self-attention); the
    feed-forward takes one input and returns one array."""
    grads = sublayer.backward(ds)
    return grads if isinstance(sublayer, MultiHeadAttention) else (grads, None)


def residual_backward(dy, norm: LayerNorm, sublayer: Module, drop: Dropout, norm_first: bool):
    """Returns (dx, dcontext): dcontext is the sub-layer's gradient for its context
    (cross-attention's memory), else None."""
    if norm_first:
        # y = x + s(norm(x))  =>  dx = dy + norm'(s'(dy))
        ds, dcontext = _sublayer_backward(sublayer, drop.backward(dy))
        return dy + norm.backward(ds), dcontext
    # y = norm(z), z = x + s(x)  =>  dz = norm'(dy), dx = dz + s'(dz)
    dz = norm.backward(dy)
    ds, dcontext = _sublayer_backward(sublayer, drop.backward(dz))
    return dz + ds, dcontext


class EncoderBlock(Module):
    """Bidirectional self-attention + feed-forward. x: (B, T, n_embd) -> (B, T, n_embd).

    mask: bool broadcastable to (B, n_head, T, T), True = may attend (e.g. a key padding
    mask of shape (B, 1, 1, T)). normalization: "layernorm" or "rmsnorm" (`nn.layers.NORMALIZATIONS`).
    """

    def __init__(
        self,
        n_embd: int,
        n_head: int,
        n_inner: int,
        dropout: float = 0.0,
        activation: str = "gelu",
        norm_first: bool = True,
        eps: float = 1e-5,
        bias: bool = True,
        dtype=DEFAULT_DTYPE,
        normalization: str = "layernorm",
    ):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(n_embd, n_head, bias=bias, dropout=dropout, dtype=dtype)
        self.attn_norm = make_norm(normalization, n_embd, eps, bias, dtype)
        self.ff = FeedForward(n_embd, n_inner, activation, dropout=dropout, bias=bias, dtype=dtype)
        self.ff_norm = make_norm(normalization, n_embd, eps, bias, dtype)
        self.attn_dropout = Dropout(dropout)
        self.ff_dropout = Dropout(dropout)
        # hook points (scratchformer.lens): the residual stream before, between and after
        self.hook_resid_pre, self.hook_resid_mid, self.hook_resid_post = HookPoint(), HookPoint(), HookPoint()

    def check_input(self, x, mask=None) -> None:
        check_float_array(x, "EncoderBlock input", ndim=3, last_dim=self.ff_norm.weight.shape[0])

    def forward(self, x: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
        x = self.hook_resid_pre(x)
        x = self.hook_resid_mid(
            residual_forward(x, self.attn_norm, self.self_attn, self.attn_dropout, self.norm_first, mask=mask)
        )
        return self.hook_resid_post(
            residual_forward(x, self.ff_norm, self.ff, self.ff_dropout, self.norm_first)
        )

    def backward(self, dy: np.ndarray) -> np.ndarray:
        dy, _ = residual_backward(dy, self.ff_norm, self.ff, self.ff_dropout, self.norm_first)
        dx, _ = residual_backward(dy, self.attn_norm, self.self_attn, self.attn_dropout, self.norm_first)
        return dx


class DecoderBlock(Module):
    """Causal self-attention, cross-attention over `memory` (the encoder output), feed-forward.

    x: (B, T, n_embd); memory: (B, S, n_embd) -> (B, T, n_embd). With cross_attention=False
    this is a GPT block. self_mask: bool broadcastable to (B, H, T, T), combined with the causal
    mask; memory_mask: broadcastable to (B, H, T, S), e.g. the source padding mask (B, 1, 1, S).
    `cache`: a list of KVCache (one per attention) for incremental decoding in eval mode.
    normalization: "layernorm" or "rmsnorm"; rope_theta: rotary positions in the self-attention
    (None: none, the positions come from the input); n_kv_head: the self-attention's key/value
    heads (None: n_head; fewer: grouped-query attention); alibi: ALiBi's linear biases on the
    self-attention's scores (positions without a table); see `MultiHeadAttention`.
    feedforward=False: an attention-only block (Olsson et al. 2022): no feed-forward sub-layer,
    no ff_norm (`ff` and `ff_norm` are None), so x = x + attn(norm(x)) and nothing more.
    qk_norm: QK-norm in the self-attention (each head's q and k RMS-normalised, eps `eps`).
    """

    def __init__(
        self,
        n_embd: int,
        n_head: int,
        n_inner: int,
        dropout: float = 0.0,
        activation: str = "gelu",
        norm_first: bool = True,
        cross_attention: bool = True,
        eps: float = 1e-5,
        bias: bool = True,
        dtype=DEFAULT_DTYPE,
        normalization: str = "layernorm",
        rope_theta: float | None = None,
        n_kv_head: int | None = None,
        alibi: bool = False,
        feedforward: bool = True,
        qk_norm: bool = False,
    ):
        super().__init__()
        self.norm_first, self.cross_attention = norm_first, cross_attention
        self.self_attn = MultiHeadAttention(
            n_embd,
            n_head,
            bias=bias,
            dropout=dropout,
            dtype=dtype,
            rope_theta=rope_theta,
            n_kv_head=n_kv_head,
            alibi=alibi,
            qk_norm=qk_norm,
            norm_eps=eps,
        )
        self.attn_norm = make_norm(normalization, n_embd, eps, bias, dtype)
        self.attn_dropout = Dropout(dropout)
        if cross_attention:
            self.cross_attn = MultiHeadAttention(n_embd, n_head, bias=bias, dropout=dropout, dtype=dtype)
            self.cross_norm = make_norm(normalization, n_embd, eps, bias, dtype)
            self.cross_dropout = Dropout(dropout)
        self.ff = (
            FeedForward(n_embd, n_inner, activation, dropout=dropout, bias=bias, dtype=dtype)
            if feedforward
            else None
        )
        self.ff_norm = make_norm(normalization, n_embd, eps, bias, dtype) if feedforward else None
        self.ff_dropout = Dropout(dropout)
        # hook points (scratchformer.lens): the residual stream before the block, after the
        # self-attention, after the cross-attention (cross_attention=True only), after the block
        self.hook_resid_pre, self.hook_resid_mid, self.hook_resid_post = HookPoint(), HookPoint(), HookPoint()
        if cross_attention:
            self.hook_resid_cross = HookPoint()

    def new_cache(self, capacity: int = 0) -> list[KVCache]:
        """capacity: how many positions the self-attention cache should hold (a hint)."""
        return [KVCache(capacity)] + ([KVCache()] if self.cross_attention else [])

    def check_input(self, x, memory=None, self_mask=None, memory_mask=None, cache=None) -> None:
        C = self.self_attn.n_embd
        check_float_array(x, "DecoderBlock input", ndim=3, last_dim=C)
        if self.cross_attention and memory is None:
            raise ShapeError("DecoderBlock with cross-attention needs memory (the encoder output), got None")
        if not self.cross_attention and memory is not None:
            raise ShapeError("DecoderBlock was built with cross_attention=False but got memory")
        if memory is not None:
            check_float_array(memory, "DecoderBlock memory", ndim=3, last_dim=C)

    def forward(self, x, memory=None, self_mask=None, memory_mask=None, cache: list[KVCache] | None = None):
        self_cache, cross_cache = (cache + [None])[:2] if cache is not None else (None, None)
        x = self.hook_resid_pre(x)
        x = self.hook_resid_mid(
            residual_forward(
                x,
                self.attn_norm,
                self.self_attn,
                self.attn_dropout,
                self.norm_first,
                mask=self_mask,
                causal=True,
                kv_cache=self_cache,
            )
        )
        if self.cross_attention:
            x = self.hook_resid_cross(
                residual_forward(
                    x,
                    self.cross_norm,
                    self.cross_attn,
                    self.cross_dropout,
                    self.norm_first,
                    context=memory,
                    mask=memory_mask,
                    kv_cache=cross_cache,
                )
            )
        if self.ff is not None:  # an attention-only block has none
            x = residual_forward(x, self.ff_norm, self.ff, self.ff_dropout, self.norm_first)
        return self.hook_resid_post(x)

    def backward(self, dy):
        """Returns (dx, dmemory); dmemory is None without cross-attention (a GPT block)."""
        dmemory = None
        if self.ff is not None:
            dy, _ = residual_backward(dy, self.ff_norm, self.ff, self.ff_dropout, self.norm_first)
        if self.cross_attention:
            dy, dmemory = residual_backward(
                dy, self.cross_norm, self.cross_attn, self.cross_dropout, self.norm_first
            )
        dx, _ = residual_backward(dy, self.attn_norm, self.self_attn, self.attn_dropout, self.norm_first)
        return dx, dmemory
