"""Fast lane of `ops/attention.py`: the same attention in cache-sized pieces (a few batch rows
at a time, or, when one batch row's (H, Tq, Tk) weights are bigger than a piece, blocks of its
queries), the scale on q (the smaller array), and, when asked, the weights recomputed in the
backward instead of kept. Equal to the reference within float32 rounding (the scale, the sums
and the recomputation round differently): float64 within 1e-12 relative
(tests/ops/test_fast_lane.py, tests/ops/test_blocked_attention.py).

The block rule, in one place (`_pieces`): a piece holds at most CHUNK_BYTES (2 MB) of scores,
about one core's L2, so that the softmax's passes and the backward's two (block, Tk) arrays
(W and dS) run from cache. Weights that fit CHUNK_BYTES make one piece (the default
configurations, T = 16 and 64); otherwise a few batch rows a piece (medium, T = 256), or, when
one batch row's (H, Tq, Tk) weights pass CHUNK_BYTES, blocks of its queries:
block = CHUNK_BYTES // (H x Tk x itemsize) (at T = 1024, 4 float32 heads: 128 queries).

Long context (blocks of queries, keep_weights=False, as a training forward over
KEEP_WEIGHTS_BYTES runs): no (Tq, Tk) array of every head is held at once. A piece holds
(H, block, Tk) scores; the forward keeps each query's lse = log(sum_j exp(score_j)) (the row
max subtracted first unless Cauchy-Schwarz bounds every score well inside exp's range), divides
its (block, d) output instead of the weights, and the backward recomputes each block's weights
as it goes (flash attention's scheme, in NumPy's terms):
    W  = exp(where(allowed, [q s, -lse] [k, 1]^T + bias, -inf))      one product, one exp
    dS = W * ([dout, -rowsum] [v, 1]^T)                               one product, one multiply
(the subtractions ride in the products as a (d + 1)-th column), so the attention's working
memory is O(block x Tk) per head plus (T, d) arrays. A block of queries attends only to the
keys up to the last one any of its rows may see, and its mask is written over the keys from
its first hidden one on (a causal block: keys after its diagonal skipped, about half the
products at long T; -inf written over the (block, block) diagonal square only). Training
dropout draws its mask block by block, from the same random stream as with kept weights, and
keeps it as bits (np.packbits): (B, H, Tq, Tk) / 8 bytes.

`ops/attention.py` checks the arguments and builds the mask, then (`fast.lane` choosing this
lane) hands over to `attention_forward` here, with the arguments of its formula `attend`:
`allowed` (True = may attend, broadcastable to (B, H, Tq, Tk), or None), `bias` (added to the
scaled scores, broadcastable to (B, H, Tq, Tk), or None: ALiBi's), `drop(w) -> (dropped, mask)`,
its dropout with p, rng and training bound (it multiplies by a mask of 0 and one value drawn
from w's shape alone), and `training`, `keep_weights` for this lane's rule: a training forward
keeps weights up to KEEP_WEIGHTS_BYTES and recomputes bigger ones in the backward (the
reference always keeps them). Its cache holds lane="fast", which sends the backward here too.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from scratchformer.fast.reductions import max_last, sum_last

# The block rule's one constant: a piece's scores, at most this many bytes, stay in one core's
# cache (about its L2) through the softmax's passes (medium size, 8 x 6 x 256 x 256: forward
# 17.6 -> 15.0 ms, backward 26 -> 21.6 ms a layer). At T = 1024, 4 float32 heads, a block of 128
# queries; 1 MB and 2 MB time alike there, 256 KB and 4 MB 1.3-1.5x slower (one thread, Xeon
# with 2 MB of L2 a core).
CHUNK_BYTES = 2 << 20

# a training-mode forward keeps its attention weights for the backward up to this size; above
# it the backward recomputes them (keep_weights=False): 12.6 MB a layer at medium size
# (8 x 6 x 256 x 256 a process), 75 MB of a process's 400 MB of activations
KEEP_WEIGHTS_BYTES = 4 << 20


class Piece(NamedTuple):
    """One piece of the attention: batch rows `rows`, queries `queries`, and the first `keys`
    keys (the keys after them are hidden from every query of the piece). The piece's hidden
    keys all lie at or after key `masked_from` (the mask is written over those keys only)."""

    rows: slice
    queries: slice
    keys: int
    masked_from: int = 0
    whole: bool = False  # the whole attention in one piece: every array as it is


def weights_nbytes(q, k) -> int:
    """Bytes of the (B, H, Tq, Tk) attention weights of q (B, H, Tq, d) and k (B, H, Tk, d)."""
    return q.itemsize * math.prod(q.shape[:-1]) * k.shape[-2]


def _pieces(q, k, v, allowed, bias) -> list[Piece]:
    """The pieces of the attention, each holding about CHUNK_BYTES of weights: several batch
    rows, or one batch row's block of queries. One piece (everything) unless q, k, v are
    (B, H, T, d) with one B and the mask and the bias have that B or none."""
    B, Tq, Tk = q.shape[0], q.shape[-2], k.shape[-2]
    whole = [Piece(slice(None), slice(None), Tk, whole=True)]
    splittable = (
        q.ndim == 4
        and k.ndim == 4
        and v.ndim == 4
        and k.shape[0] == v.shape[0] == B
        and all(a is None or a.ndim < 4 or a.shape[0] in (1, B) for a in (allowed, bias))
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
            keys, masked_from = _key_span(_cut(allowed, part, B, Tq, Tk), Tk)
            pieces.append(part._replace(keys=keys, masked_from=min(masked_from, keys)))
    return pieces


def _key_span(allowed, Tk: int) -> tuple[int, int]:
    """(1 + the last key that some query of a piece may see, the first key hidden from some
    query of it), allowed being the piece's mask. The first is at least 1, so that a piece whose
    queries see no key still has (zero) weights; the second is Tk when no key is hidden."""
    if allowed is None or allowed.ndim == 0 or allowed.shape[-1] != Tk:
        return Tk, 0  # a mask that broadcasts over the keys: written over all of them
    columns = allowed.reshape(-1, Tk)
    seen = np.flatnonzero(columns.any(axis=0))
    masked = np.flatnonzero(~columns.all(axis=0))
    return (int(seen[-1]) + 1 if seen.size else 1), (int(masked[0]) if masked.size else Tk)


def _cut(a, piece: Piece, B: int, Tq: int, Tk: int):
    """A piece of `a`, broadcastable to (B, H, Tq, Tk) (a mask, a bias, or the weights): each
    axis that a has at full size (it may broadcast over the batch, queries or keys instead)."""
    if a is None or piece.whole:
        return a
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
    if piece.whole:
        return a
    if a.ndim == 4 and a.shape[0] == B:
        a = a[piece.rows]
    return a[..., : piece.keys, :] if keys else a[..., piece.queries, :]


def _batch(a, piece: Piece, B: int):
    """The piece's batch rows of a (..., n, d) array (all of it if a has no batch axis)."""
    return a[piece.rows] if not piece.whole and a.ndim == 4 and a.shape[0] == B else a


