"""QK-norm (`qk_norm=True`): RMSNorm on each head's queries and keys before the scores.

Checked as the other layers are: finite differences (scratchformer.gradcheck, float64, bar 5e-8
as tests/nn/test_layers_gradcheck.py) and PyTorch autograd (float64, bar 1e-9 as
tests/nn/test_torch_parity.py), each in both lanes; then its place in the model: the norm comes
before the rotation (Gemma 3's and Qwen 3's order), one (head_size,) weight shared by the heads,
the hook points read what the scores read, the parameter count.
"""

from __future__ import annotations

import numpy as np
import pytest

from scratchformer.errors import ConfigError
from scratchformer.gradcheck import gradcheck
from scratchformer.models import GPT, GPTConfig
from scratchformer.nn import MultiHeadAttention, RMSNorm, manual_seed

pytestmark = pytest.mark.usefixtures("one_torch_thread")
both_lanes = pytest.mark.usefixtures("lane")  # the numerical checks run in each lane

torch = pytest.importorskip("torch", reason="torch not installed: pip install torch==2.13.0")
F = torch.nn.functional

GRAD_TOL = 5e-8  # finite differences in float64 (reached: ~1e-10 to 1e-9)
TORCH_TOL = 1e-9  # max|ours - torch| / max|torch| in float64
D, H, B, T, S = 8, 2, 2, 5, 4
EPS = 1e-5
TINY = dict(vocab_size=7, block_size=6, n_layer=2, n_head=2, n_embd=8, qk_norm=True)


