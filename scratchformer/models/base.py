"""The contract every model family keeps: GPT, TransformerClassifier, Seq2SeqTransformer and
interop's BertEncoder. `Module` (nn/module.py) knows layers; this class adds what a *model* has
on top: a loss, and one meaning of `backward`.

    output, loss = model(inputs..., targets)   # loss: mean cross-entropy over the targets that
                                               # are not IGNORE_INDEX (-100); None without targets
    model.backward()                           # gradient of the loss, added into every .grad
    model.backward(dloss=0.5)                  # ... of 0.5 * loss (e.g. 1 / accumulation steps)
    model.backward(grad_output=g)              # g: d(something)/d(output), output's shape: the
                                               # gradient of that scalar instead of the loss's
                                               # (dloss scales it too); targets not needed

The BERT encoder has no loss (its output is the hidden states), so it always takes grad_output.
Every backward consumes the cache of one training-mode forward and returns None: the inputs are
integer ids. `loss_terms(inputs..., targets)` says how many terms the loss of a forward on those
arguments averages (its targets that count), from the arguments alone: a caller splitting a
batch (training/parallel.py) weighs the slices' losses by it. A model keeps no count of its own.

The same class is the one place the tools (lens, viz, limits, beam search, diagnostics, the
CLI) learn a model's parts. Every family answers on its own class, so a subclass
(`class MyGPT(GPT)`) is its family for every tool:

    family                      "gpt" | "classifier" | "seq2seq" | "bert" | "sentence_classifier"
    stacks()                    hook-name prefix -> that stack's blocks, in forward order ("" for
                                one stack; "encoder." and "decoder." for seq2seq)
    block_parts(block)          a `BlockParts`: the block's attentions, feed-forward and norms
    final_norm(prefix)          the norm after a stack (None: post-norm stacks end in their own)
    final_norm_kind(prefix)     "layernorm" | "rmsnorm" | None
    unembedding()               a `Head` (the stack it reads, weight (V, C), bias (V,) or None),
                                or None for a model without a vocabulary head
    token_embedding(prefix)     the token table's Embedding (`token_table`: its (V, C) weights)
    positions(prefix)           the module adding positions to the tokens, or None where
                                positions live inside attention (rotary); `position_table`:
                                its (P, C) table or None; `learned_positions`
    causal(prefix)              whether the stack's self-attention is causal
    named_hook_points()         stable name -> HookPoint outside the blocks ("embed", "pos_embed",
                                "ln_final"); inside the blocks the names come from block_parts
    example(ids, tokens, ...)   an `Example`: one input as every tool runs it (the forward's
                                arguments, those of its loss, what the lens explains, the labels
                                of each stack's positions and of the output)
    generates                   True for models with `generate(idx, max_new_tokens, rng=...)`
    param_count(config)         (classmethod) the parameters the constructor builds for `config`
    sizes(config)               (classmethod) a `limits.Sizes`: what memory estimates need
    decodes                     True for encoder-decoder models: src_mask, encode, decode,
                                decode_step, new_caches (scratchformer.inference.beam)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from scratchformer.checks import check_backward_args, check_config_type
from scratchformer.errors import BackwardError, ConfigError, DataError
from scratchformer.limits.estimates import Sizes
from scratchformer.nn import (
    Embedding,
    LayerNorm,
    LearnedPositionalEmbedding,
    NoNorm,
    RMSNorm,
    SinusoidalPositionalEncoding,
    manual_seed,
)
from scratchformer.nn.module import Module, eval_mode
from scratchformer.ops.loss import IGNORE_INDEX, cross_entropy_backward

__all__ = [
    "IGNORE_INDEX",
    "BlockParts",
    "Example",
    "Head",
    "Model",
    "Sizes",
    "attention_params",
    "block_params",
    "feedforward_params",
    "linear_params",
    "norm_params",
]


@dataclass(frozen=True)
class BlockParts:
    """One block's parts. attentions: hook-name part ("attn", "cross_attn") -> MultiHeadAttention,
    in forward order; feedforward: the FeedForward ("mlp" in hook names); norms: "attn_norm",
    ("cross_norm",) "ff_norm" -> the norm before each sub-layer (pre-norm) or after its residual
    sum (post-norm); norm_first: which of the two."""

    attentions: dict
    feedforward: Module | None  # None: an attention-only block (no feed-forward, no "ff_norm")
    norms: dict
    norm_first: bool


@dataclass(frozen=True)
class Example:
    """One input as the CLI, report.html, the lens and the training diagnostics run it, from
    `Model.example`: every array a batch of one.

    inputs: the forward's arguments without targets, as the figures draw them: (ids,), or a
        seq2seq model's (src, tgt_in) with its whole decoding as tgt_in.
    loss_inputs: the forward's arguments with the targets of one loss (a GPT's next tokens, a
        classifier's `target` class, seq2seq's answer shifted by one), or None (no loss: one
        token, or a model without one).
    explained: the forward's arguments whose output at the last position the lens explains.
    target: the output entry explained and learned where the example fixes it (a classifier's
        class: the one given, else its prediction), else None (the lens takes the prediction).
    tokens: stack prefix -> a label per position of that stack's input in `inputs` (a CLS
        vector's "[CLS]" included).
    positions: a label per position of the explained output (the logit lens's columns), or None
        where the output is one per sequence.
    output_labels: a label per entry of the output's last axis (the vocabulary's tokens, the
        classes), or None for hidden states.
    answer: the labels of the model's own answer where it decodes one (seq2seq), else None."""

    inputs: tuple
    loss_inputs: tuple | None
    explained: tuple
    target: int | None
    tokens: dict
    positions: list | None
    output_labels: list | None
    answer: list | None = None


