"""The Module contract: parameter discovery and names, state dicts, train/eval caching,
dtype handling, masks and clear errors on bad inputs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from scratchformer.errors import ConfigError, DataError, ScratchformerError, ShapeError
from scratchformer.nn import (
    BackwardError,
    DecoderBlock,
    Dropout,
    Embedding,
    EncoderBlock,
    FeedForward,
    LayerNorm,
    LearnedPositionalEmbedding,
    Linear,
    Module,
    MultiHeadAttention,
    Parameter,
    SinusoidalPositionalEncoding,
    StateDictError,
    manual_seed,
)
from scratchformer.ops import erf

D, H, FF, B, T, S = 8, 2, 16, 2, 4, 5


def randn(*shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


class Tied(Module):
    """An embedding and an output projection sharing one weight (GPT-2 style), plus a list."""

    def __init__(self):
        super().__init__()
        self.wte = Embedding(10, D)
        self.blocks = [EncoderBlock(D, H, FF), EncoderBlock(D, H, FF)]
        self.head = Linear(D, 10, bias=False)
        self.head.weight = self.wte.weight


# every module with a factory for its inputs/kwargs (float32 inputs)
MODULES = {
    "Linear": (lambda: Linear(D, 5), lambda: ((randn(B, T, D),), {})),
    "Embedding": (lambda: Embedding(11, D), lambda: ((np.array([[1, 2, 3], [4, 5, 10]]),), {})),
    "LayerNorm": (lambda: LayerNorm(D), lambda: ((randn(B, T, D),), {})),
    "Dropout": (lambda: Dropout(0.3), lambda: ((randn(B, T, D),), {})),
    "MHA-self": (
        lambda: MultiHeadAttention(D, H, dropout=0.1),
        lambda: ((randn(B, T, D),), {"causal": True}),
    ),
    "MHA-cross": (lambda: MultiHeadAttention(D, H), lambda: ((randn(B, T, D), randn(B, S, D, seed=1)), {})),
    "FeedForward-relu": (lambda: FeedForward(D, FF, "relu", dropout=0.1), lambda: ((randn(B, T, D),), {})),
    "FeedForward-gelu": (lambda: FeedForward(D, FF, "gelu"), lambda: ((randn(B, T, D),), {})),
    "FeedForward-gelu_tanh": (lambda: FeedForward(D, FF, "gelu_tanh"), lambda: ((randn(B, T, D),), {})),
    "Sinusoidal": (lambda: SinusoidalPositionalEncoding(10, D), lambda: ((randn(B, T, D),), {"offset": 2})),
    "LearnedPos": (lambda: LearnedPositionalEmbedding(10, D), lambda: ((randn(B, T, D),), {"offset": 2})),
    "Encoder-pre": (lambda: EncoderBlock(D, H, FF, dropout=0.1), lambda: ((randn(B, T, D),), {})),
    "Encoder-post": (
        lambda: EncoderBlock(D, H, FF, norm_first=False, activation="relu"),
        lambda: ((randn(B, T, D),), {"mask": np.ones((B, 1, 1, T), bool)}),
    ),
    "Decoder-cross": (
        lambda: DecoderBlock(D, H, FF, dropout=0.1),
        lambda: ((randn(B, T, D), randn(B, S, D, seed=1)), {}),
    ),
    "Decoder-gpt": (
        lambda: DecoderBlock(D, H, FF, cross_attention=False, norm_first=False),
        lambda: ((randn(B, T, D),), {}),
    ),
}
ALL = pytest.mark.parametrize("kind", list(MODULES))


def build(kind):
    manual_seed(0)
    make, inputs = MODULES[kind]
    args, kwargs = inputs()
    return make(), args, kwargs


# ---------------------------------------------------------------------------------------------
# discovery and names
def test_shared_parameter_listed_once_under_first_name():
    m = Tied()
    params = m.parameters()
    assert len(params) == len({id(p) for p in params})
    names = [n for n, _ in m.named_parameters()]
    assert "wte.weight" in names and "head.weight" not in names
    assert sum(p is m.wte.weight for p in params) == 1
    assert m.num_parameters() == sum(p.data.size for p in params)
    assert "head.weight" not in m.state_dict()


def test_named_parameters_are_pytorch_style():
    names = [n for n, _ in EncoderBlock(D, H, FF).named_parameters()]
    assert names == [
        "self_attn.in_proj_weight",
        "self_attn.in_proj_bias",
        "self_attn.out_proj.weight",
        "self_attn.out_proj.bias",
        "attn_norm.weight",
        "attn_norm.bias",
        "ff.fc1.weight",
        "ff.fc1.bias",
        "ff.fc2.weight",
        "ff.fc2.bias",
        "ff_norm.weight",
        "ff_norm.bias",
    ]
    dec = dict(DecoderBlock(D, H, FF).named_parameters())
    assert {"cross_attn.in_proj_weight", "cross_norm.weight", "ff_norm.bias"} <= set(dec)
    assert dec["self_attn.in_proj_weight"].shape == (3 * D, D)
    assert dec["cross_attn.out_proj.weight"].shape == (D, D)
    gpt = dict(DecoderBlock(D, H, FF, cross_attention=False).named_parameters())
    assert not any(n.startswith("cross") for n in gpt) and len(gpt) == 12
    tied = [n for n, _ in Tied().named_parameters()]
    assert "blocks.1.self_attn.in_proj_weight" in tied and "blocks.0.ff_norm.bias" in tied
    assert [n for n, _ in MultiHeadAttention(D, H, bias=False).named_parameters()] == [
        "in_proj_weight",
        "out_proj.weight",
    ]
    assert [n for n, _ in Tied().named_modules()][:3] == ["", "wte", "blocks.0"]


def test_parameter_requires_float():
    with pytest.raises(TypeError, match="floating"):
        Parameter(np.arange(3))
    p = Parameter(np.ones((2, 3)))
    assert p.grad.shape == (2, 3) and np.all(p.grad == 0) and p.shape == (2, 3)


# ---------------------------------------------------------------------------------------------
# state dicts
def test_load_state_dict_rejects_missing_and_unknown_keys():
    m = EncoderBlock(D, H, FF)
    sd = m.state_dict()
    missing = dict(sd)
    del missing["ff.fc1.bias"]
    with pytest.raises(StateDictError, match=r"missing keys \['ff.fc1.bias'\]"):
        m.load_state_dict(missing)
    extra = dict(sd, **{"ff.fc3.weight": np.zeros((2, 2))})
    with pytest.raises(StateDictError, match=r"unexpected keys \['ff.fc3.weight'\]") as info:
        m.load_state_dict(extra)
    assert isinstance(info.value, ValueError) and isinstance(info.value, ScratchformerError)
    # strict=False tolerates both, and loads what matches
    sd2 = {k: v + 1 for k, v in missing.items()}
    sd2["nonsense"] = np.zeros(1)
    m.load_state_dict(sd2, strict=False)
    np.testing.assert_array_equal(m.ff.fc2.weight.data, sd["ff.fc2.weight"] + 1)
    np.testing.assert_array_equal(m.ff.fc1.bias.data, sd["ff.fc1.bias"])  # untouched


def test_load_state_dict_rejects_wrong_shapes_naming_them():
    m = EncoderBlock(D, H, FF)
    before = m.state_dict()
    sd = dict(before)
    sd["self_attn.in_proj_weight"] = np.zeros((D, 3 * D))
    for strict in (True, False):
        with pytest.raises(
            StateDictError, match=r"self_attn.in_proj_weight: expected \(24, 8\), got \(8, 24\)"
        ):
            m.load_state_dict(sd, strict=strict)
    for k, v in m.state_dict().items():  # nothing was half-loaded
        np.testing.assert_array_equal(v, before[k])


def test_load_state_dict_keeps_dtype():
    m = Linear(3, 2)
    m.load_state_dict({"weight": np.ones((2, 3)), "bias": np.zeros(2)})
    assert m.weight.data.dtype == np.float32 and np.all(m.weight.data == 1)


# ---------------------------------------------------------------------------------------------
# the forward/backward cache contract
STATEFUL = pytest.mark.parametrize("kind", list(MODULES))


@STATEFUL
def test_backward_without_forward_raises(kind):
    m, args, kwargs = build(kind)
    with pytest.raises(BackwardError, match=r"without a matching forward.*train\(\)"):
        m.backward(np.ones((B, T, D), np.float32))


@STATEFUL
def test_each_backward_consumes_one_forward(kind):
    m, args, kwargs = build(kind)
    out = m(*args, **kwargs)
    m.backward(np.ones_like(out))
    with pytest.raises(BackwardError):
        m.backward(np.ones_like(out))


@ALL
def test_eval_mode_caches_nothing(kind):
    m, args, kwargs = build(kind)
    m(*args, **kwargs)
    # training mode does cache (blocks through their sub-layers)
    assert any(sub._cache is not None for sub in m.modules())
    m.eval()
    assert all(not sub.training and sub._cache is None for sub in m.modules())  # eval() drops caches
    out = m(*args, **kwargs)
    assert all(sub._cache is None for sub in m.modules())
    with pytest.raises(BackwardError):
        m.backward(np.ones_like(out))
    m.train()
    assert all(sub.training for sub in m.modules())


# ---------------------------------------------------------------------------------------------
# dtypes
@ALL
def test_float32_default_and_no_silent_upcast(kind):
    m, args, kwargs = build(kind)
    assert m.dtype == np.float32
    assert all(p.data.dtype == np.float32 and p.grad.dtype == np.float32 for p in m.parameters())
    out = m(*args, **kwargs)
    assert out.dtype == np.float32, f"{kind} forward returned {out.dtype}"
    grads = m.backward(np.ones_like(out))
    grads = grads if isinstance(grads, tuple) else (grads,)
    for g in grads:
        assert g is None or g.dtype == np.float32, f"{kind} backward returned {g.dtype}"
    assert all(p.grad.dtype == np.float32 for p in m.parameters())
    for sub in m.modules():
        if isinstance(sub, MultiHeadAttention):
            assert sub.attn_weights.dtype == np.float32


@ALL
def test_to_float64_converts_and_returns_module(kind):
    m, args, kwargs = build(kind)
    assert m.to(np.float64) is m
    assert all(p.data.dtype == np.float64 and p.grad.dtype == np.float64 for p in m.parameters())
    args = tuple(a.astype(np.float64) if a.dtype.kind == "f" else a for a in args)
    out = m(*args, **kwargs)
    assert out.dtype == np.float64
    assert (
        m.to(np.float32) is m
        and m(*tuple(a.astype(np.float32) if a.dtype.kind == "f" else a for a in args), **kwargs).dtype
        == np.float32
    )


def test_to_rejects_non_float():
    with pytest.raises(TypeError, match="floating"):
        Linear(2, 2).to(np.int64)


def test_sinusoidal_table_exact_after_to_float64():
    m = SinusoidalPositionalEncoding(16, D).to(np.float64)
    ref = SinusoidalPositionalEncoding(16, D, dtype=np.float64)
    x = np.zeros((1, 16, D))
    np.testing.assert_allclose(m(x), ref(x), rtol=0, atol=1e-14)


# ---------------------------------------------------------------------------------------------
# masks
@pytest.mark.parametrize("bias", [True, False])
def test_all_masked_query_rows_give_zero_weights_and_output(bias):
    manual_seed(0)
    m = MultiHeadAttention(D, H, bias=bias)
    if bias:
        m.out_proj.bias.data[...] = 0.5
    x, ctx = randn(B, T, D), randn(B, S, D, seed=1)
    mask = np.ones((B, 1, T, S), dtype=bool)
    mask[0, :, 1, :] = False  # query 1 of batch 0 may see nothing
    out = m(x, ctx, mask=mask)
    assert np.all(np.isfinite(out))
    assert np.all(m.attn_weights[0, :, 1] == 0)
    np.testing.assert_allclose(m.attn_weights[1].sum(-1), 1, rtol=1e-6)
    # zero attention output, so the module returns out_proj(0) = its bias
    expected = np.full(D, 0.5 if bias else 0.0, dtype=np.float32)
    np.testing.assert_array_equal(out[0, 1], expected)
    assert not np.allclose(out[0, 0], expected)
    dx, dctx = m.backward(randn(B, T, D, seed=2))
    assert np.all(np.isfinite(dx)) and np.all(np.isfinite(dctx))
    assert np.all(dx[0, 1] == 0)  # nothing flows back through the query that saw nothing


def test_fully_padded_sequence_in_encoder_gives_no_nan():
    manual_seed(0)
    blk = EncoderBlock(D, H, FF)
    mask = np.zeros((B, 1, 1, T), dtype=bool)
    mask[1, ..., :2] = True
    out = blk(randn(B, T, D), mask=mask)
    assert np.all(np.isfinite(out))
    assert np.all(np.isfinite(blk.backward(np.ones_like(out))))


# ---------------------------------------------------------------------------------------------
# clear errors for bad inputs
def test_bad_inputs_raise_clear_errors():
    manual_seed(0)
    lin, emb, mha = Linear(D, 4), Embedding(5, D), MultiHeadAttention(D, H)
    with pytest.raises(ShapeError, match=r"Linear input must have last dim 8, got shape \(2, 3\)"):
        lin(randn(2, 3))
    with pytest.raises(TypeError, match="float array"):
        lin(np.ones((2, D), dtype=np.int64))
    with pytest.raises(TypeError, match="numpy array"):
        lin([[0.0] * D])
    with pytest.raises(DataError, match=r"\[0, 5\).*max 5") as info:
        emb(np.array([[0, 5]]))
    assert isinstance(info.value, ScratchformerError)
    with pytest.raises(DataError, match="min -1"):
        emb(np.array([-1, 2]))
    with pytest.raises(DataError, match="integer token ids"):
        emb(np.array([0.0, 1.0]))
    with pytest.raises(TypeError, match="boolean"):
        mha(randn(B, T, D), mask=np.ones((B, 1, 1, T), dtype=np.float32))
    with pytest.raises(ShapeError, match="does not broadcast"):
        mha(randn(B, T, D), mask=np.ones((B, 1, 1, T + 1), dtype=bool))
    with pytest.raises(ShapeError, match="attention input x must have last dim 8"):
        mha(randn(B, T, D + 1))
    with pytest.raises(ShapeError, match="3 dims"):
        mha(randn(T, D))
    with pytest.raises(ShapeError, match="context"):
        mha(randn(B, T, D), randn(B + 1, S, D))
    with pytest.raises(ShapeError, match="LayerNorm input must have last dim 8"):
        LayerNorm(D)(randn(B, T, D - 1))
    for pos in (SinusoidalPositionalEncoding(6, D), LearnedPositionalEmbedding(6, D)):
        with pytest.raises(ShapeError, match="longer than max_len=6"):
            pos(randn(1, 7, D))
        with pytest.raises(ShapeError, match="length 7 is longer"):
            pos(randn(1, 4, D), offset=3)
        assert pos(randn(1, 6, D)).shape == (1, 6, D)
    with pytest.raises(ShapeError, match="needs memory"):
        DecoderBlock(D, H, FF)(randn(B, T, D))
    with pytest.raises(ShapeError, match="cross_attention=False"):
        DecoderBlock(D, H, FF, cross_attention=False)(randn(B, T, D), randn(B, S, D))


def test_bad_configs_raise():
    with pytest.raises(ConfigError, match="divisible"):
        MultiHeadAttention(10, 3)
    with pytest.raises(ConfigError, match="activation must be one of .* got 'swish'"):
        FeedForward(D, FF, "swish")
    with pytest.raises(ConfigError, match=r"\[0, 1\)"):
        Dropout(1.0)


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: MultiHeadAttention(16, 0), "n_head must be a positive integer, got 0"),
        (lambda: MultiHeadAttention(16, -4), "n_head must be a positive integer"),
        (lambda: MultiHeadAttention(0, 1), "n_embd must be a positive integer"),
        (lambda: MultiHeadAttention(16, 4, dropout=1.5), r"dropout must be a number in \[0, 1\), got 1.5"),
        (lambda: MultiHeadAttention(16, 4, dropout=-1), r"dropout must be a number in \[0, 1\), got -1"),
        (lambda: Dropout(-0.1), r"\[0, 1\), got -0.1"),
        (lambda: Dropout(float("nan")), r"\[0, 1\), got nan"),
        (lambda: LayerNorm(D, eps=-1), "eps must be a finite number > 0, got -1"),
        (lambda: LayerNorm(D, eps=0), "eps must be a finite number > 0, got 0"),
        (lambda: LayerNorm(D, eps=float("inf")), "eps must be a finite number > 0"),
        (lambda: EncoderBlock(D, H, FF, dropout=1.0), r"dropout must be a number in \[0, 1\)"),
        (lambda: Linear(0, 3), "in_features must be a positive integer"),
        (lambda: Embedding(5, 2.5), "embedding_dim must be a positive integer"),
    ],
)
def test_layer_constructors_reject_bad_arguments_with_config_error(build, message):
    """issue 9, 7.: no ZeroDivisionError, no silently accepted dropout or eps."""
    with pytest.raises(ConfigError, match=message):
        build()


# ---------------------------------------------------------------------------------------------
def test_erf_matches_math_erf_over_minus8_to_8():
    x = np.linspace(-8, 8, 100_001)
    err = np.max(np.abs(erf(x) - np.array([math.erf(v) for v in x])))
    assert err <= 1e-14, f"max |erf - math.erf| = {err:.2e}"
    assert erf(np.array(0.0)) == 0.0 and erf(np.array(-8.0)) == -1.0
    # odd function, exactly
    np.testing.assert_array_equal(erf(-x), -erf(x))


def test_attention_over_the_size_limit_recomputes_its_weights_with_the_same_gradients(monkeypatch):
    import scratchformer.fast.attention as fast_attention

    x, dy = randn(B, T, D), randn(B, T, D, seed=3)
    results = []
    for limit in (1 << 30, 0):  # everything kept; nothing kept (the fast lane's rule)
        monkeypatch.setattr(fast_attention, "KEEP_WEIGHTS_BYTES", limit)
        manual_seed(0)
        m = MultiHeadAttention(D, H)
        out = m(x, causal=True)
        assert (m.attn_weights is None) == (limit == 0)  # training mode, over the limit: not kept
        dx, _ = m.backward(dy)
        results.append((out, dx, m.in_proj_weight.grad.copy(), m.out_proj.weight.grad.copy()))
        m.eval()
        m(x, causal=True)
        assert m.attn_weights.shape == (B, H, T, T)  # eval mode keeps them, for plots
    # the output is the same arithmetic but for its divisor (the (T, d) output is divided, not the
    # weights); the backward's weights come back as exp(scores - lse): float32 rounding apart
    for a, b in zip(*results):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


# -- the base stays small: no processes, no allocator ---------------------------------------------
def _fresh_python(code: str) -> str:
    """Run `code` in a fresh interpreter (this worktree's scratchformer) and return its stdout."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_layers_models_and_optimisers_import_no_process_code():
    # multi-core training lives in training/parallel.py, which only the trainer and the CLI import
    out = _fresh_python(
        "import sys\n"
        "from scratchformer.nn import Linear\n"
        "import scratchformer.models, scratchformer.optim, scratchformer.interop\n"
        "print(sorted(m for m in ('multiprocessing', 'mmap', 'signal', 'scratchformer.training.parallel')"
        " if m in sys.modules))\n"
    )
    assert out.strip() == "[]"


def test_building_layers_and_optimisers_leaves_malloc_alone():
    # keep_freed_memory() changes the whole process's malloc: only train() and the CLI call it
    out = _fresh_python(
        "import numpy as np\n"
        "import scratchformer.allocator as allocator\n"
        "from scratchformer.models import GPT, GPTConfig\n"
        "from scratchformer.optim import AdamW, SGD\n"
        "m = GPT(GPTConfig(vocab_size=5, block_size=4, n_layer=1, n_head=1, n_embd=4), seed=0)\n"
        "AdamW(m.parameters()); SGD(m.parameters(), lr=0.1)\n"
        "print(allocator._done)\n"
    )
    assert out.strip() == "False"


def test_train_and_the_cli_tune_the_allocator(monkeypatch, tmp_path):
    from scratchformer.cli import main as cli
    from scratchformer.training import trainer

    calls = []
    monkeypatch.setattr(trainer, "keep_freed_memory", lambda: calls.append("train") or True)
    monkeypatch.setattr(cli, "keep_freed_memory", lambda: calls.append("cli") or True)
    assert (
        cli.main(
            [
                "train",
                "--task",
                "sort",
                "--max-steps",
                "1",
                "--eval-batches",
                "1",
                "--workers",
                "1",
                "--out",
                str(tmp_path / "run"),
                "--no-progress",
                "--quiet",
            ]
        )
        == 0
    )
    assert calls == ["cli", "train"]
