"""Hugging Face GPT-2 interop, checked against `transformers` (a test-only dependency)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from scratchformer.errors import CheckpointError, ConfigError  # noqa: E402
from scratchformer.interop import load_hf_gpt2, save_hf_gpt2  # noqa: E402
from scratchformer.interop.gpt2 import gpt2_config_from_hf  # noqa: E402
from scratchformer.models import GPT, GPTConfig  # noqa: E402

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

SMALL = dict(
    n_layer=2,
    n_head=2,
    n_embd=16,
    vocab_size=50,
    n_positions=32,
    resid_pdrop=0.0,
    embd_pdrop=0.0,
    attn_pdrop=0.0,
)


def _hf_model(seed=0, **overrides):
    torch.manual_seed(seed)
    cfg = transformers.GPT2Config(**{**SMALL, **overrides})
    try:
        m = transformers.GPT2LMHeadModel(cfg, attn_implementation="eager")
    except TypeError:
        m = transformers.GPT2LMHeadModel(cfg)
    with torch.no_grad():  # larger weights than the 0.02 init: logits far from ties
        for name, p in m.named_parameters():
            if p.ndim == 2:
                p.normal_(0.0, 0.2)
            elif ".ln_" in name or name.startswith("transformer.ln_f"):  # not LayerNorm's 1 / 0
                p.normal_(1.0 if name.endswith("weight") else 0.0, 0.3)
            else:  # the other biases
                p.normal_(0.0, 0.1)
    return m.eval()


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("gpt2")
    hf = _hf_model()
    hf.save_pretrained(path, safe_serialization=True)
    return path, hf


def _idx(B=2, T=12, seed=0):
    return np.random.default_rng(seed).integers(0, SMALL["vocab_size"], (B, T))


def _hf_logits(hf, idx):
    with torch.no_grad():
        return hf(torch.tensor(idx)).logits.numpy()


def test_logits_match(hf_dir):
    path, hf = hf_dir
    model = load_hf_gpt2(path)
    assert model.config.activation == "gelu_tanh" and model.config.block_size == 32
    assert model.config.dtype == "float32" and model.lm_head.weight is model.wte.weight
    idx = _idx()
    logits, _ = model(idx)
    np.testing.assert_allclose(logits, _hf_logits(hf, idx), atol=1e-4, rtol=0)


def test_greedy_tokens_match_hf_generate(hf_dir):
    path, hf = hf_dir
    model = load_hf_gpt2(path)
    idx = _idx(B=3, T=5, seed=1)
    ours = model.generate(idx, 15, top_k=1)
    with torch.no_grad():
        theirs = hf.generate(
            torch.tensor(idx),
            attention_mask=torch.ones(idx.shape, dtype=torch.long),
            do_sample=False,
            max_new_tokens=15,
            pad_token_id=0,
        ).numpy()
    np.testing.assert_array_equal(ours, theirs)
    np.testing.assert_array_equal(model.generate(idx, 15, top_k=1, use_cache=False), theirs)


# our name -> (HF name, transposed?)
def _hf_name(ours: str):
    from scratchformer.interop.gpt2 import _BLOCK_MAP

    if ours.startswith("h."):
        i, rest = ours[2:].split(".", 1)
        for o, t, tr in _BLOCK_MAP:
            if o == rest:
                return f"transformer.h.{i}.{t}", tr
    return f"transformer.{ours}", False


def test_float64_gradients_match(hf_dir):
    path, _ = hf_dir
    hf = transformers.GPT2LMHeadModel.from_pretrained(path).double().eval()
    model = load_hf_gpt2(path, dtype="float64")
    assert model.dtype == np.float64
    idx = _idx(B=2, T=10, seed=2)
    # HF shifts labels inside: position t predicts idx[t + 1]; the last position is ignored
    targets = np.concatenate([idx[:, 1:], np.full((2, 1), -100)], axis=1)
    model.zero_grad()
    _, loss = model(idx, targets)
    model.backward()
    t_idx = torch.tensor(idx)
    # the LM loss in float64 (transformers' own loss upcasts logits to float32 only)
    logits = hf(input_ids=t_idx).logits
    assert logits.dtype == torch.float64
    ref = torch.nn.functional.cross_entropy(
        logits[:, :-1].reshape(-1, logits.shape[-1]), t_idx[:, 1:].reshape(-1)
    )
    ref.backward()
    assert loss == pytest.approx(ref.item(), rel=1e-12)
    hf_params = dict(hf.named_parameters())
    for name, p in model.named_parameters():
        hf_name, transpose = _hf_name(name)
        g = hf_params[hf_name].grad.numpy()
        g = g.T if transpose else g
        scale = np.abs(g).max()
        assert np.abs(p.grad - g).max() <= 1e-9 * scale, name


def test_training_in_lockstep_with_torch(hf_dir):
    """The whole update path (loss, backward, clipping, AdamW with nanoGPT's groups, warmup +
    cosine) follows transformers' GPT-2 trained by torch.optim.AdamW, step for step, in float64."""
    from scratchformer.optim import AdamW, clip_grad_norm, cosine_lr, param_groups

    path, _ = hf_dir
    hf = transformers.GPT2LMHeadModel.from_pretrained(path).double().train()
    model = load_hf_gpt2(path, dtype="float64")
    decay = [p for p in hf.parameters() if p.dim() >= 2]
    no_decay = [p for p in hf.parameters() if p.dim() < 2]
    their_opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
        lr=1e-2,
        betas=(0.9, 0.99),
        foreach=False,
    )
    our_opt = AdamW(param_groups(model, 0.1, decay_embeddings=True), lr=1e-2, betas=(0.9, 0.99))
    rng, norms = np.random.default_rng(5), []
    for step in range(25):
        lr = cosine_lr(step, 1e-2, 1e-3, 5, 25)
        idx = rng.integers(0, SMALL["vocab_size"], (4, 12))
        targets = np.concatenate([idx[:, 1:], np.full((4, 1), -100)], axis=1)
        t_idx = torch.tensor(idx)
        logits = hf(input_ids=t_idx).logits
        ref = torch.nn.functional.cross_entropy(
            logits[:, :-1].reshape(-1, logits.shape[-1]), t_idx[:, 1:].reshape(-1)
        )
        their_opt.zero_grad()
        ref.backward()
        their_norm = torch.nn.utils.clip_grad_norm_(hf.parameters(), 1.0).item()
        for g in their_opt.param_groups:
            g["lr"] = lr
        their_opt.step()

        our_opt.zero_grad()
        _, loss = model(idx, targets)
        model.backward()
        our_norm = clip_grad_norm(model.parameters(), 1.0)
        our_opt.lr = lr
        our_opt.step()
        assert loss == pytest.approx(ref.item(), rel=1e-10), step
        assert our_norm == pytest.approx(their_norm, rel=1e-10), step
        norms.append(their_norm)
    assert max(norms) > 1.0 > min(norms)  # steps with and without clipping were both compared
    hf_params = dict(hf.named_parameters())
    for name, p in model.named_parameters():
        hf_name, transpose = _hf_name(name)
        w = hf_params[hf_name].detach().numpy()
        np.testing.assert_allclose(p.data, w.T if transpose else w, rtol=0, atol=1e-10, err_msg=name)


