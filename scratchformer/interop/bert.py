"""Hugging Face BERT-family checkpoints in scratchformer's own layers.

`load_hf_bert(path)` reads a checkpoint directory (``config.json`` + ``model.safetensors``, or a
sharded ``model.safetensors.index.json``) and returns a `BertEncoder`: word + position +
token-type embeddings, the embedding LayerNorm, then ``num_hidden_layers`` post-norm
`EncoderBlock`s (exact-erf GELU, LayerNorm eps from the config). Its ``forward`` returns the
last hidden state, i.e. what ``transformers.BertModel(...).last_hidden_state`` returns.

Name mapping (Hugging Face -> scratchformer; an optional ``bert.`` prefix and the old
``gamma``/``beta`` LayerNorm names are accepted, pooler / heads / ``position_ids`` ignored)::

    embeddings.word_embeddings.weight            -> word_embeddings.weight
    embeddings.position_embeddings.weight        -> position_embeddings.weight
    embeddings.token_type_embeddings.weight      -> token_type_embeddings.weight
    embeddings.LayerNorm.{weight,bias}           -> embeddings_norm.{weight,bias}
    encoder.layer.i.attention.self.{query,key,value}.{weight,bias}
                                                 -> layers.i.self_attn.in_proj_{weight,bias}
                                                    (q; k; v concatenated by rows)
    encoder.layer.i.attention.output.dense       -> layers.i.self_attn.out_proj
    encoder.layer.i.attention.output.LayerNorm   -> layers.i.attn_norm
    encoder.layer.i.intermediate.dense           -> layers.i.ff.fc1
    encoder.layer.i.output.dense                 -> layers.i.ff.fc2
    encoder.layer.i.output.LayerNorm             -> layers.i.ff_norm

What the reader holds is declared: BERT_KEYS classifies every config.json key of transformers'
BertConfig (read, checked against BERT_OPTIONS, or inert), and a tensor that is neither the
encoder's nor OUTSIDE_THE_ENCODER (the pooler, the heads) is refused in one line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np

from scratchformer.checks import check_positive_int, check_positive_number, check_token_ids
from scratchformer.errors import CheckpointError, ConfigError, DataError
from scratchformer.interop.hf_files import read_safetensors
from scratchformer.interop.layout import INERT_KEYS
from scratchformer.limits.memory import check_fits
from scratchformer.models.base import Example, Model, Sizes
from scratchformer.runfiles import read_optional_json

__all__ = ["BertConfig", "BertEncoder", "load_hf_bert", "hf_to_scratch_state_dict"]

# Hugging Face hidden_act -> scratchformer activation name
_ACTIVATIONS = {
    "gelu": "gelu",  # exact erf GELU
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "relu": "relu",
}


# the BERT options scratchformer's encoder does not implement: config.json key -> the value it must keep
BERT_OPTIONS = {"is_decoder": False, "add_cross_attention": False}

# every config.json key of transformers' BertConfig (5.x, and older files): read into BertConfig,
# checked (BERT_OPTIONS, position_embedding_type), or inert: it changes nothing the encoder computes
BERT_KEYS = {
    **dict.fromkeys(
        "vocab_size hidden_size num_hidden_layers num_attention_heads intermediate_size hidden_act "
        "max_position_embeddings type_vocab_size layer_norm_eps pad_token_id model_type".split(),
        "read",
    ),
    **dict.fromkeys(["position_embedding_type", *BERT_OPTIONS], "checked"),
    **dict.fromkeys(
        [
            *INERT_KEYS,
            *"hidden_dropout_prob attention_probs_dropout_prob classifier_dropout tie_word_embeddings".split(),
            "gradient_checkpointing",
        ],
        "inert",
    ),
}

# tensors of a BERT checkpoint outside the encoder (its pooler and task heads, buffers): not read
OUTSIDE_THE_ENCODER = r"(pooler|cls|classifier)\..*|embeddings\.(position_ids|token_type_ids)"


@dataclass
class BertConfig:
    """The fields of a Hugging Face ``BertConfig`` that the encoder needs."""

    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    pad_token_id: int = 0
    position_embedding_type: str = "absolute"
    model_type: str = "bert"
    is_decoder: bool = False
    add_cross_attention: bool = False

    def __post_init__(self) -> None:
        self.validate()

    @property
    def activation(self) -> str:
        """The scratchformer activation name for ``hidden_act``."""
        return _ACTIVATIONS[self.hidden_act]

    def validate(self) -> None:
        for key, held in BERT_OPTIONS.items():
            if getattr(self, key) != held:
                raise ConfigError(
                    f"{key}={getattr(self, key)!r} is not supported (scratchformer's BERT encoder has {key}={held!r})"
                )
        if not isinstance(self.hidden_act, str) or self.hidden_act not in _ACTIVATIONS:
            raise ConfigError(
                f"hidden_act={self.hidden_act!r} is not supported (use one of {sorted(_ACTIVATIONS)})"
            )
        if self.position_embedding_type != "absolute":
            raise ConfigError(
                f"position_embedding_type={self.position_embedding_type!r} is not supported (only 'absolute')"
            )
        for name in (
            "vocab_size",
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "intermediate_size",
            "max_position_embeddings",
            "type_vocab_size",
        ):
            check_positive_int(name, getattr(self, name))
        if self.hidden_size % self.num_attention_heads:
            raise ConfigError(
                f"hidden_size={self.hidden_size} is not divisible by "
                f"num_attention_heads={self.num_attention_heads}"
            )
        check_positive_number("layer_norm_eps", self.layer_norm_eps)
        self.layer_norm_eps = float(self.layer_norm_eps)

    @classmethod
    def from_dict(cls, d: dict) -> BertConfig:
        if not isinstance(d, dict):
            raise ConfigError(f"a BERT config must be a JSON object, got {type(d).__name__}")
        known = {f.name for f in fields(cls)}
        kwargs = {k: v for k, v in d.items() if k in known}
        # Hugging Face defaults position_embedding_type to absolute; a null means the same
        if kwargs.get("position_embedding_type") is None:
            kwargs.pop("position_embedding_type", None)
        return cls(**kwargs)

    @classmethod
    def from_json(cls, path: str | Path) -> BertConfig:
        """Read ``config.json`` (a file, or a directory holding one)."""
        path = Path(path)
        if path.is_dir():
            path = path / "config.json"
        d = read_optional_json(path)
        if d is None:
            raise CheckpointError(f"BERT config not found: {path}")
        return cls.from_dict(d)


class BertEncoder(Model):
    """BERT's embeddings + post-norm encoder stack, returning the last hidden state."""

    _targets_name = None  # no loss: backward takes grad_output
    family = "bert"
    config_class = BertConfig

    def __init__(self, config: BertConfig, dtype=np.float32):
        super().__init__()
        from scratchformer.nn import Embedding, EncoderBlock, LayerNorm
        from scratchformer.nn.hooks import HookPoint

        self.config = config
        c = config
        dtype = np.dtype(dtype)
        if not np.issubdtype(dtype, np.floating):
            raise ConfigError(f"dtype must be a floating type, got {dtype}")
        self.word_embeddings = Embedding(c.vocab_size, c.hidden_size, dtype=dtype)
        self.position_embeddings = Embedding(c.max_position_embeddings, c.hidden_size, dtype=dtype)
        self.token_type_embeddings = Embedding(c.type_vocab_size, c.hidden_size, dtype=dtype)
        self.embeddings_norm = LayerNorm(c.hidden_size, eps=c.layer_norm_eps, dtype=dtype)
        # hook points (scratchformer.lens): word and position embeddings (B, T, d)
        self.hook_embed, self.hook_pos_embed = HookPoint(), HookPoint()
        try:
            self.layers = [
                EncoderBlock(
                    c.hidden_size,
                    c.num_attention_heads,
                    c.intermediate_size,
                    dropout=0.0,
                    activation=c.activation,
                    norm_first=False,
                    eps=c.layer_norm_eps,
                    dtype=dtype,
                )
                for _ in range(c.num_hidden_layers)
            ]
        except (ValueError, KeyError) as e:  # the core does not know this activation
            raise ConfigError(f"hidden_act={c.hidden_act!r}: {e}") from None
        self.eval()  # an inference model by default; .train() enables backward

    # -- the model contract (models/base.py) ----------------------------------------------------
    def stacks(self) -> dict[str, list]:
        return {"": self.layers}

    def token_embedding(self, prefix: str = ""):
        return self.word_embeddings

    def positions(self, prefix: str = ""):
        return self.position_embeddings

    def _example(self, ids, tokens, vocab_labels, target, **_) -> Example:
        """The sequence; no loss and no logits (the output is the hidden states)."""
        return Example((ids[None],), None, (ids[None],), None, {"": tokens}, tokens, None)

    def named_hook_points(self) -> dict:
        norm = self.embeddings_norm  # what the embedding LayerNorm takes and gives
        return {
            "embed": self.hook_embed,
            "pos_embed": self.hook_pos_embed,
            "embed_norm.in": norm.hook_in,
            "embed_norm.out": norm.hook_out,
        }

    @classmethod
    def param_count(cls, config: BertConfig) -> int:
        return bert_param_count(config)

    @classmethod
    def sizes(cls, config: BertConfig) -> Sizes:
        c = config
        return Sizes(
            bert_param_count(c),
            c.num_hidden_layers,
            c.hidden_size,
            c.num_attention_heads,
            c.max_position_embeddings,
            c.vocab_size,
        )

    def _check_ids(self, ids, name: str, limit: int, shape=None) -> np.ndarray:
        """(B, T) int64 ids in [0, limit); one sequence (T,) and bool masks are accepted too."""
        ids = np.asarray(ids)
        ids = ids[None, :] if ids.ndim == 1 else ids
        ids = ids.astype(np.int64) if ids.dtype == np.bool_ else ids
        ids = check_token_ids(ids, name, limit).astype(np.int64, copy=False)
        if shape is not None and ids.shape != shape:
            raise DataError(f"{name} has shape {ids.shape}, input_ids has {shape}")
        return ids

    def embed(self, input_ids, token_type_ids=None) -> np.ndarray:
        """Word + position + token-type embeddings, then the embedding LayerNorm: (B, T, d)."""
        c = self.config
        input_ids = self._check_ids(input_ids, "input_ids", c.vocab_size)
        B, T = input_ids.shape
        if T > c.max_position_embeddings:
            raise DataError(
                f"sequence length {T} exceeds max_position_embeddings={c.max_position_embeddings}"
            )
        if token_type_ids is None:
            token_type_ids = np.zeros_like(input_ids)
        token_type_ids = self._check_ids(token_type_ids, "token_type_ids", c.type_vocab_size, (B, T))
        position_ids = np.broadcast_to(np.arange(T, dtype=np.int64), (B, T))
        x = (
            self.hook_embed(self.word_embeddings(input_ids))
            + self.hook_pos_embed(self.position_embeddings(np.ascontiguousarray(position_ids)))
            + self.token_type_embeddings(token_type_ids)
        )
        return self.embeddings_norm(x)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None) -> np.ndarray:
        """input_ids (B, T) int, attention_mask (B, T) 0/1 (None = all ones), token_type_ids
        (B, T) (None = zeros) -> last hidden state (B, T, hidden_size)."""
        x = self.embed(input_ids, token_type_ids)
        # the [PAD] row is PyTorch's padding_idx: it never receives a gradient (see backward)
        pad = np.asarray(input_ids).reshape(x.shape[:2]) == self.config.pad_token_id
        mask = None
        if attention_mask is not None:
            am = np.asarray(attention_mask)
            if am.ndim == 1:
                am = am[None, :]
            if am.shape != x.shape[:2]:
                raise DataError(f"attention_mask has shape {am.shape}, input_ids has {x.shape[:2]}")
            mask = am[:, None, None, :].astype(bool)
        for layer in self.layers:
            x = layer(x, mask=mask)
        self._save(loss=None, out_shape=x.shape, pad=pad)
        return x

    def backward(self, dloss: float = 1.0, grad_output: np.ndarray | None = None) -> None:
        """dloss * grad_output, a gradient of the last hidden state (B, T, hidden_size), ->
        parameter gradients (after a training-mode forward): models/base.py's contract. The
        encoder has no loss of its own, so grad_output is needed. As in Hugging Face's
        BertEmbeddings (padding_idx), the pad_token_id row of word_embeddings gets no gradient."""
        cache, dy = self._start_backward(dloss, grad_output)
        for layer in reversed(self.layers):
            dy = layer.backward(dy)
        pad = cache["pad"]  # (B, T) positions holding pad_token_id
        dy = self.embeddings_norm.backward(dy)
        self.token_type_embeddings.backward(dy)
        self.position_embeddings.backward(dy)
        dy = self.hook_embed.backward(dy)  # the input embeddings' gradient, for the lens's saliency
        # Hugging Face builds word_embeddings with padding_idx=pad_token_id: that row is not trained
        self.word_embeddings.backward(np.where(pad[:, :, None], 0, dy) if pad.any() else dy)
        return None

    @classmethod
    def from_pretrained(cls, path: str | Path, dtype=np.float32) -> BertEncoder:
        return load_hf_bert(path, dtype=dtype)


