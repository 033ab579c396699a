"""ALiBi, attention with linear biases (Press et al. 2022): ops/alibi.py, the bias argument of
ops/attention.py, MultiHeadAttention(alibi=True) and GPT(positional="alibi").

Checked against the paper's slope table and its reference code's interpolation (written here
again, independently), against PyTorch (the bias built in torch, float64 softmax attention and
autograd, bar 1e-12), by finite differences (scratchformer.gradcheck, bar 5e-8) in both lanes,
and end to end: cached decoding equals uncached, and the command line trains, resumes, samples
and evaluates an ALiBi run.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from tiny_run import TINY as CLI_TINY

from scratchformer import fast
from scratchformer.errors import ConfigError, DTypeError, ShapeError
from scratchformer.gradcheck import gradcheck, numerical_gradient, relative_error
from scratchformer.models import GPT, GPTConfig
from scratchformer.nn import DecoderBlock, KVCache, MultiHeadAttention, manual_seed
from scratchformer.ops import IGNORE_INDEX, alibi_bias, alibi_slopes, attention_backward, attention_forward

pytestmark = pytest.mark.usefixtures("one_torch_thread")

torch = pytest.importorskip("torch", reason="torch not installed: pip install torch==2.13.0")

GRAD_TOL = 5e-8  # finite differences in float64, as tests/nn/test_layers_gradcheck.py
TORCH_TOL = 1e-12  # max|ours - torch| / max|torch| in float64
D, H, B, T = 8, 4, 2, 5
TINY = dict(vocab_size=7, block_size=8, n_layer=2, n_head=4, n_embd=8, positional="alibi")


def x_of(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def randomize(module, seed=0, scale=0.5):
    g = np.random.default_rng(seed)
    for _, p in module.named_parameters():
        p.data[...] = g.standard_normal(p.shape) * scale
    return module


def close(name, ours, ref, tol=TORCH_TOL):
    ref = ref.detach().numpy() if isinstance(ref, torch.Tensor) else np.asarray(ref)
    assert ours.shape == ref.shape, f"{name}: shape {ours.shape} != {ref.shape}"
    err = np.abs(ours - ref).max() / max(np.abs(ref).max(), 1e-300)
    assert err <= tol, f"{name}: relative error {err:.2e} > {tol:.0e}"


# -- the slopes ----------------------------------------------------------------------------------
def paper_get_slopes(n):
    """The paper's reference code (github.com/ofirpress/attention_with_linear_biases), as written there."""

    def get_slopes_power_of_2(n):
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        ratio = start
        return [start * ratio**i for i in range(n)]

    if math.log2(n).is_integer():
        return get_slopes_power_of_2(n)
    closest_power_of_2 = 2 ** math.floor(math.log2(n))
    return (
        get_slopes_power_of_2(closest_power_of_2)
        + paper_get_slopes(2 * closest_power_of_2)[0::2][: n - closest_power_of_2]
    )


def bloom_slopes(n):
    """transformers' BLOOM build_alibi_tensor's slopes, in torch float64."""
    closest = 2 ** math.floor(math.log2(n))
    base = torch.tensor(2 ** (-(2 ** -(math.log2(closest) - 3))), dtype=torch.float64)
    slopes = torch.pow(base, torch.arange(1, 1 + closest, dtype=torch.float64))
    if closest != n:
        extra_base = torch.tensor(2 ** (-(2 ** -(math.log2(2 * closest) - 3))), dtype=torch.float64)
        remaining = min(closest, n - closest)
        slopes = torch.cat(
            [slopes, torch.pow(extra_base, torch.arange(1, 1 + 2 * remaining, 2, dtype=torch.float64))]
        )
    return slopes


def test_slopes_are_the_papers_table_for_8_heads():
    np.testing.assert_array_equal(
        alibi_slopes(8), [1 / 2, 1 / 4, 1 / 8, 1 / 16, 1 / 32, 1 / 64, 1 / 128, 1 / 256]
    )
    np.testing.assert_array_equal(alibi_slopes(16)[:3], [2**-0.5, 1 / 2, 2**-1.5])  # 2^(-8/16), ...


