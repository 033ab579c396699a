"""What the figures and the training diagnostics read of a model: one forward of the model
itself, read through its hook points (`lens.hooks.run_with_cache`), and the accessors that ask
its contract (models/base.py). Nothing here runs a block or knows a family's attribute names,
so a new block option shows in every figure its hook points show. It sits below `training`
(whose diagnostics read `attention_maps`) and `viz` (which re-exports it as
`scratchformer.viz.trace`).

    blocks(model)               -> the main stack's blocks (seq2seq: the encoder)
    token_table(model)          -> (V, C) token-embedding matrix
    position_table(model)       -> (P, C) positions added to the tokens (learned or sinusoidal;
                                   None where positions live inside attention: rotary, ALiBi)
    norm_kinds(model)           -> {"layernorm", "rmsnorm", None}: the kinds of its norms
    config_dict(model)          -> the model's config as a plain dict
    attention_maps(model, *inputs) -> {"encoder"|"decoder"|"cross": (L, H, Tq, Tk)}
    map_layout(model)           -> where each of those maps comes from (its stack and attention)
    head_score_bias(model, ids) -> (T, T) the bias an attention adds to its scores (ALiBi's), or None
    class_probabilities(model, ids) -> a classifier's (n_classes,) probabilities
    trace(model, *inputs)       -> a `Trace`: the main stack's residual stream, sub-layers, norms
                                   and heads, from one hooked forward

`inputs` are the forward's arguments without targets, each (T,) or (1, T): `Model.example`'s
`inputs` (a seq2seq model needs its decoder input too).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, is_dataclass

import numpy as np

from scratchformer.lens.hooks import run_with_cache
from scratchformer.lens.parts import stacks
from scratchformer.models.base import Model, norm_kind
from scratchformer.nn import eval_mode
from scratchformer.ops import softmax_forward


# -- accessors: each asks the model's contract ------------------------------------------------
def _model(model) -> Model:
    """`model`, or ConfigError for anything that is not a scratchformer model."""
    stacks(model)
    return model


def blocks(model) -> list:
    """The blocks of the main stack (seq2seq: the encoder)."""
    return stacks(model)[model.main_prefix()]


def is_causal(model) -> bool:
    return _model(model).causal(model.main_prefix())


def token_table(model) -> np.ndarray:
    """(V, C) token embeddings (seq2seq: the source table)."""
    return _model(model).token_table()


def position_table(model) -> np.ndarray | None:
    """(P, C) what is added to the token embedding at each position (learned or sinusoidal);
    None when nothing is (rotary positions)."""
    return _model(model).position_table()


def learned_positions(model) -> bool:
    return _model(model).learned_positions()


def norm_kinds(model) -> set:
    """The kinds ("layernorm", "rmsnorm", None: no norm) of the main stack's norms and its final norm."""
    p = _model(model).main_prefix()
    norms = [n for b in blocks(model) for n in model.block_parts(b).norms.values()]
    return {norm_kind(n) for n in norms} | (
        {model.final_norm_kind(p)} if model.final_norm(p) is not None else set()
    )


def config_dict(model) -> dict:
    c = model.config
    return asdict(c) if is_dataclass(c) else dict(vars(c))


def class_probabilities(model, ids) -> np.ndarray:
    """A classifier's softmax over classes for one input, (n_classes,)."""
    with eval_mode(model):
        logits, _ = model(np.asarray(ids).reshape(1, -1))
    return softmax_forward(np.asarray(logits, np.float64))[0]


def head_score_bias(model, ids, layer: int = 0, head: int = 0) -> np.ndarray | None:
    """(T, T) for the T tokens `ids`: what the main stack's self-attention in `layer` adds to
    the scaled scores of `head` (ALiBi's distance penalty), or None when it adds nothing: the
    attention's own answer (`score_bias`), for a figure that computes a head from its q and k."""
    attn = model.block_parts(blocks(model)[layer]).attentions["attn"]
    T = np.asarray(ids).reshape(-1).shape[0]
    bias = attn.score_bias(T, T, np.float64)
    return None if bias is None else bias[head]


# -- one hooked forward -------------------------------------------------------------------------
def _batch(inputs) -> tuple:
    return tuple(np.asarray(x).reshape(1, -1) if np.ndim(x) == 1 else np.asarray(x) for x in inputs)


@dataclass(frozen=True)
class MapLayout:
    """Where one of `attention_maps`'s maps comes from: stack (hook-name prefix of the stack its
    queries are in), attention ("attn" for self-attention, else its name), names (the hook-name
    prefixes of its attentions, one per block in forward order)."""

    stack: str
    attention: str
    names: list


