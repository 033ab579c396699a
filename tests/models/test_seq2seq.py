"""Seq2SeqTransformer: end-to-end gradient checks (finite differences and PyTorch), decoding
(greedy, beam search), smoke training on the copy task."""

from __future__ import annotations

import math

import numpy as np
import pytest
from model_state import assert_same_init, assert_seed_equals_manual_seed, seeded_state

from scratchformer.data.tasks import BOS, EOS, PAD, VOCAB_SIZE, exact_match, make_task
from scratchformer.errors import ConfigError, DataError, ShapeError
from scratchformer.gradcheck import numerical_gradient, relative_error
from scratchformer.inference import beam_search, greedy_decode, sequence_scores
from scratchformer.models import Seq2SeqConfig, Seq2SeqTransformer
from scratchformer.nn import manual_seed
from scratchformer.ops import IGNORE_INDEX


def tiny(norm_first=True, share=False, label_smoothing=0.1, dtype=np.float64, **kw):
    manual_seed(0)
    cfg = {
        "src_vocab_size": VOCAB_SIZE,
        "tgt_vocab_size": VOCAB_SIZE,
        "max_len": 7,
        "n_layer": 1,
        "n_decoder_layers": 2,
        "n_head": 2,
        "n_embd": 4,
        "n_inner": 8,
        "norm_first": norm_first,
        "share_embeddings": share,
        "label_smoothing": label_smoothing,
        "pad_id": PAD,
        "bos_id": BOS,
        "eos_id": EOS,
    }
    cfg.update(kw)
    return Seq2SeqTransformer(Seq2SeqConfig(**cfg)).to(dtype)


def randomize_layernorms(model, seed=5):
    g = np.random.default_rng(seed)
    for name, p in model.named_parameters():
        if "norm." in name or name.startswith("ln_f."):
            p.data[...] = g.normal(1.0 if name.endswith("weight") else 0.0, 0.3, p.shape)


def batch():
    d = make_task("reverse", 3, np.random.default_rng(3), max_len=5)
    src, tgt_in, tgt_out = d
    assert (src == PAD).any() and (tgt_out == PAD).any()  # padding is exercised
    return src, tgt_in, tgt_out


CASES = [(True, False, 0.1), (False, True, 0.0), (True, True, 0.2)]


@pytest.mark.parametrize("norm_first,share,ls", CASES)
def test_gradcheck_whole_seq2seq(norm_first, share, ls):
    model = tiny(norm_first, share, ls)
    src, tgt_in, tgt_out = batch()
    model.zero_grad()
    model(src, tgt_in, tgt_out)
    model.backward()
    names = [n for n, _ in model.named_parameters()]
    assert ("tgt_emb.weight" in names) != share
    for name, p in model.named_parameters():
        # step 3e-5: with 1e-6 rounding dominates the small encoder gradients (errors 2.6e-7);
        # with 3e-5 the worst error is 5e-9, so the bar can catch a backward off by 3e-7
        numeric = numerical_gradient(lambda: model(src, tgt_in, tgt_out)[1], p.data, eps=3e-5)
        err = relative_error(p.grad, numeric)
        assert err <= 5e-8, f"{name}: relative error {err:.2e}"


# -- PyTorch parity ---------------------------------------------------------------------------------
_ATTN = ["in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"]
_WB = ["weight", "bias"]
ENC_MAP = {
    **{f"self_attn.{a}": f"self_attn.{a}" for a in _ATTN},
    **{f"norm1.{a}": f"attn_norm.{a}" for a in _WB},
    **{f"linear1.{a}": f"ff.fc1.{a}" for a in _WB},
    **{f"linear2.{a}": f"ff.fc2.{a}" for a in _WB},
    **{f"norm2.{a}": f"ff_norm.{a}" for a in _WB},
}
DEC_MAP = {
    **{f"self_attn.{a}": f"self_attn.{a}" for a in _ATTN},
    **{f"norm1.{a}": f"attn_norm.{a}" for a in _WB},
    **{f"multihead_attn.{a}": f"cross_attn.{a}" for a in _ATTN},
    **{f"norm2.{a}": f"cross_norm.{a}" for a in _WB},
    **{f"linear1.{a}": f"ff.fc1.{a}" for a in _WB},
    **{f"linear2.{a}": f"ff.fc2.{a}" for a in _WB},
    **{f"norm3.{a}": f"ff_norm.{a}" for a in _WB},
}


