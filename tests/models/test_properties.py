"""Property tests (hypothesis): invariants that must hold for any input, not just a chosen one."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from scratchformer.nn import (
    DecoderBlock,
    Dropout,
    Embedding,
    EncoderBlock,
    FeedForward,
    LayerNorm,
    LearnedPositionalEmbedding,
    Linear,
    MultiHeadAttention,
    manual_seed,
)
from scratchformer.ops import attention_forward, log_softmax_forward, softmax_forward

FEW = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
D, H, FF = 8, 2, 16

finite = st.floats(-1e4, 1e4, allow_nan=False, allow_infinity=False, width=64)
seeds = st.integers(0, 2**32 - 1)


def randn(seed, *shape):
    return np.random.default_rng(seed).standard_normal(shape)


# ---------------------------------------------------------------------------------------------
@FEW
@given(
    hnp.arrays(np.float64, hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=7), elements=finite)
)
def test_softmax_rows_sum_to_one(x):
    y = softmax_forward(x)
    assert np.all(np.isfinite(y))
    assert np.all((y >= 0) & (y <= 1))
    np.testing.assert_allclose(y.sum(axis=-1), 1.0, rtol=0, atol=1e-12)
    # the largest logit gets the largest probability, and log_softmax agrees with log(softmax)
    np.testing.assert_array_equal(np.take_along_axis(y, x.argmax(-1)[..., None], -1)[..., 0], y.max(-1))
    ls = log_softmax_forward(x)
    assert np.all(ls <= 1e-15)
    np.testing.assert_allclose(np.exp(ls), y, rtol=0, atol=1e-12)


@FEW
@given(
    st.integers(1, 5),
    st.integers(1, 5),
    seeds,
    st.data(),
    st.booleans(),
)
def test_masked_attention_weights_are_exactly_zero(Tq, Tk, seed, data, causal):
    B, Hh, d = 2, 2, 3
    mask = data.draw(hnp.arrays(bool, (B, 1, Tq, Tk)), label="mask")
    q, k, v = randn(seed, B, Hh, Tq, d) * 3, randn(seed + 1, B, Hh, Tk, d) * 3, randn(seed + 2, B, Hh, Tk, d)
    out, cache = attention_forward(q, k, v, mask=mask, causal=causal)
    w = cache["weights"]
    allowed = np.broadcast_to(mask & (np.tri(Tq, Tk, k=Tk - Tq, dtype=bool) if causal else True), w.shape)
    assert np.all(np.isfinite(w)) and np.all(np.isfinite(out))
    assert np.all(w[~allowed] == 0.0)  # exactly zero, not merely tiny
    any_row = allowed.any(-1)
    np.testing.assert_allclose(w.sum(-1)[any_row], 1.0, rtol=0, atol=1e-12)
    assert np.all(w.sum(-1)[~any_row] == 0.0)
    assert np.all(out[~any_row] == 0.0)  # a query with no visible key outputs zeros, not NaN


# ---------------------------------------------------------------------------------------------
# causality: output at t must not depend on inputs after t
@FEW
@given(st.integers(2, 6), st.data(), seeds, st.booleans(), st.booleans())
def test_causal_output_ignores_the_future(T, data, seed, norm_first, cross):
    t = data.draw(st.integers(0, T - 2), label="t")
    manual_seed(seed % 1000)
    blk = DecoderBlock(D, H, FF, norm_first=norm_first, cross_attention=cross, dtype=np.float64).eval()
    x = randn(seed, 2, T, D)
    mem = randn(seed + 1, 2, 3, D) if cross else None
    y = blk(x, mem)
    x2 = x.copy()
    x2[:, t + 1 :] = randn(seed + 2, 2, T - t - 1, D) * 5  # change every token after t
    y2 = blk(x2, mem)
    np.testing.assert_allclose(y2[:, : t + 1], y[:, : t + 1], rtol=0, atol=1e-12)
    assert not np.allclose(y2[:, t + 1 :], y[:, t + 1 :])  # ... while the future itself does change


@FEW
@given(st.integers(2, 6), st.data(), seeds)
def test_causal_attention_ignores_the_future(T, data, seed):
    t = data.draw(st.integers(0, T - 2), label="t")
    manual_seed(seed % 1000)
    mha = MultiHeadAttention(D, H, dtype=np.float64)
    x = randn(seed, 1, T, D)
    y = mha(x, causal=True)
    x2 = x.copy()
    x2[:, t + 1 :] += 3.0
    y2 = mha(x2, causal=True)
    np.testing.assert_allclose(y2[:, : t + 1], y[:, : t + 1], rtol=0, atol=1e-12)
    # and the gradient of position <= t's output never reaches tokens after t
    R = np.zeros_like(y2)
    R[:, : t + 1] = randn(seed + 3, 1, t + 1, D)
    dx, dcontext = mha.backward(R)
    assert dcontext is None  # self-attention: no context was given
    assert np.all(dx[:, t + 1 :] == 0.0)
    assert np.any(dx[:, : t + 1] != 0.0)


# ---------------------------------------------------------------------------------------------
@FEW
@given(seeds, st.booleans(), st.integers(1, 4))
def test_decoder_output_changes_when_encoder_output_changes(seed, norm_first, S):
    manual_seed(seed % 1000)
    blk = DecoderBlock(D, H, FF, norm_first=norm_first, dtype=np.float64).eval()
    x, mem = randn(seed, 2, 3, D), randn(seed + 1, 2, S + 1, D)
    y = blk(x, mem)
    mem2 = mem.copy()
    mem2[:, 0] += randn(seed + 2, 2, D)  # a visible memory position
    y2 = blk(x, mem2)
    assert np.all(np.abs(y2 - y).max(axis=-1) > 1e-9)  # every target position reads the memory
    # ... but a padded-out memory position has no influence at all
    mmask = np.ones((2, 1, 1, S + 1), dtype=bool)
    mmask[..., -1] = False
    mem3 = mem.copy()
    mem3[:, -1] += 10.0
    np.testing.assert_allclose(
        blk(x, mem3, memory_mask=mmask), blk(x, mem, memory_mask=mmask), rtol=0, atol=1e-12
    )


# ---------------------------------------------------------------------------------------------
@FEW
@given(
    hnp.arrays(
        np.float32,
        hnp.array_shapes(min_dims=1, max_dims=4, max_side=6),
        elements=st.floats(-100, 100, width=32),
    ),
    st.floats(0.0, 0.95),
)
def test_eval_mode_dropout_is_identity(x, p):
    d = Dropout(p, rng=np.random.default_rng(0)).eval()
    y = d(x)
    assert y.dtype == x.dtype
    np.testing.assert_array_equal(y, x)
    assert d._cache is None


@FEW
@given(seeds, st.booleans())
def test_eval_mode_block_ignores_dropout(seed, norm_first):
    """A block with dropout > 0 in eval mode equals the same block with dropout 0, bit for bit."""
    manual_seed(seed % 1000)
    a = EncoderBlock(D, H, FF, dropout=0.5, norm_first=norm_first).eval()
    manual_seed(seed % 1000)
    b = EncoderBlock(D, H, FF, dropout=0.0, norm_first=norm_first).eval()
    x = randn(seed, 2, 4, D).astype(np.float32)
    np.testing.assert_array_equal(a(x), b(x))
    np.testing.assert_array_equal(a(x), a(x))
    a.train()
    assert not np.array_equal(a(x), b(x))  # in training mode the dropout really acts


# ---------------------------------------------------------------------------------------------
MODULE_FACTORIES = {
    "linear": (lambda: Linear(D, 5), lambda s: (randn(s, 2, 3, D),)),
    "embedding": (lambda: Embedding(11, D), lambda s: (np.random.default_rng(s).integers(0, 11, (2, 3)),)),
    "layernorm": (lambda: LayerNorm(D), lambda s: (randn(s, 2, 3, D),)),
    "mha-cross": (lambda: MultiHeadAttention(D, H), lambda s: (randn(s, 2, 3, D), randn(s + 1, 2, 4, D))),
    "feedforward": (lambda: FeedForward(D, FF, "gelu_tanh"), lambda s: (randn(s, 2, 3, D),)),
    "learned-pos": (lambda: LearnedPositionalEmbedding(6, D), lambda s: (randn(s, 2, 3, D),)),
    "encoder": (lambda: EncoderBlock(D, H, FF, norm_first=False), lambda s: (randn(s, 2, 3, D),)),
    "decoder": (lambda: DecoderBlock(D, H, FF), lambda s: (randn(s, 2, 3, D), randn(s + 1, 2, 4, D))),
}


def _inputs(kind, seed, dtype):
    return tuple(x.astype(dtype) if x.dtype.kind == "f" else x for x in MODULE_FACTORIES[kind][1](seed))


@FEW
@given(st.sampled_from(sorted(MODULE_FACTORIES)), seeds, st.sampled_from([np.float32, np.float64]))
def test_state_dict_round_trips_exactly(kind, seed, dtype):
    make = MODULE_FACTORIES[kind][0]
    manual_seed(seed % 1000)
    a = make().to(dtype)
    for p in a.parameters():  # randomize everything, LayerNorm and zero-initialised biases included
        p.data[...] = np.random.default_rng(seed).standard_normal(p.shape).astype(dtype)
    manual_seed(seed % 1000 + 1)
    b = make().to(dtype)
    sd = a.state_dict()
    assert any(not np.array_equal(sd[k], v) for k, v in b.state_dict().items())
    b.load_state_dict(sd)
    sd_b = b.state_dict()
    assert list(sd_b) == list(sd)
    for k in sd:
        assert sd_b[k].dtype == sd[k].dtype == dtype
        np.testing.assert_array_equal(sd_b[k], sd[k])
    xs = _inputs(kind, seed, dtype)
    np.testing.assert_array_equal(a.eval()(*xs), b.eval()(*xs))
    # the state dict holds copies: editing it does not touch the module
    for v in sd.values():
        v[...] = 0
    for k, v in a.state_dict().items():
        np.testing.assert_array_equal(v, sd_b[k])


@FEW
@given(st.sampled_from(sorted(MODULE_FACTORIES)), seeds)
def test_gradients_accumulate_over_two_backward_calls(kind, seed):
    manual_seed(seed % 1000)
    m = MODULE_FACTORIES[kind][0]().to(np.float64).train()
    xs = _inputs(kind, seed, np.float64)
    out = m(*xs)
    R1, R2 = randn(seed + 7, *out.shape), randn(seed + 8, *out.shape)

    def grads_for(R):
        m.zero_grad()
        m(*xs)
        m.backward(R)
        return {n: p.grad.copy() for n, p in m.named_parameters()}

    g1, g2 = grads_for(R1), grads_for(R2)
    m.zero_grad()
    m(*xs)
    m.backward(R1)
    m(*xs)
    m.backward(R2)
    for n, p in m.named_parameters():
        np.testing.assert_allclose(p.grad, g1[n] + g2[n], rtol=1e-12, atol=1e-12, err_msg=n)
        assert not np.allclose(p.grad, g1[n]) or np.all(g2[n] == 0), n


@pytest.mark.parametrize("kind", sorted(MODULE_FACTORIES))
def test_zero_grad_resets(kind):
    manual_seed(0)
    m = MODULE_FACTORIES[kind][0]().to(np.float64)
    xs = _inputs(kind, 0, np.float64)
    m.backward(np.ones_like(m(*xs)))
    assert any(np.any(p.grad != 0) for p in m.parameters())
    m.zero_grad()
    assert all(np.all(p.grad == 0) for p in m.parameters())
