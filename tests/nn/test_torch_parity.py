"""Parity with PyTorch (torch==2.13.0 CPU, test-only): same weights, same inputs, same
upstream gradient; outputs and the gradients of every input and every parameter compared.

Where the layout matches, the reference is the real torch.nn layer (Linear, Embedding,
LayerNorm, MultiheadAttention, TransformerEncoderLayer, TransformerDecoderLayer); elsewhere a
few lines of torch code built from the same weights.

Error measure: max|ours - torch| / max|torch| (relative to the tensor's scale), required
<= 1e-9 in float64 and <= 1e-4 in float32 (both sides computed in that dtype).
Masks: ours are True = may attend; torch's boolean masks are True = NOT allowed, hence `~`.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch not installed: pip install torch==2.13.0")
F = torch.nn.functional

from scratchformer.nn import (  # noqa: E402
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
    SinusoidalPositionalEncoding,
    manual_seed,
)
from scratchformer.ops import (  # noqa: E402
    cross_entropy_backward,
    cross_entropy_forward,
    log_softmax_backward,
    log_softmax_forward,
    softmax_backward,
    softmax_forward,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TOL = {np.float64: 1e-9, np.float32: 1e-4}
TORCH_DTYPE = {np.float64: torch.float64, np.float32: torch.float32}
DTYPES = pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
D, H, FF, B, T, S = 8, 2, 16, 2, 4, 5
ACTIVATIONS = ["relu", "gelu", "gelu_tanh"]


def rel_err(ours: np.ndarray, ref) -> float:
    ref = ref.detach().numpy() if isinstance(ref, torch.Tensor) else np.asarray(ref)
    assert ours.shape == ref.shape, f"shape {ours.shape} != torch {ref.shape}"
    scale = float(np.max(np.abs(ref)))
    assert scale > 0, "reference is all zeros: the comparison would prove nothing"
    return float(np.max(np.abs(ours.astype(np.float64) - ref.astype(np.float64)))) / scale


def assert_close(name, ours, ref, dtype):
    err = rel_err(ours, ref)
    assert err <= TOL[dtype], f"{name}: max|ours - torch| / max|torch| = {err:.2e} > {TOL[dtype]}"


def key_padding(lengths, Tk):
    """(B, Tk) bool, True = real token (may attend)."""
    return np.arange(Tk)[None, :] < np.asarray(lengths)[:, None]


def torch_act(name):
    return {"relu": F.relu, "gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh")}[name]


def randomize(module, seed=0, scale=0.5):
    """Random weights everywhere (default LayerNorm ones/zeros and zero biases hide bugs)."""
    g = np.random.default_rng(seed)
    for _, p in module.named_parameters():
        p.data[...] = g.standard_normal(p.shape) * scale
    return module


def rename(name: str, table: dict[str, str]) -> str:
    for ours, theirs in table.items():
        if name.startswith(ours + "."):
            return theirs + name[len(ours) :]
    return name


ENC_MAP = {"attn_norm": "norm1", "ff.fc1": "linear1", "ff.fc2": "linear2", "ff_norm": "norm2"}
DEC_MAP = {
    "attn_norm": "norm1",
    "cross_attn": "multihead_attn",
    "cross_norm": "norm2",
    "ff.fc1": "linear1",
    "ff.fc2": "linear2",
    "ff_norm": "norm3",
}


def run_parity(ours: Module, tmod, inputs, our_kwargs, torch_fwd, dtype, name_map=lambda n: n, seed=0):
    """Copy our weights into `tmod`, run both, compare output, input grads and parameter grads.

    inputs: list of numpy arrays (floats get gradients; integer ids do not).
    torch_fwd(tmod, *torch_inputs) -> output tensor.
    """
    ours.to(dtype).train()
    ours.zero_grad()
    tdt = TORCH_DTYPE[dtype]
    tmod.to(tdt).train()
    tparams = dict(tmod.named_parameters())
    mapped = {}
    with torch.no_grad():
        for name, p in ours.named_parameters():
            tname = name_map(name)
            assert tname in tparams, f"{name} -> {tname} not a torch parameter ({sorted(tparams)})"
            assert tuple(tparams[tname].shape) == p.shape, name
            tparams[tname].copy_(torch.from_numpy(p.data.copy()))
            mapped[name] = tname
    assert sorted(mapped.values()) == sorted(tparams), "some torch parameters were not set from ours"

    xs = [x.astype(dtype) if np.issubdtype(x.dtype, np.floating) else x for x in inputs]
    txs = [torch.tensor(x, requires_grad=bool(np.issubdtype(x.dtype, np.floating))) for x in xs]
    out = ours(*xs, **our_kwargs)
    tout = torch_fwd(tmod, *txs)
    assert out.dtype == dtype, f"output dtype {out.dtype}, expected {np.dtype(dtype)}"
    assert_close("output", out, tout, dtype)

    R = np.random.default_rng(seed + 100).standard_normal(out.shape).astype(dtype)
    grads = ours.backward(R)
    grads = grads if isinstance(grads, tuple) else (grads,)
    tout.backward(torch.from_numpy(R))
    float_idx = [i for i, x in enumerate(xs) if np.issubdtype(x.dtype, np.floating)]
    for j, i in enumerate(float_idx):
        assert grads[j].dtype == dtype
        assert_close(f"grad input{i}", grads[j], txs[i].grad, dtype)
    checked = 0
    for name, p in ours.named_parameters():
        assert p.grad.dtype == dtype
        assert_close(f"grad {name}", p.grad, tparams[mapped[name]].grad, dtype)
        checked += 1
    return out, checked


# ---------------------------------------------------------------------------------------------
# basic layers
@DTYPES
@pytest.mark.parametrize("bias", [True, False])
def test_linear(dtype, bias):
    manual_seed(0)
    m = Linear(6, 5, bias=bias)
    x = np.random.default_rng(1).standard_normal((B, T, 6))
    run_parity(m, torch.nn.Linear(6, 5, bias=bias), [x], {}, lambda t, x: t(x), dtype)


@DTYPES
def test_embedding(dtype):
    manual_seed(0)
    m = Embedding(7, D)
    idx = np.array([[1, 3, 1, 6], [0, 1, 3, 3]])
    _, n = run_parity(m, torch.nn.Embedding(7, D), [idx], {}, lambda t, i: t(i), dtype)
    assert n == 1


@DTYPES
@pytest.mark.parametrize("bias", [True, False])
def test_layernorm(dtype, bias):
    m = randomize(LayerNorm(D, bias=bias), 2)
    x = np.random.default_rng(3).standard_normal((B, T, D)) * 3 + 1
    _, n = run_parity(m, torch.nn.LayerNorm(D, bias=bias), [x], {}, lambda t, x: t(x), dtype)
    assert n == (2 if bias else 1)


def test_dropout_eval_matches_torch_and_train_grad_is_mask():
    x = np.random.default_rng(4).standard_normal((B, T, D))
    m = Dropout(0.5, rng=np.random.default_rng(0)).eval()
    np.testing.assert_array_equal(m(x), torch.nn.Dropout(0.5).eval()(torch.tensor(x)).numpy())
    m.train()
    y = m(x)
    mask = np.where(y == 0, 0.0, 2.0)
    assert np.any(mask == 0) and np.any(mask == 2)
    np.testing.assert_allclose(y, x * mask, rtol=1e-15)  # surviving entries scaled by 1/(1-p)
    R = np.ones_like(x)
    np.testing.assert_array_equal(m.backward(R), mask)


@DTYPES
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize(
    "case", ["self", "self-padding", "self-causal", "self-causal-padding", "cross", "cross-padding"]
)
def test_multihead_attention(dtype, bias, case):
    manual_seed(5)
    m = randomize(MultiHeadAttention(D, H, bias=bias), 5)
    g = np.random.default_rng(6)
    x = g.standard_normal((B, T, D))
    cross = case.startswith("cross")
    Tk = S if cross else T
    ctx = g.standard_normal((B, S, D)) if cross else None
    pad = key_padding([Tk, Tk - 2], Tk) if "padding" in case else None
    causal = "causal" in case
    kwargs = {"causal": causal}
    if pad is not None:
        kwargs["mask"] = pad[:, None, None, :]
    tmha = torch.nn.MultiheadAttention(D, H, bias=bias, batch_first=True)
    weights = {}

    def tfwd(t, x, c=None):
        kv = x if c is None else c
        out, w = t(
            x,
            kv,
            kv,
            key_padding_mask=None if pad is None else torch.from_numpy(~pad),
            attn_mask=torch.from_numpy(~np.tri(T, T, dtype=bool)) if causal else None,
            need_weights=True,
            average_attn_weights=False,
        )
        weights["torch"] = w
        return out

    inputs = [x] + ([ctx] if cross else [])  # context is passed positionally
    _, n = run_parity(m, tmha, inputs, kwargs, tfwd, dtype)
    assert n == (4 if bias else 2)
    assert_close("attention weights", m.attn_weights, weights["torch"], dtype)


@DTYPES
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_feedforward(dtype, activation):
    manual_seed(7)
    m = randomize(FeedForward(D, FF, activation), 7)

    class TorchFF(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = torch.nn.Linear(D, FF), torch.nn.Linear(FF, D)

        def forward(self, x):
            return self.fc2(torch_act(activation)(self.fc1(x)))

    x = np.random.default_rng(8).standard_normal((B, T, D))
    run_parity(m, TorchFF(), [x], {}, lambda t, x: t(x), dtype)


@DTYPES
def test_sinusoidal_positional_encoding(dtype):
    # built in the target dtype: a float32 table converted with .to(float64) keeps float32 rounding
    m = SinusoidalPositionalEncoding(16, D, dtype=dtype)
    x = np.random.default_rng(9).standard_normal((B, T, D))

    class TorchPE(torch.nn.Module):  # Vaswani et al. 3.5, written independently in torch
        def forward(self, x, offset=3):
            pos = torch.arange(offset, offset + x.shape[1], dtype=torch.float64)[:, None]
            i2 = torch.arange(0, D, 2, dtype=torch.float64)
            angle = pos / torch.pow(torch.tensor(10000.0, dtype=torch.float64), i2 / D)
            pe = torch.stack([torch.sin(angle), torch.cos(angle)], dim=-1).reshape(x.shape[1], D)
            return x + pe.to(x.dtype)

    run_parity(m, TorchPE(), [x], {"offset": 3}, lambda t, x: t(x), dtype)


@DTYPES
def test_learned_positional_embedding(dtype):
    manual_seed(10)
    m = LearnedPositionalEmbedding(12, D)

    class TorchLPE(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.zeros(12, D))

        def forward(self, x):
            return x + self.weight[5 : 5 + x.shape[1]]

    x = np.random.default_rng(11).standard_normal((B, T, D))
    run_parity(m, TorchLPE(), [x], {"offset": 5}, lambda t, x: t(x), dtype)


# ---------------------------------------------------------------------------------------------
# blocks vs torch.nn.TransformerEncoderLayer / TransformerDecoderLayer
def torch_encoder_layer(activation, norm_first):
    return torch.nn.TransformerEncoderLayer(
        D, H, FF, dropout=0.0, activation=torch_act(activation), batch_first=True, norm_first=norm_first
    )


def torch_decoder_layer(activation, norm_first):
    return torch.nn.TransformerDecoderLayer(
        D, H, FF, dropout=0.0, activation=torch_act(activation), batch_first=True, norm_first=norm_first
    )


def torch_causal(Tq):
    return torch.from_numpy(~np.tri(Tq, Tq, dtype=bool))  # True = not allowed


@DTYPES
@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("norm_first", [True, False], ids=["pre-norm", "post-norm"])
def test_encoder_block(dtype, activation, norm_first):
    manual_seed(12)
    m = randomize(EncoderBlock(D, H, FF, activation=activation, norm_first=norm_first), 12)
    pad = key_padding([T, T - 1], T)
    x = np.random.default_rng(13).standard_normal((B, T, D))
    _, n = run_parity(
        m,
        torch_encoder_layer(activation, norm_first),
        [x],
        {"mask": pad[:, None, None, :]},
        lambda t, x: t(x, src_key_padding_mask=torch.from_numpy(~pad)),
        dtype,
        name_map=lambda n: rename(n, ENC_MAP),
    )
    assert n == 12


@DTYPES
@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("norm_first", [True, False], ids=["pre-norm", "post-norm"])
def test_decoder_block_cross_attention(dtype, activation, norm_first):
    manual_seed(14)
    m = randomize(DecoderBlock(D, H, FF, activation=activation, norm_first=norm_first), 14)
    g = np.random.default_rng(15)
    x, mem = g.standard_normal((B, T, D)), g.standard_normal((B, S, D))  # Tq = 4 != Tk = 5
    src_pad, tgt_pad = key_padding([S, S - 2], S), key_padding([T, T - 1], T)
    _, n = run_parity(
        m,
        torch_decoder_layer(activation, norm_first),
        [x, mem],
        {"self_mask": tgt_pad[:, None, None, :], "memory_mask": src_pad[:, None, None, :]},
        lambda t, x, mem: t(
            x,
            mem,
            tgt_mask=torch_causal(T),
            tgt_key_padding_mask=torch.from_numpy(~tgt_pad),
            memory_key_padding_mask=torch.from_numpy(~src_pad),
        ),
        dtype,
        name_map=lambda n: rename(n, DEC_MAP),
    )
    assert n == 18


@DTYPES
@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("norm_first", [True, False], ids=["pre-norm", "post-norm"])
def test_decoder_block_without_cross_attention(dtype, activation, norm_first):
    """A GPT block is an encoder layer with a causal mask."""
    manual_seed(16)
    m = randomize(
        DecoderBlock(D, H, FF, activation=activation, norm_first=norm_first, cross_attention=False), 16
    )
    x = np.random.default_rng(17).standard_normal((B, T, D))
    _, n = run_parity(
        m,
        torch_encoder_layer(activation, norm_first),
        [x],
        {},
        lambda t, x: t(x, src_mask=torch_causal(T)),
        dtype,
        name_map=lambda n: rename(n, ENC_MAP),
    )
    assert n == 12


# ---------------------------------------------------------------------------------------------
# a 2-layer encoder-decoder stack
class EncDec(Module):
    """2 EncoderBlocks over the source, 2 DecoderBlocks over the target reading the encoder output."""

    def __init__(self, activation, norm_first, layers=2):
        super().__init__()
        self.encoder = [
            EncoderBlock(D, H, FF, activation=activation, norm_first=norm_first) for _ in range(layers)
        ]
        self.decoder = [
            DecoderBlock(D, H, FF, activation=activation, norm_first=norm_first) for _ in range(layers)
        ]

    def forward(self, src, tgt, src_mask=None):
        for blk in self.encoder:
            src = blk(src, mask=src_mask)
        for blk in self.decoder:
            tgt = blk(tgt, src, memory_mask=src_mask)
        return tgt

    def backward(self, dy):
        dmem = 0
        for blk in reversed(self.decoder):
            dy, dm = blk.backward(dy)
            dmem = dmem + dm  # every decoder layer reads the same encoder output
        for blk in reversed(self.encoder):
            dmem = blk.backward(dmem)
        return dmem, dy


class TorchEncDec(torch.nn.Module):
    def __init__(self, activation, norm_first, layers=2):
        super().__init__()
        self.encoder = torch.nn.ModuleList(
            [torch_encoder_layer(activation, norm_first) for _ in range(layers)]
        )
        self.decoder = torch.nn.ModuleList(
            [torch_decoder_layer(activation, norm_first) for _ in range(layers)]
        )

    def forward(self, src, tgt, src_key_padding_mask):
        for layer in self.encoder:
            src = layer(src, src_key_padding_mask=src_key_padding_mask)
        for layer in self.decoder:
            tgt = layer(
                tgt, src, tgt_mask=torch_causal(tgt.shape[1]), memory_key_padding_mask=src_key_padding_mask
            )
        return tgt


def stack_name_map(name: str) -> str:
    part, idx, rest = name.split(".", 2)
    return f"{part}.{idx}." + rename(rest, ENC_MAP if part == "encoder" else DEC_MAP)


@DTYPES
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("norm_first", [True, False], ids=["pre-norm", "post-norm"])
def test_two_layer_encoder_decoder_stack(dtype, activation, norm_first):
    manual_seed(18)
    m = randomize(EncDec(activation, norm_first), 18, scale=0.4)
    g = np.random.default_rng(19)
    src, tgt = g.standard_normal((B, S, D)), g.standard_normal((B, T, D))
    src_pad = key_padding([S, S - 2], S)
    _, n = run_parity(
        m,
        TorchEncDec(activation, norm_first),
        [src, tgt],
        {"src_mask": src_pad[:, None, None, :]},
        lambda t, s, x: t(s, x, torch.from_numpy(~src_pad)),
        dtype,
        name_map=stack_name_map,
    )
    assert n == 2 * 12 + 2 * 18  # every parameter, including the encoder's (reached via cross-attention)


# ---------------------------------------------------------------------------------------------
# losses and softmax
@DTYPES
@pytest.mark.parametrize("shape", [(6,), (2, 4)], ids=["N,V", "B,T,V"])
@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
@pytest.mark.parametrize("ignore_index", [-100, 2])
def test_cross_entropy(dtype, shape, label_smoothing, ignore_index):
    V = 5
    g = np.random.default_rng(20)
    logits = (g.standard_normal((*shape, V)) * 2).astype(dtype)
    targets = g.integers(0, V, size=shape)
    targets.reshape(-1)[[1, 3]] = ignore_index
    loss, cache = cross_entropy_forward(logits, targets, ignore_index, label_smoothing)
    dlogits = cross_entropy_backward(cache, dloss=0.7)
    assert dlogits.dtype == dtype

    tl = torch.tensor(logits, requires_grad=True)
    inp = tl if len(shape) == 1 else tl.permute(0, 2, 1)  # torch wants (B, V, T)
    tloss = F.cross_entropy(
        inp, torch.from_numpy(targets), ignore_index=ignore_index, label_smoothing=label_smoothing
    )
    (tloss * 0.7).backward()
    assert abs(loss - tloss.item()) / abs(tloss.item()) <= TOL[dtype]
    assert_close("dlogits", dlogits, tl.grad, dtype)


@DTYPES
def test_softmax_and_log_softmax(dtype):
    g = np.random.default_rng(21)
    x = (g.standard_normal((2, 3, 7)) * 4).astype(dtype)
    R = g.standard_normal(x.shape).astype(dtype)
    for fwd, bwd, tf in [
        (softmax_forward, softmax_backward, torch.softmax),
        (log_softmax_forward, log_softmax_backward, torch.log_softmax),
    ]:
        tx = torch.tensor(x, requires_grad=True)
        ty = tf(tx, -1)
        ty.backward(torch.from_numpy(R))
        y = fwd(x)
        assert y.dtype == dtype
        assert_close(fwd.__name__, y, ty, dtype)
        assert_close(bwd.__name__, bwd(R, y), tx.grad, dtype)
