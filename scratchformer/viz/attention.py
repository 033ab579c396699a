"""Attention figures: every head as a grid, seq2seq's three attentions, a classifier's
prediction beside its heads, causal against bidirectional, and one head step by step.

Each function takes arrays (see `scratchformer.viz.trace` to get them from a model) and
returns a matplotlib Figure; `path=` also saves it as a PNG.
"""

from __future__ import annotations

import math

import numpy as np

from scratchformer.errors import ShapeError
from scratchformer.ops import attention_forward, causal_mask, softmax_forward
from scratchformer.viz._plot import finish, heatmap, new_figure

__all__ = ["attention_grid", "seq2seq_attention", "classifier_attention", "causal_vs_bidirectional",
           "attention_steps"]


def _check_maps(weights, name="weights") -> np.ndarray:
    weights = np.asarray(weights)
    if weights.ndim != 4:
        raise ShapeError(f"{name} must be (n_layer, n_head, Tq, Tk), got shape {weights.shape}")
    return weights


ANNOTATE_MAX = 12  # write the values in the cells when both sides have at most this many tokens


def _cell(ext: int, annotate: bool = False) -> float:
    """Inches per heatmap panel: larger for longer inputs (and room for written values)."""
    return min(4.0, max(1.8, (0.3 if annotate else 0.16) * ext))


def attention_grid(weights, tokens, query_tokens=None, title: str = "attention", path=None):
    """Every layer (rows) x head (columns). weights: (L, H, Tq, Tk); tokens: Tk key labels;
    query_tokens: Tq labels (default: tokens). Values are written in the cells when T <= 12."""
    weights = _check_maps(weights)
    L, H, Tq, Tk = weights.shape
    query_tokens = tokens if query_tokens is None else query_tokens
    annotate = ANNOTATE_MAX if L * H <= 16 else 0  # 6 x 12 BERT heads: no numbers
    s = _cell(max(Tq, Tk), annotate and max(Tq, Tk) <= annotate)
    fig = new_figure(1.0 + s * H, 0.6 + s * L)
    axes = fig.subplots(L, H, squeeze=False)
    for layer in range(L):
        for head in range(H):
            ax = axes[layer, head]
            # token labels on the outer panels only (left column, bottom row)
            im = heatmap(ax, weights[layer, head], tokens if layer == L - 1 else None,
                         query_tokens if head == 0 else None, annotate_max=annotate)
            if layer < L - 1:
                ax.set_xticks([])
            if head > 0:
                ax.set_yticks([])
            ax.set_title(f"layer {layer} head {head}", fontsize=8)
    fig.colorbar(im, ax=axes, shrink=0.6, label="weight")
    fig.suptitle(f"{title}: rows = queries, columns = keys", fontsize=10)
    return finish(fig, path)


def seq2seq_attention(maps: dict, src_tokens, tgt_tokens, layer: int = -1, path=None):
    """Encoder self-, decoder self- and cross-attention of one layer, one row per kind and one
    column per head. maps: {"encoder", "decoder", "cross"} -> (L, H, Tq, Tk)."""
    rows = [("encoder", src_tokens, src_tokens), ("decoder", tgt_tokens, tgt_tokens),
            ("cross", src_tokens, tgt_tokens)]  # (name, keys, queries)
    sides = {"encoder": "source", "decoder": "target (causal)", "cross": "target reads source"}
    for name, _, _ in rows:
        _check_maps(maps[name], name)
    H = maps["encoder"].shape[1]
    s = _cell(max(len(src_tokens), len(tgt_tokens)), max(len(src_tokens), len(tgt_tokens)) <= ANNOTATE_MAX)
    fig = new_figure(1.0 + s * H, 0.8 + s * 3)
    axes = fig.subplots(3, H, squeeze=False)
    for r, (name, keys, queries) in enumerate(rows):
        w = maps[name][layer]
        for head in range(H):
            heatmap(axes[r, head], w[head], keys, queries)
            axes[r, head].set_title(f"{name} head {head}", fontsize=8)
        axes[r, 0].set_ylabel(sides[name], fontsize=8)
    fig.suptitle(f"seq2seq attention, layer {layer % maps['encoder'].shape[0]}", fontsize=10)
    return finish(fig, path)