# -- loading -------------------------------------------------------------------------------

_LAYER_RE = re.compile(r"^encoder\.layer\.(\d+)\.(.+)$")
_LAYER_MAP = {
    "attention.output.dense": "self_attn.out_proj",
    "attention.output.LayerNorm": "attn_norm",
    "intermediate.dense": "ff.fc1",
    "output.dense": "ff.fc2",
    "output.LayerNorm": "ff_norm",
}
_EMB_MAP = {
    "embeddings.word_embeddings.weight": "word_embeddings.weight",
    "embeddings.position_embeddings.weight": "position_embeddings.weight",
    "embeddings.token_type_embeddings.weight": "token_type_embeddings.weight",
    "embeddings.LayerNorm.weight": "embeddings_norm.weight",
    "embeddings.LayerNorm.bias": "embeddings_norm.bias",
}


def _normalise_key(key: str) -> str:
    for prefix in ("bert.", "model."):
        if key.startswith(prefix):
            key = key[len(prefix) :]
            break
    if key.endswith(".gamma"):
        key = key[: -len(".gamma")] + ".weight"
    elif key.endswith(".beta"):
        key = key[: -len(".beta")] + ".bias"
    return key


def hf_to_scratch_state_dict(hf: dict[str, np.ndarray], num_layers: int) -> dict[str, np.ndarray]:
    """Map a Hugging Face BERT state dict to `BertEncoder` parameter names.

    Tensors outside the encoder (OUTSIDE_THE_ENCODER: the pooler, MLM/NSP and classifier heads,
    ``position_ids``) are dropped. A missing encoder key, or one the encoder has no place for (a
    relative-position table, a layer past num_layers), is a CheckpointError naming it.
    """
    hf = {_normalise_key(k): v for k, v in hf.items()}
    out: dict[str, np.ndarray] = {}
    qkv: dict[tuple[int, str, str], np.ndarray] = {}
    leftover = []
    for key, value in hf.items():
        if key in _EMB_MAP:
            out[_EMB_MAP[key]] = value
            continue
        m = _LAYER_RE.match(key)
        if not m:
            if not re.fullmatch(OUTSIDE_THE_ENCODER, key):
                leftover.append(key)
            continue
        i, rest = int(m.group(1)), m.group(2)
        if i >= num_layers:
            raise CheckpointError(
                f"checkpoint has layer {i} but the config says num_hidden_layers={num_layers}"
            )
        module, _, leaf = rest.rpartition(".")
        if module in ("attention.self.query", "attention.self.key", "attention.self.value"):
            qkv[(i, module.rsplit(".", 1)[1], leaf)] = value
        elif module in _LAYER_MAP and leaf in ("weight", "bias"):
            out[f"layers.{i}.{_LAYER_MAP[module]}.{leaf}"] = value
        else:
            leftover.append(key)
    if leftover:
        raise CheckpointError(
            f"the checkpoint holds {', '.join(leftover[:3])}{' and more' if len(leftover) > 3 else ''}, which a "
            "BERT encoder of its config.json has no place for: is it another architecture?"
        )
    for i in range(num_layers):
        for leaf in ("weight", "bias"):
            parts = []
            for which in ("query", "key", "value"):
                k = (i, which, leaf)
                if k not in qkv:
                    raise CheckpointError(f"checkpoint lacks encoder.layer.{i}.attention.self.{which}.{leaf}")
                parts.append(np.asarray(qkv[k]))
            out[f"layers.{i}.self_attn.in_proj_{leaf}"] = np.concatenate(parts, axis=0)
    return out


