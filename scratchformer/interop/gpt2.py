"""Hugging Face GPT-2 checkpoints (``GPT2LMHeadModel`` layout) <-> scratchformer `GPT`.

`load_hf_gpt2(path)` reads a directory holding ``config.json`` + ``model.safetensors`` and
returns a `GPT` whose logits match ``transformers.GPT2LMHeadModel``; `save_hf_gpt2(model, path)`
writes such a directory, which ``GPT2LMHeadModel.from_pretrained`` loads.

Name mapping (Hugging Face -> scratchformer). GPT-2's ``Conv1D`` stores weights as
(in, out), so every ``c_*`` weight is transposed into our (out, in) `Linear` layout; the
``transformer.`` prefix is optional (the original openai checkpoints have none) and the
``attn.bias`` / ``attn.masked_bias`` causal-mask buffers are ignored::

    transformer.wte.weight                 -> wte.weight (also the tied lm_head)
    transformer.wpe.weight                 -> wpe.weight
    transformer.h.i.ln_1.{weight,bias}     -> h.i.attn_norm.{weight,bias}
    transformer.h.i.attn.c_attn.weight     -> h.i.self_attn.in_proj_weight   (transposed: the
    transformer.h.i.attn.c_attn.bias       -> h.i.self_attn.in_proj_bias      columns are q|k|v)
    transformer.h.i.attn.c_proj            -> h.i.self_attn.out_proj         (weight transposed)
    transformer.h.i.ln_2                   -> h.i.ff_norm
    transformer.h.i.mlp.c_fc               -> h.i.ff.fc1                     (weight transposed)
    transformer.h.i.mlp.c_proj             -> h.i.ff.fc2                     (weight transposed)
    transformer.ln_f                       -> ln_f
    lm_head.weight                         -> lm_head.weight (only when untied)

Config mapping: n_positions -> block_size, n_inner -> n_inner, layer_norm_epsilon ->
layer_norm_eps, activation_function "gelu_new" / "gelu_pytorch_tanh" / "gelu_fast" ->
"gelu_tanh", "gelu" -> "gelu" (exact), "relu" -> "relu"; dropout <- resid_pdrop (scratchformer
has one dropout rate). Configs GPT-2 options we do not implement (scale_attn_by_inverse_layer_idx,
reorder_and_upcast_attn, scale_attn_weights=False, cross-attention) are a ConfigError.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from scratchformer.checks import config_flag, config_number
from scratchformer.errors import CheckpointError, ConfigError, DTypeError
from scratchformer.interop.hf_files import (
    HFCheckpoint,
    check_representable,
    load_checkpoint_state,
    read_checkpoint,
    write_checkpoint,
)
from scratchformer.models.gpt import GPT, GPTConfig

__all__ = ["load_hf_gpt2", "gpt2_from_hf", "save_hf_gpt2", "gpt2_config_from_hf", "gpt2_config_to_hf"]

_ACT_FROM_HF = {
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu_fast": "gelu_tanh",
    "gelu": "gelu",
    "relu": "relu",
}
_ACT_TO_HF = {"gelu_tanh": "gelu_new", "gelu": "gelu", "relu": "relu"}

# (our suffix, HF suffix, transpose) for each block parameter
_BLOCK_MAP = [
    ("attn_norm.weight", "ln_1.weight", False),
    ("attn_norm.bias", "ln_1.bias", False),
    ("self_attn.in_proj_weight", "attn.c_attn.weight", True),
    ("self_attn.in_proj_bias", "attn.c_attn.bias", False),
    ("self_attn.out_proj.weight", "attn.c_proj.weight", True),
    ("self_attn.out_proj.bias", "attn.c_proj.bias", False),
    ("ff_norm.weight", "ln_2.weight", False),
    ("ff_norm.bias", "ln_2.bias", False),
    ("ff.fc1.weight", "mlp.c_fc.weight", True),
    ("ff.fc1.bias", "mlp.c_fc.bias", False),
    ("ff.fc2.weight", "mlp.c_proj.weight", True),
    ("ff.fc2.bias", "mlp.c_proj.bias", False),
]
_TOP_MAP = [
    ("wte.weight", "wte.weight"),
    ("wpe.weight", "wpe.weight"),
    ("ln_f.weight", "ln_f.weight"),
    ("ln_f.bias", "ln_f.bias"),
]


def gpt2_config_from_hf(hf: dict, dtype: str = "float32") -> GPTConfig:
    """A GPTConfig from the dict of a Hugging Face GPT-2 ``config.json``."""
    model_type = hf.get("model_type", "gpt2")
    if model_type != "gpt2":
        raise ConfigError(f"model_type must be 'gpt2', got {model_type!r}")
    act = hf.get("activation_function", "gelu_new")
    if act not in _ACT_FROM_HF:
        raise ConfigError(f"activation_function {act!r} is not supported (use one of {sorted(_ACT_FROM_HF)})")
    for flag, bad in (
        ("scale_attn_by_inverse_layer_idx", True),
        ("reorder_and_upcast_attn", True),
        ("add_cross_attention", True),
        ("scale_attn_weights", False),
    ):
        value = hf.get(flag, not bad)
        if not isinstance(value, bool):  # "false" is a true string: a flag is JSON true or false
            raise ConfigError(f"GPT-2 config.json's {flag} must be true or false, got {value!r}")
        if value == bad:
            raise ConfigError(f"GPT-2 config {flag}={value!r} is not supported")
    missing = [k for k in ("vocab_size", "n_positions", "n_embd", "n_layer", "n_head") if k not in hf]
    if missing:
        raise ConfigError(f"GPT-2 config.json lacks {missing}")
    return GPTConfig.from_dict(
        dict(
            vocab_size=hf["vocab_size"],
            block_size=hf["n_positions"],
            n_layer=hf["n_layer"],
            n_head=hf["n_head"],
            n_embd=hf["n_embd"],
            n_inner=hf.get("n_inner"),
            dropout=config_number(hf, "resid_pdrop", 0.1),
            bias=True,
            norm_first=True,
            activation=_ACT_FROM_HF[act],
            positional="learned",
            tie_weights=config_flag(hf, "tie_word_embeddings", True),
            layer_norm_eps=config_number(hf, "layer_norm_epsilon", 1e-5),
            dtype=dtype,
        )
    )


def gpt2_config_to_hf(config: GPTConfig) -> dict:
    """The ``config.json`` dict of a GPT2LMHeadModel equivalent to `config` (ConfigError if
    GPT-2 cannot represent it: it needs learned positions, pre-norm, biases, a tied head,
    LayerNorm, a GELU or ReLU feed-forward and as many key/value heads as query heads)."""
    problems = []
    if config.positional != "learned":
        problems.append(f"positional={config.positional!r} (GPT-2 has learned positions)")
    if not config.norm_first:
        problems.append("norm_first=False (GPT-2 is pre-norm)")
    if not config.bias:
        problems.append("bias=False (GPT-2 has biases)")
    if not config.tie_weights:
        problems.append("tie_weights=False (GPT-2's lm_head is tied to wte)")
    if config.activation not in _ACT_TO_HF:
        problems.append(f"activation={config.activation!r} (GPT-2 has one of {', '.join(_ACT_TO_HF)})")
    if config.normalization != "layernorm":
        problems.append(f"normalization={config.normalization!r} (GPT-2 has LayerNorm)")
    if config.n_kv_head not in (None, config.n_head):
        problems.append(f"n_kv_head={config.n_kv_head} (GPT-2 has one key/value head per query head)")
    check_representable("GPT-2", problems)
    return {
        "model_type": "gpt2",
        "architectures": ["GPT2LMHeadModel"],
        "vocab_size": config.vocab_size,
        "n_positions": config.block_size,
        "n_ctx": config.block_size,
        "n_embd": config.n_embd,
        "n_layer": config.n_layer,
        "n_head": config.n_head,
        "n_inner": config.n_inner,
        "activation_function": _ACT_TO_HF[config.activation],
        "resid_pdrop": config.dropout,
        "embd_pdrop": config.dropout,
        "attn_pdrop": config.dropout,
        "layer_norm_epsilon": config.layer_norm_eps,
        "initializer_range": 0.02,
        "scale_attn_weights": True,
        "scale_attn_by_inverse_layer_idx": False,
        "reorder_and_upcast_attn": False,
        "tie_word_embeddings": True,
        "use_cache": True,
        "torch_dtype": config.dtype,
    }


def load_hf_gpt2(path, dtype: str = "float32") -> GPT:
    """Load a Hugging Face GPT-2 directory (``config.json`` + ``model.safetensors``) as a GPT.

    dtype: the model's float dtype ("float32" default, or "float64").
    Raises CheckpointError for missing files / tensors, ConfigError for unsupported configs.
    """
    checkpoint = read_checkpoint(path, "GPT-2")
    return gpt2_from_hf(checkpoint, gpt2_config_from_hf(checkpoint.config, dtype=dtype))


def gpt2_from_hf(checkpoint: HFCheckpoint, config: GPTConfig) -> GPT:
    """The GPT of `config` (gpt2_config_from_hf of the checkpoint's config.json) with the weights of an
    already-read GPT-2 directory (`read_checkpoint`); as `load_hf_gpt2`."""
    _, tensors, weights_file, _ = checkpoint
    # accept both "transformer.h.0..." (GPT2LMHeadModel) and "h.0..." (GPT2Model / openai)
    strip = {k[len("transformer.") :] if k.startswith("transformer.") else k: v for k, v in tensors.items()}

    def get(name: str) -> np.ndarray:
        if name not in strip:
            raise CheckpointError(f"GPT-2 checkpoint {weights_file}: tensor {name!r} not found")
        return strip[name]

    state = {ours: get(theirs) for ours, theirs in _TOP_MAP}
    for i in range(config.n_layer):
        for ours, theirs, transpose in _BLOCK_MAP:
            t = get(f"h.{i}.{theirs}")
            state[f"h.{i}.{ours}"] = t.T if transpose else t
    if not config.tie_weights:
        state["lm_head.weight"] = get("lm_head.weight")
    return load_checkpoint_state(GPT(config), state, "GPT-2", weights_file)


def save_hf_gpt2(model: GPT, path, token_ids: dict[str, int] | None = None) -> Path:
    """Write `model` as a Hugging Face GPT2LMHeadModel directory (config.json + model.safetensors).

    Tied weights are written once, as ``transformer.wte.weight`` (as transformers does).
    token_ids: {"bos_token_id": ..., "eos_token_id": ..., "pad_token_id": ...} for config.json
    (where generate stops). Weights keep the model's dtype. Returns the directory.
    """
    if not isinstance(model, GPT):
        raise DTypeError(f"save_hf_gpt2 needs a GPT, got {type(model).__name__}")
    hf_cfg = gpt2_config_to_hf(model.config)  # a model GPT-2 cannot hold fails here, before any tensor
    sd = model.state_dict()
    tensors = {f"transformer.{theirs}": sd[ours] for ours, theirs in _TOP_MAP}
    for i in range(model.config.n_layer):
        for ours, theirs, transpose in _BLOCK_MAP:
            t = sd[f"h.{i}.{ours}"]
            tensors[f"transformer.h.{i}.{theirs}"] = t.T if transpose else t
    return write_checkpoint(path, hf_cfg, tensors, token_ids)
