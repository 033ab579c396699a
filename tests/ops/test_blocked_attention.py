"""Long context: the fast lane's attention over blocks of queries (scratchformer/fast/attention.py)
against the reference lane (ops/attention.py's formula), and its memory.

Equality: forward and every gradient to float64 rounding (1e-12 relative), with the number of
queries not a multiple of the block, causal and not, with a padding mask, ALiBi's score bias,
rotary positions and grouped-query attention (the layer's own path), and with dropout (the
same mask as the reference, drawn block by block from the same stream). Memory: the peak that
tracemalloc sees (NumPy's allocations) over a forward and backward stays within a bound written
from a block's bytes and the (T, d) arrays, far below one (B, H, T, T) array; the same call
keeping the weights breaks that bound (the check can fail).
"""

import tracemalloc

import numpy as np
import pytest

from scratchformer import fast, ops
from scratchformer.fast import attention as fast_attention

TOL64 = dict(rtol=1e-12, atol=1e-13)


@pytest.fixture(autouse=True)
def fast_lane():
    with fast.reference(False):
        yield


def _inputs(B, H, Tq, Tk, d, dtype=np.float64, seed=3):
    g = np.random.default_rng(seed)
    return tuple(
        g.standard_normal(s).astype(dtype)
        for s in ((B, H, Tq, d), (B, H, Tk, d), (B, H, Tk, d), (B, H, Tq, d))
    )


def _blocks_of(monkeypatch, q, k, block):
    """CHUNK_BYTES such that each batch row goes in blocks of `block` queries."""
    monkeypatch.setattr(fast_attention, "CHUNK_BYTES", block * q.itemsize * q.shape[1] * k.shape[-2])


def _run(q, k, v, dout, keep, dropout=0.0, **kw):
    """(out, dq, dk, dv) of a training forward and its backward, dropout drawn from seed 9."""
    out, cache = ops.attention_forward(
        q, k, v, dropout_p=dropout, rng=np.random.default_rng(9), training=True, keep_weights=keep, **kw
    )
    return (out, *ops.attention_backward(dout, cache)), cache


def _padding(B, Tk, lengths):
    return (np.arange(Tk)[None, :] < np.asarray(lengths)[:, None])[:, None, None, :]  # (B, 1, 1, Tk)


CASES = {
    "causal": dict(Tq=37, Tk=37, causal=True, mask=None),
    "causal Tq<Tk (past keys)": dict(Tq=23, Tk=37, causal=True, mask=None),
    "full": dict(Tq=37, Tk=37, causal=False, mask=None),
    "padding": dict(Tq=37, Tk=37, causal=False, mask=_padding(2, 37, [37, 20])),
    "causal+padding": dict(Tq=37, Tk=37, causal=True, mask=_padding(2, 37, [30, 37])),
}