def load_hf_state_dict(path: str | Path) -> dict[str, np.ndarray]:
    """The raw tensors of ``model.safetensors`` (or its shards) in a checkpoint directory."""
    path = Path(path)
    single = path / "model.safetensors"
    index = path / "model.safetensors.index.json"
    if single.is_file():
        return read_safetensors(single)
    if index.is_file():
        weight_map = read_optional_json(index, error=CheckpointError).get("weight_map")
        if not isinstance(weight_map, dict):
            raise CheckpointError(f"{index} has no 'weight_map' object")
        sd: dict[str, np.ndarray] = {}
        for shard in sorted(set(weight_map.values())):
            shard_path = path / shard
            if not shard_path.is_file():
                raise CheckpointError(f"checkpoint shard not found: {shard_path}")
            sd.update(read_safetensors(shard_path))
        return sd
    hint = " (only safetensors is supported)" if (path / "pytorch_model.bin").is_file() else ""
    raise CheckpointError(f"model weights not found: {single}{hint}")


def bert_param_count(config: BertConfig) -> int:
    """Parameters of a `BertEncoder` of this config: the three embedding tables and their
    LayerNorm, then per layer q, k, v and output projections, the feed-forward and two LayerNorms."""
    d, ff = config.hidden_size, config.intermediate_size
    embeddings = (config.vocab_size + config.max_position_embeddings + config.type_vocab_size) * d + 2 * d
    per_layer = 4 * d * d + 4 * d + 2 * d * ff + ff + d + 4 * d
    return embeddings + config.num_hidden_layers * per_layer


