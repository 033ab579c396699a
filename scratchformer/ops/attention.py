"""Scaled dot-product attention (Vaswani et al. 2017, eq. 1) with masks, and its backward.

    scores = q k^T / sqrt(d)          (B, H, Tq, Tk)
    weights = softmax(scores)         masked keys get weight exactly 0
    out = weights v                   (B, H, Tq, d)

The mask convention: a boolean mask, **True = this query may attend to this key** (PyTorch's
`scaled_dot_product_attention`, and the copy tutorial's `masked_fill(mask == 0, -inf)`). Some
texts, the ten-part NumPy series among them, write the opposite, 1 = masked (hidden); such a
mask passed as it is would attend only to the keys it meant to hide. `attention_forward` takes
that convention when asked by name: `mask_means="masked"`.

An additive bias on the scores (`bias=`, broadcastable to (B, H, Tq, Tk); ALiBi's, see
ops/alibi.py) enters after the scale: scores = q k^T / sqrt(d) + bias. It is a constant, so the
backward is unchanged: dscores passes through it to q and k as it is.

`attention_forward` checks its arguments and builds the mask, then hands them to `attend`, the
formula. `attend` and `attention_backward` are decorated `@fast.lane`: in the fast lane they run
`scratchformer/fast/attention.py` (the batch, or for long context each row's queries, in
cache-sized pieces; big weights recomputed in the backward instead of kept, by that lane's rule),
with or without a bias; the backward runs in the lane its forward's cache came from. The lane is
chosen in `fast.lane` alone.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from scratchformer import fast
from scratchformer.checks import (
    DOOR,
    as_array,
    check_bool,
    check_generator,
    check_positive_int,
    check_probability,
    op_float,
)
from scratchformer.errors import ConfigError, DTypeError, ShapeError
from scratchformer.fast import attention as fast_attention
from scratchformer.ops.dropout import dropout_backward, dropout_forward
from scratchformer.ops.softmax import softmax_backward

__all__ = [
    "attend",
    "attention_backward",
    "attention_forward",
    "attention_mask",
    "attention_scores",
    "causal_mask",
    "masked_softmax",
    "scores_backward",
    "weighted_sum_backward",
]


def causal_mask(Tq: int, Tk: int) -> np.ndarray:
    """(Tq, Tk) bool, True where query i may see key j: j <= i + (Tk - Tq).

    Aligned at the end, so with a KV cache (Tk = past + Tq) the new queries see the past.
    Made once per shape (read-only): every layer of every step asks for the same one."""
    if not DOOR.inside:  # a direct call: check the arguments (a layer's call was checked at its door)
        check_positive_int("Tq", Tq)
        check_positive_int("Tk", Tk)
    return _causal_mask(Tq, Tk)


@functools.lru_cache(maxsize=64)
def _causal_mask(Tq: int, Tk: int) -> np.ndarray:
    mask = np.tri(Tq, Tk, k=Tk - Tq, dtype=bool)
    mask.flags.writeable = False
    return mask


def attention_mask(mask: np.ndarray | None, causal: bool, Tq: int, Tk: int) -> np.ndarray | None:
    """Combine a user mask (broadcastable to (B, H, Tq, Tk), True = may attend) with causality."""
    if not DOOR.inside:  # a direct call: check the arguments (a layer's call was checked at its door)
        check_bool("causal", causal)
        check_positive_int("Tq", Tq)
        check_positive_int("Tk", Tk)
    if mask is not None:
        mask = as_array(mask, "attention mask")
        if mask.dtype != bool:
            raise DTypeError(f"attention mask must be boolean (True = may attend), got dtype {mask.dtype}")
        _check_broadcasts(mask, "attention mask", Tq, Tk)
    if causal and Tq > 1:  # one query (a decoding step) sees every key: nothing to mask
        c = causal_mask(Tq, Tk)
        mask = c if mask is None else (mask & c)
    return mask


def attention_forward(
    q,
    k,
    v,
    mask=None,
    causal=False,
    dropout_p=0.0,
    rng=None,
    training=False,
    keep_weights=None,
    mask_means="attend",
    bias=None,
):
    """q: (B, H, Tq, d); k, v: (B, H, Tk, d); mask: bool broadcastable to (B, H, Tq, Tk).
    bias: None, or floats broadcastable to (B, H, Tq, Tk) added to the scaled scores (ALiBi's
    (H, Tq, Tk), ops/alibi.py).

    mask_means: "attend" (the default): True = may attend. "masked": the ten-part NumPy
    series' convention, True or 1 = hidden, 0 = may attend (bool, or integers 0/1).

    Returns (out (B, H, Tq, d), cache); cache["weights"] (B, H, Tq, Tk) are the attention
    weights before dropout (for plots). A query whose keys are all masked gets zero weights
    and a zero output (never NaN; a NaN input still gives NaN). Dropout, when training, acts
    on the weights (as torch.nn.MultiheadAttention). The reference keeps the weights always;
    the fast lane may keep less and recompute them in the backward (cache["weights"] is then
    None): keep_weights=None leaves that to its rule (fast/attention.py: kept unless training
    and bigger than KEEP_WEIGHTS_BYTES), True or False decides it.
    """
    if not DOOR.inside:  # a direct call: check the arguments (a layer's call was checked at its door)
        for name, a in (("q", q), ("k", k), ("v", v)):
            op_float("attention_forward", name, a, ndim=4)
        check_bool("causal", causal)
        check_bool("training", training)
        check_probability("dropout_p", dropout_p)
        if training and dropout_p:
            check_generator("rng", rng)
    if mask_means != "attend":
        mask = _from_masked_convention(mask, mask_means)
    Tq, Tk, d = q.shape[-2], k.shape[-2], q.shape[-1]
    if k.shape[-1] != d or k.shape[:-2] != v.shape[:-2] or k.shape[-2] != v.shape[-2]:
        raise ShapeError(f"attention: incompatible q {q.shape}, k {k.shape}, v {v.shape}")
    allowed = attention_mask(mask, causal, Tq, Tk)  # None: every key visible
    if bias is not None:
        bias = _check_bias(bias, Tq, Tk)
    drop = functools.partial(dropout_forward, p=dropout_p, rng=rng, training=training)
    return attend(q, k, v, allowed, bias, drop, training, keep_weights)


@fast.lane(fast_attention, name="attention_forward")
def attend(q, k, v, allowed, bias, drop, training, keep_weights):
    """The formula of `attention_forward`, on its checked arguments: allowed (True = may
    attend, broadcastable to (B, H, Tq, Tk)) or None; bias or None; drop(weights) ->
    (dropped, mask or None), the dropout. `training` and `keep_weights` are read by the fast
    lane only (whether to keep the weights); the reference keeps them."""
    weights = masked_softmax(attention_scores(q, k, bias), allowed)  # (B, H, Tq, Tk)
    dropped, drop_mask = drop(weights)
    out = dropped @ v  # (B, H, Tq, d)
    # allowed and bias: not needed by the backward; kept (references) for the walk-through's checks
    return out, dict(q=q, k=k, v=v, weights=weights, drop_mask=drop_mask, allowed=allowed, bias=bias)


def attention_scores(q: np.ndarray, k: np.ndarray, bias=None) -> np.ndarray:
    """The scores before the mask, (B, H, Tq, Tk): q k^T / sqrt(d), plus `bias` (ALiBi's) when given.
    (`MultiHeadAttention` shows them to its `hook_scores` from here too.)"""
    scores = q @ k.swapaxes(-1, -2) / math.sqrt(q.shape[-1])
    if bias is not None:
        scores = scores + bias  # a constant: d(scores + bias) / d(scores) = 1, nothing in the backward
    return scores


def masked_softmax(scores: np.ndarray, allowed) -> np.ndarray:
    """softmax over the keys (the last axis) of `scores`, a hidden key (allowed False) weighing 0;
    a query that sees no key gets zero weights, not 0 / 0."""
    if allowed is not None:
        scores = np.where(allowed, scores, -np.inf)  # a hidden key gets exp(-inf) = 0
    row_max = scores.max(axis=-1, keepdims=True)  # (B, H, Tq, 1)
    row_max[np.isneginf(row_max)] = 0  # a query that sees no key: exp(-inf - 0) = 0, not inf - inf
    e = np.exp(scores - row_max)
    denom = e.sum(axis=-1, keepdims=True)
    return e / np.where(denom == 0, 1, denom)


def _check_bias(bias, Tq: int, Tk: int) -> np.ndarray:
    """An additive score bias: floats broadcastable to (B, H, Tq, Tk), or a clear error."""
    bias = np.asarray(bias)
    if not np.issubdtype(bias.dtype, np.floating):
        raise DTypeError(f"attention bias must hold floats (added to the scores), got dtype {bias.dtype}")
    _check_broadcasts(bias, "attention bias", Tq, Tk)
    return bias


def _check_broadcasts(a: np.ndarray, what: str, Tq: int, Tk: int) -> None:
    """A ShapeError naming `what` unless a (at most 4-D) broadcasts to (B, H, Tq, Tk)."""
    try:
        fits = a.ndim <= 4 and np.broadcast_shapes(a.shape[-2:], (Tq, Tk)) == (Tq, Tk)
    except ValueError:
        fits = False
    if not fits:
        raise ShapeError(f"{what} of shape {a.shape} does not broadcast to (B, H, {Tq}, {Tk})")


def _from_masked_convention(mask, mask_means: str):
    """A mask written 1 = hidden (mask_means="masked") as this module's True = may attend."""
    if mask_means != "masked":
        raise ConfigError(
            f'mask_means must be "attend" (True = may attend) or "masked" (1 = hidden), got {mask_means!r}'
        )
    if mask is None:
        return None
    mask = np.asarray(mask)
    if mask.dtype != bool and not (np.issubdtype(mask.dtype, np.integer) and np.isin(mask, (0, 1)).all()):
        raise DTypeError(
            f'a mask with mask_means="masked" must be bool or integers 0/1 (1 = hidden), got dtype {mask.dtype}'
        )
    return mask == 0


@fast.lane(fast_attention, by_cache=True)
def attention_backward(dout: np.ndarray, cache: dict):
    """Returns (dq, dk, dv), the derivative of the forward above. With W the softmax weights,
    A = dropout(W) what multiplied v, and s = 1 / sqrt(d):
        out = A v                =>  dv = A^T dout,  dA = dout v^T      (weighted_sum_backward)
        A = W * mask             =>  dW = dA * mask                     (dropout_backward)
        W = softmax(S)           =>  dS = W * (dW - sum_j dW_j W_j)     (softmax_backward, per query row)
        S = q k^T s              =>  dq = dS k s,  dk = dS^T q s        (scores_backward)
    Each line is its own op, so the backward walk-through (viz/backward.py) shows and checks
    each on its own.
    """
    q, k, v, weights, drop_mask = cache["q"], cache["k"], cache["v"], cache["weights"], cache["drop_mask"]
    dropped = weights if drop_mask is None else weights * drop_mask  # A
    ddropped, dv = weighted_sum_backward(dout, dropped, v)  # (B, H, Tq, Tk), (B, H, Tk, d)
    dweights = dropout_backward(ddropped, drop_mask)  # (B, H, Tq, Tk)
    dscores = softmax_backward(dweights, weights)  # hidden keys: W = 0, so dS = 0
    dq, dk = scores_backward(dscores, q, k)  # (B, H, Tq, d), (B, H, Tk, d)
    return dq, dk, dv


def weighted_sum_backward(dout: np.ndarray, a: np.ndarray, v: np.ndarray):
    """out = a v, a: (B, H, Tq, Tk) weights, v: (B, H, Tk, d). Returns (da, dv) for dout
    (B, H, Tq, d): da = dout v^T (B, H, Tq, Tk), dv = a^T dout (B, H, Tk, d)."""
    dv = a.swapaxes(-1, -2) @ dout  # each key's value receives what every query that read it passed back
    da = dout @ v.swapaxes(-1, -2)
    return da, dv


def scores_backward(dscores: np.ndarray, q: np.ndarray, k: np.ndarray):
    """S = q k^T / sqrt(d) (+ a constant bias), q: (B, H, Tq, d), k: (B, H, Tk, d). Returns
    (dq, dk) for dscores (B, H, Tq, Tk): dq = dS k / sqrt(d), dk = dS^T q / sqrt(d)."""
    sqrt_d = math.sqrt(q.shape[-1])
    dq = dscores @ k / sqrt_d
    dk = dscores.swapaxes(-1, -2) @ q / sqrt_d
    return dq, dk