def _hide(scores, allowed, masked_from: int) -> None:
    """scores = -inf in place where not allowed, written over the keys from `masked_from` on
    only (a causal block's hidden keys are the few after its diagonal)."""
    if allowed is None:
        return
    if masked_from and allowed.ndim and allowed.shape[-1] == scores.shape[-1]:
        scores, allowed = scores[..., masked_from:], allowed[..., masked_from:]
    np.copyto(scores, -np.inf, where=~allowed)


def _add_bias(scores, bias, fresh: bool):
    """scores + bias, in place unless a wider bias widens a fresh array (as in the reference)."""
    if bias is None:
        return scores
    if fresh and np.result_type(scores, bias) != scores.dtype:
        return scores + bias
    scores += bias
    return scores


def _softmax_weights(q, k, allowed, bias, scale, out=None, masked_from=0, normalise=True, shift=True):
    """weights = softmax(where(allowed, (q s) k^T + bias, -inf)) over the keys, in one (..., Tq,
    Tk) array (out, if given). Returns (weights, row_max, denom). normalise=False leaves
    exp(scores - row_max) undivided (the recomputing forward divides its (..., Tq, d) output
    by denom instead of the weights). shift=False skips the row max (row_max is then None):
    exp(scores) itself, for scores known to be bounded (`_scores_bounded`)."""
    # the scale on q, (..., Tq, d), is a smaller pass than on the scores when d < Tk
    weights = _add_bias(np.matmul(q * scale, k.swapaxes(-1, -2), out=out), bias, fresh=out is None)
    _hide(weights, allowed, masked_from)
    row_max = None
    if shift:
        row_max = max_last(weights)  # (..., Tq, 1)
        if allowed is not None:
            row_max[~np.isfinite(row_max)] = 0  # fully masked row: avoid inf - inf
        weights -= row_max
    np.exp(weights, out=weights)  # exp(-inf) = 0 for masked keys
    denom = sum_last(weights)
    if allowed is not None:
        denom[denom == 0] = 1  # fully masked row: zero weights, not 0 / 0
    if normalise:
        weights /= denom
    return weights, row_max, denom