@pytest.mark.parametrize("norm_first,share,ls", CASES)
def test_matches_pytorch(norm_first, share, ls):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    F = torch.nn.functional
    model = tiny(norm_first, share, ls)
    c = model.config
    src, tgt_in, tgt_out = batch()
    randomize_layernorms(model)  # weight 1 and bias 0 would hide a swapped or dropped gain
    model.zero_grad()
    _, loss = model(src, tgt_in, tgt_out)
    model.backward()

    ours = dict(model.named_parameters())
    leaves = {}

    def leaf(name):
        if name not in leaves:
            leaves[name] = torch.tensor(ours[name].data, dtype=torch.float64, requires_grad=True)
        return leaves[name]

    def torch_layer(cls, prefix, mapping):
        layer = cls(
            c.n_embd,
            c.n_head,
            c.n_inner,
            dropout=0.0,
            activation=c.activation,
            batch_first=True,
            norm_first=c.norm_first,
            dtype=torch.float64,
        )
        tparams = dict(layer.named_parameters())
        assert set(tparams) == set(mapping)
        with torch.no_grad():
            for tname, oname in mapping.items():
                tparams[tname].copy_(torch.from_numpy(ours[f"{prefix}.{oname}"].data))
                leaves[f"{prefix}.{oname}"] = tparams[tname]
        return layer.train()

    enc = [
        torch_layer(torch.nn.TransformerEncoderLayer, f"encoder.{i}", ENC_MAP)
        for i in range(c.n_encoder_layers)
    ]
    dec = [
        torch_layer(torch.nn.TransformerDecoderLayer, f"decoder.{i}", DEC_MAP)
        for i in range(c.n_decoder_layers)
    ]
    S, T = src.shape[1], tgt_in.shape[1]
    pe = torch.from_numpy(model.src_pos.pe)
    src_t, tin_t = torch.from_numpy(src), torch.from_numpy(tgt_in)
    src_pad, tgt_pad = src_t == PAD, tin_t == PAD  # torch: True = NOT allowed
    scale = math.sqrt(c.n_embd)
    h = leaf("src_emb.weight")[src_t] * scale + pe[:S]
    for layer in enc:
        h = layer(h, src_key_padding_mask=src_pad)
    if norm_first:
        h = F.layer_norm(h, (c.n_embd,), leaf("enc_norm.weight"), leaf("enc_norm.bias"), eps=1e-5)
    memory = h
    tgt_table = leaf("src_emb.weight") if share else leaf("tgt_emb.weight")
    h = tgt_table[tin_t] * scale + pe[:T]
    causal = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    for layer in dec:
        h = layer(h, memory, tgt_mask=causal, tgt_key_padding_mask=tgt_pad, memory_key_padding_mask=src_pad)
    if norm_first:
        h = F.layer_norm(h, (c.n_embd,), leaf("dec_norm.weight"), leaf("dec_norm.bias"), eps=1e-5)
    logits = F.linear(h, leaf("lm_head.weight"), leaf("lm_head.bias"))
    tloss = F.cross_entropy(
        logits.reshape(-1, c.tgt_vocab_size),
        torch.from_numpy(tgt_out).reshape(-1),
        ignore_index=PAD,
        label_smoothing=ls,
    )
    tloss.backward()

    assert abs(loss - tloss.item()) <= 1e-9 * max(1.0, abs(tloss.item()))
    assert set(leaves) == set(ours), set(ours) ^ set(leaves)
    for name, t in leaves.items():
        ref = t.grad.numpy()
        scale_ = max(np.abs(ref).max(), 1e-12)
        assert np.abs(ours[name].grad - ref).max() <= 1e-9 * scale_, name