def one_sequence(ids, tokens=None) -> tuple[np.ndarray, list[str]]:
    """ids (T,) or (1, T) -> ((T,) int64 ids, a label per id: `tokens`, or the ids as text)."""
    ids = np.asarray(ids, dtype=np.int64).reshape(-1)
    if ids.size == 0:
        raise DataError("an example needs at least one token")
    tokens = [str(i) for i in ids] if tokens is None else list(tokens)
    if len(tokens) != len(ids):
        raise DataError(f"got {len(tokens)} token labels for {len(ids)} ids: give one label per id")
    return ids, tokens


def label_list(labels, size: int) -> list[str]:
    """`labels` (one per entry), or the entries' numbers as text."""
    return [str(i) for i in range(size)] if labels is None else list(labels)


@dataclass(frozen=True)
class Head:
    """How a stack's last residual becomes vocabulary logits: logits = final_norm(x) @ weight.T
    (+ bias). prefix: the stack's hook-name prefix; weight (V, C); bias (V,) or None."""

    prefix: str
    weight: np.ndarray
    bias: np.ndarray | None


def nn_block_parts(block) -> BlockParts:
    """The parts of scratchformer.nn's EncoderBlock and DecoderBlock (the blocks every family
    here builds)."""
    attentions = {"attn": block.self_attn}
    norms = {"attn_norm": block.attn_norm}
    if getattr(block, "cross_attention", False):
        attentions["cross_attn"] = block.cross_attn
        norms["cross_norm"] = block.cross_norm
    if block.ff_norm is not None:  # attention-only blocks have no feed-forward
        norms["ff_norm"] = block.ff_norm
    return BlockParts(attentions, block.ff, norms, bool(block.norm_first))


# -- parameter counts of the layers, from the shapes their constructors build (nn/) -----------
def linear_params(n_in: int, n_out: int, bias: bool) -> int:
    """`Linear(n_in, n_out, bias)`: weight (n_out, n_in), bias (n_out,)."""
    return n_out * n_in + (n_out if bias else 0)


def norm_params(normalization: str, n_embd: int, bias: bool) -> int:
    """`make_norm`: LayerNorm weight (+ bias), RMSNorm weight only, "none" nothing."""
    if normalization == "none":
        return 0
    return n_embd + (n_embd if bias and normalization == "layernorm" else 0)