def attention_forward(q, k, v, allowed, bias, drop, training, keep_weights):
    """q: (B, H, Tq, d); k, v: (B, H, Tk, d); allowed, bias: None or broadcastable to
    (B, H, Tq, Tk). Returns (out (B, H, Tq, d), cache), as the reference `ops.attention.attend`.

    keep_weights=True keeps the weights (B, H, Tq, Tk) for the backward (and for plots).
    keep_weights=False keeps, per query, only lse = row max + log(denominator) (B, H, Tq, 1)
    (log(denominator) alone when the scores are bounded and no max was subtracted),
    and the backward recomputes each piece's weights as exp(scores - lse) (as flash attention
    does, and PyTorch's scaled_dot_product_attention): cache["weights"] is then None. A piece's
    weights are left undivided, exp(scores - max), and its (Tq, d) output is divided by the
    denominator instead. The dropout's mask is drawn piece by piece, from the same stream as
    with kept weights (its draw depends on the shape alone, and dropout(e) / denom =
    dropout(e / denom)), and kept as bits (np.packbits), 1/32 of float32's bytes.
    keep_weights=None: kept unless training and over KEEP_WEIGHTS_BYTES.
    """
    if keep_weights is None:  # big weights are not kept for a training backward: it recomputes them
        keep_weights = not training or weights_nbytes(q, k) <= KEEP_WEIGHTS_BYTES
    Tq = q.shape[-2]
    scale = np.asarray(1.0 / math.sqrt(q.shape[-1]), dtype=q.dtype)
    pieces = _pieces(q, k, v, allowed, bias)
    lead = np.broadcast_shapes(q.shape[:-2], k.shape[:-2])  # (B, H), or what q and k broadcast to
    w_dtype = np.result_type(q, k) if bias is None else np.result_type(q, k, bias)
    out = np.empty(
        np.broadcast_shapes(lead, v.shape[:-2]) + (Tq, v.shape[-1]), dtype=np.result_type(w_dtype, v)
    )
    cache = dict(q=q, k=k, v=v, allowed=allowed, bias=bias, scale=scale, pieces=pieces, out=out, lane="fast")
    if keep_weights:
        cache.update(_forward_kept(q, k, v, allowed, bias, drop, scale, pieces, lead, w_dtype, out))
    else:
        cache.update(_forward_recomputed(q, k, v, allowed, bias, drop, scale, pieces, lead, w_dtype, out))
    return out, cache


