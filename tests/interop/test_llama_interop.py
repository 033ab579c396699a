"""Hugging Face Llama interop, checked against `transformers`' LlamaForCausalLM (test-only).

Tiny random checkpoints are written by transformers' own save_pretrained and loaded with
`load_hf_llama`; logits, loss, every parameter's gradient and greedy tokens must agree.

transformers computes three things in float32 even in a float64 model: LlamaRMSNorm (it upcasts
to float32, the checkpoint-faithful choice for bf16 weights), the rotary cos/sin (its inv_freq
is a float32 buffer) and the loss (it upcasts the logits; the float64 test takes the same
cross-entropy of its float64 logits). For the float64 comparison (bar 1e-9) those two are replaced, in
that test only, by the same formulas in float64; the unchanged model is compared too, with the
bar its float32 parts allow (1e-5).
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from scratchformer.errors import CheckpointError, ConfigError  # noqa: E402
from scratchformer.interop import load_hf_llama, save_hf_llama  # noqa: E402
from scratchformer.interop.llama import llama_config_from_hf  # noqa: E402
from scratchformer.models import GPT, GPTConfig
from scratchformer.ops import IGNORE_INDEX  # noqa: E402

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from transformers.models.llama import modeling_llama  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SMALL = dict(
    hidden_size=32,
    num_attention_heads=4,
    num_hidden_layers=2,
    intermediate_size=40,
    vocab_size=50,
    max_position_embeddings=64,
)
TOL64 = 1e-9


def _hf_model(seed=0, **overrides):
    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(**{**SMALL, **overrides})
    cfg._attn_implementation = "sdpa"  # float64 throughout (eager's softmax runs in float32)
    m = transformers.LlamaForCausalLM(cfg).to(torch.float64)
    with torch.no_grad():  # larger weights than the 0.02 init: logits far from ties
        for name, p in m.named_parameters():
            p.normal_(1.0, 0.3) if name.endswith("norm.weight") else p.normal_(0.0, 0.3)
    return m


def _save(m, path):
    m.save_pretrained(path, safe_serialization=True)
    return path


@pytest.fixture
def float64_llama(monkeypatch):
    """LlamaRMSNorm and the rotary tables computed in float64 (the same formulas)."""

    def rmsnorm(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon))

    def rotary(self, x, position_ids):
        theta = self.config.rope_parameters["rope_theta"]
        dim = self.inv_freq.shape[0] * 2
        inv_freq = 1.0 / theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
        freqs = position_ids[..., None].to(torch.float64) * inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)

    monkeypatch.setattr(modeling_llama.LlamaRMSNorm, "forward", rmsnorm)
    monkeypatch.setattr(modeling_llama.LlamaRotaryEmbedding, "forward", rotary)


def _rel(ours, ref) -> float:
    ref = ref.detach().numpy() if isinstance(ref, torch.Tensor) else np.asarray(ref)
    assert ours.shape == ref.shape
    return float(np.max(np.abs(ours - ref)) / np.max(np.abs(ref)))


def _hf_grads(hf) -> dict[str, np.ndarray]:
    """Our parameter name -> the Hugging Face gradient(s) stacked as our layout stacks them."""
    g = {n: p.grad.numpy() for n, p in hf.named_parameters()}
    out = {"wte.weight": g["model.embed_tokens.weight"], "ln_f.weight": g["model.norm.weight"]}
    for i in range(hf.config.num_hidden_layers):
        hfp = f"model.layers.{i}."
        out[f"h.{i}.attn_norm.weight"] = g[hfp + "input_layernorm.weight"]
        out[f"h.{i}.self_attn.in_proj_weight"] = np.concatenate(
            [g[hfp + f"self_attn.{p}_proj.weight"] for p in "qkv"]
        )
        out[f"h.{i}.self_attn.out_proj.weight"] = g[hfp + "self_attn.o_proj.weight"]
        out[f"h.{i}.ff_norm.weight"] = g[hfp + "post_attention_layernorm.weight"]
        out[f"h.{i}.ff.fc1.weight"] = np.concatenate(
            [g[hfp + "mlp.gate_proj.weight"], g[hfp + "mlp.up_proj.weight"]]
        )
        out[f"h.{i}.ff.fc2.weight"] = g[hfp + "mlp.down_proj.weight"]
    if "lm_head.weight" in g and not hf.config.tie_word_embeddings:
        out["lm_head.weight"] = g["lm_head.weight"]
    return out


@pytest.mark.parametrize(
    "overrides",
    [{}, {"num_key_value_heads": 2, "tie_word_embeddings": True, "rope_theta": 500.0}],
    ids=["mha-untied", "gqa-tied-theta500"],
)
def test_load_matches_transformers_float64(tmp_path, float64_llama, overrides):
    hf = _hf_model(**overrides)
    ours = load_hf_llama(_save(hf, tmp_path / "llama"), dtype="float64")
    c = ours.config
    assert (c.positional, c.normalization, c.activation, c.bias, c.n_inner) == (
        "rope",
        "rmsnorm",
        "swiglu",
        False,
        40,
    )
    assert c.n_kv_head == overrides.get("num_key_value_heads") and c.tie_weights == bool(overrides)
    assert c.rope_theta == overrides.get("rope_theta", 10000.0) and c.layer_norm_eps == 1e-6
    idx = np.random.default_rng(0).integers(0, 50, (2, 11))
    # logits and loss: HF shifts labels inside; ours takes next-token targets (IGNORE_INDEX: none)
    targets = np.concatenate([idx[:, 1:], np.full((2, 1), IGNORE_INDEX)], axis=1)
    ours.train()
    logits, loss = ours(idx, targets)
    hf.train()
    out = hf(torch.from_numpy(idx), labels=torch.from_numpy(idx))
    assert _rel(logits, out.logits) <= TOL64, _rel(logits, out.logits)
    assert abs(loss - out.loss.item()) <= 1e-6 * abs(out.loss.item())  # HF's loss upcasts to float32
    ref_loss = torch.nn.functional.cross_entropy(
        out.logits[:, :-1].reshape(-1, 50), torch.from_numpy(idx[:, 1:]).reshape(-1)
    )  # in float64
    assert abs(loss - ref_loss.item()) <= TOL64 * abs(ref_loss.item())
    # every parameter's gradient
    ours.zero_grad()
    ours.backward()
    ref_loss.backward()
    ref = _hf_grads(hf)
    names = [n for n, _ in ours.named_parameters()]
    assert sorted(names) == sorted(ref)
    for name, p in ours.named_parameters():
        assert _rel(p.grad, ref[name]) <= TOL64, f"{name}: {_rel(p.grad, ref[name]):.2e}"
    # greedy tokens, ours with the KV cache
    prompt = idx[:, :4]
    mine = ours.generate(prompt, 12, temperature=0.0)
    gen = transformers.GenerationConfig(max_new_tokens=12, do_sample=False, eos_token_id=None, pad_token_id=0)
    with torch.no_grad():
        theirs = hf.eval().generate(torch.from_numpy(prompt), generation_config=gen).numpy()
    np.testing.assert_array_equal(mine, theirs)


def test_load_matches_unmodified_transformers_within_float32_parts(tmp_path):
    hf = _hf_model(num_key_value_heads=1)
    ours = load_hf_llama(_save(hf, tmp_path / "llama"), dtype="float64").eval()
    idx = np.random.default_rng(1).integers(0, 50, (2, 9))
    with torch.no_grad():
        ref = hf.eval()(torch.from_numpy(idx)).logits
    assert _rel(ours(idx)[0], ref) <= 1e-5


def test_save_round_trips_through_transformers(tmp_path, float64_llama):
    cfg = GPTConfig(
        vocab_size=30,
        block_size=16,
        n_layer=2,
        n_head=4,
        n_embd=16,
        n_kv_head=2,
        n_inner=24,
        positional="rope",
        normalization="rmsnorm",
        activation="swiglu",
        bias=False,
        tie_weights=False,
        layer_norm_eps=1e-6,
        rope_theta=1000.0,
        dtype="float64",
    )
    ours = GPT(cfg, seed=0)
    rng = np.random.default_rng(0)
    for p in ours.parameters():
        p.data[...] = rng.normal(1.0 if p.data.ndim == 1 else 0.0, 0.3, p.shape)
    path = save_hf_llama(ours, tmp_path / "out")
    hf = transformers.LlamaForCausalLM.from_pretrained(
        path, torch_dtype=torch.float64, attn_implementation="sdpa"
    )
    idx = np.random.default_rng(2).integers(0, 30, (2, 10))
    with torch.no_grad():
        ref = hf.eval()(torch.from_numpy(idx)).logits
    assert _rel(ours.eval()(idx)[0], ref) <= TOL64
    again = load_hf_llama(path, dtype="float64")
    assert again.config == ours.config
    for (n, a), (_, b) in zip(ours.state_dict().items(), again.state_dict().items()):
        np.testing.assert_array_equal(a, b, err_msg=n)


def test_refusals_are_one_clear_line(tmp_path):
    base = {"model_type": "llama", **SMALL}
    for extra, match in [
        ({"rope_scaling": {"rope_type": "linear", "factor": 2.0}}, "rope scaling"),
        ({"rope_parameters": {"rope_type": "llama3", "rope_theta": 5e5}}, "rope scaling 'llama3'"),
        ({"hidden_act": "gelu"}, "hidden_act='gelu'"),
        ({"attention_bias": True}, "attention_bias"),
        ({"mlp_bias": True}, "mlp_bias"),
        ({"head_dim": 16}, "head_dim=16"),
        ({"pretraining_tp": 2}, "pretraining_tp=2"),
        ({"model_type": "mistral"}, "model_type"),
        ({"num_key_value_heads": 3}, "n_kv_head must divide n_head=4"),
    ]:
        with pytest.raises(ConfigError, match=match):
            llama_config_from_hf({**base, **extra})
    with pytest.raises(ConfigError, match="lacks"):
        llama_config_from_hf({"model_type": "llama", "hidden_size": 32})
    with pytest.raises(CheckpointError, match="not found"):
        load_hf_llama(tmp_path)
    gpt2_like = GPT(GPTConfig(vocab_size=10, block_size=8, n_layer=1, n_head=2, n_embd=8), seed=0)
    with pytest.raises(ConfigError, match="Llama cannot represent this model: .*positional='learned'"):
        save_hf_llama(gpt2_like, tmp_path / "x")
    # a tensor missing from the file: named
    hf = _hf_model()
    path = _save(hf, tmp_path / "llama")
    from safetensors.numpy import load_file, save_file

    tensors = load_file(str(path / "model.safetensors"))
    del tensors["model.layers.1.mlp.up_proj.weight"]
    save_file(tensors, str(path / "model.safetensors"))
    with pytest.raises(CheckpointError, match="model.layers.1.mlp.up_proj.weight"):
        load_hf_llama(path)
    cfg = json.loads((path / "config.json").read_text())
    assert cfg["model_type"] == "llama"


def test_sample_hf_runs_a_llama_directory(tmp_path, capsys):
    """`scratchformer sample --hf DIR` picks this loader from config.json's model_type."""
    from scratchformer.cli.main import main
    from scratchformer.data.bpe import BPETokenizer
    from scratchformer.interop.hf_lm import load_hf_causal_lm

    tok = BPETokenizer.train(["to be or not to be", "that is the question", "whether tis nobler"] * 20, 280)
    hf = _hf_model(vocab_size=tok.vocab_size)
    path = _save(hf, tmp_path / "llama")
    tok._tok.model.save(str(path))  # GPT-2's vocab.json + merges.txt
    model, _ = load_hf_causal_lm(path)
    assert model.config.positional == "rope" and model.config.vocab_size == tok.vocab_size
    assert (
        main(
            [
                "sample",
                "--hf",
                str(path),
                "--prompt",
                "to be",
                "-n",
                "1",
                "--max-new-tokens",
                "6",
                "--temperature",
                "0",
                "--seed",
                "1",
            ]
        )
        == 0
    )
    assert (
        capsys.readouterr().out.splitlines()[1].startswith("to be")
    )  # after the "=== sample 1 of 1 ===" line