def test_slopes_of_a_head_count_that_is_not_a_power_of_2_interleave():
    # 6 heads: the four of H=4 (1/4 ... 1/256), then the first two odd-numbered ones of H=8 (1/2, 1/8)
    np.testing.assert_array_equal(alibi_slopes(6), [1 / 4, 1 / 16, 1 / 64, 1 / 256, 1 / 2, 1 / 8])
    for n in (1, 2, 3, 5, 6, 7, 12, 20, 24, 32):  # a few ulps: the reference codes multiply repeatedly
        np.testing.assert_allclose(
            alibi_slopes(n), paper_get_slopes(n), rtol=1e-14, atol=0, err_msg=f"{n} heads"
        )
        np.testing.assert_allclose(
            alibi_slopes(n), bloom_slopes(n).numpy(), rtol=1e-14, atol=0, err_msg=f"{n} heads"
        )


def test_bias_equals_the_formula_written_element_by_element():
    for Hn, Tq, Tk in ((3, 4, 4), (8, 1, 6), (6, 2, 7)):
        m = paper_get_slopes(Hn)
        ref = np.zeros((Hn, Tq, Tk))
        for h in range(Hn):
            for i in range(Tq):
                for j in range(Tk):
                    ref[h, i, j] = -m[h] * ((Tk - Tq + i) - j)  # query i sits at position past + i
        np.testing.assert_allclose(alibi_bias(Hn, Tq, Tk), ref, rtol=1e-15, atol=0)
    b = alibi_bias(4, 3, 3, np.float32)
    assert b.dtype == np.float32 and not b.flags.writeable
    with pytest.raises(ShapeError, match="0 < Tq <= Tk"):
        alibi_bias(4, 5, 3)
    with pytest.raises(ConfigError, match="positive number of heads"):
        alibi_slopes(0)


