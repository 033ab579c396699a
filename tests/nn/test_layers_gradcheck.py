"""Finite-difference checks (scratchformer.gradcheck.gradcheck, float64) of every layer.

Error measure, per tensor (each float input and each parameter):
    max|analytic - numeric| / max(max|analytic|, max|numeric|)
the worst absolute difference relative to that gradient's own scale -- robust to entries
that are (near) zero. Bar: worst error over all tensors <= 5e-8 (float64 reaches 1e-10 to 5e-9).

Sizes are tiny (d_model 8, 2 heads, T <= 5) so the whole file runs in seconds. Every check runs
through both lanes: the reference ops and the fast lane (scratchformer/fast/).
"""

from __future__ import annotations

import numpy as np
import pytest

from scratchformer.gradcheck import gradcheck
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
    SinusoidalPositionalEncoding,
    manual_seed,
    set_dropout_rng,
)

pytestmark = pytest.mark.usefixtures("lane")

TOL = 5e-8  # reached: 1e-10 to 5e-9; a backward off by a factor 1 + 3e-7 fails
D, H, FF, B, T, S = 8, 2, 16, 2, 4, 5
ACTIVATIONS = ["relu", "gelu", "gelu_tanh"]


def x_of(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def padding_mask(lengths, Tk):
    """(B, 1, 1, Tk) key-padding mask, True = may attend."""
    return (np.arange(Tk)[None, :] < np.asarray(lengths)[:, None])[:, None, None, :]


def assert_ok(report, expected_names):
    assert set(expected_names) <= set(report.errors), (
        f"not checked: {set(expected_names) - set(report.errors)}"
    )
    assert report.max_error <= TOL, f"gradcheck failed:\n{report}"


def randomize(module, seed=0):
    """Random non-trivial weights (LayerNorm ones/zeros and zero biases would hide bugs)."""
    g = np.random.default_rng(seed)
    for _, p in module.named_parameters():
        p.data[...] = g.standard_normal(p.shape) * 0.5
    return module


def param_names(module):
    return [n for n, _ in module.named_parameters()]


# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("bias", [True, False])
def test_linear(bias):
    manual_seed(0)
    m = Linear(5, 3, bias=bias)
    r = gradcheck(m, x_of((B, T, 5)))
    assert_ok(r, ["input0", "weight"] + (["bias"] if bias else []))


def test_embedding_weight_grad_with_repeated_ids():
    manual_seed(0)
    m = Embedding(7, D)
    idx = np.array([[1, 3, 1, 6], [0, 1, 3, 3]])
    r = gradcheck(m, idx)
    assert_ok(r, ["weight"])
    assert "input0" not in r.errors  # integer ids get no gradient


def test_layernorm():
    m = randomize(LayerNorm(D))
    r = gradcheck(m, x_of((B, T, D)) * 3 + 1)
    assert_ok(r, ["input0", "weight", "bias"])


def test_layernorm_without_bias():
    m = randomize(LayerNorm(D, bias=False))
    assert m.bias is None and param_names(m) == ["weight"]
    r = gradcheck(m, x_of((B, T, D)) * 3 + 1)
    assert_ok(r, ["input0", "weight"])


@pytest.mark.parametrize("p", [0.0, 0.4])
def test_dropout(p):
    m = Dropout(p, rng=np.random.default_rng(0))
    r = gradcheck(m, x_of((B, T, D)))
    assert_ok(r, ["input0"])


@pytest.mark.parametrize(
    "kind,kwargs",
    [
        ("self", {}),
        ("self", {"mask": padding_mask([4, 2], T)}),
        ("self", {"causal": True}),
        ("self", {"causal": True, "mask": padding_mask([3, 4], T)}),
        ("cross", {}),
        ("cross", {"mask": padding_mask([5, 2], S)}),
    ],
    ids=["self", "self-padding", "self-causal", "self-causal-padding", "cross", "cross-padding"],
)
@pytest.mark.parametrize("bias", [True, False])
def test_multihead_attention(kind, kwargs, bias):
    manual_seed(1)
    m = randomize(MultiHeadAttention(D, H, bias=bias), seed=1)
    inputs = (x_of((B, T, D), 1),) + ((x_of((B, S, D), 2),) if kind == "cross" else ())
    r = gradcheck(m, *inputs, kwargs=kwargs)
    names = ["input0", "in_proj_weight", "out_proj.weight"] + (
        ["in_proj_bias", "out_proj.bias"] if bias else []
    )
    assert_ok(r, names + (["input1"] if kind == "cross" else []))
    assert set(r.errors) == set(names) | {"input0"} | ({"input1"} if kind == "cross" else set())


@pytest.mark.parametrize("kind", ["self", "cross"])
def test_multihead_attention_with_attention_dropout(kind):
    manual_seed(2)
    m = randomize(MultiHeadAttention(D, H, dropout=0.3), seed=2)
    inputs = (x_of((B, T, D), 3),) + ((x_of((B, S, D), 4),) if kind == "cross" else ())
    r = gradcheck(m, *inputs, kwargs={"causal": kind == "self"})
    assert_ok(r, ["input0", "in_proj_weight"])


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("dropout", [0.0, 0.25])
def test_feedforward(activation, dropout):
    manual_seed(3)
    m = randomize(FeedForward(D, FF, activation, dropout=dropout), seed=3)
    r = gradcheck(m, x_of((B, T, D), 5))
    assert_ok(r, ["input0", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"])


def test_sinusoidal_positional_encoding():
    m = SinusoidalPositionalEncoding(16, D)
    r = gradcheck(m, x_of((B, T, D), 6), kwargs={"offset": 3})
    assert_ok(r, ["input0"])


@pytest.mark.parametrize("offset", [0, 5])
def test_learned_positional_embedding(offset):
    manual_seed(4)
    m = LearnedPositionalEmbedding(12, D)
    r = gradcheck(m, x_of((B, T, D), 7), kwargs={"offset": offset})
    assert_ok(r, ["input0", "weight"])


# ---------------------------------------------------------------------------------------------
# blocks: pre/post norm x activations (x dropout on some), with padding and causal masks
@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("norm_first", [True, False], ids=["pre-norm", "post-norm"])
def test_encoder_block(norm_first, activation):
    manual_seed(5)
    dropout = 0.2 if activation == "gelu" else 0.0
    m = randomize(EncoderBlock(D, H, FF, dropout=dropout, activation=activation, norm_first=norm_first), 5)
    set_dropout_rng(m, np.random.default_rng(0))
    r = gradcheck(m, x_of((B, T, D), 8), kwargs={"mask": padding_mask([4, 3], T)})
    assert_ok(r, ["input0"] + param_names(m))
    assert len(r.errors) == 1 + len(param_names(m)) == 1 + 12


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("norm_first", [True, False], ids=["pre-norm", "post-norm"])
@pytest.mark.parametrize("cross", [True, False], ids=["cross-attn", "gpt"])
def test_decoder_block(cross, norm_first, activation):
    manual_seed(6)
    dropout = 0.2 if activation == "gelu" else 0.0
    m = randomize(
        DecoderBlock(
            D, H, FF, dropout=dropout, activation=activation, norm_first=norm_first, cross_attention=cross
        ),
        6,
    )
    set_dropout_rng(m, np.random.default_rng(0))
    x = x_of((B, T, D), 9)
    if cross:  # Tq = 4 != Tk = 5, with a source padding mask and an extra target padding mask
        r = gradcheck(
            m,
            x,
            x_of((B, S, D), 10),
            kwargs={"memory_mask": padding_mask([5, 3], S), "self_mask": padding_mask([4, 3], T)},
        )
        assert_ok(r, ["input0", "input1"] + param_names(m))
        assert "cross_attn.in_proj_weight" in r.errors
    else:
        r = gradcheck(m, x, kwargs={"self_mask": padding_mask([4, 3], T)})
        assert_ok(r, ["input0"] + param_names(m))
        assert not any(n.startswith("cross") for n in r.errors)


@pytest.mark.parametrize("norm_first", [True, False], ids=["pre-norm", "post-norm"])
def test_attention_only_decoder_block(norm_first):
    """feedforward=False: x + attn(norm(x)) alone; no ff or ff_norm parameters, and the
    gradient still reaches the attention and its norm."""
    manual_seed(7)
    m = randomize(DecoderBlock(D, H, FF, norm_first=norm_first, cross_attention=False, feedforward=False), 7)
    assert m.ff is None and m.ff_norm is None
    r = gradcheck(m, x_of((B, T, D), 11), kwargs={"self_mask": padding_mask([4, 3], T)})
    assert_ok(r, ["input0"] + param_names(m))
    assert not any(n.startswith("ff") for n in r.errors) and len(param_names(m)) == 6


def test_gradcheck_detects_a_wrong_backward():
    """The checker must be able to fail: break LayerNorm's backward and watch it report."""

    class BadLayerNorm(LayerNorm):
        def backward(self, dy):
            return super().backward(dy) * 1.001

    r = gradcheck(BadLayerNorm(D), x_of((B, T, D), 11))
    assert r.errors["input0"] > 1e-4
    assert r.errors["weight"] <= TOL
    assert "worst" in str(r)


def test_gradcheck_leaves_the_module_untouched():
    manual_seed(7)
    m = Linear(3, 2)
    before = {k: v.copy() for k, v in m.state_dict().items()}
    gradcheck(m, x_of((2, 3), 12))
    assert m.weight.data.dtype == np.float32 and np.all(m.weight.grad == 0)
    for k, v in m.state_dict().items():
        np.testing.assert_array_equal(v, before[k])
