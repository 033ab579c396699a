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

from dataclasses import dataclass, fields

import numpy as np

from scratchformer.checks import check_positive_int, check_seed
from scratchformer.errors import ConfigError, DataError
from scratchformer.interop.bert import _ACTIVATIONS, BERT_OPTIONS, BertConfig, BertEncoder, bert_param_count
from scratchformer.models.base import Example, Model, Sizes, label_list, linear_params
from scratchformer.nn import Linear
from scratchformer.ops import cross_entropy_forward
from scratchformer.settings import DictConfig, setting
from scratchformer.specs import NON_NEGATIVE, POSITIVE, Bool, Int, List, Num, Str

__all__ = ["BertClassifier", "SentenceClassifierConfig", "mean_pool_forward", "mean_pool_backward"]

ENCODER_FIELDS = (
    tuple(  # the shape; the options the encoder holds at one value only are checked when it is read
        f.name
        for f in fields(BertConfig)
        if f.name not in ("position_embedding_type", "model_type", *BERT_OPTIONS)
    )
)


@dataclass
class SentenceClassifierConfig(DictConfig):
    """A BERT encoder's shape (Hugging Face BertConfig names), the classes and the input length."""

    vocab_size: int = setting(POSITIVE)
    hidden_size: int = setting(POSITIVE)
    num_hidden_layers: int = setting(POSITIVE)
    num_attention_heads: int = setting(POSITIVE)
    intermediate_size: int = setting(POSITIVE)
    labels: list = setting(List(Str(max_len=256), max_len=10_000, unique=True))  # class id -> name (sorted)
    hidden_act: str = setting(Str(tuple(_ACTIVATIONS)), "gelu")
    max_position_embeddings: int = setting(POSITIVE, 512)
    type_vocab_size: int = setting(POSITIVE, 2)
    layer_norm_eps: float = setting(Num(above=0.0), 1e-12)
    pad_token_id: int = setting(NON_NEGATIVE, 0)
    max_length: int = setting(Int(min=3, max=4096), 64)  # tokens per text, [CLS] and [SEP] included
    freeze_encoder: bool = setting(Bool(), False)  # True: train the head alone (a linear probe)

    def check_together(self) -> None:
        if self.hidden_size % self.num_attention_heads:
            raise ConfigError(
                f"hidden_size ({self.hidden_size}) must be divisible by num_attention_heads "
                f"({self.num_attention_heads})"
            )
        if len(self.labels) < 2:
            raise ConfigError(f"a classifier needs at least 2 labels, got {self.labels}")
        if self.max_length > self.max_position_embeddings:
            raise ConfigError(
                f"max_length {self.max_length} exceeds the encoder's max_position_embeddings "
                f"{self.max_position_embeddings}: use --max-length {self.max_position_embeddings}"
            )

    @property
    def num_classes(self) -> int:
        return len(self.labels)

    def bert_config(self) -> BertConfig:
        return BertConfig(**{name: getattr(self, name) for name in ENCODER_FIELDS})


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
    family = "sentence_classifier"
    config_class = SentenceClassifierConfig

    def __init__(
        self, encoder: BertEncoder, num_classes: int, freeze_encoder: bool = False, seed: int | None = None
    ):
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

    # -- the model contract (models/base.py): the encoder's parts under "encoder." ---------------
    def stacks(self) -> dict[str, list]:
        return {"encoder.": self.encoder.layers}

    def token_embedding(self, prefix: str = ""):
        return self.encoder.word_embeddings

    def positions(self, prefix: str = ""):
        return self.encoder.position_embeddings

    def _example(self, ids, tokens, vocab_labels, target, class_names=None, **_) -> Example:
        """The sentence (no attention mask: every token real) and the loss of its class
        (`target`, else the prediction)."""
        x = ids[None]
        target = self._predicted((x,)) if target is None else int(target)
        classes = label_list(class_names, self.num_classes)
        return Example((x,), (x, None, np.array([target])), (x,), target, {"encoder.": tokens}, None, classes)

    def named_hook_points(self) -> dict:
        return {"encoder." + name: hp for name, hp in self.encoder.named_hook_points().items()}

    @classmethod
    def param_count(cls, config: SentenceClassifierConfig) -> int:
        """The encoder's parameters (its whole position table and token types) and the head."""
        return bert_param_count(config.bert_config()) + linear_params(
            config.hidden_size, config.num_classes, True
        )

    @classmethod
    def sizes(cls, config: SentenceClassifierConfig) -> Sizes:
        c = config  # the texts are cut to max_length tokens: the longest sequence it runs
        return Sizes(
            cls.param_count(c),
            c.num_hidden_layers,
            c.hidden_size,
            c.num_attention_heads,
            c.max_length,
            c.vocab_size,
        )

    def trainable_parameters(self) -> list:
        """What the optimiser updates: every parameter, or the head's alone when frozen."""
        return self.head.parameters() if self.freeze_encoder else self.parameters()

    def head_parameters(self) -> list:
        """The parameters that start from scratch (the linear head), as against the pretrained
        encoder's: the ones a fine-tuning's own rate (TrainConfig.head_lr) applies to."""
        return self.head.parameters()

    def check_input(self, input_ids, attention_mask=None, labels=None) -> None:
        if labels is not None:
            labels = np.asarray(labels)
            if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
                raise DataError(
                    f"labels must be a (B,) integer array, got shape {labels.shape} {labels.dtype}"
                )
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
        return logits, loss

    def loss_terms(self, input_ids, attention_mask=None, labels=None) -> int:
        """The labels forward(input_ids, attention_mask, labels) averages over: those not IGNORE_INDEX."""
        return self._counted(labels)

    def backward(self, dloss: float = 1.0, grad_output: np.ndarray | None = None) -> None:
        """After a training-mode forward with labels: the gradient of dloss * loss (or dloss *
        grad_output, a gradient of the logits (B, num_classes)) into the head's and, unless
        frozen, every encoder parameter's .grad."""
        cache, dlogits = self._start_backward(dloss, grad_output)
        dpooled = self.head.backward(dlogits)
        if not self.freeze_encoder:
            self.encoder.backward(grad_output=mean_pool_backward(dpooled, cache["weights"]))
        return None
