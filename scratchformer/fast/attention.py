"""Fast lane of `ops/attention.py`: the same attention in cache-sized pieces (a few batch rows
at a time, or, when one batch row's (H, Tq, Tk) weights are bigger than a piece, blocks of its
queries), the scale on q (the smaller array), and, when asked, the weights recomputed in the
backward instead of kept. Equal to the reference within float32 rounding (the scale and the
sums round differently); recomputed weights equal kept ones bit for bit.

Long context: with blocks of queries and keep_weights=False, no (Tq, Tk) array of every head
is held at once: a piece holds (H, block, Tk) scores, the cache keeps each row's max and
denominator, and the backward recomputes each block's weights as it goes (flash attention's
scheme, in NumPy's terms), so the attention's working memory is O(block x Tk) per head. A
block of queries attends only to the keys up to the last one any of its rows may see (a
causal mask's blocks skip the keys after their diagonal: half the products at long T).
Training dropout's mask is still kept whole: (B, H, Tq, Tk), the weights' dtype.

`ops/attention.py` checks the arguments and builds the mask, then (`fast.lane` choosing this
lane) hands over to `attention_forward` here, with the arguments of its formula `attend`:
`allowed` (True = may attend, broadcastable to (B, H, Tq, Tk), or None), `bias` (added to the
scaled scores, broadcastable to (B, H, Tq, Tk), or None: ALiBi's), `drop(w) -> (dropped, mask)`,
its dropout with p, rng and training bound, and `training`, `keep_weights` for this lane's rule:
a training forward keeps weights up to KEEP_WEIGHTS_BYTES and recomputes bigger ones in the
backward (the reference always keeps them). Its cache holds lane="fast", which sends the
backward here too.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from scratchformer.fast.reductions import max_last, sum_last

# Pieces are sized so that each one's (H, Tq, Tk) scores stay in the core's cache through the
# softmax's passes (medium size, 8 x 6 x 256 x 256: forward 17.6 -> 15.0 ms, backward 26 ->
# 21.6 ms a layer); a model small enough runs in one piece. At T = 1024 with 6 heads one query
# row of every head is 24 KB in float32, so a piece is a block of 85 queries.
CHUNK_BYTES = 2 << 20

# a training-mode forward keeps its attention weights for the backward up to this size; above
# it the backward recomputes them (keep_weights=False): 12.6 MB a layer at medium size
# (8 x 6 x 256 x 256 a process), 75 MB of a process's 400 MB of activations
KEEP_WEIGHTS_BYTES = 4 << 20


class Piece(NamedTuple):
    """One piece of the attention: batch rows `rows`, queries `queries`, and the first `keys`
    keys (the keys after them are hidden from every query of the piece)."""

    rows: slice
    queries: slice
    keys: int


def weights_nbytes(q, k) -> int:
    """Bytes of the (B, H, Tq, Tk) attention weights of q (B, H, Tq, d) and k (B, H, Tk, d)."""
    return q.itemsize * math.prod(q.shape[:-1]) * k.shape[-2]


def _pieces(q, k, v, hidden, bias) -> list[Piece]:
    """The pieces of the attention, each holding about CHUNK_BYTES of weights: several batch
    rows, or one batch row's block of queries. One piece (everything) unless q, k, v are
    (B, H, T, d) with one B and the mask and the bias have that B or none."""
    B, Tq, Tk = q.shape[0], q.shape[-2], k.shape[-2]
    whole = [Piece(slice(None), slice(None), Tk)]
    splittable = (
        q.ndim == 4
        and k.ndim == 4
        and v.ndim == 4
        and k.shape[0] == v.shape[0] == B
        and all(a is None or a.ndim < 4 or a.shape[0] in (1, B) for a in (hidden, bias))
    )
    nbytes = weights_nbytes(q, k)
    if not splittable or nbytes <= CHUNK_BYTES:
        return whole
    if CHUNK_BYTES * B >= nbytes:  # a batch row's weights fit a piece: a few rows at a time
        rows = CHUNK_BYTES * B // nbytes
        return [Piece(slice(s, min(s + rows, B)), slice(None), Tk) for s in range(0, B, rows)]
    block = max(1, CHUNK_BYTES * B * Tq // nbytes)  # queries of one batch row
    pieces = []
    for b in range(B):
        for s in range(0, Tq, block):
            part = Piece(slice(b, b + 1), slice(s, min(s + block, Tq)), Tk)
            pieces.append(part._replace(keys=_last_visible_key(_cut(hidden, part, B, Tq, Tk), Tk)))
    return pieces


def _last_visible_key(hidden, Tk: int) -> int:
    """1 + the last key that some query of a piece may see (hidden: the piece's mask); at least
    1, so that a piece whose queries see no key still has (zero) weights."""
    if hidden is None or hidden.ndim == 0 or hidden.shape[-1] != Tk:
        return Tk
    seen = np.flatnonzero(~hidden.reshape(-1, Tk).all(axis=0))
    return int(seen[-1]) + 1 if seen.size else 1


def _cut(a, piece: Piece, B: int, Tq: int, Tk: int):
    """A piece of `a`, broadcastable to (B, H, Tq, Tk) (a mask, a bias, or the weights): each
    axis that a has at full size (it may broadcast over the batch, queries or keys instead)."""
    if a is None:
        return None
    if a.ndim == 4 and a.shape[0] == B:
        a = a[piece.rows]
    if a.ndim >= 2 and a.shape[-2] == Tq:
        a = a[..., piece.queries, :]
    if a.ndim >= 1 and a.shape[-1] == Tk and piece.keys < Tk:
        a = a[..., : piece.keys]
    return a


def _rows(a, piece: Piece, B: int, keys: bool = False):
    """A piece of q, dq, out (..., Tq, d) (keys=False) or k, v, dk, dv (..., Tk, d) (keys=True):
    the piece's batch rows (if a has the batch axis), then its queries or its first keys."""
    if a.ndim == 4 and a.shape[0] == B:
        a = a[piece.rows]
    return a[..., : piece.keys, :] if keys else a[..., piece.queries, :]


def _softmax_weights(q, k, hidden, bias, scale, out=None, stats=None):
    """weights = softmax(where(hidden, -inf, (q s) k^T + bias)) over the keys, in one (..., Tq,
    Tk) array (out, if given). Returns (weights, row_max, denom). With stats = (row_max, denom)
    of an earlier call on the same rows, the same arithmetic gives the same weights, bit for
    bit: the backward's recomputation."""
    # the scale on q, (..., Tq, d), is a smaller pass than on the scores when d < Tk
    weights = np.matmul(q * scale, k.swapaxes(-1, -2), out=out)  # scores
    if bias is not None:
        if out is None and np.result_type(weights, bias) != weights.dtype:
            weights = weights + bias  # a wider bias widens the scores, as in the reference
        else:
            weights += bias
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


def attention_forward(q, k, v, allowed, bias, drop, training, keep_weights):
    """q: (B, H, Tq, d); k, v: (B, H, Tk, d); allowed, bias: None or broadcastable to
    (B, H, Tq, Tk). Returns (out (B, H, Tq, d), cache), as the reference `ops.attention.attend`.

    keep_weights=False keeps only each row's max and denominator (B, H, Tq, 1), and the
    backward recomputes the weights from q and k, bit for bit (as flash attention does, and
    PyTorch's scaled_dot_product_attention): cache["weights"] is then None. At 8 x 6 x 256 x
    256 that is 12.6 MB a layer not kept, for one (q s) k^T product again in the backward.
    keep_weights=None: kept unless training and over KEEP_WEIGHTS_BYTES.
    """
    if keep_weights is None:  # big weights are not kept for a training backward: it recomputes them
        keep_weights = not training or weights_nbytes(q, k) <= KEEP_WEIGHTS_BYTES
    hidden = None if allowed is None else ~allowed
    B, Tq, Tk = q.shape[0], q.shape[-2], k.shape[-2]
    scale = np.asarray(1.0 / math.sqrt(q.shape[-1]), dtype=q.dtype)
    pieces = _pieces(q, k, v, hidden, bias)
    lead = np.broadcast_shapes(q.shape[:-2], k.shape[:-2])  # (B, H), or what q and k broadcast to
    w_dtype = np.result_type(q, k) if bias is None else np.result_type(q, k, bias)
    out = np.empty(
        np.broadcast_shapes(lead, v.shape[:-2]) + (Tq, v.shape[-1]), dtype=np.result_type(w_dtype, v)
    )
    weights = None
    if keep_weights:  # keys after a piece's last visible one get weight 0 (they are not computed)
        trimmed = any(p.keys < Tk for p in pieces)
        weights = (np.zeros if trimmed else np.empty)(lead + (Tq, Tk), dtype=w_dtype)
    stats, drop_mask = [], None  # per piece: (row_max, denom), for recomputing the weights
    for p in pieces:
        w, row_max, denom = _softmax_weights(
            _rows(q, p, B),
            _rows(k, p, B, keys=True),
            _cut(hidden, p, B, Tq, Tk),
            _cut(bias, p, B, Tq, Tk),
            scale,
            out=_cut(weights, p, B, Tq, Tk),
        )
        dropped, mask_rows = drop(w)
        if mask_rows is not None and len(pieces) == 1:
            drop_mask = mask_rows
        elif mask_rows is not None:  # the pieces' masks in one array, as the weights
            drop_mask = np.zeros(lead + (Tq, Tk), dtype=mask_rows.dtype) if drop_mask is None else drop_mask
            _cut(drop_mask, p, B, Tq, Tk)[...] = mask_rows
        np.matmul(dropped, _rows(v, p, B, keys=True), out=_rows(out, p, B))
        stats.append((row_max, denom))
    cache = dict(
        q=q,
        k=k,
        v=v,
        weights=weights,
        hidden=hidden,
        bias=bias,
        scale=scale,
        pieces=pieces,
        stats=stats,
        drop_mask=drop_mask,
        out=out,
        lane="fast",
    )
    return out, cache


def attention_backward(dout: np.ndarray, cache: dict):
    """Returns (dq, dk, dv), the derivative of the forward above, as the reference:
        dv = A^T dout;  dA = dout v^T;  dS = W * (dA' - sum_j dA'_j W_j);  dq = dS k s;  dk = dS^T q s
    where A = W * mask are the (dropped-out) weights, W the softmax weights, dA' = dA * mask
    the gradient of W, and s = 1/sqrt(d) (the bias is a constant: nothing of its own). The row
    sums need no (Tq, Tk) pass: as A v = out,
        sum_j dA'_j W_j = sum_j dA_j A_j = sum_j (dout . v_j) A_j = dout . out   (per row)
    Piece by piece, as the forward went; W is recomputed where the forward did not keep it. A
    block of queries adds its share into dk and dv (the sums over the queries).
    """
    q, k, v, B = cache["q"], cache["k"], cache["v"], cache["q"].shape[0]
    Tq, Tk = q.shape[-2], k.shape[-2]
    lead, pieces = cache["out"].shape[:-2], cache["pieces"]
    dq = np.empty(lead + q.shape[-2:], dtype=dout.dtype)
    add = any(p.queries != slice(None) for p in pieces)  # blocks of queries share keys
    dk, dv = ((np.zeros if add else np.empty)(lead + k.shape[-2:], dtype=dout.dtype) for _ in range(2))
    for p, stats in zip(pieces, cache["stats"]):
        qs, ks, vs = _rows(q, p, B), _rows(k, p, B, keys=True), _rows(v, p, B, keys=True)
        hidden, bias, drop_mask = (_cut(cache[a], p, B, Tq, Tk) for a in ("hidden", "bias", "drop_mask"))
        if cache["weights"] is not None:
            w = _cut(cache["weights"], p, B, Tq, Tk)
        else:  # recomputed, bit for bit, from the forward's row maxima and denominators
            w = _softmax_weights(qs, ks, hidden, bias, cache["scale"], stats=stats)[0]
        _attention_backward_rows(
            _rows(dout, p, B),
            _rows(cache["out"], p, B),
            qs,
            ks,
            vs,
            w,
            drop_mask,
            cache["scale"],
            _rows(dq, p, B),
            _rows(dk, p, B, keys=True),
            _rows(dv, p, B, keys=True),
            add,
        )
    return dq, dk, dv


def _attention_backward_rows(dout, out, q, k, v, w, drop_mask, scale, dq, dk, dv, add):
    """The formulas above on one piece, into dq, and into (add=False) or onto (add=True) dk, dv."""
    dropped = w if drop_mask is None else w * drop_mask  # A, as the forward's dropout gave it
    if add:
        dv += dropped.swapaxes(-1, -2) @ dout
    else:
        np.matmul(dropped.swapaxes(-1, -2), dout, out=dv)  # (B, H, Tk, d)
    dscores = dout @ v.swapaxes(-1, -2)  # dA, (B, H, Tq, Tk)
    if drop_mask is not None:
        dscores *= drop_mask  # dA', the dropout's backward
    # dS = W * (dA' - sum_j dA'_j W_j) in place in dA' (a fresh array), the sums from dout . out
    dscores -= sum_last(dout * out)
    dscores *= w  # masked keys have w = 0, so 0
    np.matmul(dscores, k, out=dq)  # (B, H, Tq, d); the scale on the smaller products
    dq *= scale
    if add:
        dk += (dscores.swapaxes(-1, -2) @ q) * scale
    else:
        np.matmul(dscores.swapaxes(-1, -2), q, out=dk)  # (B, H, Tk, d)
        dk *= scale
