"""GPT: shapes, loss, whole-model gradient check in float64, weight tying, errors, training."""

from __future__ import annotations

import math

import numpy as np
import pytest

from scratchformer.errors import ConfigError, DataError, ShapeError
from scratchformer.gradcheck import numerical_gradient, relative_error
from scratchformer.models import GPT, GPTConfig
from scratchformer.nn import (
    BackwardError,
    DecoderBlock,
    LearnedPositionalEmbedding,
    SinusoidalPositionalEncoding,
)
from scratchformer.ops import IGNORE_INDEX

TINY = dict(vocab_size=7, block_size=6, n_layer=2, n_head=2, n_embd=8)


def _ids(rng, shape, vocab):
    return rng.integers(0, vocab, size=shape)


# -- config -------------------------------------------------------------------------------------
def test_config_defaults():
    c = GPTConfig()
    assert (c.norm_first, c.positional, c.activation, c.tie_weights, c.bias) == (
        True,
        "learned",
        "gelu",
        True,
        True,
    )
    assert c.inner_size == 4 * c.n_embd and c.layer_norm_eps == 1e-5 and c.dtype == "float32"
    assert GPTConfig(n_embd=16, n_head=2, n_inner=40).inner_size == 40
    assert GPTConfig.from_dict(c.to_dict()) == c


@pytest.mark.parametrize(
    "field, value",
    [
        ("vocab_size", 0),
        ("block_size", -1),
        ("n_layer", 1.5),
        ("n_head", 5),
        ("n_embd", True),
        ("dropout", 1.0),
        ("activation", "swish"),
        ("positional", "rotary"),
        ("dtype", "float16"),
        ("layer_norm_eps", 0.0),
        ("n_inner", 0),
        ("tie_weights", "yes"),
    ],
)
def test_config_errors_name_the_field(field, value):
    with pytest.raises(ConfigError, match=field if field != "n_head" else "n_head"):
        GPTConfig(**{**TINY, field: value})


def test_from_dict_rejects_unknown_fields():
    with pytest.raises(ConfigError, match="n_embed"):
        GPTConfig.from_dict({**TINY, "n_embed": 8})


@pytest.mark.parametrize("model", ["GPT", "TransformerClassifier", "Seq2SeqTransformer"])
def test_models_take_only_their_own_config(model):
    import scratchformer.models as models

    for wrong in (
        dict(TINY),
        GPTConfig(**TINY)
        if model != "GPT"
        else models.ClassifierConfig(
            vocab_size=8, n_classes=2, max_len=4, n_embd=8, n_head=2, n_layer=1, n_inner=16
        ),
    ):
        with pytest.raises(ConfigError, match=f"^{model} needs a \\w+Config, got {type(wrong).__name__}$"):
            getattr(models, model)(wrong, seed=0)


# -- structure ----------------------------------------------------------------------------------
def test_structure_and_names():
    m = GPT(GPTConfig(**TINY), seed=0)
    assert len(m.h) == 2 and all(isinstance(b, DecoderBlock) and not b.cross_attention for b in m.h)
    assert isinstance(m.wpe, LearnedPositionalEmbedding)
    names = [n for n, _ in m.named_parameters()]
    assert names[:2] == ["wte.weight", "wpe.weight"] and "ln_f.weight" in names
    assert "h.1.self_attn.in_proj_weight" in names and "h.0.ff.fc2.bias" in names
    assert isinstance(GPT(GPTConfig(**TINY, positional="sinusoidal")).wpe, SinusoidalPositionalEncoding)


def test_tied_weights_are_one_parameter():
    m = GPT(GPTConfig(**TINY), seed=0)
    assert m.lm_head.weight is m.wte.weight
    sd = m.state_dict()
    assert "lm_head.weight" not in sd and "wte.weight" in sd
    assert sum(p is m.wte.weight for p in m.parameters()) == 1
    m2 = GPT(GPTConfig(**TINY), seed=1)
    m2.load_state_dict(sd)
    assert m2.lm_head.weight is m2.wte.weight
    np.testing.assert_array_equal(m2.lm_head.weight.data, sd["wte.weight"])
    untied = GPT(GPTConfig(**TINY, tie_weights=False), seed=0)
    assert untied.lm_head.weight is not untied.wte.weight and "lm_head.weight" in untied.state_dict()
    assert untied.num_parameters() == m.num_parameters() + 7 * 8