def _forward_kept(q, k, v, allowed, bias, drop, scale, pieces, lead, w_dtype, out) -> dict:
    """The forward that keeps the weights (B, H, Tq, Tk) and the dropout's mask (if any)."""
    B, Tq, Tk = q.shape[0], q.shape[-2], k.shape[-2]
    # keys after a piece's last visible one get weight 0 (they are not computed)
    trimmed = any(p.keys < Tk for p in pieces)
    weights = (np.zeros if trimmed else np.empty)(lead + (Tq, Tk), dtype=w_dtype)
    drop_mask = None
    for p in pieces:
        w = _softmax_weights(
            _rows(q, p, B),
            _rows(k, p, B, keys=True),
            _cut(allowed, p, B, Tq, Tk),
            _cut(bias, p, B, Tq, Tk),
            scale,
            out=_cut(weights, p, B, Tq, Tk),
            masked_from=p.masked_from,
        )[0]
        dropped, mask_rows = drop(w)
        if mask_rows is not None and len(pieces) == 1:
            drop_mask = mask_rows
        elif mask_rows is not None:  # the pieces' masks in one array, as the weights
            drop_mask = np.zeros(lead + (Tq, Tk), dtype=mask_rows.dtype) if drop_mask is None else drop_mask
            _cut(drop_mask, p, B, Tq, Tk)[...] = mask_rows
        np.matmul(dropped, _rows(v, p, B, keys=True), out=_rows(out, p, B))
    return dict(weights=weights, drop_mask=drop_mask)


def _forward_recomputed(q, k, v, allowed, bias, drop, scale, pieces, lead, w_dtype, out) -> dict:
    """The forward that keeps lse (B, H, Tq, 1) and, with dropout, each piece's mask as bits."""
    B, Tq, Tk = q.shape[0], q.shape[-2], k.shape[-2]
    lse = np.empty(lead + (Tq, 1), dtype=w_dtype)
    shift = bias is not None or not _scores_bounded(q, k, scale, w_dtype)
    drop_bits = []  # per piece: (its mask as bits along the keys, the mask's nonzero value)
    for p in pieces:
        e, row_max, denom = _softmax_weights(
            _rows(q, p, B),
            _rows(k, p, B, keys=True),
            _cut(allowed, p, B, Tq, Tk),
            _cut(bias, p, B, Tq, Tk),
            scale,
            masked_from=p.masked_from,
            normalise=False,
            shift=shift,
        )
        dropped, mask_rows = drop(e)  # dropout(e) / denom = dropout(e / denom): the same draw
        if mask_rows is not None:
            drop_bits.append((np.packbits(mask_rows != 0, axis=-1), mask_rows.max(initial=0)))
        o = _rows(out, p, B)
        np.matmul(dropped, _rows(v, p, B, keys=True), out=o)
        o /= denom  # (Tq, d) divided instead of (Tq, Tk)
        if shift:
            np.log(denom, out=denom)
            np.add(row_max, denom, out=_rows(lse, p, B))
        else:
            np.log(denom, out=_rows(lse, p, B))
    return dict(weights=None, lse=lse, drop_bits=drop_bits or None, drop_mask=None)


def _scores_bounded(q, k, scale, dtype) -> bool:
    """True when no score |q_i . k_j| s can pass log(dtype's max) / 2 - log(Tk) (float32 at
    Tk = 1024: 37), by Cauchy-Schwarz on each (batch row, head)'s longest q and k: exp(score)
    then neither overflows, nor do Tk of them summed, nor does a visible key's underflow to 0,
    so softmax needs no row max subtracted (a pass over the scores saved, and the max's). NaN
    or inf anywhere: False (the shifted form propagates them as the reference does)."""
    Tk = k.shape[-2]
    limit = math.log(float(np.finfo(dtype).max)) / 2 - math.log(Tk)
    q2 = sum_last(q * q).max(axis=-2)  # (B, H, 1): the longest query's squared length
    k2 = sum_last(k * k).max(axis=-2)
    bound = float(np.sqrt((q2 * k2).max()) * scale)
    return bound <= limit  # NaN compares False