@pytest.mark.parametrize(
    "case,bias",
    [(c, b) for c in CASES for b in ("none", "alibi", "full") if b != "alibi" or CASES[c]["causal"]],
)  # ALiBi is defined for causal attention only
@pytest.mark.parametrize("keep", [False, True], ids=["recomputed", "kept"])
def test_blocks_equal_the_reference_forward_and_every_gradient(case, bias, keep, monkeypatch):
    """Blocks of 8 of 37 queries (the last block 5), 3 heads: out, dq, dk, dv equal the
    reference lane's to float64 rounding; each block's keys stop at its last visible one."""
    c = CASES[case]
    B, H, d = 2, 3, 5
    q, k, v, dout = _inputs(B, H, c["Tq"], c["Tk"], d)
    b = None
    if bias == "alibi":
        b = ops.alibi_bias(H, c["Tq"], c["Tk"], np.float64)
    elif bias == "full":
        b = np.random.default_rng(4).standard_normal((B, H, c["Tq"], c["Tk"]))
    kw = dict(causal=c["causal"], mask=c["mask"], bias=b)
    with fast.reference():
        want, _ = _run(q, k, v, dout, keep, **kw)
    _blocks_of(monkeypatch, q, k, block=8)
    got, cache = _run(q, k, v, dout, keep, **kw)
    sizes = [len(range(c["Tq"])[p.queries]) for p in cache["pieces"]]
    assert sizes == ([8] * (c["Tq"] // 8) + [c["Tq"] % 8]) * B  # Tq (37, 23) is not a multiple of the block
    if c["causal"] and c["mask"] is None:  # a causal block sees keys up to its diagonal, no further
        past = c["Tk"] - c["Tq"]
        ends = [range(c["Tq"])[p.queries][-1] + 1 + past for p in cache["pieces"]]
        assert [p.keys for p in cache["pieces"]] == ends
        assert [p.masked_from for p in cache["pieces"]] == [e - s + 1 for e, s in zip(ends, sizes)]
    assert (cache["weights"] is None) == (not keep)
    for a, w in zip(got, want):
        assert a.shape == w.shape and np.isfinite(a).all()
        np.testing.assert_allclose(a, w, **TOL64)


@pytest.mark.parametrize("keep", [False, True], ids=["recomputed", "kept"])
def test_dropout_in_blocks_draws_the_references_mask(keep, monkeypatch):
    """Dropout 0.3 in blocks of queries that each cover whole rows of the keys (non-causal):
    the blocks draw, in order, the same random integers as the reference's one draw of the
    whole (B=1) array, so out and every gradient equal the reference's to float64 rounding."""
    q, k, v, dout = _inputs(1, 2, 37, 37, 4)
    with fast.reference():
        want, ref = _run(q, k, v, dout, keep, dropout=0.3)
    _blocks_of(monkeypatch, q, k, block=37)  # one block = the whole row: the reference's draw order
    got, cache = _run(q, k, v, dout, keep, dropout=0.3)
    assert ref["drop_mask"] is not None and (ref["drop_mask"] == 0).any()
    if not keep:
        assert cache["drop_mask"] is None and cache["drop_bits"] is not None  # kept as bits
    for a, w in zip(got, want):
        np.testing.assert_allclose(a, w, **TOL64)


def test_dropout_recomputed_in_blocks_equals_dropout_kept_in_blocks(monkeypatch):
    """Causal blocks of 8 of 37 queries with dropout 0.3: the recomputing forward (mask kept
    as bits) draws the very mask the weight-keeping forward draws, block by block."""
    q, k, v, dout = _inputs(2, 3, 37, 37, 4)
    _blocks_of(monkeypatch, q, k, block=8)
    kept, kc = _run(q, k, v, dout, True, dropout=0.3, causal=True)
    recomputed, rc = _run(q, k, v, dout, False, dropout=0.3, causal=True)
    assert kc["drop_mask"] is not None and rc["weights"] is None
    for a, w in zip(recomputed, kept):
        np.testing.assert_allclose(a, w, **TOL64)


@pytest.mark.parametrize("n_kv_head", [1, 2], ids=["MQA", "GQA"])
def test_the_layer_with_rope_alibi_and_grouped_heads_in_blocks_equals_the_reference(n_kv_head, monkeypatch):
    """MultiHeadAttention (rotary positions or ALiBi, grouped-query heads, causal) over 19
    positions in blocks of 4 queries, the weights recomputed: output, dx and every parameter's
    gradient equal the reference lane's."""
    from scratchformer.nn.attention import MultiHeadAttention

    rng = np.random.default_rng(5)
    x, dy = rng.standard_normal((2, 19, 16)), rng.standard_normal((2, 19, 16))
    for positions in (dict(rope_theta=10000.0), dict(alibi=True)):
        results = []
        for reference in (True, False):
            if not reference:
                monkeypatch.setattr(
                    fast_attention, "CHUNK_BYTES", 4 * 4 * 19 * 8
                )  # 4 queries x 4 heads x 19 keys
                monkeypatch.setattr(fast_attention, "KEEP_WEIGHTS_BYTES", 0)
            attn = MultiHeadAttention(
                16, 4, n_kv_head=n_kv_head, dtype=np.float64, rng=np.random.default_rng(0), **positions
            )
            with fast.reference(reference):
                y = attn(x, causal=True)
                dx, _ = attn.backward(dy)
            results.append((y, dx, *(p.grad.copy() for p in attn.parameters())))
        for a, b in zip(*results):
            np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-13)


def test_the_block_rule_keeps_small_contexts_whole_and_sizes_long_ones_by_bytes():
    """One place chooses the pieces (_pieces, from CHUNK_BYTES): the default configurations'
    attention (T = 16, 64) runs in one piece with its weights kept; medium (T = 256) a few batch
    rows a piece; T = 1024 in blocks of queries whose scores each fit CHUNK_BYTES."""

    def pieces(B, H, T, d, training=True):
        q, k, v, _ = _inputs(B, H, T, T, d, np.float32)
        return ops.attention_forward(q, k, v, causal=True, training=training)[1]

    for B, H, T, d in ((16, 4, 16, 16), (6, 4, 64, 32)):  # names, shakespeare-cpu (a process's half)
        cache = pieces(B, H, T, d)
        assert len(cache["pieces"]) == 1 and cache["weights"] is not None
    cache = pieces(8, 6, 256, 8)  # medium's attention shape, a narrow d for speed
    assert all(p.queries == slice(None) for p in cache["pieces"]) and cache["weights"] is None
    cache = pieces(2, 4, 1024, 4)  # long context
    for p in cache["pieces"]:
        rows = range(1024)[p.queries]
        assert 1 < len(rows) < 1024 and 4 * len(rows) * p.keys * 4 <= fast_attention.CHUNK_BYTES
    assert cache["weights"] is None


def _peak(fn) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("dropout", [0.0, 0.2])
def test_the_peak_memory_is_a_few_blocks_not_the_whole_weights(dropout, monkeypatch):
    """B = 2, H = 2, T = 600, d = 4, float64, causal, blocks of 24 queries: the whole weights
    would be 11.5 MB. The peak of a training forward + backward stays within 3 blocks of scores
    (scores, dS, and dropout's mask) + 14 arrays of (B, H, T, d + 1) (outputs, lse, the block's
    [k, 1] and [v, 1], temporaries) + the mask's bits; keeping the weights breaks it."""
    B, H, T, d, block = 2, 2, 600, 4, 24
    q, k, v, dout = _inputs(B, H, T, T, d)
    _blocks_of(monkeypatch, q, k, block)
    whole = fast_attention.weights_nbytes(q, k)
    block_bytes = 8 * H * block * T
    bound = 3 * block_bytes + 14 * (8 * B * H * T * (d + 1)) + B * H * T * T // 8
    ops.causal_mask(T, T)  # made once per shape, outside the measurement (the layers share it)

    def step(keep):
        return lambda: _run(q, k, v, dout, keep, dropout=dropout, causal=True)

    blocked = _peak(step(False))
    assert blocked <= bound < whole / 4
    assert _peak(step(True)) > bound  # the same step keeping the (B, H, T, T) weights


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_large_scores_take_the_row_max_and_small_ones_need_none(dtype, monkeypatch):
    """Scores bounded by Cauchy-Schwarz (`_scores_bounded`) skip the row max; scores that could
    pass the bound (q 8x longer in float32, 80x in float64) subtract it. Both equal the
    reference, finite: float64 to 1e-12, float32 to 1e-5 relative, and with q 8x longer to
    1e-4 (each score's rounding, and so each weight's relative error, grows with the score)."""
    q, k, v, dout = _inputs(2, 2, 37, 37, 4, dtype)
    tol = TOL64 if dtype == np.float64 else dict(rtol=1e-5, atol=1e-6)
    scale = np.asarray(0.5, dtype)  # 1 / sqrt(d)
    _blocks_of(monkeypatch, q, k, block=8)
    for factor, bounded in ((1, True), (8 if dtype == np.float32 else 80, False)):
        qf = q * dtype(factor)
        assert fast_attention._scores_bounded(qf, k, scale, dtype) == bounded
        with fast.reference():
            want, _ = _run(qf, k, v, dout, False, causal=True)
        got, _ = _run(qf, k, v, dout, False, causal=True)
        if dtype == np.float32 and factor > 1:
            tol = dict(rtol=1e-4, atol=1e-5)
        for a, w in zip(got, want):
            assert np.isfinite(a).all()
            np.testing.assert_allclose(a, w, **tol)
    nan = q.copy()
    nan[0, 0, 3, 1] = np.nan
    assert not fast_attention._scores_bounded(nan, k, scale, dtype)  # NaN: the shifted form, as the reference
