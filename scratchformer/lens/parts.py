"""The model parts the analyses read: the stacks, each block's attentions, the final norm and
the unembedding. With `hooks.py`, the only lens file that knows the models' attribute names."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scratchformer.errors import ConfigError


def family(model) -> str:
    """"gpt" | "classifier" | "seq2seq" | "bert" (ConfigError for anything else)."""
    kinds = {"GPT": "gpt", "TransformerClassifier": "classifier", "Seq2SeqTransformer": "seq2seq",
             "BertEncoder": "bert"}
    name = type(model).__name__
    if name not in kinds:
        raise ConfigError(f"the lens studies GPT, TransformerClassifier, Seq2SeqTransformer or BertEncoder "
                          f"models, got {name}")
    return kinds[name]


def stacks(model) -> dict[str, list]:
    """Hook-name prefix -> that stack's blocks ("" for single-stack models)."""
    f = family(model)
    if f == "seq2seq":
        return {"encoder.": model.encoder, "decoder.": model.decoder}
    return {"": getattr(model, {"gpt": "h", "classifier": "blocks", "bert": "layers"}[f])}


def attentions(model) -> list[tuple[str, str, object]]:
    """(hook prefix of the attention, e.g. "blocks.0.attn", label, MultiHeadAttention) for every
    attention of the model, in forward order; label: "L0" ("enc L0", "dec L0", "cross L0")."""
    out = []
    for prefix, blocks in stacks(model).items():
        side = {"": "", "encoder.": "enc ", "decoder.": "dec "}[prefix]
        for i, block in enumerate(blocks):
            out.append((f"{prefix}blocks.{i}.attn", f"{side}L{i}", block.self_attn))
            if getattr(block, "cross_attention", False):
                out.append((f"{prefix}blocks.{i}.cross_attn", f"cross L{i}", block.cross_attn))
    return out


@dataclass
class Unembedding:
    """How the last residual becomes logits: logits = norm(x) @ W.T + b (norm may be None).

    prefix: the hook-name prefix of the stack ("" or "decoder."); n_layer: its blocks;
    pre_norm: the residual stream is a sum of its parts (pre-norm blocks)."""

    prefix: str
    n_layer: int
    norm: object | None
    W: np.ndarray
    b: np.ndarray | None
    pre_norm: bool

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """(..., C) residual -> (..., V) logits."""
        h = x if self.norm is None else _layernorm(x, self.norm)
        out = h @ self.W.T
        return out if self.b is None else out + self.b


def _layernorm(x: np.ndarray, norm) -> np.ndarray:
    """The final norm applied by its own layer (the same float operations as the model's)."""
    shape = x.shape
    return norm(x.reshape(-1, 1, shape[-1])).reshape(shape)


def unembedding(model) -> Unembedding:
    """The final norm and unembedding of a language model (GPT, or seq2seq's decoder)."""
    f = family(model)
    if f == "gpt":
        head = model.lm_head
        return Unembedding("", len(model.h), model.ln_f, head.weight.data, None, model.config.norm_first)
    if f == "seq2seq":
        c = model.config
        norm = model.dec_norm if c.norm_first else None
        return Unembedding("decoder.", len(model.decoder), norm, model.lm_head.weight.data,
                           model.lm_head.bias.data, c.norm_first)
    raise ConfigError(f"the logit lens and logit attribution need a language model (GPT or seq2seq), "
                      f"got a {type(model).__name__}")


def dropouts_off(model):
    """Set every dropout probability to 0; returns a function that restores them (saliency runs
    a training-mode forward for the backward, which must be the eval-mode function)."""
    saved = []
    for m in model.modules():
        for attr in ("p", "dropout_p"):
            if isinstance(getattr(m, attr, None), float) and type(m).__name__ in ("Dropout", "MultiHeadAttention"):
                saved.append((m, attr, getattr(m, attr)))
                setattr(m, attr, 0.0)

    def restore():
        for m, attr, value in saved:
            setattr(m, attr, value)
    return restore


def as_batch(ids) -> np.ndarray:
    ids = np.asarray(ids)
    return ids[None, :] if ids.ndim == 1 else ids