def load_hf_bert(path: str | Path, dtype=np.float32) -> BertEncoder:
    """Load a Hugging Face BERT-family checkpoint directory into a `BertEncoder` (eval mode).

    Args:
        path: directory with ``config.json`` and ``model.safetensors``.
        dtype: parameter dtype, float32 (default) or float64.
    """
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"checkpoint directory not found: {path}")
    if not path.is_dir():
        raise CheckpointError(f"checkpoint path is not a directory: {path}")
    dtype = np.dtype(dtype)
    if not np.issubdtype(dtype, np.floating):
        raise ConfigError(f"dtype must be a floating type, got {dtype}")
    config = BertConfig.from_json(path / "config.json")
    check_fits(
        bert_param_count(config) * dtype.itemsize,
        f"the BERT model of {path / 'config.json'} (about {bert_param_count(config):,} parameters)",
        "its sizes (is it the right config.json?)",
    )
    hf = load_hf_state_dict(path)
    sd = hf_to_scratch_state_dict(hf, config.num_hidden_layers)
    model = BertEncoder(config, dtype=dtype)
    own = dict(model.named_parameters())
    missing = sorted(set(own) - set(sd))
    if missing:
        raise CheckpointError(f"{path / 'model.safetensors'} lacks {len(missing)} tensors, e.g. {missing[0]}")
    bad = [
        f"{k} {tuple(np.shape(v))} != {own[k].shape}" for k, v in sd.items() if np.shape(v) != own[k].shape
    ]
    if bad:
        raise CheckpointError(f"checkpoint does not match config.json: {'; '.join(bad[:3])}")
    model.load_state_dict(sd, strict=True)
    return model