def x_of(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def randomize(module, seed=0):
    """Random weights everywhere: the norms' gains of exactly 1 would hide a bug in their gradient."""
    g = np.random.default_rng(seed)
    for _, p in module.named_parameters():
        p.data[...] = g.standard_normal(p.shape) * 0.5 + (1.0 if p.data.ndim == 1 else 0.0)
    return module


def attention(seed=0, **kwargs) -> MultiHeadAttention:
    manual_seed(seed)
    return randomize(MultiHeadAttention(D, H, qk_norm=True, norm_eps=EPS, **kwargs), seed).to(np.float64)


def t(a, grad=True):
    return torch.tensor(np.asarray(a, np.float64), requires_grad=grad)


def assert_torch_close(name, ours, ref):
    ref = ref.detach().numpy()
    assert ours.shape == ref.shape, f"{name}: shape {ours.shape} != torch {ref.shape}"
    err = float(np.max(np.abs(ours - ref)) / np.max(np.abs(ref)))
    assert err <= TORCH_TOL, f"{name}: max|ours - torch| / max|torch| = {err:.2e}"


def rope_ref(x, theta=10000.0):
    """Hugging Face's apply_rotary_pos_emb (rotate_half) on x (..., T, hs), torch float64."""
    n, hs = x.shape[-2], x.shape[-1]
    freqs = torch.arange(n, dtype=torch.float64)[:, None] / theta ** (
        torch.arange(0, hs, 2, dtype=torch.float64) / hs
    )
    emb = torch.cat((freqs, freqs), dim=-1)
    return x * emb.cos() + torch.cat((-x[..., hs // 2 :], x[..., : hs // 2]), dim=-1) * emb.sin()


# -- finite differences ------------------------------------------------------------------------
@both_lanes
@pytest.mark.parametrize(
    "kwargs,call",
    [
        ({"rope_theta": 10000.0, "n_kv_head": 1, "bias": False}, {"causal": True}),
        ({"alibi": True}, {"causal": True}),
        ({}, {}),  # cross-attention: q from x, k from the context
    ],
    ids=["rope-gqa", "alibi", "cross"],
)
def test_qk_norm_attention_gradcheck(kwargs, call):
    m = attention(**kwargs)
    cross = not call
    inputs = (x_of((B, T, D), 1),) + ((x_of((B, S, D), 2),) if cross else ())
    report = gradcheck(m, *inputs, kwargs=call)
    names = {"input0", "in_proj_weight", "out_proj.weight", "q_norm.weight", "k_norm.weight"}
    assert names | ({"input1"} if cross else set()) <= set(report.errors)
    assert report.max_error <= GRAD_TOL, f"gradcheck failed:\n{report}"


# -- PyTorch ---------------------------------------------------------------------------------
@both_lanes
@pytest.mark.parametrize("rope", [False, True])
def test_qk_norm_attention_matches_torch(rope):
    """Gemma 3's order (transformers' Gemma3Attention, Qwen3Attention): project, split into heads,
    RMSNorm each head over head_size with one (head_size,) weight, then rotate, then attend."""
    Hkv, hs = 1, D // H
    m = attention(bias=True, n_kv_head=Hkv, rope_theta=500.0 if rope else None).train()
    W, b, Wo = t(m.in_proj_weight.data), t(m.in_proj_bias.data), t(m.out_proj.weight.data)
    wq, wk = t(m.q_norm.weight.data), t(m.k_norm.weight.data)
    x, dy = x_of((B, T, D)), x_of((B, T, D), 1)
    tx = t(x)
    q, k, v = (tx @ W.T + b).split([H * hs, Hkv * hs, Hkv * hs], dim=-1)
    q, k, v = (p.reshape(B, T, -1, hs).transpose(1, 2) for p in (q, k, v))
    q, k = F.rms_norm(q, (hs,), wq, EPS), F.rms_norm(k, (hs,), wk, EPS)
    if rope:
        q, k = rope_ref(q, 500.0), rope_ref(k, 500.0)
    k, v = (p.repeat_interleave(H // Hkv, dim=1) for p in (k, v))
    att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    tout = att.transpose(1, 2).reshape(B, T, D) @ Wo.T + t(m.out_proj.bias.data, grad=False)
    assert_torch_close("output", m(x, causal=True), tout)
    tout.backward(torch.from_numpy(dy))
    m.zero_grad()
    dx, _ = m.backward(dy)
    for name, ours, ref in (
        ("dx", dx, tx.grad),
        ("d in_proj_weight", m.in_proj_weight.grad, W.grad),
        ("d in_proj_bias", m.in_proj_bias.grad, b.grad),
        ("d q_norm.weight", m.q_norm.weight.grad, wq.grad),
        ("d k_norm.weight", m.k_norm.weight.grad, wk.grad),
    ):
        assert_torch_close(name, ours, ref)


# -- in the model ------------------------------------------------------------------------------
def test_the_scores_do_not_grow_with_the_projections():
    """Scaling W_q and W_k by 100 changes nothing the scores read (each head's q and k are
    normed, eps aside); without qk_norm it saturates the softmax."""
    x = x_of((1, T, D))
    normed, plain = attention(bias=False), attention(bias=False)
    plain.q_norm = plain.k_norm = None
    before = normed(x, causal=True), plain(x, causal=True)
    for m in (normed, plain):
        m.in_proj_weight.data[: 2 * D] *= 100.0
    after = normed(x, causal=True)  # only eps's share of each norm shrinks
    assert np.abs(after - before[0]).max() <= 1e-4 * np.abs(before[0]).max()
    assert not np.allclose(plain(x, causal=True), before[1], rtol=1e-2)


def test_a_gpt_with_qk_norm_has_the_weights_and_hook_points():
    from scratchformer.lens import run_with_cache

    m = GPT(GPTConfig(**TINY, positional="rope"), seed=0)
    attn = m.h[0].self_attn
    assert isinstance(attn.q_norm, RMSNorm) and attn.q_norm.weight.shape == (D // H,)
    state = m.state_dict()
    assert {"h.1.self_attn.q_norm.weight", "h.1.self_attn.k_norm.weight"} <= set(state)
    without = GPT(GPTConfig(**{**TINY, "positional": "rope", "qk_norm": False}), seed=0)
    assert m.num_parameters() - without.num_parameters() == 2 * 2 * (D // H)  # 2 layers, q and k
    assert GPT.param_count(m.config) == m.num_parameters()
    ids = np.array([[1, 2, 3, 4]])
    _, cache = run_with_cache(m, ids)
    q_in, q_out = cache["blocks.0.attn.q_norm.in"], cache["blocks.0.attn.q_norm.out"]
    assert q_in.shape == q_out.shape == cache["blocks.0.attn.q"].shape == (1, H, 4, D // H)
    eps = m.config.layer_norm_eps  # each head's vector over its own head_size channels
    normed = q_in / np.sqrt((q_in**2).mean(-1, keepdims=True) + eps) * attn.q_norm.weight.data
    np.testing.assert_allclose(q_out, normed, rtol=1e-5)
    # the rotation comes after the norm: position 0 is not rotated, the later ones are
    np.testing.assert_allclose(cache["blocks.0.attn.q"][:, :, 0], q_out[:, :, 0], rtol=1e-6)
    assert not np.allclose(cache["blocks.0.attn.q"][:, :, 1:], q_out[:, :, 1:])
    # a hook on the normed keys reaches the scores
    from scratchformer.lens import run_with_hooks

    logits, _ = m.eval()(ids)
    zeroed, _ = run_with_hooks(m, ids, hooks={"blocks.0.attn.k_norm.out": lambda k, _: k * 0})
    assert not np.allclose(zeroed, logits)


def test_export_refuses_it_in_one_line():
    """No layout declares qk_norm (interop/layout.py): GPT-2's and Llama's otherwise, refused."""
    from scratchformer.interop.hf_lm import hf_layout

    llama = dict(positional="rope", normalization="rmsnorm", activation="swiglu", bias=False)
    for style in ({}, llama):
        with pytest.raises(ConfigError) as refused:
            hf_layout(GPT(GPTConfig(**TINY, **style), seed=0))
        message = str(refused.value)
        assert "\n" not in message and message.count("qk_norm=True") == 2, message  # both layouts say why
        hf_layout(GPT(GPTConfig(**{**TINY, **style, "qk_norm": False}), seed=0))  # held without it


def test_the_backward_walkthrough_checks_every_step(lane):
    from scratchformer.viz.backward import backward_steps

    m = GPT(GPTConfig(**{**TINY, "positional": "rope", "n_kv_head": 1, "dtype": "float64"}), seed=0)
    randomize(m)
    ids = np.array([[1, 2, 3, 4, 5]])
    steps = backward_steps(m, ids[:, :-1], ids[:, 1:], lane=lane)
    assert {"h.0.self_attn.q_norm", "h.1.self_attn.k_norm"} <= {s.name for s in steps}
    wrong = [f"{s.name}: {s.failures()[:1]}" for s in steps if not s.ok]
    assert not wrong, wrong


def test_qk_norm_is_a_boolean():
    with pytest.raises(ConfigError, match="qk_norm"):
        GPTConfig(**{**TINY, "qk_norm": "yes"})
    with pytest.raises(ConfigError, match="qk_norm"):
        MultiHeadAttention(D, H, qk_norm=1)
