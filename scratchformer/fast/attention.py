"""Fast lane of `ops/attention.py`: the same attention over the batch in cache-sized pieces of
rows, the scale on q (the smaller array), and, when asked, the weights recomputed in the backward
instead of kept. Equal to the reference within float32 rounding (the scale and the sums round
differently); recomputed weights equal kept ones bit for bit.

`ops/attention.py` checks the arguments and builds the mask, then hands over here with
`hidden` (True = masked key, broadcastable to (B, H, Tq, Tk), or None) and `drop(w) -> (dropped,
mask)`, its dropout with p, rng and training bound.
"""

from __future__ import annotations

import math

import numpy as np

from scratchformer.fast.reductions import max_last, sum_last


# Batch rows are processed a few at a time, so that each piece's (H, Tq, Tk) scores stay in the
# core's cache through the softmax's passes (medium size, 8 x 6 x 256 x 256: forward 17.6 ->
# 15.0 ms, backward 26 -> 21.6 ms a layer); a model small enough runs in one piece.
CHUNK_BYTES = 2 << 20


def weights_nbytes(q, k) -> int:
    """Bytes of the (B, H, Tq, Tk) attention weights of q (B, H, Tq, d) and k (B, H, Tk, d)."""
    return q.itemsize * math.prod(q.shape[:-1]) * k.shape[-2]


