"""A sentence classifier on a pretrained BERT-family encoder: mean pooling and a linear head.

    input_ids, attention_mask (B, T) -> encoder -> hidden (B, T, d)
        -> pooled[b] = sum_t mask[b, t] hidden[b, t] / sum_t mask[b, t]     (B, d)
        -> logits = pooled W^T + b                                          (B, num_classes)
        -> loss = cross_entropy(logits, labels)

The pooling is sentence-transformers' (all-MiniLM-L6-v2 is trained with it), so a fine-tuned
classifier starts from the embedding the checkpoint was trained to produce. Fine-tuning runs the
hand-written backward through every layer of the encoder; `freeze_encoder=True` trains the head
alone (a linear probe on frozen embeddings) and skips the encoder's backward.

Usage::

    clf = BertClassifier(load_hf_bert(path, dtype=np.float64), num_classes=2, seed=0)
    logits, loss = clf(ids, mask, labels=labels)
    clf.zero_grad(); clf.backward()                          # adds into every Parameter.grad
    opt = AdamW(clf.trainable_parameters(), lr=2e-5)         # the head only when frozen
"""

from __future__ import annotations

import numpy as np

from scratchformer.checks import check_positive_int, check_seed
from scratchformer.errors import DataError
from scratchformer.interop.bert import BertEncoder
from scratchformer.models.base import Model
from scratchformer.nn import Linear
from scratchformer.ops import cross_entropy_forward

__all__ = ["BertClassifier", "mean_pool_forward", "mean_pool_backward"]


def mean_pool_forward(hidden: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean over the positions where mask is 1: hidden (B, T, d), mask (B, T) 0/1 -> pooled
    (B, d), and the weights (B, T, 1) = mask / count that the backward needs."""
    m = mask.astype(hidden.dtype)[:, :, None]
    weights = m / np.maximum(m.sum(axis=1, keepdims=True), 1e-9)
    return (hidden * weights).sum(axis=1), weights


def mean_pool_backward(dpooled: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """d pooled (B, d) -> d hidden (B, T, d): each position gets its weight's share."""
    return dpooled[:, None, :] * weights


class BertClassifier(Model):
    """encoder -> mean pooling -> Linear(hidden_size, num_classes). backward: models/base.py's contract."""

    _targets_name = "labels"

    def __init__(self, encoder: BertEncoder, num_classes: int, freeze_encoder: bool = False,
                 seed: int | None = None):
        super().__init__()
        check_positive_int("num_classes", num_classes)
        check_seed("seed", seed)
        self.encoder = encoder
        self.num_classes = num_classes
        self.freeze_encoder = bool(freeze_encoder)
        d = encoder.config.hidden_size
        dtype = encoder.word_embeddings.weight.data.dtype
        rng = np.random.default_rng(seed)
        self.head = Linear(d, num_classes, dtype=dtype, rng=rng)

    def trainable_parameters(self) -> list:
        """What the optimiser updates: every parameter, or the head's alone when frozen."""
        return self.head.parameters() if self.freeze_encoder else self.parameters()

    def check_input(self, input_ids, attention_mask=None, labels=None) -> None:
        if labels is not None:
            labels = np.asarray(labels)
            if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
                raise DataError(f"labels must be a (B,) integer array, got shape {labels.shape} {labels.dtype}")
            if labels.size and (labels.min() < 0 or labels.max() >= self.num_classes):
                raise DataError(f"labels must be in 0..{self.num_classes - 1}")

    def forward(self, input_ids, attention_mask=None, labels=None):
        """input_ids (B, T) int, attention_mask (B, T) 0/1 (None: all ones), labels (B,) int or
        None -> (logits (B, num_classes), mean loss or None)."""
        ids = np.asarray(input_ids)
        mask = np.ones(ids.shape, dtype=np.int64) if attention_mask is None else np.asarray(attention_mask)
        encoder_training = self.training and not self.freeze_encoder
        self.encoder.train(encoder_training)  # a frozen encoder keeps no cache for a backward
        hidden = self.encoder(ids, attention_mask)
        pooled, weights = mean_pool_forward(hidden, mask)
        logits = self.head(pooled)
        loss, ce = None, None
        if labels is not None:
            loss, ce = cross_entropy_forward(logits, np.asarray(labels, dtype=np.int64))
        self._save(loss=ce, weights=weights, out_shape=logits.shape)
        self._note_loss(ce)
        return logits, loss

    def backward(self, dloss: float = 1.0, grad_output: np.ndarray | None = None) -> None:
        """After a training-mode forward with labels: the gradient of dloss * loss (or dloss *
        grad_output, a gradient of the logits (B, num_classes)) into the head's and, unless
        frozen, every encoder parameter's .grad."""
        cache, dlogits = self._start_backward(dloss, grad_output)
        dpooled = self.head.backward(dlogits)
        if not self.freeze_encoder:
            self.encoder.backward(grad_output=mean_pool_backward(dpooled, cache["weights"]))
        return None