def map_layout(model) -> dict[str, MapLayout]:
    """Map name -> its `MapLayout`: the main stack's self-attention is "encoder"; another stack's
    is the stack's name ("decoder"); any other attention its own name ("cross" for cross_attn)."""
    out: dict[str, MapLayout] = {}
    for prefix, stack in stacks(model).items():
        for i, block in enumerate(stack):
            for name in model.block_parts(block).attentions:
                if name == "attn":
                    key = "encoder" if prefix == model.main_prefix() else prefix.rstrip(".")
                else:
                    key = name.removesuffix("_attn")
                out.setdefault(key, MapLayout(prefix, name, [])).names.append(f"{prefix}blocks.{i}.{name}")
    return out


def _maps(model, cache: dict) -> dict[str, np.ndarray]:
    return {
        key: np.stack([cache[a + ".pattern"][0] for a in layout.names])
        for key, layout in map_layout(model).items()
    }


def attention_maps(model, *inputs) -> dict[str, np.ndarray]:
    """Every attention's weights in one eval-mode forward on `inputs` (read through the hooks):
    {"encoder": (L, H, T, T)} ("decoder" and "cross" too for seq2seq), batch row 0."""
    names = [a + ".pattern" for layout in map_layout(model).values() for a in layout.names]
    _, cache = run_with_cache(model, *_batch(inputs), names=names)
    return _maps(model, cache)


@dataclass
class Trace:
    """The main stack's insides for one input, from `trace`. Shapes for T tokens, width C.

    residual: n_layer + 1 arrays (1, T, C): the stream before block 0 and after each block.
    attn_update / ff_update: n_layer arrays (1, T, C): what each sub-layer outputs (the update
        a pre-norm block adds to the stream).
    ff_pre / ff_post: n_layer arrays (1, T, n_inner): feed-forward hidden before / after the
        activation (with SwiGLU, ff_pre is (1, T, 2 n_inner): [gate | up]); attention-only blocks
        have none (these lists are then shorter, and their ff_update is zero).
    layernorms: (name, input, output) for every norm that ran ("0.attn_norm", ..., "final").
    output: the stack's output, after its final norm.
    cache: every activation of the forward, by hook name (lens/hooks.py); prefix: the main
        stack's hook-name prefix."""

    residual: list = field(default_factory=list)
    attn_update: list = field(default_factory=list)
    ff_update: list = field(default_factory=list)
    ff_pre: list = field(default_factory=list)
    ff_post: list = field(default_factory=list)
    layernorms: list = field(default_factory=list)
    output: np.ndarray | None = None
    cache: dict = field(default_factory=dict)
    prefix: str = ""
    maps: dict = field(default_factory=dict)

    def head(self, layer: int = 0, head: int = 0) -> dict[str, np.ndarray]:
        """One head of the main stack's self-attention in `layer`, as the forward ran it: q, k, v
        (T, head_size), rotated where the positions are rotary (k and v: the key/value head the
        query head reads under grouped-query attention); scores (Tq, Tk), q k^T / sqrt(d) plus
        the attention's own bias (ALiBi's), -inf at hidden keys; pattern (Tq, Tk); out (T, head_size)."""
        a = f"{self.prefix}blocks.{layer}.attn."
        q, k = self.cache[a + "q"], self.cache[a + "k"]  # (1, H, T, hs), (1, H_kv, T, hs)
        kv = head // (q.shape[1] // k.shape[1])  # grouped-query attention: the group's shared head
        return {
            "q": q[0, head],
            "k": k[0, kv],
            "v": self.cache[a + "v"][0, kv],
            "scores": self.cache[a + "scores"][0, head],
            "pattern": self.cache[a + "pattern"][0, head],
            "out": self.cache[a + "head_out"][0, head],
        }


def trace(model, *inputs) -> Trace:
    """The main stack's insides (and every attention's weights, `Trace.maps`) from one eval-mode
    forward of the model on `inputs`, read through its hook points."""
    p = _model(model).main_prefix()
    _, cache = run_with_cache(model, *_batch(inputs))
    t = Trace(cache=cache, prefix=p, maps=_maps(model, cache))
    stack = model.stacks()[p]
    t.residual.append(cache[f"{p}blocks.0.resid_pre"])
    for i, block in enumerate(stack):
        b = f"{p}blocks.{i}."
        t.layernorms += [
            (f"{i}.{n}", cache[b + n + ".in"], cache[b + n + ".out"]) for n in model.block_parts(block).norms
        ]
        t.attn_update.append(cache[b + "attn.out"])
        if b + "mlp.out" in cache:
            t.ff_update.append(cache[b + "mlp.out"])
            t.ff_pre.append(cache[b + "mlp.pre"])
            t.ff_post.append(cache[b + "mlp.post"])
        else:  # an attention-only block: it adds nothing more (no ff_pre / ff_post)
            t.ff_update.append(np.zeros_like(t.attn_update[-1]))
        t.residual.append(cache[b + "resid_post"])
    t.output = t.residual[-1]
    if f"{p}final_norm.in" in cache:
        t.layernorms.append(("final", cache[f"{p}final_norm.in"], cache[f"{p}final_norm.out"]))
        t.output = cache[f"{p}final_norm.out"]
    return t
