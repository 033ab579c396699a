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

`GPT2` (an interop.layout.Layout) declares what the layout holds: learned positions, pre-norm
blocks with a feed-forward, LayerNorm, biases, one key/value head per query head, a GELU or ReLU
feed-forward, tied or untied head; any other setting (one it does not know included) is refused
in one line, and so is a tensor left over or missing on either side.

Config mapping: n_positions -> block_size, n_inner -> n_inner, layer_norm_epsilon ->
layer_norm_eps, activation_function "gelu_new" / "gelu_pytorch_tanh" / "gelu_fast" ->
"gelu_tanh", "gelu" -> "gelu" (exact), "relu" -> "relu"; dropout <-> resid_pdrop, embd_pdrop and attn_pdrop
(scratchformer has one dropout rate; GPT-2 has none on the feed-forward's hidden activation).
Configs with GPT-2 options we do not implement (scale_attn_by_inverse_layer_idx,
reorder_and_upcast_attn, scale_attn_weights=False, cross-attention) are a ConfigError.
"""

from __future__ import annotations

from pathlib import Path

from scratchformer.checks import config_flag, config_number
from scratchformer.errors import ConfigError, DTypeError
from scratchformer.interop.hf_files import HFCheckpoint, write_checkpoint
from scratchformer.interop.layout import ANY, EVERY_VALUE, INERT_KEYS, Layout, Only, Piece, Rule
from scratchformer.models.gpt import GPT, GPTConfig

__all__ = ["GPT2", "load_hf_gpt2", "gpt2_from_hf", "save_hf_gpt2", "gpt2_config_from_hf", "gpt2_config_to_hf"]

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

# the GPT-2 options scratchformer does not implement: config.json key -> the value it must keep
_GPT2_OPTIONS = {
    "scale_attn_by_inverse_layer_idx": False,
    "reorder_and_upcast_attn": False,
    "add_cross_attention": False,
    "scale_attn_weights": True,
}


def gpt2_config_from_hf(hf: dict, dtype: str = "float32") -> GPTConfig:
    """A GPTConfig from the dict of a Hugging Face GPT-2 ``config.json``."""
    model_type = hf.get("model_type", "gpt2")
    if model_type != "gpt2":
        raise ConfigError(f"model_type must be 'gpt2', got {model_type!r}")
    act = hf.get("activation_function", "gelu_new")
    if act not in _ACT_FROM_HF:
        raise ConfigError(f"activation_function {act!r} is not supported (use one of {sorted(_ACT_FROM_HF)})")
    for flag, held in _GPT2_OPTIONS.items():
        value = hf.get(flag, held)
        if not isinstance(value, bool):  # "false" is a true string: a flag is JSON true or false
            raise ConfigError(f"GPT-2 config.json's {flag} must be true or false, got {value!r}")
        if value != held:
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
    """The ``config.json`` dict of a GPT2LMHeadModel equivalent to `config` (ConfigError naming
    every setting GPT-2 cannot hold: see `GPT2.holds`)."""
    GPT2.check(config)
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
        **_GPT2_OPTIONS,
        "tie_word_embeddings": config.tie_weights,
        "use_cache": True,
        "torch_dtype": config.dtype,
    }


def gpt2_pieces(config: GPTConfig) -> list[Piece]:
    """Every parameter of the GPT of `config` and its GPT2LMHeadModel tensor (see the module docstring)."""
    pieces = [Piece(ours, ("transformer." + theirs,)) for ours, theirs in _TOP_MAP]
    for i in range(config.n_layer):
        for ours, theirs, transposed in _BLOCK_MAP:
            pieces.append(Piece(f"h.{i}.{ours}", (f"transformer.h.{i}.{theirs}",), transposed=transposed))
    if not config.tie_weights:
        pieces.append(Piece("lm_head.weight", ("lm_head.weight",)))
    return pieces


# config.json keys of transformers' GPT2Config (5.x, and older files) besides INERT_KEYS and those
# gpt2_config_from_hf reads: none changes the model's outputs (embd_pdrop, attn_pdrop: training only)
_INERT = (
    "n_ctx summary_type summary_use_proj summary_activation summary_proj_to_labels summary_first_dropout "
    "task_specific_params embd_pdrop attn_pdrop"
).split()

GPT2 = Layout(
    family="GPT-2",
    hf_class="GPT2LMHeadModel",
    model_type="gpt2",
    holds={
        **EVERY_VALUE,
        "rope_theta": ANY,  # positions are learned: the rotary base is unused
        "bias": Only((True,), "biases"),
        "norm_first": Only((True,), "pre-norm blocks"),
        "activation": Only(tuple(_ACT_TO_HF), "a GELU or ReLU feed-forward"),
        "positional": Only(("learned",), "learned positions"),
        "normalization": Only(("layernorm",), "LayerNorm"),
        "n_kv_head": Rule(lambda c: c.n_kv_head in (None, c.n_head), "one key/value head per query head"),
        "attn_only": Only((False,), "a feed-forward in every block"),
    },
    pieces=gpt2_pieces,
    config_to_hf=gpt2_config_to_hf,
    config_from_hf=gpt2_config_from_hf,
    hf_keys={
        **dict.fromkeys(
            "model_type vocab_size n_positions n_embd n_layer n_head n_inner activation_function resid_pdrop "
            "layer_norm_epsilon tie_word_embeddings".split(),
            "read",
        ),
        **dict.fromkeys(_GPT2_OPTIONS, "checked"),
        **dict.fromkeys([*INERT_KEYS, *_INERT], "inert"),
    },
    dropped_there="the embeddings, the attention weights and each sub-layer's output "
    "(embd_pdrop, attn_pdrop, resid_pdrop), not the feed-forward's hidden activation",
    buffers=r"(transformer\.)?h\.\d+\.attn\.(bias|masked_bias)",  # causal masks of older files
    prefix="transformer.",
)


def load_hf_gpt2(path, dtype: str = "float32", notes: list[str] | None = None) -> GPT:
    """Load a Hugging Face GPT-2 directory (``config.json`` + ``model.safetensors``) as a GPT.

    dtype: the model's float dtype ("float32" default, or "float64"). notes: a list that gets
    what the reading decided (a tied config.json whose weights hold their own head: read untied).
    Raises CheckpointError for missing or leftover files / tensors, ConfigError for unsupported configs.
    """
    return GPT2.load(path, dtype, notes)


def gpt2_from_hf(checkpoint: HFCheckpoint, config: GPTConfig, notes: list[str] | None = None) -> GPT:
    """The GPT of `config` (gpt2_config_from_hf of the checkpoint's config.json) with the weights of an
    already-read GPT-2 directory (`hf_files.read_checkpoint`); as `load_hf_gpt2`."""
    return GPT2.model_from_hf(checkpoint, config, notes)


def save_hf_gpt2(model: GPT, path, token_ids: dict[str, int] | None = None) -> Path:
    """Write `model` as a Hugging Face GPT2LMHeadModel directory (config.json + model.safetensors).

    Tied weights are written once, as ``transformer.wte.weight`` (as transformers does).
    token_ids: {"bos_token_id": ..., "eos_token_id": ..., "pad_token_id": ...} for config.json
    (where generate stops). Weights keep the model's dtype. Returns the directory. ConfigError,
    before anything is written, naming what GPT-2 cannot hold of the model.
    """
    if not isinstance(model, GPT):
        raise DTypeError(f"save_hf_gpt2 needs a GPT, got {type(model).__name__}")
    tensors = GPT2.hf_tensors(model)  # a model GPT-2 cannot hold fails here, before any file
    return write_checkpoint(path, gpt2_config_to_hf(model.config), tensors, token_ids)