# -- the op against torch ------------------------------------------------------------------------
def torch_alibi_attention(q, k, v, allowed):
    """softmax(q k^T / sqrt(d) - m_h (i - j), masked) v in torch, the bias from BLOOM's slopes."""
    Hn, Tq, Tk = q.shape[1], q.shape[2], k.shape[2]
    pos_q = torch.arange(Tk - Tq, Tk, dtype=torch.float64)[:, None]
    pos_k = torch.arange(Tk, dtype=torch.float64)[None, :]
    bias = -bloom_slopes(Hn)[:, None, None] * (pos_q - pos_k)  # (H, Tq, Tk)
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]) + bias
    scores = scores.masked_fill(~torch.from_numpy(np.ascontiguousarray(allowed)), float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


@pytest.mark.parametrize(
    "Tq,Tk,padded",
    [(5, 5, False), (5, 5, True), (2, 6, False), (1, 6, False)],
    ids=["square", "padding", "cached-2", "cached-1"],
)
def test_op_matches_torch_forward_and_backward(lane, Tq, Tk, padded):
    q, k, v, dout = (
        x_of((B, H, Tq, 3), 1),
        x_of((B, H, Tk, 3), 2),
        x_of((B, H, Tk, 3), 3),
        x_of((B, H, Tq, 3), 4),
    )
    mask = None
    allowed = np.broadcast_to(np.tri(Tq, Tk, k=Tk - Tq, dtype=bool), (B, H, Tq, Tk))
    if padded:  # batch row 1 has only its first 3 keys
        mask = (np.arange(Tk)[None, :] < np.array([Tk, 3])[:, None])[:, None, None, :]
        allowed = allowed & mask
    out, cache = attention_forward(q, k, v, mask=mask, causal=True, bias=alibi_bias(H, Tq, Tk))
    tq, tk, tv = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
    tout = torch_alibi_attention(tq, tk, tv, allowed)
    close("out", out, tout)
    tout.backward(torch.from_numpy(dout))
    for name, ours, ref in zip(
        ("dq", "dk", "dv"), attention_backward(dout, cache), (tq.grad, tk.grad, tv.grad)
    ):
        close(name, ours, ref)
    plain, _ = attention_forward(q, k, v, mask=mask, causal=True)
    assert np.abs(plain - out).max() > 1e-2  # the bias matters here: the comparison has teeth


def test_a_bias_takes_the_fast_lane_and_equals_the_reference():
    """fast/attention.py adds the bias after the scale and recomputes it with the weights in the
    backward: the fast lane's result equals the reference formula's (float64: 1e-12 relative)."""
    from scratchformer.ops import attention_backward

    q, k, v, dout = (x_of((B, H, T, 3), s) for s in (1, 2, 3, 4))
    bias = alibi_bias(H, T, T)
    with fast.reference(False):
        fast_out, fast_cache = attention_forward(q, k, v, causal=True, bias=bias, keep_weights=False)
        fast_grads = attention_backward(dout, fast_cache)
    with fast.reference(True):
        ref_out, ref_cache = attention_forward(q, k, v, causal=True, bias=bias)
        ref_grads = attention_backward(dout, ref_cache)
    assert fast_cache["lane"] == "fast" and fast_cache["weights"] is None  # recomputed in the backward
    for got, want in zip((fast_out, *fast_grads), (ref_out, *ref_grads)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-13)


def test_bad_biases_are_refused():
    q = x_of((1, 2, 3, 4))
    with pytest.raises(ShapeError, match=r"does not broadcast to \(B, H, 3, 3\)"):
        attention_forward(q, q, q, bias=np.zeros((2, 3, 4)))
    with pytest.raises(DTypeError, match="must hold floats"):
        attention_forward(q, q, q, bias=np.zeros((3, 3), dtype=int))


# -- MultiHeadAttention --------------------------------------------------------------------------
def assert_grad_ok(report, names):
    assert set(names) <= set(report.errors), f"not checked: {set(names) - set(report.errors)}"
    assert report.max_error <= GRAD_TOL, f"gradcheck failed:\n{report}"


@pytest.mark.parametrize("n_kv_head", [None, 2], ids=["mha", "gqa"])
@pytest.mark.parametrize("bias", [True, False])
def test_attention_gradcheck(lane, bias, n_kv_head):
    manual_seed(0)
    m = randomize(MultiHeadAttention(D, H, bias=bias, alibi=True, n_kv_head=n_kv_head))
    names = ["input0", "in_proj_weight", "out_proj.weight"] + (
        ["in_proj_bias", "out_proj.bias"] if bias else []
    )
    assert_grad_ok(gradcheck(m, x_of((B, T, D)), kwargs={"causal": True}), names)


@pytest.mark.parametrize("Hkv", [4, 2, 1], ids=["mha", "gqa", "mqa"])
def test_attention_matches_torch(lane, Hkv):
    manual_seed(0)
    hs = D // H
    m = randomize(MultiHeadAttention(D, H, bias=False, alibi=True, n_kv_head=Hkv)).to(np.float64).train()
    W, Wo = (torch.tensor(a, requires_grad=True) for a in (m.in_proj_weight.data, m.out_proj.weight.data))
    x, dy = x_of((B, T, D)), x_of((B, T, D), 1)
    tx = torch.tensor(x, requires_grad=True)
    q, k, v = (tx @ W.T).split([H * hs, Hkv * hs, Hkv * hs], dim=-1)
    q, k, v = (p.reshape(B, T, -1, hs).transpose(1, 2) for p in (q, k, v))
    k, v = (p.repeat_interleave(H // Hkv, dim=1) for p in (k, v))
    att = torch_alibi_attention(q, k, v, np.tri(T, T, dtype=bool))
    tout = att.transpose(1, 2).reshape(B, T, D) @ Wo.T
    close("output", m(x, causal=True), tout)
    tout.backward(torch.from_numpy(dy))
    m.zero_grad()
    dx, dctx = m.backward(dy)
    assert dctx is None
    close("dx", dx, tx.grad)
    close("d in_proj_weight", m.in_proj_weight.grad, W.grad)
    close("d out_proj.weight", m.out_proj.weight.grad, Wo.grad)


@pytest.mark.parametrize("n_kv_head", [None, 2], ids=["mha", "gqa"])
def test_attention_with_kv_cache_equals_the_full_forward(n_kv_head):
    """The cached keys are positions 0 .. past - 1: a prefill of 2, then one token at a time."""
    manual_seed(0)
    m = randomize(MultiHeadAttention(D, H, alibi=True, n_kv_head=n_kv_head)).to(np.float64).eval()
    x = x_of((B, 6, D))
    full = m(x, causal=True)
    # a tool recomputing the weights from self_qkv and score_bias gets the model's own
    q, k, _ = m.self_qkv(x)
    bias = m.score_bias(6, 6, q.dtype)
    weights = attention_forward(q, m.expand_kv(k), m.expand_kv(k), causal=True, bias=bias)[1]["weights"]
    np.testing.assert_allclose(weights, m.attn_weights, rtol=0, atol=1e-14)
    assert MultiHeadAttention(D, H).score_bias(6, 6) is None
    cache = KVCache()
    steps = [m(x[:, :2], causal=True, kv_cache=cache)] + [
        m(x[:, i : i + 1], causal=True, kv_cache=cache) for i in range(2, 6)
    ]
    np.testing.assert_allclose(np.concatenate(steps, axis=1), full, rtol=0, atol=1e-12)
    plain = randomize(MultiHeadAttention(D, H, n_kv_head=n_kv_head)).to(np.float64).eval()
    assert np.abs(plain(x, causal=True) - full).max() > 1e-3  # same weights without ALiBi differ


def test_alibi_is_refused_where_it_is_not_defined():
    m = MultiHeadAttention(D, H, alibi=True)
    x = x_of((1, 3, D)).astype(np.float32)
    with pytest.raises(ShapeError, match="causal=True"):
        m(x)
    with pytest.raises(ShapeError, match="self-attention only"):
        m(x, context=x_of((1, 4, D)).astype(np.float32), causal=True)
    with pytest.raises(ConfigError, match="alibi must be True or False"):
        MultiHeadAttention(D, H, alibi="yes")
    assert [n for n, _ in m.named_parameters()] == [n for n, _ in MultiHeadAttention(D, H).named_parameters()]


def test_decoder_block_gradcheck(lane):
    manual_seed(0)
    b = randomize(DecoderBlock(D, H, 12, cross_attention=False, alibi=True, n_kv_head=2))
    assert b.self_attn.alibi
    assert_grad_ok(gradcheck(b, x_of((B, T, D))), ["input0", "self_attn.in_proj_weight", "ff.fc1.weight"])


# -- GPT ---------------------------------------------------------------------------------------
def test_gpt_has_no_position_table_and_its_config_round_trips():
    c = GPTConfig(**TINY)
    assert GPTConfig.from_dict(c.to_dict()) == c
    m = GPT(c, seed=0)
    assert m.wpe is None and all(block.self_attn.alibi for block in m.h)
    assert not any(n.startswith("wpe") for n in m.state_dict())
    assert not GPT(GPTConfig(**{**TINY, "positional": "rope"}), seed=0).h[0].self_attn.alibi


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {
            "norm_first": False,
            "tie_weights": False,
            "n_kv_head": 2,
            "normalization": "rmsnorm",
            "activation": "swiglu",
            "bias": False,
        },
    ],
    ids=["gpt2-blocks", "postnorm-untied-gqa-llama-blocks"],
)
def test_gradcheck_whole_gpt_float64(lane, overrides):
    m = GPT(GPTConfig(**{**TINY, "dtype": "float64", **overrides}), seed=0)
    rng = np.random.default_rng(0)
    for p in m.parameters():
        p.data[...] = rng.normal(0, 0.5, p.shape) + (1.0 if p.data.ndim == 1 else 0.0)
    idx, tgt = rng.integers(0, 7, (2, 8)), rng.integers(0, 7, (2, 8))
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


def test_gpt_logits_are_the_same_in_both_lanes():
    m = randomize(GPT(GPTConfig(**TINY), seed=0), seed=2)
    idx = np.random.default_rng(1).integers(0, 7, (2, 8))
    with fast.reference(False):
        a, _ = m.eval()(idx)
    with fast.reference(True):
        b, _ = m(idx)
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-5)