def attention_backward(dout: np.ndarray, cache: dict):
    """Returns (dq, dk, dv), the derivative of the forward above, as the reference:
        dv = A^T dout;  dA = dout v^T;  dS = W * (dA' - sum_j dA'_j W_j);  dq = dS k s;  dk = dS^T q s
    where A = W * mask are the (dropped-out) weights, W the softmax weights, dA' = dA * mask
    the gradient of W, and s = 1/sqrt(d) (the bias is a constant: nothing of its own). The row
    sums need no (Tq, Tk) pass: as A v = out,
        sum_j dA'_j W_j = sum_j dA_j A_j = sum_j (dout . v_j) A_j = dout . out   (per row)
    Piece by piece, as the forward went; where the forward did not keep W, each piece's W is
    recomputed (`_backward_recomputed`). A block of queries adds its share into dk and dv (the
    sums over the queries).
    """
    q, k, B = cache["q"], cache["k"], cache["q"].shape[0]
    Tq, Tk = q.shape[-2], k.shape[-2]
    lead, pieces = cache["out"].shape[:-2], cache["pieces"]
    dq = np.empty(lead + q.shape[-2:], dtype=dout.dtype)
    add = any(p.queries != slice(None) for p in pieces)  # blocks of queries share keys
    dk, dv = ((np.zeros if add else np.empty)(lead + k.shape[-2:], dtype=dout.dtype) for _ in range(2))
    if cache["weights"] is None:
        _backward_recomputed(dout, cache, dq, dk, dv, add)
        return dq, dk, dv
    rowsum = sum_last(dout * cache["out"])  # sum_j dA'_j W_j, (B, H, Tq, 1)
    v = cache["v"]
    for p in pieces:
        _attention_backward_rows(
            _rows(dout, p, B),
            _rows(rowsum, p, B),
            _rows(q, p, B),
            _rows(k, p, B, keys=True),
            _rows(v, p, B, keys=True),
            _cut(cache["weights"], p, B, Tq, Tk),
            _cut(cache["drop_mask"], p, B, Tq, Tk),
            cache["scale"],
            _rows(dq, p, B),
            _rows(dk, p, B, keys=True),
            _rows(dv, p, B, keys=True),
            add,
        )
    return dq, dk, dv


def _attention_backward_rows(dout, rowsum, q, k, v, w, drop_mask, scale, dq, dk, dv, add):
    """The formulas above on one piece with kept weights w, into dq, and into (add=False) or
    onto (add=True) dk, dv."""
    dropped = w if drop_mask is None else w * drop_mask  # A, as the forward's dropout gave it
    if add:
        dv += dropped.swapaxes(-1, -2) @ dout
    else:
        np.matmul(dropped.swapaxes(-1, -2), dout, out=dv)  # (B, H, Tk, d)
    dscores = dout @ v.swapaxes(-1, -2)  # dA, (B, H, Tq, Tk)
    if drop_mask is not None:
        dscores *= drop_mask  # dA', the dropout's backward
    # dS = W * (dA' - sum_j dA'_j W_j) in place in dA' (a fresh array)
    dscores -= rowsum
    dscores *= w  # masked keys have w = 0, so 0
    np.matmul(dscores, k, out=dq)  # (B, H, Tq, d); the scale on the smaller products
    dq *= scale
    if add:
        dk += (dscores.swapaxes(-1, -2) @ q) * scale
    else:
        np.matmul(dscores.swapaxes(-1, -2), q, out=dk)  # (B, H, Tk, d)
        dk *= scale


