"""Hugging Face Llama checkpoints (``LlamaForCausalLM`` layout) <-> scratchformer `GPT`.

A Llama is a GPT with rotary positions, RMSNorm, the SwiGLU feed-forward and no biases:
``GPTConfig(positional="rope", normalization="rmsnorm", activation="swiglu", bias=False)``.
`load_hf_llama(path)` reads a directory holding ``config.json`` + ``model.safetensors`` (as
``save_pretrained`` writes it) and returns such a GPT, whose logits match
``transformers.LlamaForCausalLM``; `save_hf_llama(model, path)` writes one that
``LlamaForCausalLM.from_pretrained`` loads.

Name mapping (Hugging Face -> scratchformer). Both store Linear weights as (out, in); q/k/v are
stacked into the fused attention projection and gate/up into the feed-forward's first layer::

    model.embed_tokens.weight                    -> wte.weight
    model.layers.i.input_layernorm.weight        -> h.i.attn_norm.weight
    model.layers.i.self_attn.{q,k,v}_proj.weight -> h.i.self_attn.in_proj_weight  (rows [q; k; v])
    model.layers.i.self_attn.o_proj.weight       -> h.i.self_attn.out_proj.weight
    model.layers.i.post_attention_layernorm      -> h.i.ff_norm
    model.layers.i.mlp.{gate,up}_proj.weight     -> h.i.ff.fc1.weight             (rows [gate; up])
    model.layers.i.mlp.down_proj.weight          -> h.i.ff.fc2.weight
    model.norm.weight                            -> ln_f.weight
    lm_head.weight                               -> lm_head.weight (absent when tied to the embedding)

Config mapping: hidden_size -> n_embd, num_hidden_layers -> n_layer, num_attention_heads ->
n_head, num_key_value_heads -> n_kv_head (grouped-query attention), intermediate_size ->
n_inner, max_position_embeddings -> block_size, rms_norm_eps -> layer_norm_eps, rope_theta
(or rope_parameters["rope_theta"]) -> rope_theta, tie_word_embeddings -> tie_weights.
attention_dropout <-> dropout (transformers' Llama drops the attention weights only).
What scratchformer does not implement is a ConfigError naming the field: rope scaling of any
kind, an activation other than silu, attention or MLP biases, a head_dim other than
hidden_size / num_attention_heads. `LLAMA` (an interop.layout.Layout) declares what the layout
holds; any other setting, and a tensor left over or missing on either side, is refused in one line.
"""

from __future__ import annotations

from pathlib import Path

from scratchformer.checks import config_flag, config_int, config_number
from scratchformer.errors import ConfigError, DTypeError
from scratchformer.interop.hf_files import HFCheckpoint, write_checkpoint
from scratchformer.interop.layout import ANY, EVERY_VALUE, INERT_KEYS, Layout, Only, Piece
from scratchformer.models.gpt import GPT, GPTConfig

__all__ = [
    "LLAMA",
    "load_hf_llama",
    "llama_from_hf",
    "save_hf_llama",
    "llama_config_from_hf",
    "llama_config_to_hf",
]

LLAMA_BLOCKS = dict(
    positional="rope",
    normalization="rmsnorm",
    activation="swiglu",
    bias=False,
    norm_first=True,
    attn_only=False,
)


def _rope_theta(hf: dict) -> float:
    """The rotary base; refuses any rope scaling (linear, dynamic, yarn, llama3, ...)."""
    params = hf.get("rope_parameters") or {}  # transformers >= 5
    scaling = hf.get("rope_scaling")  # transformers < 5
    rope_type = params.get("rope_type", params.get("type", "default"))
    if scaling not in (None, {}) or rope_type != "default":
        kind = rope_type if rope_type != "default" else scaling
        raise ConfigError(
            f"Llama config asks for rope scaling {kind!r}: scratchformer implements plain RoPE only"
        )
    return config_number(params if "rope_theta" in params else hf, "rope_theta", 10000.0)