def attention_params(n_embd: int, n_head: int, bias: bool, n_kv_head: int | None = None) -> int:
    """`MultiHeadAttention`: [W_q; W_k; W_v] ((n_head + 2 n_kv_head) head_size, n_embd) (+ bias),
    out_proj (n_embd, n_embd) (+ bias)."""
    rows = (n_head + 2 * (n_head if n_kv_head is None else n_kv_head)) * (n_embd // n_head)
    return rows * n_embd + (rows if bias else 0) + linear_params(n_embd, n_embd, bias)


def feedforward_params(n_embd: int, n_inner: int, gated: bool, bias: bool) -> int:
    """`FeedForward`: fc1 n_embd -> n_inner (2 n_inner when gated: [gate; up]), fc2 n_inner -> n_embd."""
    return linear_params(n_embd, (2 if gated else 1) * n_inner, bias) + linear_params(n_inner, n_embd, bias)


def block_params(
    n_embd: int,
    n_head: int,
    n_inner: int,
    gated: bool = False,
    bias: bool = True,
    normalization: str = "layernorm",
    n_kv_head: int | None = None,
    cross_attention: bool = False,
    feedforward: bool = True,
) -> int:
    """`EncoderBlock` / `DecoderBlock`: self-attention, (cross-attention,) feed-forward and a
    norm before (or after) each; feedforward=False: an attention-only block (neither the
    feed-forward nor its norm)."""
    n = attention_params(n_embd, n_head, bias, n_kv_head)
    if feedforward:
        n += feedforward_params(n_embd, n_inner, gated, bias) + norm_params(normalization, n_embd, bias)
    if cross_attention:
        n += attention_params(n_embd, n_head, bias) + norm_params(normalization, n_embd, bias)
    return n + norm_params(normalization, n_embd, bias)


class Model(Module):
    """Base class of the model families: `backward(dloss=1.0, grad_output=None)` (see above)."""

    _targets_name: str | None = "targets"  # how forward calls its targets (None: it has no loss)
    family: ClassVar[str] = ""  # "gpt" | "classifier" | "seq2seq" | "bert" | "sentence_classifier"
    config_class: ClassVar[
        type
    ]  # the config a constructor takes (GPTConfig, ...): its from_dict reads config.json
    decodes: ClassVar[bool] = False  # the encoder-decoder decoding API (inference/beam.py)
    generates: ClassVar[bool] = False  # generate(idx, max_new_tokens, rng=...): a language model samples

    def _take_config(self, config, seed: int | None):
        """What every family's constructor does first: `config` must be its `config_class`
        (checked again: a field may have been set since it was built); with a `seed`,
        `scratchformer.nn.manual_seed(seed)` runs first, so the initial weights (and dropout
        generators) are a deterministic function of the seed. Returns the config."""
        check_config_type(type(self).__name__, config, self.config_class)
        config.validate()
        if seed is not None:
            manual_seed(seed)
        self.config = config
        return config

    # -- the parts every tool asks for (see the module docstring) ------------------------------
    def stacks(self) -> dict[str, list]:
        """Hook-name prefix -> that stack's blocks, in forward order."""
        raise NotImplementedError(f"{type(self).__name__} does not say its stacks of blocks")

    def main_prefix(self) -> str:
        """The prefix of the stack the figures draw first (seq2seq: the encoder)."""
        return next(iter(self.stacks()))

    def block_parts(self, block) -> BlockParts:
        """One block's attentions, feed-forward and norms (the nn blocks' by default)."""
        return nn_block_parts(block)

    def final_norm(self, prefix: str = ""):
        """The norm applied after the stack `prefix`, or None."""
        return None

    def final_norm_kind(self, prefix: str = "") -> str | None:
        """ "layernorm", "rmsnorm" or None (no final norm)."""
        return norm_kind(self.final_norm(prefix))

    def unembedding(self) -> Head | None:
        """The vocabulary head, or None (a classifier's head reads a pooled vector)."""
        return None

    def token_embedding(self, prefix: str = ""):
        """The token-embedding table (an Embedding) of stack `prefix`."""
        raise NotImplementedError(f"{type(self).__name__} does not say its token embedding")

    def token_table(self, prefix: str = "") -> np.ndarray:
        """(V, C) token embeddings."""
        return self.token_embedding(prefix or self.main_prefix()).weight.data

    def positions(self, prefix: str = ""):
        """The module adding positions to the token embeddings, or None when positions live
        inside attention (rotary)."""
        return None

    def position_table(self, prefix: str = "") -> np.ndarray | None:
        """(P, C): what is added to the token embedding at each position; None when nothing is."""
        pos = self.positions(prefix or self.main_prefix())
        if pos is None:
            return None
        if isinstance(pos, (LearnedPositionalEmbedding, Embedding)):
            return pos.weight.data
        if isinstance(pos, SinusoidalPositionalEncoding):
            return pos.pe
        raise ConfigError(f"{type(self).__name__}: positions of type {type(pos).__name__} have no table")

    def learned_positions(self, prefix: str = "") -> bool:
        return isinstance(
            self.positions(prefix or self.main_prefix()), (LearnedPositionalEmbedding, Embedding)
        )

    def causal(self, prefix: str = "") -> bool:
        """Whether the self-attention of stack `prefix` is causal."""
        return False

    def named_hook_points(self) -> dict:
        """Stable name -> HookPoint for the hook points outside the blocks."""
        return {}

    def example(
        self,
        ids,
        tokens=None,
        vocab_labels=None,
        target=None,
        *,
        tgt_ids=None,
        tgt_tokens=None,
        class_names=None,
    ) -> Example:
        """One input as every tool runs it (see `Example`). ids (T,) or (1, T): the input (seq2seq:
        the source); tokens: a label per id (default: the ids); vocab_labels: a label per
        vocabulary id; target: the output entry to explain and learn (a classifier's class; None:
        the model's prediction); tgt_ids, tgt_tokens: a decoding model's decoder input and its
        labels (None: its start token and its own greedy answer); class_names: a classifier's
        labels of its classes. Each family answers in `_example` (eval-mode forwards only)."""
        ids, tokens = one_sequence(ids, tokens)
        given = dict(tgt_ids=tgt_ids, tgt_tokens=tgt_tokens, class_names=class_names)
        return self._example(ids, tokens, vocab_labels, target, **given)

    def _example(self, ids: np.ndarray, tokens: list, vocab_labels, target, **given) -> Example:
        """`example` on checked ids (T,) and their labels; `given`: the keywords a family reads."""
        raise NotImplementedError(f"{type(self).__name__} does not give an example")

    def _predicted(self, inputs: tuple) -> int:
        """The output entry the model predicts at the last position of its forward on `inputs`."""
        with eval_mode(self):
            out = self(*inputs)
        logits = out[0] if isinstance(out, tuple) else out
        return int((logits[0, -1] if logits.ndim == 3 else logits[0]).argmax())

    @classmethod
    def param_count(cls, config) -> int:
        """Parameters a model of `config` holds, from the shapes its constructor builds."""
        raise NotImplementedError(f"{cls.__name__} does not count its parameters")

    @classmethod
    def sizes(cls, config) -> Sizes:
        """What the memory estimates of scratchformer.limits.estimates need, before building anything."""
        raise NotImplementedError(f"{cls.__name__} does not give its sizes")

    def backward(self, dloss: float = 1.0, grad_output: np.ndarray | None = None) -> None:  # pragma: no cover
        raise NotImplementedError(f"{type(self).__name__} does not implement backward")

    def loss_terms(self, *args, **kwargs) -> int:
        """How many terms the loss of `self(*args, **kwargs)` averages: its targets that count
        (not IGNORE_INDEX), 0 without targets. Each family takes its forward's arguments."""
        raise NotImplementedError(f"{type(self).__name__} has no loss")

    @staticmethod
    def _counted(targets, ignored=()) -> int:
        """The entries of `targets` (None: none) that are neither IGNORE_INDEX nor in `ignored`."""
        if targets is None:
            return 0
        t = np.asarray(targets)
        counted = t != IGNORE_INDEX
        for value in ignored:
            counted &= t != value
        return int(np.count_nonzero(counted))

    def _start_backward(self, dloss, grad_output) -> tuple[dict, np.ndarray]:
        """Where backward starts: (the cache of the last forward, consumed, and the gradient of
        dloss * its loss, or dloss * grad_output). The arguments are checked before the cache is
        consumed, so a refused call leaves the forward for a correct one. The cache holds "loss"
        (cross_entropy's cache or None) and "out_shape" (the output's shape)."""
        check_backward_args(
            dloss, grad_output, (getattr(self, "_cache", None) or {}).get("out_shape"), "grad_output"
        )
        cache, dloss = self._pop_cache(), float(dloss)
        if grad_output is not None:
            grad = np.asarray(grad_output).astype(self.dtype, copy=False)
            return cache, (grad * dloss if dloss != 1.0 else grad)
        if cache.get("loss") is None and self._targets_name is None:
            raise BackwardError(
                f"{type(self).__name__}.backward() needs grad_output, the gradient of its output "
                "(it has no loss of its own)"
            )
        if cache.get("loss") is None:
            raise BackwardError(
                f"{type(self).__name__}.backward() needs a forward with {self._targets_name} (or "
                "pass grad_output, the gradient of the output)"
            )
        # astype: a loss computed in a wider dtype (GPTConfig.loss_dtype) hands back the model's
        return cache, cross_entropy_backward(cache["loss"], dloss).astype(self.dtype, copy=False)


def norm_kind(norm) -> str | None:
    """ "layernorm", "rmsnorm" or None (no norm, or a NoNorm: normalization="none")."""
    if norm is None or isinstance(norm, NoNorm):
        return None
    if isinstance(norm, RMSNorm):
        return "rmsnorm"
    if isinstance(norm, LayerNorm):
        return "layernorm"
    raise ConfigError(f"unknown final norm {type(norm).__name__}")
