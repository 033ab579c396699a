"""The modern blocks: rotary positions (RoPE), RMSNorm and the SwiGLU feed-forward.

Each is checked three ways: its own properties (a rotation keeps norms and makes scores depend
on relative positions only; RMSNorm's output has unit root mean square), finite differences
(scratchformer.gradcheck, float64, bar 5e-8 as tests/nn/test_layers_gradcheck.py) and PyTorch
autograd (float64, bar 1e-9 as tests/nn/test_torch_parity.py). Then the GPT that uses them: the KV
cache's position offset, checkpoints and the command line, and the figures (the one-head figure
must show the rotated scores the model softmaxes).
"""

from __future__ import annotations

import numpy as np
import pytest
import tiny_run

from scratchformer.errors import ConfigError, ShapeError
from scratchformer.gradcheck import gradcheck, numerical_gradient, relative_error
from scratchformer.models import GPT, GPTConfig
from scratchformer.nn import (
    DecoderBlock,
    FeedForward,
    KVCache,
    LayerNorm,
    MultiHeadAttention,
    RMSNorm,
    manual_seed,
)
from scratchformer.ops import (
    IGNORE_INDEX,
    attention_forward,
    rmsnorm_forward,
    rope_backward,
    rope_forward,
    rope_tables,
    rotate_half,
    swiglu_backward,
    swiglu_forward,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

torch = pytest.importorskip("torch", reason="torch not installed: pip install torch==2.13.0")
F = torch.nn.functional

GRAD_TOL = 5e-8  # finite differences in float64 (reached: ~1e-10 to 1e-9)
TORCH_TOL = 1e-9  # max|ours - torch| / max|torch| in float64
D, H, FF, B, T = 8, 2, 12, 2, 5
MODERN = dict(positional="rope", normalization="rmsnorm", activation="swiglu", bias=False)


def x_of(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def randomize(module, seed=0, scale=0.5):
    """Random weights everywhere (gains of exactly 1 would hide a bug in the weight's gradient)."""
    g = np.random.default_rng(seed)
    for _, p in module.named_parameters():
        p.data[...] = g.standard_normal(p.shape) * scale
    return module


def assert_grad_ok(report, names):
    assert set(names) <= set(report.errors), f"not checked: {set(names) - set(report.errors)}"
    assert report.max_error <= GRAD_TOL, f"gradcheck failed:\n{report}"


def assert_torch_close(name, ours, ref):
    ref = ref.detach().numpy()
    assert ours.shape == ref.shape, f"{name}: shape {ours.shape} != torch {ref.shape}"
    err = float(np.max(np.abs(ours - ref)) / np.max(np.abs(ref)))
    assert err <= TORCH_TOL, f"{name}: max|ours - torch| / max|torch| = {err:.2e}"


def t(a, grad=True):
    return torch.tensor(np.asarray(a, np.float64), requires_grad=grad)


# -- RoPE: the op ---------------------------------------------------------------------------------
def test_rope_is_a_rotation_by_position():
    hs = 8
    cos, sin = rope_tables(0, 6, hs)
    x = x_of((6, hs))
    y = rope_forward(x, cos, sin)
    np.testing.assert_allclose(y[0], x[0])  # position 0: angle 0
    np.testing.assert_allclose(np.linalg.norm(y, axis=-1), np.linalg.norm(x, axis=-1))  # a rotation
    # the halves convention of GPT-NeoX / HF Llama: plane i is channels (i, i + hs/2)
    p, i = 3, 1
    angle = p * 10000.0 ** (-2 * i / hs)
    x1, x2 = x[p, i], x[p, i + hs // 2]
    np.testing.assert_allclose(
        [y[p, i], y[p, i + hs // 2]],
        [x1 * np.cos(angle) - x2 * np.sin(angle), x2 * np.cos(angle) + x1 * np.sin(angle)],
    )
    np.testing.assert_array_equal(rotate_half(np.arange(4.0)), [-2.0, -3.0, 0.0, 1.0])


def test_rope_scores_depend_on_the_relative_position_only():
    hs = 8
    q, k = x_of((hs,), 1), x_of((hs,), 2)

    def score(m, n):
        qm = rope_forward(q[None], *rope_tables(m, 1, hs))[0]
        kn = rope_forward(k[None], *rope_tables(n, 1, hs))[0]
        return qm @ kn

    assert score(5, 2) == pytest.approx(score(13, 10), abs=1e-12)
    assert score(5, 2) == pytest.approx(score(3, 0), abs=1e-12)
    assert score(5, 2) != pytest.approx(score(5, 3), abs=1e-3)


def test_rope_backward_is_the_transposed_rotation():
    hs = 6
    cos, sin = rope_tables(2, 4, hs)
    x, dy = x_of((3, 4, hs)), x_of((3, 4, hs), 1)

    def loss():
        return float(np.sum(rope_forward(x, cos, sin) * dy))

    assert relative_error(rope_backward(dy, cos, sin), numerical_gradient(loss, x)) <= GRAD_TOL
    tx = t(x)
    (rope_ref(tx, 2) * torch.from_numpy(dy)).sum().backward()
    assert_torch_close("rope dx", rope_backward(dy, cos, sin), tx.grad)


def rope_ref(x, start=0, theta=10000.0):
    """Hugging Face Llama's apply_rotary_pos_emb, in torch float64: x (..., T, hs)."""
    T_, hs = x.shape[-2], x.shape[-1]
    inv_freq = 1.0 / theta ** (torch.arange(0, hs, 2, dtype=torch.float64) / hs)
    freqs = torch.arange(start, start + T_, dtype=torch.float64)[:, None] * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)
    half = torch.cat((-x[..., hs // 2 :], x[..., : hs // 2]), dim=-1)
    return x * emb.cos() + half * emb.sin()


# -- RMSNorm ----------------------------------------------------------------------------------
def test_rmsnorm_output_has_unit_root_mean_square():
    x = x_of((B, T, D)) * 7 + 3
    y, _, _ = rmsnorm_forward(x, np.ones(D), eps=0.0)
    np.testing.assert_allclose(np.sqrt((y * y).mean(-1)), 1.0)
    np.testing.assert_allclose(
        y / x, np.broadcast_to(y[..., :1] / x[..., :1], y.shape)
    )  # no centring: x scaled
    m = RMSNorm(D)
    assert [n for n, _ in m.named_parameters()] == ["weight"] and m.eps == 1e-6


def test_rmsnorm_gradcheck():
    assert_grad_ok(gradcheck(randomize(RMSNorm(D)), x_of((B, T, D)) * 3 + 1), ["input0", "weight"])


def test_rmsnorm_matches_torch():
    m = randomize(RMSNorm(D, eps=1e-5)).to(np.float64).train()
    ref = torch.nn.RMSNorm(D, eps=1e-5, dtype=torch.float64)
    with torch.no_grad():
        ref.weight.copy_(torch.from_numpy(m.weight.data))
    x, dy = x_of((B, T, D)) * 3 + 1, x_of((B, T, D), 1)
    tx = t(x)
    tout = ref(tx)
    assert_torch_close("output", m(x), tout)
    tout.backward(torch.from_numpy(dy))
    m.zero_grad()
    assert_torch_close("dx", m.backward(dy), tx.grad)
    assert_torch_close("dweight", m.weight.grad, ref.weight.grad)


# -- SwiGLU -----------------------------------------------------------------------------------
def test_swiglu_op_matches_torch_with_large_inputs():
    h = x_of((B, T, 2 * FF)) * 30  # |gate| up to ~100: the sigmoid must not overflow
    dy = x_of((B, T, FF), 1)
    th = t(h)
    ref = F.silu(th[..., :FF]) * th[..., FF:]
    ref.backward(torch.from_numpy(dy))
    with np.errstate(all="raise"):
        assert_torch_close("swiglu", swiglu_forward(h), ref)
        assert_torch_close("swiglu dh", swiglu_backward(dy, h), th.grad)


@pytest.mark.parametrize("bias", [True, False])
def test_swiglu_feedforward_gradcheck(bias):
    manual_seed(0)
    m = randomize(FeedForward(D, FF, "swiglu", bias=bias))
    assert m.fc1.weight.shape == (2 * FF, D) and m.fc2.weight.shape == (D, FF)
    assert_grad_ok(gradcheck(m, x_of((B, T, D))), ["input0", "fc1.weight", "fc2.weight"])


def test_swiglu_feedforward_is_llamas_mlp():
    """fc1 = [gate_proj; up_proj], fc2 = down_proj: down(silu(gate(x)) * up(x)), torch autograd."""
    manual_seed(0)
    m = randomize(FeedForward(D, FF, "swiglu", bias=False)).to(np.float64).train()
    gate, up, down = (t(w) for w in (m.fc1.weight.data[:FF], m.fc1.weight.data[FF:], m.fc2.weight.data))
    x, dy = x_of((B, T, D)), x_of((B, T, D), 1)
    tx = t(x)
    tout = (F.silu(tx @ gate.T) * (tx @ up.T)) @ down.T
    assert_torch_close("output", m(x), tout)
    tout.backward(torch.from_numpy(dy))
    m.zero_grad()
    assert_torch_close("dx", m.backward(dy), tx.grad)
    assert_torch_close("d fc1 (gate half)", m.fc1.weight.grad[:FF], gate.grad)
    assert_torch_close("d fc1 (up half)", m.fc1.weight.grad[FF:], up.grad)
    assert_torch_close("d fc2", m.fc2.weight.grad, down.grad)


# -- RoPE inside attention ----------------------------------------------------------------------
@pytest.mark.parametrize("bias", [True, False])
def test_rope_attention_gradcheck(bias):
    manual_seed(0)
    m = randomize(MultiHeadAttention(D, H, bias=bias, rope_theta=10000.0))
    names = ["input0", "in_proj_weight", "out_proj.weight"] + (["in_proj_bias"] if bias else [])
    assert_grad_ok(gradcheck(m, x_of((B, T, D)), kwargs={"causal": True}), names)


def test_rope_attention_matches_torch():
    manual_seed(0)
    m = randomize(MultiHeadAttention(D, H, bias=False, rope_theta=500.0)).to(np.float64).train()
    W, Wo = t(m.in_proj_weight.data), t(m.out_proj.weight.data)
    x, dy = x_of((B, T, D)), x_of((B, T, D), 1)
    tx = t(x)
    q, k, v = (p.reshape(B, T, H, D // H).transpose(1, 2) for p in (tx @ W.T).split(D, dim=-1))
    q, k = rope_ref(q, theta=500.0), rope_ref(k, theta=500.0)
    att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    tout = att.transpose(1, 2).reshape(B, T, D) @ Wo.T
    assert_torch_close("output", m(x, causal=True), tout)
    tout.backward(torch.from_numpy(dy))
    m.zero_grad()
    dx, dctx = m.backward(dy)
    assert dctx is None
    assert_torch_close("dx", dx, tx.grad)
    assert_torch_close("d in_proj_weight", m.in_proj_weight.grad, W.grad)
    assert_torch_close("d out_proj.weight", m.out_proj.weight.grad, Wo.grad)


def test_rope_attention_with_kv_cache_equals_the_full_forward():
    """The cache's length is the new tokens' position offset: prefill 2, then one at a time."""
    manual_seed(0)
    m = randomize(MultiHeadAttention(D, H, rope_theta=10000.0)).to(np.float64).eval()
    x = x_of((B, 6, D))
    full = m(x, causal=True)
    cache = KVCache()
    steps = [m(x[:, :2], causal=True, kv_cache=cache)] + [
        m(x[:, i : i + 1], causal=True, kv_cache=cache) for i in range(2, 6)
    ]
    np.testing.assert_allclose(np.concatenate(steps, axis=1), full, rtol=0, atol=1e-12)
    assert cache.length == 6


# -- grouped-query attention ---------------------------------------------------------------------
def test_grouped_query_attention_gradcheck():
    manual_seed(0)
    m = randomize(MultiHeadAttention(D, 4, bias=True, rope_theta=10000.0, n_kv_head=2))
    assert m.in_proj_weight.shape == ((4 + 2 * 2) * 2, D)  # 4 query heads, 2 key and 2 value heads of size 2
    assert_grad_ok(
        gradcheck(m, x_of((B, T, D)), kwargs={"causal": True}),
        ["input0", "in_proj_weight", "in_proj_bias", "out_proj.weight"],
    )


def test_grouped_query_attention_matches_torch_repeat_kv():
    """Hugging Face's layout: query head h reads key/value head h // (n_head / n_kv_head)."""
    manual_seed(0)
    Hq, Hkv, hs = 4, 2, 2
    m = (
        randomize(MultiHeadAttention(D, Hq, bias=False, rope_theta=10000.0, n_kv_head=Hkv))
        .to(np.float64)
        .train()
    )
    W, Wo = t(m.in_proj_weight.data), t(m.out_proj.weight.data)
    x, dy = x_of((B, T, D)), x_of((B, T, D), 1)
    tx = t(x)
    q, k, v = (tx @ W.T).split([Hq * hs, Hkv * hs, Hkv * hs], dim=-1)
    q, k, v = (p.reshape(B, T, -1, hs).transpose(1, 2) for p in (q, k, v))
    q, k = rope_ref(q), rope_ref(k)
    k, v = (p.repeat_interleave(Hq // Hkv, dim=1) for p in (k, v))
    tout = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, D) @ Wo.T
    assert_torch_close("output", m(x, causal=True), tout)
    tout.backward(torch.from_numpy(dy))
    m.zero_grad()
    assert_torch_close("dx", m.backward(dy)[0], tx.grad)
    assert_torch_close("d in_proj_weight", m.in_proj_weight.grad, W.grad)
    # the cache holds only the key/value heads, and decoding with it equals the full forward
    m.eval()
    cache = KVCache()
    steps = [m(x[:, :3], causal=True, kv_cache=cache)] + [
        m(x[:, i : i + 1], causal=True, kv_cache=cache) for i in range(3, T)
    ]
    np.testing.assert_allclose(np.concatenate(steps, axis=1), m(x, causal=True), rtol=0, atol=1e-12)
    assert cache.k.shape == (B, Hkv, T, hs)


def test_rope_refuses_odd_head_sizes_and_cross_attention():
    with pytest.raises(ConfigError, match="even head size"):
        MultiHeadAttention(6, 2, rope_theta=10000.0)
    with pytest.raises(ConfigError, match="head size n_embd / n_head = 3 must be even"):
        GPTConfig(vocab_size=5, block_size=4, n_layer=1, n_head=2, n_embd=6, positional="rope")
    m = MultiHeadAttention(D, H, rope_theta=10000.0)
    with pytest.raises(ShapeError, match="self-attention only"):
        m(x_of((1, 3, D)).astype(np.float32), context=x_of((1, 4, D)).astype(np.float32))
    with pytest.raises(ConfigError, match="n_kv_head must divide n_head=4"):
        GPTConfig(vocab_size=5, block_size=4, n_layer=1, n_head=4, n_embd=8, n_kv_head=3)


# -- the modern block and GPT -------------------------------------------------------------------
@pytest.mark.parametrize("norm_first", [True, False])
def test_modern_decoder_block_gradcheck(norm_first):
    manual_seed(0)
    b = randomize(
        DecoderBlock(
            D,
            H,
            FF,
            activation="swiglu",
            norm_first=norm_first,
            cross_attention=False,
            bias=False,
            normalization="rmsnorm",
            rope_theta=10000.0,
        )
    )
    assert isinstance(b.attn_norm, RMSNorm) and isinstance(b.ff_norm, RMSNorm)
    assert_grad_ok(
        gradcheck(b, x_of((B, T, D))),
        [
            "input0",
            "attn_norm.weight",
            "self_attn.in_proj_weight",
            "ff.fc1.weight",
            "ff.fc2.weight",
            "ff_norm.weight",
        ],
    )


TINY = dict(vocab_size=7, block_size=6, n_layer=2, n_head=2, n_embd=8)


def test_gpt_config_of_the_modern_blocks():
    c = GPTConfig(**TINY, **MODERN)
    assert GPTConfig.from_dict(c.to_dict()) == c and c.to_dict()["rope_theta"] == 10000.0
    assert c.inner_size == 8 * 8 // 3  # SwiGLU's default: as many weights as 4 * n_embd in two matrices
    assert GPTConfig(**TINY, **MODERN, n_inner=40).inner_size == 40
    m = GPT(c, seed=0)
    assert m.wpe is None and isinstance(m.ln_f, RMSNorm)
    assert all(not n.endswith("bias") for n, _ in m.named_parameters())
    assert "wpe.weight" not in m.state_dict()
    gelu = GPT(GPTConfig(**{**TINY, "n_embd": 48, "n_head": 4}), seed=0)
    swiglu = GPT(GPTConfig(**{**TINY, "n_embd": 48, "n_head": 4}, activation="swiglu"), seed=0)
    assert (
        gelu.h[0].ff.fc1.weight.data.size + gelu.h[0].ff.fc2.weight.data.size
        == swiglu.h[0].ff.fc1.weight.data.size + swiglu.h[0].ff.fc2.weight.data.size
    )  # 2 * 48 * 192 == 3 * 48 * 128
    for field, value in (
        ("normalization", "batchnorm"),
        ("positional", "xpos"),
        ("activation", "geglu"),
        ("rope_theta", 0.0),
    ):
        with pytest.raises(ConfigError, match=field):
            GPTConfig(**{**TINY, field: value})
    assert isinstance(GPT(GPTConfig(**TINY), seed=0).ln_f, LayerNorm)  # the defaults are unchanged


@pytest.mark.parametrize(
    "overrides",
    [
        MODERN,
        {**MODERN, "norm_first": False, "tie_weights": False, "bias": True, "n_head": 4, "n_kv_head": 2},
    ],
    ids=["llama", "postnorm-untied-bias-gqa"],
)
def test_gradcheck_whole_modern_gpt_float64(overrides):
    m = GPT(GPTConfig(**{**TINY, "dtype": "float64", **overrides}), seed=0)
    rng = np.random.default_rng(0)
    for p in m.parameters():
        p.data[...] = rng.normal(0, 0.5, p.shape) + (1.0 if p.data.ndim == 1 else 0.0)
    idx, tgt = rng.integers(0, 7, (2, 6)), rng.integers(0, 7, (2, 6))
    tgt[0, -2:] = IGNORE_INDEX
    m.zero_grad()
    m(idx, tgt)
    m.backward()
    errors = {
        name: relative_error(p.grad, numerical_gradient(lambda: m(idx, tgt)[1], p.data))
        for name, p in m.named_parameters()
    }
    worst = max(errors, key=errors.get)
    assert errors[worst] <= GRAD_TOL, f"{worst}: {errors[worst]:.2e}"


def test_rope_gpt_with_kv_cache_equals_the_full_forward():
    m = GPT(GPTConfig(**{**TINY, "block_size": 8}, **MODERN, dtype="float64"), seed=0)
    randomize(m, seed=3)
    idx = np.random.default_rng(1).integers(0, 7, (2, 8))
    full, _ = m.eval()(idx)
    caches = m.new_caches()
    last = [m._last_logits(idx[:, :3], caches)] + [
        m._last_logits(idx[:, i : i + 1], caches, offset=i) for i in range(3, 8)
    ]
    np.testing.assert_allclose(np.stack(last, axis=1), full[:, 2:], rtol=0, atol=1e-12)
    for temperature in (0.0, 1.0):  # past block_size too: the window is recomputed from scratch
        cached = m.generate(idx[:, :3], 9, temperature=temperature, rng=5, use_cache=True)
        np.testing.assert_array_equal(
            cached, m.generate(idx[:, :3], 9, temperature=temperature, rng=5, use_cache=False)
        )


# -- checkpoints and the command line --------------------------------------------------------------
def test_cli_trains_evaluates_and_samples_a_llama_style_gpt(tmp_path, capsys):
    from scratchformer.cli.main import main
    from scratchformer.training.jobs import load_job

    out = tmp_path / "llama"
    assert (
        main(
            [
                "train",
                "--positional",
                "rope",
                "--normalization",
                "rmsnorm",
                "--activation",
                "swiglu",
                "--no-bias",
                "--max-steps",
                "2",
                "--eval-interval",
                "2",
                *tiny_run.TINY,
                "--out",
                str(out),
            ]
        )
        == 0
    )
    job = load_job(out)  # the checkpoint's schema accepts the new fields and the model is rebuilt from them
    c = job.model.config
    assert (c.positional, c.normalization, c.activation, c.bias) == ("rope", "rmsnorm", "swiglu", False)
    assert job.model.wpe is None and isinstance(job.model.h[0].attn_norm, RMSNorm)
    capsys.readouterr()
    assert main(["eval", str(out), "--split", "test", "--workers", "1"]) == 0
    assert "loss" in capsys.readouterr().out
    assert main(["sample", str(out), "-n", "2", "--seed", "0"]) == 0
    assert (
        main(
            [
                "train",
                "--task",
                "copy",
                "--positional",
                "rope",
                "--max-steps",
                "1",
                "--out",
                str(tmp_path / "copy"),
            ]
        )
        == 2
    )
    assert "positional" in capsys.readouterr().err


# -- figures -------------------------------------------------------------------------------------
def test_one_head_figure_shows_the_rotated_scores():
    """The trace's head must give the q, k the model scores: with rotary positions, rotated ones.
    Un-rotated q and k give other weights, so this test fails if viz recomputes them without RoPE."""
    from scratchformer.viz import trace as T

    m = GPT(GPTConfig(vocab_size=9, block_size=12, n_layer=2, n_head=2, n_embd=16, **MODERN), seed=0)
    randomize(m, seed=1, scale=0.8)
    ids = np.random.default_rng(0).integers(0, 9, 10)
    gqa = GPT(
        GPTConfig(vocab_size=9, block_size=12, n_layer=1, n_head=4, n_embd=16, n_kv_head=2, **MODERN), seed=0
    )
    randomize(gqa, seed=1, scale=0.8)
    for head in range(4):  # grouped-query: heads 2 and 3 share key/value head 1
        q, k, v = (T.trace(gqa, ids).head(layer=0, head=head)[x] for x in "qkv")
        w = attention_forward(q[None, None], k[None, None], v[None, None], causal=True)[1]["weights"]
        np.testing.assert_allclose(w[0, 0], T.attention_maps(gqa, ids)["encoder"][0, head], atol=1e-6)
    q, k, v = (T.trace(m, ids).head(layer=1, head=1)[x] for x in "qkv")
    w = attention_forward(q[None, None], k[None, None], v[None, None], causal=True)[1]["weights"]
    np.testing.assert_allclose(w[0, 0], T.attention_maps(m, ids)["encoder"][1, 1], atol=1e-6)
    h = m.h[1].attn_norm(T.trace(m, ids).residual[1])
    W = m.h[1].self_attn.in_proj_weight.data
    q0, k0 = (h[0] @ W[:16].T)[:, 8:], (h[0] @ W[16:32].T)[:, 8:]  # head 1's q and k, not rotated
    plain = attention_forward(q0[None, None], k0[None, None], v[None, None], causal=True)[1]["weights"]
    assert np.abs(plain - w).max() > 1e-2  # the rotation matters here: the check above has teeth
    # the trace reproduces the forward through RMSNorm and SwiGLU
    tr = T.trace(m, ids)
    logits, _ = m(ids[None])
    np.testing.assert_allclose(m.lm_head(tr.output), logits, atol=1e-5)
    assert tr.ff_pre[0].shape == (1, 10, 2 * m.config.inner_size) and tr.ff_post[0].shape == (1, 10, 42)
    assert T.position_table(m) is None


def test_report_draws_a_llama_style_gpt(tmp_path):
    from scratchformer import viz

    m = GPT(GPTConfig(vocab_size=9, block_size=12, n_layer=1, n_head=2, n_embd=16, **MODERN), seed=0)
    paths = viz.report(m, tmp_path, ids=np.arange(6), only=["attention_steps", "ff_activations", "layernorm"])
    names = {p.name for p in paths}
    assert {"attention_steps.png", "ff_activations.png"} <= names
    assert "layernorm.png" not in names  # it normalises as LayerNorm would: not drawn for an RMSNorm model