def classifier_attention(probs, class_names, weights, tokens, layer: int = -1, path=None):
    """The class probabilities (bars) beside every head of one layer. probs: (n_classes,)."""
    probs = np.asarray(probs, dtype=np.float64).ravel()
    weights = _check_maps(weights)
    H, T = weights.shape[1], weights.shape[-1]
    s = _cell(T, T <= ANNOTATE_MAX)
    fig = new_figure(2.6 + s * H, 0.8 + s)
    axes = fig.subplots(1, H + 1, squeeze=False, width_ratios=[1.4] + [1] * H)[0]
    names = [str(c) for c in class_names]
    axes[0].barh(range(len(probs)), probs, color="tab:blue")
    axes[0].set_yticks(range(len(probs)), names, fontsize=8)
    axes[0].set_xlim(0, 1)
    axes[0].invert_yaxis()
    axes[0].set_title(f"prediction: {names[int(probs.argmax())]}", fontsize=9)
    for head in range(H):
        heatmap(axes[head + 1], weights[layer, head], tokens, tokens)
        axes[head + 1].set_title(f"head {head}", fontsize=8)
    fig.suptitle(f"class probabilities beside layer {layer % weights.shape[0]}'s heads", fontsize=10)
    return finish(fig, path)


def _scores(q, k) -> np.ndarray:
    return (q @ k.T) / math.sqrt(q.shape[-1])  # (T, T) = q k^T / sqrt(d_head)


def causal_vs_bidirectional(q, k, tokens, path=None):
    """The same queries and keys (T, d_head) with and without the causal mask."""
    scores = _scores(np.asarray(q, np.float64), np.asarray(k, np.float64))
    T = scores.shape[0]
    both = [softmax_forward(scores), softmax_forward(np.where(causal_mask(T, T), scores, -np.inf))]
    s = _cell(T, T <= ANNOTATE_MAX) + 0.6
    fig = new_figure(2 * s + 0.6, s + 0.6)
    axes = fig.subplots(1, 2)
    for ax, w, name in zip(axes, both, ("bidirectional (encoder, BERT)", "causal (decoder, GPT)")):
        im = heatmap(ax, w, tokens, tokens)
        ax.set_title(name, fontsize=9)
    fig.colorbar(im, ax=axes, shrink=0.7)
    fig.suptitle("same input, two masks: causal rows see only earlier keys and renormalise", fontsize=10)
    return finish(fig, path)


def attention_steps(q, k, v, tokens, causal: bool = True, path=None):
    """One head step by step: scores q k^T / sqrt(d) -> masked scores -> softmax -> output."""
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    T = q.shape[0]
    scores = _scores(q, k)
    masked = np.where(causal_mask(T, T), scores, -np.inf) if causal else scores
    out, cache = attention_forward(q[None, None], k[None, None], v[None, None], causal=causal)
    weights = cache["weights"]
    s = _cell(T, T <= ANNOTATE_MAX) + 0.4
    fig = new_figure(4 * s + 0.4, s + 0.7)
    axes = fig.subplots(1, 4)
    lim = float(np.abs(scores).max()) or 1.0
    heatmap(axes[0], scores, tokens, tokens, vmin=-lim, vmax=lim, cmap="coolwarm", fmt="{:.1f}")
    shown = np.where(np.isfinite(masked), masked, np.nan)  # -inf drawn as blank
    heatmap(axes[1], shown, tokens, tokens, vmin=-lim, vmax=lim, cmap="coolwarm", annotate_max=0)
    heatmap(axes[2], weights[0, 0], tokens, tokens)
    o = out[0, 0]
    olim = float(np.abs(o).max()) or 1.0
    heatmap(axes[3], o, None, tokens, vmin=-olim, vmax=olim, cmap="coolwarm", annotate_max=0)
    titles = ("scores q k\u1d40/\u221ad", "masked (blank = -inf)" if causal else "no mask",
              "softmax weights", "output = weights v")
    for ax, t in zip(axes, titles):
        ax.set_title(t, fontsize=9)
    axes[3].set_xlabel("d_head")
    fig.suptitle("one attention head, step by step", fontsize=10)
    return finish(fig, path)