# -- masks, API, errors -----------------------------------------------------------------------------
def test_padding_in_target_and_source_is_inert():
    model = tiny().eval()
    src, tgt_in, tgt_out = batch()
    logits, loss = model(src, tgt_in, tgt_out)
    # more padding columns change neither the loss nor the real positions' logits
    src2 = np.pad(src, ((0, 0), (0, 2)), constant_values=PAD)
    tin2 = np.pad(tgt_in, ((0, 0), (0, 1)), constant_values=PAD)
    tout2 = np.pad(tgt_out, ((0, 0), (0, 1)), constant_values=PAD)
    logits2, loss2 = model(src2, tin2, tout2)
    assert abs(loss - loss2) < 1e-12
    real = tgt_in != PAD
    np.testing.assert_allclose(logits2[:, : tgt_in.shape[1]][real], logits[real], atol=1e-12)
    # IGNORE_INDEX in tgt_out is ignored like PAD (the one ignore index of every model)
    _, loss3 = model(src, tgt_in, np.where(tgt_out == PAD, IGNORE_INDEX, tgt_out))
    assert abs(loss - loss3) < 1e-12


def test_decode_step_with_cache_matches_full_decode():
    model = tiny().eval()
    src, tgt_in, _ = batch()
    mask = model.src_mask(src)
    memory = model.encode(src, mask)
    full = model.decode(tgt_in, memory, mask, tgt_padding=False)
    caches = model.new_caches()
    for t in range(tgt_in.shape[1]):
        step = model.decode_step(tgt_in[:, t : t + 1], memory, mask, caches, offset=t)
        np.testing.assert_allclose(step, full[:, t], atol=1e-10)


SEEDED_CFG = dict(
    src_vocab_size=VOCAB_SIZE,
    tgt_vocab_size=VOCAB_SIZE,
    max_len=7,
    n_layer=1,
    n_decoder_layers=2,
    n_head=2,
    n_embd=4,
    n_inner=8,
    dropout=0.1,
)  # unshared embeddings: both tables drawn


def test_seed_fixes_initial_weights():
    cfg = Seq2SeqConfig(**SEEDED_CFG)
    a, b, c = (Seq2SeqTransformer(cfg, seed=s) for s in (3, 3, 4))
    assert_same_init(a, b)
    (pa, ra), (pc, rc) = seeded_state(a), seeded_state(c)
    for name in (
        "src_emb.weight",
        "tgt_emb.weight",
        "encoder.0.self_attn.in_proj_weight",
        "decoder.1.cross_attn.in_proj_weight",
        "lm_head.weight",
    ):  # drawn at random
        assert not np.array_equal(pa[name], pc[name]), name
    assert ra != rc


def test_seed_argument_equals_manual_seed_then_construction():
    for share in (False, True):
        cfg = Seq2SeqConfig(**SEEDED_CFG, share_embeddings=share)
        assert_seed_equals_manual_seed(lambda seed: Seq2SeqTransformer(cfg, seed=seed), "src_emb.weight")


def test_errors():
    with pytest.raises(ConfigError):
        Seq2SeqConfig(src_vocab_size=10, tgt_vocab_size=12, share_embeddings=True)
    with pytest.raises(ConfigError):
        Seq2SeqConfig(src_vocab_size=10, tgt_vocab_size=10, pad_id=10)
    model = tiny()
    src, tgt_in, tgt_out = batch()
    with pytest.raises(ShapeError):
        model(src, tgt_in, tgt_out[:, :-1])
    with pytest.raises(DataError, match="src must hold integer token ids"):
        model(src.astype(np.float64), tgt_in)
    with pytest.raises(DataError, match=r"tgt_in: token ids must be in \[0, "):
        model(src, np.full_like(tgt_in, VOCAB_SIZE))
    with pytest.raises(DataError, match="src: token ids"):
        model.encode(np.full_like(src, -1))
    with pytest.raises(ShapeError):
        model(np.zeros((1, 9), dtype=np.int64), tgt_in[:1])  # longer than max_len
    with pytest.raises(ConfigError):
        greedy_decode(model, src, max_new_tokens=99)
    with pytest.raises(ConfigError):
        beam_search(model, src, beam_width=0)