def test_seed_is_deterministic_and_init_is_gpt2():
    cfg = GPTConfig(vocab_size=50, block_size=16, n_layer=4, n_head=2, n_embd=64)
    a, b, c = GPT(cfg, seed=3), GPT(cfg, seed=3), GPT(cfg, seed=4)
    for k, v in a.state_dict().items():
        np.testing.assert_array_equal(v, b.state_dict()[k])
    assert not np.array_equal(a.wte.weight.data, c.wte.weight.data)
    assert abs(a.wte.weight.data.std() - 0.02) < 0.002
    assert abs(a.h[0].ff.fc1.weight.data.std() - 0.02) < 0.002
    resid = 0.02 / math.sqrt(2 * 4)
    assert abs(a.h[0].ff.fc2.weight.data.std() - resid) < 0.1 * resid
    assert abs(a.h[1].self_attn.out_proj.weight.data.std() - resid) < 0.1 * resid
    assert not a.h[0].self_attn.in_proj_bias.data.any() and not a.h[0].ff.fc1.bias.data.any()


# -- forward -------------------------------------------------------------------------------------
def test_forward_shapes_and_float32_default():
    m = GPT(GPTConfig(**TINY), seed=0)
    idx = _ids(np.random.default_rng(0), (3, 5), 7)
    logits, loss = m(idx)
    assert logits.shape == (3, 5, 7) and logits.dtype == np.float32 and loss is None
    logits, loss = m(idx, idx)
    assert isinstance(loss, float) and np.isfinite(loss)
    assert all(p.data.dtype == np.float32 for p in m.parameters())


def test_loss_at_init_is_about_log_vocab():
    m = GPT(GPTConfig(vocab_size=65, block_size=32, n_layer=2, n_head=4, n_embd=32), seed=0)
    rng = np.random.default_rng(1)
    _, loss = m(_ids(rng, (4, 32), 65), _ids(rng, (4, 32), 65))
    assert abs(loss - math.log(65)) < 0.05


def test_ignore_index_is_honoured():
    m = GPT(GPTConfig(**TINY), seed=0)
    rng = np.random.default_rng(0)
    idx, tgt = _ids(rng, (2, 6), 7), _ids(rng, (2, 6), 7)
    tgt[0, 4:] = IGNORE_INDEX
    tgt[1, 0] = IGNORE_INDEX
    logits, loss = m(idx, tgt)
    logp = logits - logits.max(-1, keepdims=True)
    logp = logp - np.log(np.exp(logp).sum(-1, keepdims=True))
    valid = tgt != IGNORE_INDEX
    expected = -logp[valid, tgt[valid]].mean()
    assert loss == pytest.approx(expected, rel=1e-5)
    with pytest.raises(DataError, match="outside"):  # one ignore index: -1 is an error, not padding
        m(idx, np.where(valid, tgt, -1))
    # ignored positions get no gradient signal. The mean over the n valid positions is linear,
    # so n * grad(loss) must equal the sum of the gradients of each valid position alone; a
    # backward that leaked a signal from the ignored positions would count it once on the
    # left and n times on the right.
    m.to(np.float64)

    def grad(targets):
        m.zero_grad()
        m(idx, targets)
        m.backward()
        return np.concatenate([p.grad.ravel() for p in m.parameters()])

    total = np.zeros_like(grad(tgt))
    for r, c in zip(*np.nonzero(valid)):
        alone = np.full_like(tgt, IGNORE_INDEX)
        alone[r, c] = tgt[r, c]
        total += grad(alone)
    np.testing.assert_allclose(valid.sum() * grad(tgt), total, rtol=1e-9, atol=1e-12)


# -- gradient check ------------------------------------------------------------------------------
def _loss_fn(m, idx, tgt):
    return lambda: m(idx, tgt)[1]


@pytest.mark.parametrize(
    "overrides",
    [
        {},  # pre-norm, learned positions, exact GELU, tied
        {"positional": "sinusoidal", "norm_first": False},
        {"tie_weights": False, "activation": "gelu_tanh"},
        {"bias": False, "activation": "relu", "n_inner": 12},
        {"attn_only": True},  # no feed-forward (the induction-heads toy model)
        {"attn_only": True, "norm_first": False, "tie_weights": False},
    ],
    ids=[
        "default",
        "sinusoidal-postnorm",
        "untied-geluTanh",
        "nobias-relu",
        "attn-only",
        "attn-only-postnorm",
    ],
)
def test_gradcheck_whole_gpt_float64(overrides):
    m = GPT(GPTConfig(**TINY, dtype="float64", **overrides), seed=0)
    rng = np.random.default_rng(0)
    for p in m.parameters():  # larger weights than the 0.02 init exercise every path
        p.data[...] = rng.normal(0, 0.5, p.shape) + (1.0 if p.data.ndim == 1 else 0.0)  # LayerNorm gains ~1
    idx, tgt = _ids(rng, (2, 6), 7), _ids(rng, (2, 6), 7)
    tgt[0, -2:] = IGNORE_INDEX  # ignored positions (the data pipeline's padding)
    tgt[1, 2] = IGNORE_INDEX
    m.zero_grad()
    m(idx, tgt)
    m.backward()
    f = _loss_fn(m, idx, tgt)
    errors = {
        name: relative_error(p.grad, numerical_gradient(f, p.data, eps=1e-6))
        for name, p in m.named_parameters()
    }
    worst = max(errors, key=errors.get)
    assert errors[worst] <= 5e-8, f"{worst}: {errors[worst]:.2e}"
    assert len(errors) == len(m.parameters())