def llama_config_from_hf(hf: dict, dtype: str = "float32") -> GPTConfig:
    """A GPTConfig from the dict of a Hugging Face Llama ``config.json``."""
    model_type = hf.get("model_type", "llama")
    if model_type != "llama":
        raise ConfigError(f"model_type must be 'llama', got {model_type!r}")
    missing = [
        k
        for k in (
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_hidden_layers",
            "num_attention_heads",
        )
        if k not in hf
    ]
    if missing:
        raise ConfigError(f"Llama config.json lacks {missing}")
    n_embd, n_head = hf["hidden_size"], hf["num_attention_heads"]
    act = hf.get("hidden_act", "silu")
    if act != "silu":
        raise ConfigError(
            f"Llama config hidden_act={act!r} is not supported (scratchformer's SwiGLU uses silu)"
        )
    for flag in ("attention_bias", "mlp_bias"):
        if hf.get(flag):
            raise ConfigError(
                f"Llama config {flag}=true is not supported (scratchformer's Llama has no biases)"
            )
    if config_int(hf, "pretraining_tp", 1) != 1:
        raise ConfigError(
            f"Llama config pretraining_tp={hf['pretraining_tp']} is not supported (scratchformer computes "
            "each projection whole: 1)"
        )
    head_dim = config_int(hf, "head_dim")
    if head_dim is not None and isinstance(n_head, int) and n_head > 0 and head_dim * n_head != n_embd:
        raise ConfigError(
            f"Llama config head_dim={head_dim} is not hidden_size / num_attention_heads "
            f"= {n_embd} / {n_head}: not supported"
        )
    n_kv_head = hf.get("num_key_value_heads")
    return GPTConfig.from_dict(
        dict(
            vocab_size=hf["vocab_size"],
            block_size=hf.get("max_position_embeddings", 2048),
            n_layer=hf["num_hidden_layers"],
            n_head=n_head,
            n_embd=n_embd,
            n_inner=hf["intermediate_size"],
            n_kv_head=None if n_kv_head in (None, n_head) else n_kv_head,
            dropout=config_number(hf, "attention_dropout", 0.0),
            tie_weights=config_flag(hf, "tie_word_embeddings", False),
            layer_norm_eps=config_number(hf, "rms_norm_eps", 1e-6),
            rope_theta=_rope_theta(hf),
            dtype=dtype,
            **LLAMA_BLOCKS,
        )
    )


def llama_config_to_hf(config: GPTConfig) -> dict:
    """The ``config.json`` dict of a LlamaForCausalLM equivalent to `config` (ConfigError naming
    every setting Llama cannot hold: see `LLAMA.holds`)."""
    LLAMA.check(config)
    return {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "vocab_size": config.vocab_size,
        "hidden_size": config.n_embd,
        "intermediate_size": config.inner_size,
        "num_hidden_layers": config.n_layer,
        "num_attention_heads": config.n_head,
        "num_key_value_heads": config.n_kv_head or config.n_head,
        "head_dim": config.n_embd // config.n_head,
        "hidden_act": "silu",
        "max_position_embeddings": config.block_size,
        "rms_norm_eps": config.layer_norm_eps,
        "rope_theta": config.rope_theta,  # read by transformers < 5
        "rope_parameters": {"rope_type": "default", "rope_theta": config.rope_theta},  # transformers >= 5
        "attention_bias": False,
        "attention_dropout": config.dropout,
        "mlp_bias": False,
        "pretraining_tp": 1,
        "tie_word_embeddings": config.tie_weights,
        "initializer_range": 0.02,
        "use_cache": True,
        "torch_dtype": config.dtype,
    }