def test_cached_generation_equals_uncached_greedy_decoding():
    m = randomize(GPT(GPTConfig(**{**TINY, "n_kv_head": 2}, dtype="float64"), seed=0), seed=3, scale=0.8)
    idx = np.random.default_rng(1).integers(0, 7, (2, 8))
    full, _ = m.eval()(idx)
    caches = m.new_caches()
    last = [m._last_logits(idx[:, :3], caches)] + [
        m._last_logits(idx[:, i : i + 1], caches, offset=i) for i in range(3, 8)
    ]
    np.testing.assert_allclose(np.stack(last, axis=1), full[:, 2:], rtol=0, atol=1e-12)
    for temperature in (0.0, 1.0):  # past block_size too: the window is then recomputed from scratch
        cached = m.generate(idx[:, :3], 9, temperature=temperature, rng=5, use_cache=True)
        np.testing.assert_array_equal(
            cached, m.generate(idx[:, :3], 9, temperature=temperature, rng=5, use_cache=False)
        )


# -- the command line --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def alibi_run(tmp_path_factory):
    from scratchformer.cli.main import main

    out = tmp_path_factory.mktemp("alibi") / "names"
    assert (
        main(
            [
                "train",
                "--positional",
                "alibi",
                "--max-steps",
                "30",
                "--eval-interval",
                "15",
                *CLI_TINY,
                "--out",
                str(out),
            ]
        )
        == 0
    )
    return out


