"""Each Hugging Face layout refuses what it does not declare, on both sides: a setting it does not
hold (a new one it has never heard of included), a model parameter it has no place for, a tensor a
checkpoint lacks or holds beyond its config; a config.json that contradicts its weights is read as
transformers reads it, with one line saying so; and every key of transformers' own config classes is
known to each reader."""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from scratchformer.data.tokenizer import CharTokenizer  # noqa: E402
from scratchformer.errors import CheckpointError, ConfigError  # noqa: E402
from scratchformer.interop.hf_lm import HF_LAYOUTS, hf_layout, load_hf_causal_lm, save_hf_causal_lm  # noqa: E402
from scratchformer.models import GPT, GPTConfig  # noqa: E402
from scratchformer.nn import Parameter, eval_mode  # noqa: E402
from scratchformer.settings import setting  # noqa: E402
from scratchformer.specs import Bool  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
safetensors_torch = pytest.importorskip("safetensors.torch")

TOKENIZER = CharTokenizer(list("abcdefgh"), special="<eot>")
SIZES = dict(vocab_size=TOKENIZER.vocab_size, block_size=16, n_layer=2, n_head=2, n_embd=8)
LLAMA = dict(positional="rope", normalization="rmsnorm", activation="swiglu", bias=False)


@dataclasses.dataclass
class ToyConfig(GPTConfig):
    """A block option no layout has heard of, as a contributor adds one."""

    toy_gate: bool = setting(Bool(), False)


class ToyGPT(GPT):
    config_class = ToyConfig

    def __init__(self, config, seed=None):
        super().__init__(config, seed)
        if config.toy_gate:  # a parameter no layout has a place for
            self.h[0].toy_scale = Parameter(np.ones(config.n_embd, dtype=config.dtype))


def test_an_undeclared_setting_is_held_at_its_default_and_refused_elsewhere(tmp_path):
    for extra in ({}, LLAMA):
        plain = ToyGPT(ToyConfig(**SIZES, **extra), seed=0)
        assert hf_layout(plain).family == ("Llama" if extra else "GPT-2")
        toy = ToyGPT(ToyConfig(**SIZES, **extra, toy_gate=True), seed=0)
        with pytest.raises(ConfigError) as e:
            save_hf_causal_lm(toy, TOKENIZER, tmp_path / "toy")
        message = str(e.value)
        assert "\n" not in message and not (tmp_path / "toy").exists()
        assert "toy_gate=True (GPT-2 knows no toy_gate: only its default, False)" in message
        assert "toy_gate=True (Llama knows no toy_gate" in message


def test_a_parameter_with_no_place_is_refused_even_where_the_settings_are_held(tmp_path):
    model = GPT(GPTConfig(**SIZES), seed=0)
    model.h[1].self_attn.q_scale = Parameter(np.ones(4, dtype=np.float32))  # a QK-norm-like weight
    with pytest.raises(ConfigError, match=r"h\.1\.self_attn\.q_scale \(GPT-2 has no place for it\)") as e:
        save_hf_causal_lm(model, TOKENIZER, tmp_path / "x")
    assert "\n" not in str(e.value) and not (tmp_path / "x").exists()


