"""What the figures read from a model: every model-specific attribute name lives in this file.

The accessors below are the only place that knows how GPT, TransformerClassifier,
Seq2SeqTransformer and BertEncoder name their parts (embedding tables, block lists, final
norms). After a model refactor, adapt them here and nothing else in `scratchformer.viz`.

    kind(model)               -> "gpt" | "classifier" | "seq2seq" | "bert"
    blocks(model)             -> the main stack's blocks (seq2seq: the encoder)
    token_table(model)        -> (V, C) token-embedding matrix
    position_table(model)     -> (P, C) positions added to the tokens (learned or sinusoidal;
                                 None with rotary positions, which enter inside attention)
    embed(model, ids)         -> (1, T, C) input of the first block
    config_dict(model)        -> the model's config as a plain dict
    attention_maps(model, ...) -> {"encoder"|"decoder"|"cross": (L, H, Tq, Tk)}
    class_probabilities(model, ids) -> a classifier's (n_classes,) probabilities
    head_qkv(model, ids, layer, head) -> one head's q, k, v
    trace(model, ids)         -> a `Trace` of the residual stream, run block by block

Inside a block, `trace` and `head_qkv` use the names of nn/blocks.py and nn/attention.py:
norm_first, attn_norm, self_attn (`self_qkv`, `head_count`), cross_attn, ff_norm,
ff (fc1, fc2, `activate`), and each attention's `attn_weights` after a forward.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, is_dataclass

import numpy as np

from scratchformer.errors import ConfigError
from scratchformer.nn import eval_mode
from scratchformer.ops import softmax_forward

KINDS = ("gpt", "classifier", "seq2seq", "bert")


# -- accessors: the model attribute names, in one place -------------------------------------
def kind(model) -> str:
    """Which of the four model families `model` is, by type (a subclass is its family; ConfigError
    for anything else)."""
    from scratchformer.interop.bert import BertEncoder
    from scratchformer.models import GPT, Seq2SeqTransformer, TransformerClassifier

    families = ((GPT, "gpt"), (TransformerClassifier, "classifier"), (Seq2SeqTransformer, "seq2seq"),
                (BertEncoder, "bert"))
    for family, name in families:
        if isinstance(model, family):
            return name
    raise ConfigError(f"viz draws GPT, TransformerClassifier, Seq2SeqTransformer or BertEncoder "
                      f"models (or subclasses), got {type(model).__name__}")


def blocks(model) -> list:
    """The blocks of the main stack (seq2seq: the encoder; its decoder: `decoder_blocks`)."""
    return {"gpt": lambda m: m.h, "classifier": lambda m: m.blocks, "seq2seq": lambda m: m.encoder,
            "bert": lambda m: m.layers}[kind(model)](model)


def decoder_blocks(model) -> list:
    return model.decoder if kind(model) == "seq2seq" else []


def is_causal(model) -> bool:
    return kind(model) == "gpt"


def head_count(attn) -> int:
    """Number of heads of a MultiHeadAttention."""
    return attn.n_head


def final_norm(model):
    """The LayerNorm after the main stack, or None (post-norm stacks end in their own norm)."""
    return {"gpt": lambda m: m.ln_f, "classifier": lambda m: getattr(m, "ln_f", None),
            "seq2seq": lambda m: getattr(m, "enc_norm", None), "bert": lambda m: None}[kind(model)](model)


def token_table(model) -> np.ndarray:
    """(V, C) token embeddings (seq2seq: the source table)."""
    return {"gpt": lambda m: m.wte, "classifier": lambda m: m.tok_emb, "seq2seq": lambda m: m.src_emb,
            "bert": lambda m: m.word_embeddings}[kind(model)](model).weight.data


def _positions(model):
    """The module that adds positions to the token embeddings (learned or sinusoidal), or None
    (a GPT with rotary positions: they enter inside each self-attention)."""
    return {"gpt": lambda m: m.wpe, "classifier": lambda m: m.pos, "seq2seq": lambda m: m.src_pos,
            "bert": lambda m: m.position_embeddings}[kind(model)](model)


def position_table(model) -> np.ndarray | None:
    """(P, C) what is added to the token embedding at each position (learned or sinusoidal);
    None when nothing is (rotary positions)."""
    pos = _positions(model)
    if pos is None:
        return None
    return pos.weight.data if learned_positions(model) else pos.pe


def learned_positions(model) -> bool:
    return hasattr(_positions(model), "weight")


def embed(model, ids: np.ndarray) -> np.ndarray:
    """ids (1, T) -> (1, T', C), the first block's input (T' = T + 1 with a classifier CLS)."""
    k = kind(model)
    if k == "gpt":
        x = model.wte(ids)
        return x if model.wpe is None else model.wpe(x)
    if k == "bert":
        return model.embed(ids)
    if k == "seq2seq":
        return model.src_pos(model.src_emb(ids) * model.emb_scale)
    h = model.tok_emb(ids)
    if model.config.pooling == "cls":
        h = np.concatenate([np.broadcast_to(model.cls_token.data, (1, 1, h.shape[-1])), h], axis=1)
    return model.pos(h)


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
    stack = lambda mods: np.stack([m.attn_weights[0] for m in mods])  # noqa: E731
    maps = {"encoder": stack([b.self_attn for b in blocks(model)])}
    if k == "seq2seq":
        maps["decoder"] = stack([b.self_attn for b in decoder_blocks(model)])
        maps["cross"] = stack([b.cross_attn for b in decoder_blocks(model)])
    return maps


def class_probabilities(model, ids) -> np.ndarray:
    """A classifier's softmax over classes for one input, (n_classes,)."""
    with eval_mode(model):
        logits, _ = model(np.asarray(ids).reshape(1, -1))
    return softmax_forward(np.asarray(logits, np.float64))[0]


def head_qkv(model, ids, layer: int = 0, head: int = 0):
    """q, k, v (T, d_head) of one head of the main stack's `layer`, on that block's own input:
    the attention's own projection, so q and k are rotated when the model has rotary positions
    (the scores q k^T / sqrt(d_head) are then the ones the model softmaxes)."""
    t = trace(model, ids)
    block = blocks(model)[layer]
    x = t.residual[layer]
    h = block.attn_norm(x) if block.norm_first else x  # what the attention sees
    attn = block.self_attn
    with eval_mode(model):
        q, k, v = attn.self_qkv(h)  # q (1, H, T, d_head); k, v (1, n_kv_head, T, d_head)
    kv_head = head // (head_count(attn) // attn.n_kv_head)  # grouped-query: the group's shared head
    return q[0, head], k[0, kv_head], v[0, kv_head]


@dataclass
class Trace:
    """The main stack's internals for one input, from `trace`. Shapes for T tokens, width C.

    residual: n_layer + 1 arrays (1, T, C): the stream before block 0 and after each block.
    attn_update / ff_update: n_layer arrays (1, T, C): what each sub-layer adds to the stream.
    ff_pre / ff_post: n_layer arrays (1, T, n_inner): feed-forward hidden before / after the
        activation (with SwiGLU, ff_pre is (1, T, 2 n_inner): [gate | up]).
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
        for i, b in enumerate(blocks(model)):
            h = norm(b.attn_norm, x, f"{i}.attn_norm") if b.norm_first else x
            a = b.self_attn(h, mask=mask, causal=is_causal(model))
            x = x + a if b.norm_first else norm(b.attn_norm, x + a, f"{i}.attn_norm")
            h = norm(b.ff_norm, x, f"{i}.ff_norm") if b.norm_first else x
            pre = b.ff.fc1(h)                 # (1, T, n_inner)
            post = b.ff.activate(pre)         # GELU, ReLU, SwiGLU...
            f = b.ff.fc2(post)
            x = x + f if b.norm_first else norm(b.ff_norm, x + f, f"{i}.ff_norm")
            t.attn_update.append(a)
            t.ff_update.append(f)
            t.ff_pre.append(pre)
            t.ff_post.append(post)
            t.residual.append(x)
        ln = final_norm(model)
        t.output = norm(ln, x, "final") if ln is not None else x
    return t