def test_save_roundtrip_through_transformers(hf_dir, tmp_path):
    path, hf = hf_dir
    model = load_hf_gpt2(path)
    out_dir = save_hf_gpt2(model, tmp_path / "saved")
    cfg = json.loads((out_dir / "config.json").read_text())
    assert cfg["model_type"] == "gpt2" and cfg["architectures"] == ["GPT2LMHeadModel"]
    from safetensors.numpy import load_file

    keys = set(load_file(str(out_dir / "model.safetensors")))
    assert "transformer.wte.weight" in keys and "lm_head.weight" not in keys
    reloaded = transformers.GPT2LMHeadModel.from_pretrained(out_dir).eval()
    idx = _idx(seed=3)
    ours, _ = model(idx)
    np.testing.assert_allclose(_hf_logits(reloaded, idx), ours, atol=1e-5, rtol=0)
    # and back into scratchformer
    again = load_hf_gpt2(out_dir)
    for k, v in model.state_dict().items():
        np.testing.assert_array_equal(again.state_dict()[k], v)


def test_save_a_scratch_model_with_exact_gelu(tmp_path):
    model = GPT(
        GPTConfig(
            vocab_size=30, block_size=16, n_layer=2, n_head=2, n_embd=16, activation="gelu", n_inner=24
        ),
        seed=0,
    )
    rng = np.random.default_rng(0)
    for p in model.parameters():
        if p.data.ndim == 2:
            p.data[...] = rng.normal(0, 0.2, p.shape)
    save_hf_gpt2(model, tmp_path)
    hf = transformers.GPT2LMHeadModel.from_pretrained(tmp_path).eval()
    assert hf.config.activation_function == "gelu" and hf.config.n_inner == 24
    idx = rng.integers(0, 30, (2, 16))
    np.testing.assert_allclose(_hf_logits(hf, idx), model(idx)[0], atol=1e-4, rtol=0)