def test_attention_only_runs_are_refused_in_one_line_by_the_command(tmp_path, capsys):
    """Once a KeyError traceback ('h.0.ff_norm.weight') in both layouts."""
    from tiny_run import tiny

    from scratchformer.cli.main import main

    run = tmp_path / "run"
    argv = ["train", *tiny(), "--attn-only", "--max-steps", "1", "--num-samples", "0", "--workers", "1"]
    assert main([*argv, "--out", str(run)]) == 0
    capsys.readouterr()
    assert main(["export", str(run), "--hf", str(tmp_path / "hf")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err and "KeyError" not in err
    assert "attn_only=True (GPT-2 has a feed-forward in every block)" in err
    assert "attn_only=True (Llama has attn_only=False)" in err and not (tmp_path / "hf").exists()


def _hf_dir(path, family: str, tie: bool = True):
    """The export of a tiny GPT of `family`'s style, its weights far from the 0.02 init."""
    model = GPT(GPTConfig(**SIZES, tie_weights=tie, **(LLAMA if family == "llama" else {})), seed=0)
    rng = np.random.default_rng(0)
    for p in model.parameters():
        p.data[...] = rng.normal(0.0, 0.3, p.shape)
    return save_hf_causal_lm(model, TOKENIZER, path)


def _edit_tensors(path, edit):
    tensors = safetensors_torch.load_file(str(path / "model.safetensors"))
    edit(tensors)
    safetensors_torch.save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_a_tied_config_with_its_own_head_is_read_as_transformers_reads_it(tmp_path, family):
    """config.json says tied, the weights hold a different lm_head.weight: transformers 5 keeps
    them apart ("we will NOT tie them"); so does scratchformer, and says so in one line. Before,
    its logits were 0.52 (GPT-2) and 0.47 (Llama) away from transformers', without a word."""
    path = _hf_dir(tmp_path / family, family, tie=False)  # saved untied: its own head
    cfg = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**cfg, "tie_word_embeddings": True}))
    hf = transformers.AutoModelForCausalLM.from_pretrained(path).eval()
    ids = np.array([[0, 3, 1, 4, 1, 5]])
    with torch.no_grad():
        theirs = hf(torch.tensor(ids)).logits.numpy()
    notes: list[str] = []
    model, _ = load_hf_causal_lm(path, notes=notes)
    with eval_mode(model):
        ours = model(ids)[0]
    assert np.abs(ours - theirs).max() < 1e-5 * np.abs(theirs).max() and not model.config.tie_weights
    assert len(notes) == 1 and "says tie_word_embeddings" in notes[0] and "read untied" in notes[0]
    # a head equal to the embedding is the tied one written twice: tied, nothing to say
    embedding = "transformer.wte.weight" if family == "gpt2" else "model.embed_tokens.weight"
    _edit_tensors(path, lambda t: t.update({"lm_head.weight": t[embedding].clone()}))
    notes.clear()
    model, _ = load_hf_causal_lm(path, notes=notes)
    assert model.config.tie_weights and notes == []


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_a_missing_or_leftover_tensor_is_refused_in_one_line(tmp_path, family):
    path = _hf_dir(tmp_path / family, family)
    layer = (
        "transformer.h.1.ln_2.weight"
        if family == "gpt2"
        else "model.layers.1.post_attention_layernorm.weight"
    )
    _edit_tensors(
        path, lambda t: t.update({layer.replace(".1.", ".2."): t[layer].clone()})
    )  # a third layer's
    with pytest.raises(CheckpointError, match=r"holds .*\.2\..*has no place for") as e:
        load_hf_causal_lm(path)
    assert "\n" not in str(e.value)
    _edit_tensors(path, lambda t: [t.pop(layer.replace(".1.", ".2.")), t.pop(layer)])
    with pytest.raises(CheckpointError, match=f"tensor '{layer}' not found") as e:
        load_hf_causal_lm(path)
    # an untied config whose weights lack the head: transformers would draw a random one; refused
    path = _hf_dir(tmp_path / f"{family}-untied", family, tie=False)
    _edit_tensors(path, lambda t: t.pop("lm_head.weight"))
    with pytest.raises(CheckpointError, match="'lm_head.weight' not found"):
        load_hf_causal_lm(path)


def test_every_key_of_transformers_config_classes_is_known_to_its_reader():
    """A key a new transformers adds to GPT2Config or LlamaConfig (one that changes what the model
    computes, say) fails here until the layout reads it, checks it or declares it inert."""
    classes = {"gpt2": transformers.GPT2Config, "llama": transformers.LlamaConfig}
    for layout in HF_LAYOUTS:
        keys = set(classes[layout.model_type]().to_dict())
        assert keys <= set(layout.hf_keys), (layout.family, sorted(keys - set(layout.hf_keys)))
        assert set(layout.hf_keys.values()) <= {"read", "checked", "inert"}


def test_the_bert_reader_refuses_what_its_encoder_has_no_place_for(tmp_path):
    from tiny_bert import make_bert_dir

    from scratchformer.interop.bert import BERT_KEYS, load_hf_bert

    assert set(transformers.BertConfig().to_dict()) <= set(BERT_KEYS)
    path = make_bert_dir(tmp_path / "bert")
    load_hf_bert(path)  # as saved (with its pooler): read
    cfg = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**cfg, "is_decoder": True}))
    with pytest.raises(ConfigError, match="is_decoder=True is not supported"):
        load_hf_bert(path)
    (path / "config.json").write_text(json.dumps(cfg))
    key = "encoder.layer.0.attention.self.distance_embedding.weight"  # relative positions' table
    _edit_tensors(path, lambda t: t.update({key: torch.zeros(3, 4)}))
    with pytest.raises(CheckpointError, match="distance_embedding.*has no place for") as e:
        load_hf_bert(path)
    assert "\n" not in str(e.value)
