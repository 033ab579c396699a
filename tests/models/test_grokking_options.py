"""The grokking paper's two model details (Nanda et al. 2023's code): its initialisation
(`init="grokking"`) and the loss's log-softmax in float64 (`loss_dtype="float64"`)."""

import math

import numpy as np

from scratchformer.models import GPT, GPTConfig

SMALL = dict(
    vocab_size=32,
    block_size=3,
    n_layer=1,
    n_head=4,
    n_embd=64,
    n_inner=256,
    activation="relu",
    normalization="none",
    tie_weights=False,
)


def test_grokking_init_scales_every_weight_by_the_width_and_the_unembedding_by_the_vocabulary():
    m = GPT(GPTConfig(**SMALL, init="grokking"), seed=0)
    C, V = SMALL["n_embd"], SMALL["vocab_size"]
    attn, ff = m.h[0].self_attn, m.h[0].ff
    for w in (
        m.wte.weight,
        m.wpe.weight,
        attn.in_proj_weight,
        attn.out_proj.weight,
        ff.fc1.weight,
        ff.fc2.weight,
    ):
        assert abs(w.data.std() / (1 / math.sqrt(C)) - 1) < 0.1, w.shape
    assert abs(m.lm_head.weight.data.std() / (1 / math.sqrt(V)) - 1) < 0.1
    for b in (attn.in_proj_bias, attn.out_proj.bias, ff.fc1.bias, ff.fc2.bias):
        assert not b.data.any()
    # gpt2's 0.02 is 6x smaller at this width: the two schemes are told apart
    assert GPT(GPTConfig(**SMALL), seed=0).wte.weight.data.std() < 0.03


def _confident(loss_dtype):
    """A model whose logits pick the target by a wide margin: the loss is below float32's
    resolution near its value (log(1 + tiny) rounds to 0)."""
    m = GPT(GPTConfig(**SMALL, loss_dtype=loss_dtype), seed=0)
    idx = np.array([[1, 2, 3], [4, 5, 6]])
    for p in m.parameters():  # every block's output 0: the final residual is the embedding alone
        p.data[...] = 0
    m.wte.weight.data[:, 0] = 1.0
    m.lm_head.weight.data[7, 0] = 30.0  # every position predicts 7 by a margin of 30: loss ~ 31 e^-30
    targets = np.full((2, 3), 7)
    return m, idx, targets


def test_float64_loss_resolves_a_loss_that_float32_rounds_to_zero():
    exact = math.log1p((SMALL["vocab_size"] - 1) * math.exp(-30.0))
    m32, idx, t = _confident(None)
    _, loss32 = m32(idx, t)
    m64, idx, t = _confident("float64")
    _, loss64 = m64(idx, t)
    assert loss32 == 0.0  # the failure the option exists for: float32 cannot hold it
    assert abs(loss64 / exact - 1) < 1e-3  # log(1 + 3e-12) in float64: ~1e-4 relative
    m64.train()
    m64(idx, t)
    m64.zero_grad()
    m64.backward()
    assert m64.lm_head.weight.grad.dtype == np.float32  # handed back in the model's dtype
    assert np.abs(m64.lm_head.weight.grad).max() > 0  # and not rounded away


def test_float64_loss_gives_the_same_gradients_as_the_float32_loss_at_an_ordinary_loss():
    idx = np.random.default_rng(0).integers(0, SMALL["vocab_size"], (4, 3))
    t = np.random.default_rng(1).integers(0, SMALL["vocab_size"], (4, 3))
    grads = []
    for loss_dtype in (None, "float64"):
        m = GPT(GPTConfig(**SMALL, init="grokking", loss_dtype=loss_dtype), seed=0)
        m.train()
        _, loss = m(idx, t)
        m.zero_grad()
        m.backward()
        grads.append((loss, [p.grad.copy() for p in m.parameters()]))
    (l32, g32), (l64, g64) = grads
    assert abs(l32 - l64) < 1e-5
    for a, b in zip(g32, g64):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
