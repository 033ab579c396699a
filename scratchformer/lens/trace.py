"""What the figures and the training diagnostics read from a model, asked through its contract
(models/base.py): no file in `scratchformer.viz` or `scratchformer.training` knows a family's
attribute names, and a subclass is drawn as its family. It sits below `training` (whose
diagnostics run `trace`) and `viz` (which re-exports it as `scratchformer.viz.trace`).

    kind(model)               -> "gpt" | "classifier" | "seq2seq" | "bert" (the model's `family`)
    blocks(model)             -> the main stack's blocks (seq2seq: the encoder)
    token_table(model)        -> (V, C) token-embedding matrix
    position_table(model)     -> (P, C) positions added to the tokens (learned or sinusoidal;
                                 None where positions live inside attention: rotary)
    embed(model, ids)         -> (1, T, C) input of the first block
    config_dict(model)        -> the model's config as a plain dict
    attention_maps(model, ...) -> {"encoder"|"decoder"|"cross": (L, H, Tq, Tk)}
    class_probabilities(model, ids) -> a classifier's (n_classes,) probabilities
    head_qkv(model, ids, layer, head) -> one head's q, k, v
    trace(model, ids)         -> a `Trace` of the residual stream, run block by block

Inside a block, `trace` and `head_qkv` use its `BlockParts` (the attentions, the feed-forward
with `fc1`, `activate`, `fc2`, and the norms) and each attention's `self_qkv`, `n_head`,
`n_kv_head` and `attn_weights` after a forward.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, is_dataclass

import numpy as np

from scratchformer.errors import ConfigError
from scratchformer.models.base import Model
from scratchformer.nn import eval_mode
from scratchformer.ops import softmax_forward

KINDS = ("gpt", "classifier", "seq2seq", "bert")


# -- accessors: each asks the model's contract ------------------------------------------------
def kind(model) -> str:
    """Which of the four model families `model` is: its class's `family` (a subclass is its
    family; ConfigError for anything else)."""
    name = model.family if isinstance(model, Model) else None
    if name not in KINDS:
        raise ConfigError(
            f"viz draws GPT, TransformerClassifier, Seq2SeqTransformer or BertEncoder "
            f"models (or subclasses), got {type(model).__name__}"
        )
    return name


def blocks(model) -> list:
    """The blocks of the main stack (seq2seq: the encoder; its decoder: `decoder_blocks`)."""
    kind(model)
    return model.stacks()[model.main_prefix()]


def decoder_blocks(model) -> list:
    kind(model)
    return model.stacks().get("decoder.", [])


def is_causal(model) -> bool:
    kind(model)
    return model.causal(model.main_prefix())


def head_count(attn) -> int:
    """Number of heads of a MultiHeadAttention."""
    return attn.n_head


def final_norm(model):
    """The norm after the main stack, or None (post-norm stacks end in their own norm)."""
    kind(model)
    return model.final_norm(model.main_prefix())


def token_table(model) -> np.ndarray:
    """(V, C) token embeddings (seq2seq: the source table)."""
    kind(model)
    return model.token_table()


def position_table(model) -> np.ndarray | None:
    """(P, C) what is added to the token embedding at each position (learned or sinusoidal);
    None when nothing is (rotary positions)."""
    kind(model)
    return model.position_table()


def learned_positions(model) -> bool:
    kind(model)
    return model.learned_positions()


def embed(model, ids: np.ndarray) -> np.ndarray:
    """ids (1, T) -> (1, T', C), the first block's input (T' = T + 1 with a classifier CLS)."""
    kind(model)
    return model.stack_input(ids)


def config_dict(model) -> dict:
    c = model.config
    return asdict(c) if is_dataclass(c) else dict(vars(c))


# -- running the model ------------------------------------------------------------------------
def attention_maps(model, ids, tgt_ids=None) -> dict[str, np.ndarray]:
    """Run the model once (eval mode) and collect each attention module's `attn_weights`.

    ids: (T,) or (1, T) input ids (seq2seq: the source); tgt_ids: the seq2seq decoder input.
    Returns {"encoder": (L, H, T, T)} ("decoder" and "cross" too for seq2seq), batch row 0."""
    ids = np.asarray(ids).reshape(1, -1)
    k = kind(model)

    with eval_mode(model):
        if k == "seq2seq":
            model(ids, np.asarray(tgt_ids).reshape(1, -1))
        else:
            model(ids)

    def stack(bs, name="attn"):
        return np.stack([model.block_parts(b).attentions[name].attn_weights[0] for b in bs])

    maps = {"encoder": stack(blocks(model))}
    if k == "seq2seq":
        maps["decoder"] = stack(decoder_blocks(model))
        maps["cross"] = stack(decoder_blocks(model), "cross_attn")
    return maps


def class_probabilities(model, ids) -> np.ndarray:
    """A classifier's softmax over classes for one input, (n_classes,)."""
    with eval_mode(model):
        logits, _ = model(np.asarray(ids).reshape(1, -1))
    return softmax_forward(np.asarray(logits, np.float64))[0]


def head_qkv(model, ids, layer: int = 0, head: int = 0, traced=None):
    """q, k, v (T, d_head) of one head of the main stack's `layer`, on that block's own input:
    the attention's own projection, so q and k are rotated when the model has rotary positions
    (the scores q k^T / sqrt(d_head) are then the ones the model softmaxes). traced: the
    caller's `trace(model, ids)`, when it has one (the stack is then not run again)."""
    t = trace(model, ids) if traced is None else traced
    parts = model.block_parts(blocks(model)[layer])
    x = t.residual[layer]
    h = parts.norms["attn_norm"](x) if parts.norm_first else x  # what the attention sees
    attn = parts.attentions["attn"]
    with eval_mode(model):
        q, k, v = attn.self_qkv(h)  # q (1, H, T, d_head); k, v (1, n_kv_head, T, d_head)
    kv_head = head // (head_count(attn) // attn.n_kv_head)  # grouped-query: the group's shared head
    return q[0, head], k[0, kv_head], v[0, kv_head]


def head_score_bias(model, ids, layer: int = 0, head: int = 0) -> np.ndarray | None:
    """(T, T): what the attention of `layer` adds to the scaled scores of `head` (ALiBi's distance
    penalty), or None when it adds nothing. The attention answers (`score_bias`), so a figure
    that recomputes a head from `head_qkv` shows the weights the model softmaxes."""
    attn = model.block_parts(blocks(model)[layer]).attentions["attn"]
    T = np.asarray(ids).reshape(-1).shape[0]
    bias = attn.score_bias(T, T, np.float64) if hasattr(attn, "score_bias") else None
    return None if bias is None else bias[head]


@dataclass
class Trace:
    """The main stack's internals for one input, from `trace`. Shapes for T tokens, width C.

    residual: n_layer + 1 arrays (1, T, C): the stream before block 0 and after each block.
    attn_update / ff_update: n_layer arrays (1, T, C): what each sub-layer adds to the stream.
    ff_pre / ff_post: n_layer arrays (1, T, n_inner): feed-forward hidden before / after the
        activation (with SwiGLU, ff_pre is (1, T, 2 n_inner): [gate | up]); attention-only blocks
        have none (these lists are then shorter, and their ff_update is zero).
        layernorms: (name, input, output) for every LayerNorm or RMSNorm that ran."""

    residual: list = field(default_factory=list)
    attn_update: list = field(default_factory=list)
    ff_update: list = field(default_factory=list)
    ff_pre: list = field(default_factory=list)
    ff_post: list = field(default_factory=list)
    layernorms: list = field(default_factory=list)
    output: np.ndarray | None = None


def trace(model, ids) -> Trace:
    """Run the main stack block by block (eval mode) through its public sub-modules and keep
    the intermediates. It repeats `residual_forward` (nn/blocks.py) with the sub-layers split
    open; `output` equals the model's own hidden state (a test checks it)."""
    ids = np.asarray(ids).reshape(1, -1)
    k = kind(model)
    t = Trace()

    def norm(ln, x, name):  # a LayerNorm that remembers its input and output
        y = ln(x)
        t.layernorms.append((name, x, y))
        return y

    with eval_mode(model):
        x = embed(model, ids)
        mask = model.src_mask(ids) if k == "seq2seq" else None
        t.residual.append(x)
        for i, block in enumerate(blocks(model)):
            b = model.block_parts(block)
            attn_norm, ff = b.norms["attn_norm"], b.feedforward
            h = norm(attn_norm, x, f"{i}.attn_norm") if b.norm_first else x
            a = b.attentions["attn"](h, mask=mask, causal=is_causal(model))
            x = x + a if b.norm_first else norm(attn_norm, x + a, f"{i}.attn_norm")
            t.attn_update.append(a)
            if ff is None:  # an attention-only block: it adds nothing more (no ff_pre / ff_post)
                t.ff_update.append(np.zeros_like(a))
                t.residual.append(x)
                continue
            ff_norm = b.norms["ff_norm"]
            h = norm(ff_norm, x, f"{i}.ff_norm") if b.norm_first else x
            pre = ff.fc1(h)  # (1, T, n_inner)
            post = ff.activate(pre)  # GELU, ReLU, SwiGLU...
            f = ff.fc2(post)
            x = x + f if b.norm_first else norm(ff_norm, x + f, f"{i}.ff_norm")
            t.ff_update.append(f)
            t.ff_pre.append(pre)
            t.ff_post.append(post)
            t.residual.append(x)
        ln = final_norm(model)
        t.output = norm(ln, x, "final") if ln is not None else x
    return t