def _augmented(a, column, dtype):
    """[a, column] along the last axis: (..., n, d) and (..., n, 1) or a scalar -> (..., n, d + 1)."""
    out = np.empty(a.shape[:-1] + (a.shape[-1] + 1,), dtype=dtype)
    out[..., :-1] = a
    out[..., -1:] = column
    return out


def _backward_recomputed(dout, cache, dq, dk, dv, add) -> None:
    """The backward where the forward kept lse, not W. Each piece's W comes back in one
    product and one exp, the subtraction of lse done by the product:
        W = exp(where(allowed, [q s, -lse] [k, 1]^T + bias, -inf))
    and without dropout dS in one product and one multiply, the row sums' subtraction done
    by the product too:
        dS = W * (dA - rowsum) = W * ([dout, -rowsum] [v, 1]^T)
    The (…, d + 1) arrays are made piece by piece (a block's queries; its batch rows' keys
    once for all their blocks), so they are in cache when the products read them."""
    q, k, v, out, scale, B = (
        cache["q"],
        cache["k"],
        cache["v"],
        cache["out"],
        cache["scale"],
        cache["q"].shape[0],
    )
    Tq, Tk, pieces = q.shape[-2], k.shape[-2], cache["pieces"]
    w_dtype = cache["lse"].dtype  # the scores' dtype (a wider bias widens them)
    drop_bits, rows = cache["drop_bits"], None
    for i, p in enumerate(pieces):
        if p.rows != rows:  # [k, 1] and [v, 1], (B, H, Tk, d + 1), of the piece's batch rows
            rows = p.rows
            ka = _augmented(_batch(k, p, B), 1, w_dtype)
            va = _augmented(_batch(v, p, B), 1, v.dtype) if drop_bits is None else None
        qa = _augmented(_rows(q, p, B), -_rows(cache["lse"], p, B), w_dtype)  # [q s, -lse]
        qs = qa[..., :-1]
        qs *= scale
        w = _add_bias(
            np.matmul(qa, ka[..., : p.keys, :].swapaxes(-1, -2)),
            _cut(cache["bias"], p, B, Tq, Tk),
            fresh=False,  # the scores have the bias's dtype already
        )
        _hide(w, _cut(cache["allowed"], p, B, Tq, Tk), p.masked_from)
        np.exp(w, out=w)  # W, (B, H, Tq, Tk): exp(-inf) = 0 for hidden keys
        douts, dvs = _rows(dout, p, B), _rows(dv, p, B, keys=True)
        rowsum = sum_last(douts * _rows(out, p, B))  # sum_j dA'_j W_j, (B, H, Tq, 1)
        if drop_bits is None:
            dropped = w
            douta = _augmented(douts, -rowsum, dout.dtype)  # [dout, -rowsum]
            dscores = douta @ va[..., : p.keys, :].swapaxes(-1, -2)  # dA - rowsum
        else:  # the forward's mask, back from its bits
            bits, value = drop_bits[i]
            mask = np.unpackbits(bits, axis=-1, count=w.shape[-1]).astype(w.dtype)
            mask *= value
            dropped = w * mask  # A
            dscores = douts @ _rows(v, p, B, keys=True).swapaxes(-1, -2)  # dA
            dscores *= mask  # dA'
            dscores -= rowsum
        if add:
            dvs += dropped.swapaxes(-1, -2) @ douts
        else:
            np.matmul(dropped.swapaxes(-1, -2), douts, out=dvs)  # (B, H, Tk, d)
        dscores *= w  # dS; hidden keys have w = 0, so 0
        dqs = _rows(dq, p, B)
        np.matmul(dscores, _rows(k, p, B, keys=True), out=dqs)  # (B, H, Tq, d)
        dqs *= scale
        if add:
            _rows(dk, p, B, keys=True)[...] += dscores.swapaxes(-1, -2) @ qs
        else:
            np.matmul(dscores.swapaxes(-1, -2), qs, out=_rows(dk, p, B, keys=True))