# -- decoding --------------------------------------------------------------------------------------
def random_model(seed, dtype=np.float64):
    """A random model whose outputs vary in length (EOS made likely enough)."""
    manual_seed(seed)
    model = Seq2SeqTransformer(
        Seq2SeqConfig(
            src_vocab_size=VOCAB_SIZE,
            tgt_vocab_size=VOCAB_SIZE,
            max_len=10,
            n_layer=2,
            n_head=2,
            n_embd=16,
            n_inner=32,
            pad_id=PAD,
            bos_id=BOS,
            eos_id=EOS,
        )
    ).to(dtype)
    model.lm_head.bias.data[EOS] += 1.0
    return model


def sources(n, seed):
    return make_task("copy", n, np.random.default_rng(seed), max_len=8).src


def test_greedy_output_format():
    model = random_model(0)
    out = greedy_decode(model, sources(16, 0), max_new_tokens=6)
    assert out.dtype == np.int64 and out.shape[0] == 16 and out.shape[1] <= 6
    for row in out:
        hits = np.flatnonzero(row == EOS)
        if hits.size:  # everything after the first EOS is PAD
            assert (row[hits[0] + 1 :] == PAD).all()
        else:
            assert len(row) == 6


@pytest.mark.parametrize("seed", range(4))
def test_beam_width_one_equals_greedy(seed):
    model = random_model(seed)
    src = sources(32, seed)
    g, g_scores = greedy_decode(model, src, return_scores=True)
    for include_greedy in (True, False):
        b, b_scores = beam_search(model, src, beam_width=1, include_greedy=include_greedy, return_scores=True)
        np.testing.assert_array_equal(b, g)
        np.testing.assert_allclose(b_scores, g_scores, atol=1e-12)


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.0])
@pytest.mark.parametrize("k", [2, 4])
def test_beam_never_scores_below_greedy(k, alpha):
    n_better = 0
    for seed in range(3):
        model = random_model(seed)
        src = sources(32, 10 + seed)
        g = greedy_decode(model, src)
        b, b_scores = beam_search(model, src, beam_width=k, alpha=alpha, return_scores=True)
        sg = sequence_scores(model, src, g, alpha=alpha)
        sb = sequence_scores(model, src, b, alpha=alpha)
        np.testing.assert_allclose(sb, b_scores, atol=1e-9)  # beam's own scores are the model's
        assert (sb >= sg - 1e-9).all(), (k, alpha, seed, sb - sg)
        n_better += int((sb > sg + 1e-9).sum())
        if k == 4:  # the plain search (no greedy fallback) also never loses on these
            plain = beam_search(model, src, beam_width=k, alpha=alpha, include_greedy=False)
            assert (sequence_scores(model, src, plain, alpha=alpha) >= sg - 1e-9).all()
    assert n_better > 10  # and it does search: it often finds better sequences than greedy


def test_beam_search_is_batched_consistently():
    """Decoding a row alone or inside a batch gives the same answer."""
    model = random_model(1)
    src = sources(6, 5)
    together = beam_search(model, src, beam_width=3)
    for i in range(len(src)):
        alone = beam_search(model, src[i : i + 1], beam_width=3)
        n = alone.shape[1]
        np.testing.assert_array_equal(together[i, :n], alone[0])
        assert (together[i, n:] == PAD).all()


def test_copy_smoke_training_improves_loss():
    from scratchformer.optim import AdamW

    manual_seed(0)
    model = Seq2SeqTransformer(
        Seq2SeqConfig(
            src_vocab_size=VOCAB_SIZE,
            tgt_vocab_size=VOCAB_SIZE,
            max_len=9,
            n_layer=1,
            n_head=2,
            n_embd=16,
            n_inner=32,
            share_embeddings=True,
            pad_id=PAD,
            bos_id=BOS,
            eos_id=EOS,
        )
    )
    data = make_task("copy", 512, np.random.default_rng(0), max_len=8)
    opt = AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    rng = np.random.default_rng(0)
    losses = []
    for _ in range(30):
        src, tgt_in, tgt_out = data.subset(rng.integers(0, len(data), size=32))
        _, loss = model(src, tgt_in, tgt_out)
        model.zero_grad()
        model.backward()
        opt.step()
        losses.append(loss)
    assert np.mean(losses[-5:]) < np.mean(losses[:5]) - 0.1, losses
    pred = greedy_decode(model, data.src[:8])
    assert exact_match(pred, data.tgt_out[:8]).shape == (8,)
