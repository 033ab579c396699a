"""The model parts the analyses read: the stacks, each block's attentions, the final norm and
the unembedding, each asked of the model's own contract (models/base.py), so a subclass of a
family (`class MyGPT(GPT)`) is studied as its family and no lens file knows attribute names."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scratchformer.errors import ConfigError
from scratchformer.models.base import Model

_SIDES = {"": "", "encoder.": "enc ", "decoder.": "dec "}


def stacks(model) -> dict[str, list]:
    """Hook-name prefix -> that stack's blocks ("" for single-stack models); ConfigError for
    anything that is not a scratchformer model."""
    if not isinstance(model, Model):
        raise ConfigError(
            f"the lens studies scratchformer models (GPT, TransformerClassifier, Seq2SeqTransformer, "
            f"BertEncoder, or subclasses), got {type(model).__name__}"
        )
    return model.stacks()


def attentions(model) -> list[tuple[str, str, object]]:
    """(hook prefix of the attention, e.g. "blocks.0.attn", label, MultiHeadAttention) for every
    attention of the model, in forward order; label: "L0" ("enc L0", "dec L0", "cross L0")."""
    out = []
    for prefix, blocks in stacks(model).items():
        side = _SIDES.get(prefix, prefix)
        for i, block in enumerate(blocks):
            for name, attn in model.block_parts(block).attentions.items():
                label = f"{side}L{i}" if name == "attn" else f"{name.removesuffix('_attn')} L{i}"
                out.append((f"{prefix}blocks.{i}.{name}", label, attn))
    return out


@dataclass
class Unembedding:
    """How the last residual becomes logits: logits = norm(x) @ W.T + b (norm may be None).

    prefix: the hook-name prefix of the stack ("" or "decoder."); n_layer: its blocks;
    pre_norm: the residual stream is a sum of its parts (pre-norm blocks); norm_kind:
    "layernorm", "rmsnorm" or None."""

    prefix: str
    n_layer: int
    norm: object | None
    W: np.ndarray
    b: np.ndarray | None
    pre_norm: bool
    norm_kind: str | None = None

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """(..., C) residual -> (..., V) logits."""
        h = x if self.norm is None else _apply_norm(x, self.norm)
        out = h @ self.W.T
        return out if self.b is None else out + self.b

    def frozen_norm(self, x: np.ndarray):
        """The final norm as a linear map, its scale frozen at the residual x (C,): returns
        (apply, shift) with norm(x) = sum of apply(c) over the parts c of x, plus shift.
        LayerNorm: apply(c) = (c - mean(c)) / sqrt(var(x) + eps) * weight, shift = its bias;
        RMSNorm: apply(c) = c / sqrt(mean(x^2) + eps) * weight, shift = 0; no norm: c, 0."""
        zero = np.zeros_like(x)
        if self.norm_kind is None:
            return (lambda c: c), zero
        weight = self.norm.weight.data
        if self.norm_kind == "rmsnorm":
            rms = np.sqrt((x * x).mean() + self.norm.eps)
            return (lambda c: c / rms * weight), zero
        std = np.sqrt(x.var() + self.norm.eps)
        shift = zero if getattr(self.norm, "bias", None) is None else self.norm.bias.data
        return (lambda c: (c - c.mean()) / std * weight), shift


def _apply_norm(x: np.ndarray, norm) -> np.ndarray:
    """The final norm applied by its own layer (the same float operations as the model's)."""
    shape = x.shape
    return norm(x.reshape(-1, 1, shape[-1])).reshape(shape)


def unembedding(model) -> Unembedding:
    """The final norm and unembedding of a language model (GPT, or seq2seq's decoder)."""
    stacks(model)
    head = model.unembedding()
    if head is None:
        raise ConfigError(
            f"the logit lens and logit attribution need a language model (GPT or seq2seq), "
            f"got a {type(model).__name__}"
        )
    blocks = model.stacks()[head.prefix]
    pre_norm = all(model.block_parts(b).norm_first for b in blocks)
    return Unembedding(
        head.prefix,
        len(blocks),
        model.final_norm(head.prefix),
        head.weight,
        head.bias,
        pre_norm,
        model.final_norm_kind(head.prefix),
    )


def as_batch(ids) -> np.ndarray:
    ids = np.asarray(ids)
    return ids[None, :] if ids.ndim == 1 else ids