def llama_pieces(config: GPTConfig) -> list[Piece]:
    """Every parameter of the GPT of `config` and the LlamaForCausalLM tensors stacked into it."""
    head_size = config.n_embd // config.n_head
    q_rows, kv_rows = config.n_head * head_size, (config.n_kv_head or config.n_head) * head_size
    pieces = [Piece("wte.weight", ("model.embed_tokens.weight",))]
    for i in range(config.n_layer):
        hf = f"model.layers.{i}."
        pieces += [
            Piece(f"h.{i}.attn_norm.weight", (hf + "input_layernorm.weight",)),
            Piece(
                f"h.{i}.self_attn.in_proj_weight",
                tuple(hf + f"self_attn.{p}_proj.weight" for p in "qkv"),
                rows=(q_rows, kv_rows, kv_rows),
            ),
            Piece(f"h.{i}.self_attn.out_proj.weight", (hf + "self_attn.o_proj.weight",)),
            Piece(f"h.{i}.ff_norm.weight", (hf + "post_attention_layernorm.weight",)),
            Piece(
                f"h.{i}.ff.fc1.weight",
                (hf + "mlp.gate_proj.weight", hf + "mlp.up_proj.weight"),
                rows=(config.inner_size, config.inner_size),
            ),
            Piece(f"h.{i}.ff.fc2.weight", (hf + "mlp.down_proj.weight",)),
        ]
    pieces.append(Piece("ln_f.weight", ("model.norm.weight",)))
    if not config.tie_weights:
        pieces.append(Piece("lm_head.weight", ("lm_head.weight",)))
    return pieces


LLAMA = Layout(
    family="Llama",
    hf_class="LlamaForCausalLM",
    model_type="llama",
    holds={
        **EVERY_VALUE,
        "rope_theta": ANY,
        "n_kv_head": ANY,
        **{name: Only((value,), f"{name}={value!r}") for name, value in LLAMA_BLOCKS.items()},
    },
    pieces=llama_pieces,
    config_to_hf=llama_config_to_hf,
    config_from_hf=llama_config_from_hf,
    hf_keys={
        **dict.fromkeys(
            "model_type vocab_size hidden_size intermediate_size num_hidden_layers num_attention_heads "
            "num_key_value_heads max_position_embeddings attention_dropout tie_word_embeddings rms_norm_eps "
            "rope_theta rope_parameters".split(),
            "read",
        ),
        **dict.fromkeys(
            "hidden_act attention_bias mlp_bias head_dim pretraining_tp rope_scaling".split(), "checked"
        ),
        **dict.fromkeys(INERT_KEYS, "inert"),
    },
    dropped_there="the attention weights only (attention_dropout)",
    buffers=r"model\.layers\.\d+\.self_attn\.rotary_emb\.inv_freq",  # rotary tables of older files
)


def load_hf_llama(path, dtype: str = "float32", notes: list[str] | None = None) -> GPT:
    """Load a Hugging Face Llama directory (``config.json`` + ``model.safetensors``) as a GPT.

    dtype: the model's float dtype ("float32" default, or "float64"). notes: as `load_hf_gpt2`.
    Raises CheckpointError for missing or leftover files / tensors, ConfigError for unsupported configs.
    """
    return LLAMA.load(path, dtype, notes)


def llama_from_hf(checkpoint: HFCheckpoint, config: GPTConfig, notes: list[str] | None = None) -> GPT:
    """The GPT of `config` (llama_config_from_hf of the checkpoint's config.json) with the weights of an
    already-read Llama directory (`hf_files.read_checkpoint`); as `load_hf_llama`."""
    return LLAMA.model_from_hf(checkpoint, config, notes)


def save_hf_llama(model: GPT, path, token_ids: dict[str, int] | None = None) -> Path:
    """Write `model` as a Hugging Face LlamaForCausalLM directory (config.json + model.safetensors).

    token_ids: {"bos_token_id": ..., "eos_token_id": ..., "pad_token_id": ...} for config.json
    (where generate stops). Weights keep the model's dtype; a tied head is written once, as the embedding (as
    transformers does). Returns the directory. ConfigError, before anything is written, naming what
    Llama cannot hold of the model.
    """
    if not isinstance(model, GPT):
        raise DTypeError(f"save_hf_llama needs a GPT, got {type(model).__name__}")
    tensors = LLAMA.hf_tensors(model)
    return write_checkpoint(path, llama_config_to_hf(model.config), tensors, token_ids)