def test_gradients_accumulate_and_scale():
    m = GPT(GPTConfig(**TINY, dtype="float64"), seed=0)
    rng = np.random.default_rng(0)
    idx, tgt = _ids(rng, (2, 6), 7), _ids(rng, (2, 6), 7)
    m.zero_grad()
    m(idx, tgt)
    m.backward()
    once = [p.grad.copy() for p in m.parameters()]
    m(idx, tgt)
    m.backward(dloss=0.5)
    for g, p in zip(once, m.parameters()):
        np.testing.assert_allclose(p.grad, 1.5 * g, rtol=1e-12, atol=1e-15)


# -- errors ---------------------------------------------------------------------------------------
def test_bad_idx_errors():
    m = GPT(GPTConfig(**TINY), seed=0)
    with pytest.raises(DataError, match="integer"):
        m(np.zeros((1, 3), dtype=np.float32))
    with pytest.raises(DataError, match=r"\[0, 7\)"):
        m(np.array([[1, 7]]))
    with pytest.raises(DataError, match=r"\[0, 7\)"):
        m(np.array([[-2, 1]]))
    with pytest.raises(ShapeError, match="block_size"):
        m(np.zeros((1, 7), dtype=np.int64))
    with pytest.raises(ShapeError, match="2-D"):
        m(np.zeros(3, dtype=np.int64))
    with pytest.raises(ShapeError, match="targets"):
        m(np.zeros((1, 3), dtype=np.int64), np.zeros((1, 4), dtype=np.int64))
    with pytest.raises(DataError, match="targets"):
        m(np.zeros((1, 3), dtype=np.int64), np.zeros((1, 3)))


def test_backward_needs_targets_and_training_mode():
    m = GPT(GPTConfig(**TINY), seed=0)
    idx = np.zeros((1, 4), dtype=np.int64)
    with pytest.raises(BackwardError):
        m.backward()
    m(idx)
    with pytest.raises(BackwardError, match="needs a forward with targets"):
        m.backward()
    m.eval()
    _, loss = m(idx, idx)
    assert loss is not None  # eval mode still reports the loss
    with pytest.raises(BackwardError, match="call module.train()"):
        m.backward()
    m.train()
    m(idx, idx)
    m.backward()
    with pytest.raises(BackwardError):
        m.backward()  # each backward consumes one forward


def test_dropout_trains_and_eval_is_deterministic():
    m = GPT(GPTConfig(**TINY, dropout=0.3), seed=0)
    idx = _ids(np.random.default_rng(0), (2, 6), 7)
    a, _ = m(idx, idx)
    m.backward()
    b, _ = m(idx, idx)
    assert not np.allclose(a, b)
    m.eval()
    np.testing.assert_array_equal(m(idx)[0], m(idx)[0])


def test_to_float64_updates_config():
    m = GPT(GPTConfig(**TINY), seed=0).to(np.float64)
    assert m.config.dtype == "float64" and m(np.zeros((1, 2), dtype=np.int64))[0].dtype == np.float64
    assert m.lm_head.weight is m.wte.weight


# -- training -------------------------------------------------------------------------------------
def test_sgd_on_a_repeated_sequence_lowers_the_loss():
    cfg = GPTConfig(vocab_size=11, block_size=16, n_layer=2, n_head=2, n_embd=32)
    m = GPT(cfg, seed=0)
    seq = np.tile(np.arange(11), 3)[:17]
    idx, tgt = seq[None, :-1], seq[None, 1:]
    losses = []
    for _ in range(40):
        m.zero_grad()
        _, loss = m(idx, tgt)
        m.backward()
        for p in m.parameters():
            p.data -= 0.5 * p.grad
        losses.append(loss)
    assert losses[-1] < 0.5 * losses[0], losses[::8]


def test_bias_false_removes_every_bias_like_nanogpt():
    """nanoGPT's bias=False drops the biases of the Linear *and* LayerNorm layers: its CPU
    tinyshakespeare model (4 layers, 4 heads, 128 wide, 65 characters, block 64) has 804,096."""
    model = GPT(GPTConfig(vocab_size=65, block_size=64, n_layer=4, n_head=4, n_embd=128, bias=False))
    assert not [name for name, _ in model.named_parameters() if name.endswith("bias")]
    assert sum(p.data.size for p in model.parameters()) == 804_096
