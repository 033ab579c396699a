"""Encoder-only sequence classifier: embeddings + positions -> N encoder blocks -> pool -> linear head.

    logits, loss = model(x, labels)       # x: (B, T) int ids, labels: (B,) int or None
    model.backward()                      # gradients of the mean cross-entropy into .grad
    model.predict(x)                      # (B,) argmax class ids (eval mode, no caches)

Pooling:
- "mean": average of the final hidden states over the real tokens (padding excluded).
- "cls": a learned vector `cls_token` (n_embd,) is prepended to the sequence (position 0,
  never masked); its final hidden state is the sequence summary (BERT's [CLS]).

With pre-norm blocks (`norm_first=True`) a final LayerNorm `ln_f` is applied before pooling,
as GPT-2 / torch.nn.TransformerEncoder(norm=...) do; post-norm blocks already end in a norm.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scratchformer.checks import as_array, check_heads, check_int_in_range, check_token_ids
from scratchformer.errors import DataError, ShapeError
from scratchformer.models.base import (
    Example,
    Model,
    Sizes,
    block_params,
    label_list,
    linear_params,
    norm_params,
)
from scratchformer.nn import (
    Dropout,
    Embedding,
    EncoderBlock,
    LayerNorm,
    LearnedPositionalEmbedding,
    Linear,
    Parameter,
    SinusoidalPositionalEncoding,
    init,
)
from scratchformer.nn.hooks import HookPoint
from scratchformer.nn.module import eval_mode
from scratchformer.ops import ACTIVATIONS, cross_entropy_forward
from scratchformer.ops.pooling import pool_backward, pool_forward
from scratchformer.settings import TransformerConfig, setting
from scratchformer.specs import NON_NEGATIVE, POSITIVE, PROBABILITY, Bool, Maybe, Str


@dataclass
class ClassifierConfig(TransformerConfig):
    """Hyper-parameters of a `TransformerClassifier`; each field's `setting` declares its type,
    range and choices (the one place to add one)."""

    vocab_size: int = setting(POSITIVE)
    n_classes: int = setting(POSITIVE)
    max_len: int = setting(POSITIVE, 64)  # longest input sequence (the CLS token is extra)
    n_layer: int = setting(POSITIVE, 2)
    n_head: int = setting(POSITIVE, 4)
    n_embd: int = setting(POSITIVE, 64)
    n_inner: int | None = setting(Maybe(POSITIVE), None)  # feed-forward hidden size; None: 4 * n_embd
    dropout: float = setting(PROBABILITY, 0.0)
    norm_first: bool = setting(Bool(), True)
    activation: str = setting(Str(tuple(ACTIVATIONS)), "gelu")
    positional: str = setting(Str(("sinusoidal", "learned")), "sinusoidal")
    pooling: str = setting(Str(("mean", "cls")), "mean")
    pad_id: int | None = setting(
        Maybe(NON_NEGATIVE), None
    )  # if set and no padding_mask is given, mask = (x != pad_id)

    def check_together(self) -> None:
        check_heads(self.n_embd, self.n_head)
        if self.pad_id is not None:
            check_int_in_range("pad_id", self.pad_id, 0, self.vocab_size)


class TransformerClassifier(Model):
    """See the module docstring. Parameters: `tok_emb`, `pos` (learned only), `cls_token`
    (cls pooling only), `blocks.i` (EncoderBlock), `ln_f` (pre-norm only), `head`.

    `TransformerClassifier(config, seed=None)`: config a ClassifierConfig; seed: see `Model._take_config`.
    """

    _targets_name = "labels"
    family = "classifier"
    config_class = ClassifierConfig

    def __init__(self, config: ClassifierConfig, seed: int | None = None):
        super().__init__()
        c = self._take_config(config, seed)
        self.tok_emb = Embedding(c.vocab_size, c.n_embd)
        n_pos = c.max_len + (1 if c.pooling == "cls" else 0)
        if c.positional == "learned":
            self.pos = LearnedPositionalEmbedding(n_pos, c.n_embd)
        else:
            self.pos = SinusoidalPositionalEncoding(n_pos, c.n_embd)
        if c.pooling == "cls":
            self.cls_token = Parameter(init.normal((c.n_embd,), 1.0, self.tok_emb.weight.data.dtype))
        self.drop = Dropout(c.dropout)
        self.blocks = [EncoderBlock(**c.block_args()) for _ in range(c.n_layer)]
        if c.norm_first:
            self.ln_f = LayerNorm(c.n_embd)
        self.head = Linear(c.n_embd, c.n_classes)
        # hook points (scratchformer.lens): token embeddings (B, T, C), the stack's output
        # (after ln_f when pre-norm) (B, T', C)
        self.hook_embed, self.hook_ln_final = HookPoint(), HookPoint()

    # -- the model contract (models/base.py) ----------------------------------------------------
    def stacks(self) -> dict[str, list]:
        return {"": self.blocks}

    def final_norm(self, prefix: str = ""):
        return self.ln_f if self.config.norm_first else None

    def token_embedding(self, prefix: str = ""):
        return self.tok_emb

    def positions(self, prefix: str = ""):
        return self.pos

    def _example(self, ids, tokens, vocab_labels, target, class_names=None, **_) -> Example:
        """The sequence and the loss of its class (`target`, else the prediction); the stack's
        positions start with "[CLS]" under cls pooling."""
        x = ids[None]
        target = self._predicted((x,)) if target is None else int(target)
        stack = ["[CLS]"] + tokens if self.config.pooling == "cls" else tokens
        classes = label_list(class_names, self.config.n_classes)
        return Example((x,), (x, np.array([target])), (x,), target, {"": stack}, None, classes)

    def named_hook_points(self) -> dict:
        return {
            "embed": self.hook_embed,
            "pos_embed": self.pos.hook_pos_embed,
            "ln_final": self.hook_ln_final,
        }

    @classmethod
    def param_count(cls, config: ClassifierConfig) -> int:
        c = config
        n_pos = c.max_len + (1 if c.pooling == "cls" else 0)
        return (
            c.vocab_size * c.n_embd
            + (n_pos * c.n_embd if c.positional == "learned" else 0)
            + (c.n_embd if c.pooling == "cls" else 0)
            + c.n_layer * block_params(c.n_embd, c.n_head, c.inner_size)
            + (norm_params("layernorm", c.n_embd, True) if c.norm_first else 0)
            + linear_params(c.n_embd, c.n_classes, True)
        )

    @classmethod
    def sizes(cls, config: ClassifierConfig) -> Sizes:
        c = config
        return Sizes(
            cls.param_count(c), c.n_layer, c.n_embd, c.n_head, c.max_len + (c.pooling == "cls"), c.vocab_size
        )

    # -- forward / backward ------------------------------------------------------------------
    def _padding_mask(self, x: np.ndarray, padding_mask) -> np.ndarray | None:
        if padding_mask is None:
            return None if self.config.pad_id is None else (x != self.config.pad_id)
        padding_mask = as_array(padding_mask, "padding_mask")
        if padding_mask.dtype != bool or padding_mask.shape != x.shape:
            raise ShapeError(
                f"padding_mask must be bool of shape {x.shape} (True = real token), "
                f"got {padding_mask.dtype} {padding_mask.shape}"
            )
        return padding_mask

    def check_input(self, x, labels=None, padding_mask=None) -> None:
        x = check_token_ids(x, "x", self.config.vocab_size, max_len=self.config.max_len)
        keep = self._padding_mask(x, padding_mask)
        if keep is not None and self.config.pooling == "mean" and not keep.any(axis=1).all():
            raise DataError("every sequence needs at least one real (non-padding) token")
        if labels is not None and as_array(labels, "labels").shape != (x.shape[0],):
            raise ShapeError(f"labels must have shape ({x.shape[0]},), got {np.shape(labels)}")

    def forward(self, x, labels=None, padding_mask=None):
        """x: (B, T) int ids; labels: (B,) int or None; padding_mask: (B, T) bool, True = real.

        Returns (logits (B, n_classes), loss float or None)."""
        x = np.asarray(x)
        B, _T = x.shape
        keep = self._padding_mask(x, padding_mask)  # (B, T) or None
        h = self.hook_embed(self.tok_emb(x))  # (B, T, C)
        if self.config.pooling == "cls":
            cls = np.broadcast_to(self.cls_token.data.astype(h.dtype, copy=False), (B, 1, h.shape[-1]))
            h = np.concatenate([cls, h], axis=1)
            if keep is not None:
                keep = np.concatenate([np.ones((B, 1), dtype=bool), keep], axis=1)
        h = self.drop(self.pos(h))
        attn_mask = None if keep is None else keep[:, None, None, :]  # (B, 1, 1, T') keys
        for blk in self.blocks:
            h = blk(h, mask=attn_mask)
        if self.config.norm_first:
            h = self.ln_f(h)
        h = self.hook_ln_final(h)
        if self.config.pooling == "cls":  # the [CLS] position alone
            weights = np.zeros((B, h.shape[1]), dtype=h.dtype)
            weights[:, 0] = 1
        elif keep is None:
            weights = np.full((B, h.shape[1]), 1.0 / h.shape[1], dtype=h.dtype)
        else:
            weights = (keep / keep.sum(axis=1, keepdims=True)).astype(h.dtype)
        pooled = pool_forward(h, weights)  # (B, C)
        logits = self.head(pooled)
        loss, loss_cache = None, None
        if labels is not None:
            loss, loss_cache = cross_entropy_forward(logits, np.asarray(labels))
        self._save(weights=weights, shape=h.shape, loss=loss_cache, out_shape=logits.shape)
        return logits, loss

    def loss_terms(self, x, labels=None, padding_mask=None) -> int:
        """The labels forward(x, labels, padding_mask) averages over: those not IGNORE_INDEX."""
        return self._counted(labels)

    def backward(self, dloss: float = 1.0, grad_output: np.ndarray | None = None) -> None:
        """Backpropagate dloss * the loss of the last training-mode forward (or dloss *
        grad_output, a gradient of the logits (B, n_classes)): models/base.py's contract."""
        c, grad_logits = self._start_backward(dloss, grad_output)
        dpooled = self.head.backward(grad_logits)  # (B, C)
        dh = pool_backward(dpooled, c["weights"])  # (B, T, C)
        if self.config.norm_first:
            dh = self.ln_f.backward(dh)
        for blk in reversed(self.blocks):
            dh = blk.backward(dh)
        dh = self.pos.backward(self.drop.backward(dh))
        if self.config.pooling == "cls":
            self.cls_token.grad += dh[:, 0].sum(axis=0)
            dh = dh[:, 1:]
        self.tok_emb.backward(self.hook_embed.backward(dh))

    def predict(self, x, padding_mask=None) -> np.ndarray:
        """(B,) predicted class ids; runs in eval mode and restores the previous mode."""
        with eval_mode(self):
            logits, _ = self(x, padding_mask=padding_mask)
        return logits.argmax(axis=-1)