def test_untied_and_unprefixed_checkpoints(tmp_path):
    from safetensors.numpy import load_file, save_file

    hf = _hf_model(seed=1, tie_word_embeddings=False)
    hf.save_pretrained(tmp_path / "untied", safe_serialization=True)
    model = load_hf_gpt2(tmp_path / "untied")
    assert not model.config.tie_weights and model.lm_head.weight is not model.wte.weight
    idx = _idx(seed=4)
    np.testing.assert_allclose(model(idx)[0], _hf_logits(hf, idx), atol=1e-4, rtol=0)
    # and written back untied: its own lm_head.weight, which transformers reads
    save_hf_gpt2(model, tmp_path / "back")
    back = transformers.GPT2LMHeadModel.from_pretrained(tmp_path / "back").eval()
    assert not back.config.tie_word_embeddings
    np.testing.assert_allclose(_hf_logits(back, idx), _hf_logits(hf, idx), atol=1e-5, rtol=0)
    # the original openai checkpoints have no "transformer." prefix and carry attn.bias buffers
    tied = _hf_model(seed=2)
    tied.save_pretrained(tmp_path / "tied", safe_serialization=True)
    tensors = {
        k.removeprefix("transformer."): v
        for k, v in load_file(str(tmp_path / "tied/model.safetensors")).items()
    }
    tensors["h.0.attn.bias"] = np.tril(np.ones((1, 1, 32, 32), dtype=np.float32))
    (tmp_path / "bare").mkdir()
    save_file(tensors, str(tmp_path / "bare/model.safetensors"))
    (tmp_path / "bare/config.json").write_text((tmp_path / "tied/config.json").read_text())
    np.testing.assert_allclose(
        load_hf_gpt2(tmp_path / "bare")(idx)[0], _hf_logits(tied, idx), atol=1e-4, rtol=0
    )


def test_errors(hf_dir, tmp_path):
    path, _ = hf_dir
    with pytest.raises(CheckpointError, match="config.json"):
        load_hf_gpt2(tmp_path)
    (tmp_path / "config.json").write_text((path / "config.json").read_text())
    with pytest.raises(CheckpointError, match="model.safetensors"):
        load_hf_gpt2(tmp_path)
    base = json.loads((path / "config.json").read_text())
    for field, value in [
        ("scale_attn_by_inverse_layer_idx", True),
        ("reorder_and_upcast_attn", True),
        ("activation_function", "silu"),
        ("scale_attn_weights", False),
    ]:
        with pytest.raises(ConfigError, match=field):
            gpt2_config_from_hf({**base, field: value})
    assert gpt2_config_from_hf({**base, "n_inner": 40}).inner_size == 40
    # weights that do not fit the config
    (tmp_path / "model.safetensors").write_bytes((path / "model.safetensors").read_bytes())
    (tmp_path / "config.json").write_text(json.dumps({**base, "n_layer": 3}))
    with pytest.raises(CheckpointError, match="h.2"):
        load_hf_gpt2(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({**base, "n_embd": 32}))
    with pytest.raises(CheckpointError):
        load_hf_gpt2(tmp_path)
    for bad in [
        dict(positional="sinusoidal"),
        dict(norm_first=False),
        dict(bias=False),
        dict(attn_only=True),
    ]:
        m = GPT(GPTConfig(vocab_size=10, block_size=8, n_layer=1, n_head=1, n_embd=8, **bad))
        with pytest.raises(ConfigError):
            save_hf_gpt2(m, tmp_path / "x")