def test_cli_samples_and_evaluates_an_alibi_run(alibi_run, capsys):
    from scratchformer.cli.main import main
    from scratchformer.training.jobs import load_job

    job = load_job(alibi_run)  # the checkpoint's schema accepts the choice and the model is rebuilt from it
    assert job.model.config.positional == "alibi" and job.model.wpe is None
    assert job.model.h[0].self_attn.alibi
    capsys.readouterr()
    assert main(["sample", str(alibi_run), "-n", "2", "--seed", "0"]) == 0
    assert capsys.readouterr().out.strip()
    assert main(["eval", str(alibi_run), "--split", "test", "--json"]) == 0
    assert "loss" in capsys.readouterr().out.strip().splitlines()[-1]


def test_cli_resumes_an_alibi_run(alibi_run, tmp_path):
    import shutil

    from scratchformer.cli.main import main
    from scratchformer.training.jobs import load_job

    run = tmp_path / "copy"
    shutil.copytree(alibi_run, run)
    assert (
        main(["train", "--resume", "--out", str(run), "--max-steps", "34", "--no-progress", "--quiet"]) == 0
    )
    assert load_job(run).model.config.positional == "alibi"


def test_cli_viz_draws_an_alibi_run(alibi_run, tmp_path):
    from scratchformer.cli.main import main

    out = tmp_path / "figs"
    assert main(["viz", str(alibi_run), "--out", str(out)]) == 0
    assert (out / "report.html").exists() and (out / "attention_grid.png").exists()


def test_export_refuses_an_alibi_run_in_one_line(tmp_path, capsys):
    """GPT-2's layout has a learned position table and no ALiBi: refused by design, exit 2."""
    from scratchformer.cli.main import main

    out = tmp_path / "bpe"
    assert (
        main(
            [
                "train",
                "--tokenizer",
                "bpe",
                "--vocab-size",
                "300",
                "--positional",
                "alibi",
                "--tie-weights",
                "--max-steps",
                "2",
                *CLI_TINY,
                "--out",
                str(out),
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert main(["export", str(out), "--hf", str(tmp_path / "hf")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "positional='alibi'" in err and "Traceback" not in err
    assert not (tmp_path / "hf").exists()


# The tools read the model through models/base.py's contract: a model without a position table,
# with a score bias inside attention, needs no change outside ops/, nn/ and models/.
@pytest.mark.parametrize("json_out", [False, True], ids=["text", "json"])
def test_cli_lens_on_an_alibi_run(alibi_run, json_out):
    from scratchformer.cli.main import main

    assert main(["lens", str(alibi_run), "--text", "emma", *(["--json"] if json_out else [])]) == 0


def test_cli_viz_compare_init_on_an_alibi_run(alibi_run, tmp_path):
    from scratchformer.cli.main import main

    assert main(["viz", str(alibi_run), "--compare-init", "--out", str(tmp_path / "figs")]) == 0


def test_the_one_head_figure_shows_the_weights_the_model_softmaxes():
    from scratchformer.viz import trace as T

    m = randomize(
        GPT(
            GPTConfig(vocab_size=9, block_size=12, n_layer=1, n_head=2, n_embd=16, positional="alibi"), seed=0
        ),
        seed=1,
        scale=0.8,
    )
    ids = np.arange(9)
    head = T.trace(m, ids).head(layer=0, head=0)
    q, k, v = head["q"], head["k"], head["v"]
    bias = T.head_score_bias(m, ids, layer=0, head=0)
    # the scores the forward showed its hook hold ALiBi's bias (the attention's own answer), -inf ahead
    expected = np.where(np.tri(9, dtype=bool), q @ k.T / np.sqrt(q.shape[-1]) + bias, -np.inf)
    np.testing.assert_allclose(head["scores"], expected, atol=1e-5)
    assert bias is not None and bias.shape == (9, 9)
    drawn = attention_forward(
        q[None, None], k[None, None], v[None, None], causal=True, bias=bias[None, None]
    )[1]["weights"][0, 0]
    np.testing.assert_allclose(drawn, T.attention_maps(m, ids)["encoder"][0, 0], atol=1e-6)