def _spans(q, k, v, hidden) -> list[slice]:
    """Slices of the batch axis, each holding rows whose weights take about CHUNK_BYTES. One
    slice (everything) unless q, k, v are (B, H, T, d) with one B and the mask has that B or none."""
    B = q.shape[0]
    rows = max(1, CHUNK_BYTES * B // max(weights_nbytes(q, k), 1))
    splittable = (q.ndim == 4 and k.ndim == 4 and k.shape[0] == v.shape[0] == B
                  and (hidden is None or hidden.ndim < 4 or hidden.shape[0] in (1, B)))
    if not splittable or rows >= B:
        return [slice(None)]
    return [slice(s, min(s + rows, B)) for s in range(0, B, rows)]


def _rows(a, span: slice, B: int):
    """a's rows in span, if a has the batch axis (a mask may broadcast over it instead)."""
    return a if a is None or a.ndim < 4 or a.shape[0] != B else a[span]


def _softmax_weights(q, k, hidden, scale, out=None, stats=None):
    """weights = softmax(where(hidden, -inf, (q s) k^T)) over the keys, in one (..., Tq, Tk)
    array (out, if given). Returns (weights, row_max, denom). With stats = (row_max, denom) of an
    earlier call on the same rows, the same arithmetic gives the same weights, bit for bit: the
    backward's recomputation."""
    # the scale on q, (..., Tq, d), is a smaller pass than on the scores when d < Tk
    weights = np.matmul(q * scale, k.swapaxes(-1, -2), out=out)  # scores
    if hidden is not None:
        np.copyto(weights, -np.inf, where=hidden)
    if stats is None:
        row_max = max_last(weights)  # (..., Tq, 1)
        if hidden is not None:
            row_max[~np.isfinite(row_max)] = 0  # fully masked row: avoid inf - inf
    else:
        row_max, denom = stats
    weights -= row_max
    np.exp(weights, out=weights)  # exp(-inf) = 0 for masked keys
    if stats is None:
        denom = sum_last(weights)
        if hidden is not None:
            denom[denom == 0] = 1  # fully masked row: zero weights, not 0 / 0
    weights /= denom
    return weights, row_max, denom


def attention_forward(q, k, v, hidden, drop, keep_weights=True):
    """q: (B, H, Tq, d); k, v: (B, H, Tk, d). Returns (out (B, H, Tq, d), cache), as the reference.

    keep_weights=False keeps only each row's max and denominator (B, H, Tq, 1), and the
    backward recomputes the weights from q and k, bit for bit (as flash attention does, and
    PyTorch's scaled_dot_product_attention): cache["weights"] is then None. At 8 x 6 x 256 x
    256 that is 12.6 MB a layer not kept, for one (q s) k^T product again in the backward.
    """
    Tq, Tk = q.shape[-2], k.shape[-2]
    scale = np.asarray(1.0 / math.sqrt(q.shape[-1]), dtype=q.dtype)
    spans, B = _spans(q, k, v, hidden), q.shape[0]
    lead = np.broadcast_shapes(q.shape[:-2], k.shape[:-2])  # (B, H), or what q and k broadcast to
    out = np.empty(np.broadcast_shapes(lead, v.shape[:-2]) + (Tq, v.shape[-1]), dtype=np.result_type(q, v))
    weights = np.empty(lead + (Tq, Tk), dtype=np.result_type(q, k)) if keep_weights else None
    stats, drop_mask = [], None  # per span: (row_max, denom), for recomputing the weights
    for span in spans:
        w, row_max, denom = _softmax_weights(_rows(q, span, B), _rows(k, span, B), _rows(hidden, span, B), scale,
                                             out=None if weights is None else weights[span])
        dropped, mask_rows = drop(w)
        if mask_rows is not None and len(spans) == 1:
            drop_mask = mask_rows
        elif mask_rows is not None:  # the pieces' masks in one array, as the weights
            drop_mask = np.empty(lead + (Tq, Tk), dtype=mask_rows.dtype) if drop_mask is None else drop_mask
            drop_mask[span] = mask_rows
        np.matmul(dropped, _rows(v, span, B), out=out[span])
        stats.append((row_max, denom))
    cache = dict(q=q, k=k, v=v, weights=weights, hidden=hidden, scale=scale, spans=spans, stats=stats,
                 drop_mask=drop_mask, out=out, lane="fast")
    return out, cache


def attention_backward(dout: np.ndarray, cache: dict):
    """Returns (dq, dk, dv), the derivative of the forward above, as the reference:
        dv = A^T dout;  dA = dout v^T;  dS = W * (dA' - sum_j dA'_j W_j);  dq = dS k s;  dk = dS^T q s
    where A = W * mask are the (dropped-out) weights, W the softmax weights, dA' = dA * mask
    the gradient of W, and s = 1/sqrt(d). The row sums need no (Tq, Tk) pass: as A v = out,
        sum_j dA'_j W_j = sum_j dA_j A_j = sum_j (dout . v_j) A_j = dout . out   (per row)
    Piece by piece over the batch rows, as the forward went; W is recomputed where the forward
    did not keep it.
    """
    q, k, v, B = cache["q"], cache["k"], cache["v"], cache["q"].shape[0]
    lead = cache["out"].shape[:-2]
    dq = np.empty(lead + q.shape[-2:], dtype=dout.dtype)
    dk, dv = (np.empty(lead + k.shape[-2:], dtype=dout.dtype) for _ in range(2))
    for span, stats in zip(cache["spans"], cache["stats"]):
        qs, ks, vs, hidden, drop_mask = (_rows(a, span, B) for a in (q, k, v, cache["hidden"], cache["drop_mask"]))
        if cache["weights"] is not None:
            w = cache["weights"][span]
        else:  # recomputed, bit for bit, from the forward's row maxima and denominators
            w = _softmax_weights(qs, ks, hidden, cache["scale"], stats=stats)[0]
        _attention_backward_rows(_rows(dout, span, B), cache["out"][span], qs, ks, vs, w, drop_mask, cache["scale"],
                                 dq[span], dk[span], dv[span])
    return dq, dk, dv


def _attention_backward_rows(dout, out, q, k, v, w, drop_mask, scale, dq, dk, dv):
    """The formulas above on one piece of batch rows, into dq, dk, dv."""
    dropped = w if drop_mask is None else w * drop_mask  # A, as the forward's dropout gave it
    np.matmul(dropped.swapaxes(-1, -2), dout, out=dv)  # (B, H, Tk, d)
    dscores = dout @ v.swapaxes(-1, -2)  # dA, (B, H, Tq, Tk)
    if drop_mask is not None:
        dscores *= drop_mask  # dA', the dropout's backward
    # dS = W * (dA' - sum_j dA'_j W_j) in place in dA' (a fresh array), the sums from dout . out
    dscores -= sum_last(dout * out)
    dscores *= w  # masked keys have w = 0, so 0
    np.matmul(dscores, k, out=dq)  # (B, H, Tq, d); the scale on the smaller products
    dq *= scale
    np.matmul(dscores.swapaxes(-1, -2), q, out=dk)  # (B, H, Tk, d)
    dk *= scale
