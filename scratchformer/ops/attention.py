"""Scaled dot-product attention (Vaswani et al. 2017, eq. 1) with masks, and its backward.

    scores = q k^T / sqrt(d)          (B, H, Tq, Tk)
    weights = softmax(scores)         masked keys get weight exactly 0
    out = weights v                   (B, H, Tq, d)
"""

from __future__ import annotations

import functools
import math

import numpy as np

from scratchformer.errors import DTypeError, ShapeError
from scratchformer.ops.dropout import dropout_backward, dropout_forward
from scratchformer.ops.reductions import max_last, sum_last


@functools.lru_cache(maxsize=64)
def causal_mask(Tq: int, Tk: int) -> np.ndarray:
    """(Tq, Tk) bool, True where query i may see key j: j <= i + (Tk - Tq).

    Aligned at the end, so with a KV cache (Tk = past + Tq) the new queries see the past.
    Made once per shape (read-only): every layer of every step asks for the same one."""
    mask = np.tri(Tq, Tk, k=Tk - Tq, dtype=bool)
    mask.flags.writeable = False
    return mask


def attention_mask(mask: np.ndarray | None, causal: bool, Tq: int, Tk: int) -> np.ndarray | None:
    """Combine a user mask (broadcastable to (B, H, Tq, Tk), True = may attend) with causality."""
    if mask is not None:
        mask = np.asarray(mask)
        if mask.dtype != bool:
            raise DTypeError(f"attention mask must be boolean (True = may attend), got dtype {mask.dtype}")
        try:
            fits = mask.ndim <= 4 and np.broadcast_shapes(mask.shape[-2:], (Tq, Tk)) == (Tq, Tk)
        except ValueError:
            fits = False
        if not fits:
            raise ShapeError(f"attention mask of shape {mask.shape} does not broadcast to (B, H, {Tq}, {Tk})")
    if causal and Tq > 1:  # one query (a decoding step) sees every key: nothing to mask
        c = causal_mask(Tq, Tk)
        mask = c if mask is None else (mask & c)
    return mask


def attention_forward(q, k, v, mask=None, causal=False, dropout_p=0.0, rng=None, training=False):
    """q: (B, H, Tq, d); k, v: (B, H, Tk, d); mask: bool broadcastable to (B, H, Tq, Tk).

    Returns (out (B, H, Tq, d), cache); cache["weights"] (B, H, Tq, Tk) are the attention
    weights before dropout (for plots). A query whose keys are all masked gets zero weights
    and a zero output (never NaN; a NaN input still gives NaN). Dropout, when training, acts
    on the weights (as torch.nn.MultiheadAttention).
    """
    Tq, Tk = q.shape[-2], k.shape[-2]
    if k.shape[-1] != q.shape[-1] or k.shape[:-2] != v.shape[:-2] or k.shape[-2] != v.shape[-2]:
        raise ShapeError(f"attention: incompatible q {q.shape}, k {k.shape}, v {v.shape}")
    allowed = attention_mask(mask, causal, Tq, Tk)  # None: every key visible
    scale = 1.0 / math.sqrt(q.shape[-1])
    # weights = softmax(where(allowed, (q s) k^T, -inf)), in place in one (B, H, Tq, Tk) array;
    # the scale s on q, (B, H, Tq, d), is a smaller pass than on the scores when d < Tk
    weights = (q * np.asarray(scale, dtype=q.dtype)) @ k.swapaxes(-1, -2)  # scores
    if allowed is not None:
        np.copyto(weights, -np.inf, where=~allowed)
    row_max = max_last(weights)  # (B, H, Tq, 1)
    if allowed is not None:
        row_max[~np.isfinite(row_max)] = 0  # fully masked row: avoid inf - inf
    weights -= row_max
    np.exp(weights, out=weights)  # exp(-inf) = 0 for masked keys
    denom = sum_last(weights)
    if allowed is not None:
        denom[denom == 0] = 1  # fully masked row: zero weights, not 0 / 0
    weights /= denom
    dropped, drop_mask = dropout_forward(weights, dropout_p, rng, training)
    out = dropped @ v  # (B, H, Tq, d)
    cache = dict(q=q, k=k, v=v, weights=weights, dropped=dropped, drop_mask=drop_mask, scale=scale, out=out)
    return out, cache


def attention_backward(dout: np.ndarray, cache: dict):
    """Returns (dq, dk, dv), the derivative of the forward above:
        dv = A^T dout;  dA = dout v^T;  dS = W * (dA' - sum_j dA'_j W_j);  dq = dS k s;  dk = dS^T q s
    where A = W * mask are the (dropped-out) weights, W the softmax weights, dA' = dA * mask
    the gradient of W, and s = 1/sqrt(d). The row sums need no (Tq, Tk) pass: as A v = out,
        sum_j dA'_j W_j = sum_j dA_j A_j = sum_j (dout . v_j) A_j = dout . out   (per row)
    """
    q, k, v, w, scale = cache["q"], cache["k"], cache["v"], cache["weights"], cache["scale"]
    dv = cache["dropped"].swapaxes(-1, -2) @ dout  # (B, H, Tk, d)
    dscores = dropout_backward(dout @ v.swapaxes(-1, -2), cache["drop_mask"])  # dA', (B, H, Tq, Tk)
    # dS = W * (dA' - sum_j dA'_j W_j) in place in dA' (a fresh array), the sums from dout . out
    dscores -= sum_last(dout * cache["out"])
    dscores *= w  # masked keys have w = 0, so 0
    scale = np.asarray(scale, dtype=dscores.dtype)
    dq = dscores @ k  # (B, H, Tq, d); the scale on the smaller products (d <= Tk in practice)
    dq *= scale
    dk = dscores.swapaxes(-1, -2) @ q  # (B, H, Tk, d)
    dk *= scale
    return dq, dk, dv
