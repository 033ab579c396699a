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

__all__ = [
    "attention_grid",
    "seq2seq_attention",
    "classifier_attention",
    "causal_vs_bidirectional",
    "attention_steps",
]


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
            im = heatmap(
                ax,
                weights[layer, head],
                tokens if layer == L - 1 else None,
                query_tokens if head == 0 else None,
                annotate_max=annotate,
            )
            if layer < L - 1:
                ax.set_xticks([])
            if head > 0:
                ax.set_yticks([])
            ax.set_title(f"layer {layer} head {head}", fontsize=8)
        axes[layer, 0].set_ylabel("query", fontsize=8)
    for head in range(H):
        axes[L - 1, head].set_xlabel("key", fontsize=8)
    fig.colorbar(im, ax=axes, shrink=0.6, label="weight")
    fig.suptitle(f"{title}: rows = queries, columns = keys", fontsize=10)
    return finish(fig, path)


def seq2seq_attention(maps: dict, src_tokens, tgt_tokens, layer: int = -1, path=None):
    """Encoder self-, decoder self- and cross-attention of one layer, one row per kind and one
    column per head. maps: {"encoder", "decoder", "cross"} -> (L, H, Tq, Tk)."""
    rows = [
        ("encoder", src_tokens, src_tokens),
        ("decoder", tgt_tokens, tgt_tokens),
        ("cross", src_tokens, tgt_tokens),
    ]  # (name, keys, queries)
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
            im = heatmap(axes[r, head], w[head], keys, queries)
            axes[r, head].set_title(f"{name} head {head}", fontsize=8)
            axes[r, head].set_xlabel("key: " + ("target" if name == "decoder" else "source"), fontsize=7)
        axes[r, 0].set_ylabel(f"query: {sides[name]}", fontsize=8)
    fig.colorbar(im, ax=axes, shrink=0.6, label="weight")
    fig.suptitle(f"seq2seq attention, layer {layer % maps['encoder'].shape[0]}", fontsize=10)
    return finish(fig, path)


def classifier_attention(
    probs,
    class_names,
    weights,
    tokens,
    layer: int = -1,
    path=None,
    *,
    true_class: int | None = None,
    accuracy: float | None = None,
):
    """The class probabilities (bars) beside every head of one layer. probs: (n_classes,).
    The title names the input (the tokens), the prediction, and when given the true class
    (an index into class_names) and the model's held-out accuracy."""
    probs = np.asarray(probs, dtype=np.float64).ravel()
    weights = _check_maps(weights)
    H, T = weights.shape[1], weights.shape[-1]
    s = _cell(T, T <= ANNOTATE_MAX)
    fig = new_figure(2.6 + s * H, 0.8 + s)
    axes = fig.subplots(1, H + 1, squeeze=False, width_ratios=[1.4] + [1] * H)[0]
    names = [str(c) for c in class_names]
    axes[0].barh(range(len(probs)), probs, color="tab:blue")
    for i, p in enumerate(probs):
        axes[0].text(
            p - 0.02 if p > 0.8 else p + 0.02,
            i,
            f"{p:.2f}",
            va="center",
            ha="right" if p > 0.8 else "left",
            fontsize=7,
            color="white" if p > 0.8 else "black",
        )
    axes[0].set_yticks(range(len(probs)), names, fontsize=8)
    axes[0].set_xlim(0, 1)
    axes[0].set_xlabel("probability", fontsize=8)
    axes[0].invert_yaxis()
    predicted = names[int(probs.argmax())]
    axes[0].set_title(f"prediction: {predicted}", fontsize=9)
    for head in range(H):
        im = heatmap(axes[head + 1], weights[layer, head], tokens, tokens)
        axes[head + 1].set_title(f"head {head}", fontsize=8)
        axes[head + 1].set_xlabel("key", fontsize=8)
    axes[1].set_ylabel("query", fontsize=8)
    fig.colorbar(im, ax=list(axes[1:]), shrink=0.8, label="weight")
    facts = [f"input {' '.join(str(t) for t in tokens)}", f"predicted {predicted}"]
    if true_class is not None:
        truth = names[int(true_class)]
        facts.append(f"true {truth} ({'right' if truth == predicted else 'wrong'})")
    if accuracy is not None:
        facts.append(f"held-out accuracy {accuracy:.1%}")
    fig.suptitle(
        f"{'; '.join(facts)} -- class probabilities beside layer {layer % weights.shape[0]}'s heads",
        fontsize=9,
    )
    return finish(fig, path)


def _scores(q, k, bias=None) -> np.ndarray:
    """(T, T) = q k^T / sqrt(d_head) (+ bias: the attention's own score bias, ALiBi's, or None)."""
    scores = (q @ k.T) / math.sqrt(q.shape[-1])
    return scores if bias is None else scores + np.asarray(bias, np.float64)


def causal_vs_bidirectional(q, k, tokens, path=None, *, bias=None):
    """The same queries and keys (T, d_head) with and without the causal mask. bias: (T, T) added
    to the scaled scores by the model's attention (`trace.head_score_bias`), or None."""
    scores = _scores(np.asarray(q, np.float64), np.asarray(k, np.float64), bias)
    T = scores.shape[0]
    both = [softmax_forward(scores), softmax_forward(np.where(causal_mask(T, T), scores, -np.inf))]
    s = _cell(T, T <= ANNOTATE_MAX) + 0.6
    fig = new_figure(2 * s + 0.6, s + 0.6)
    axes = fig.subplots(1, 2)
    for ax, w, name in zip(axes, both, ("bidirectional (encoder, BERT)", "causal (decoder, GPT)")):
        im = heatmap(ax, w, tokens, tokens)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("key", fontsize=8)
    axes[0].set_ylabel("query", fontsize=8)
    fig.colorbar(im, ax=axes, shrink=0.7, label="weight")
    fig.suptitle("same input, two masks: causal rows see only earlier keys and renormalise", fontsize=10)
    return finish(fig, path)


def attention_steps(
    q,
    k,
    v,
    tokens,
    causal: bool = True,
    path=None,
    *,
    layer: int | None = None,
    head: int | None = None,
    bias=None,
):
    """One head step by step: scores q k^T / sqrt(d) (+ bias) -> masked scores (causal only) ->
    softmax -> output. layer, head: which head of the model this is, for the title; bias: (T, T)
    the model's attention adds to the scaled scores (`trace.head_score_bias`: ALiBi's), or None."""
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    T = q.shape[0]
    scores = _scores(q, k, bias)
    b = None if bias is None else np.asarray(bias, np.float64)[None, None]
    out, cache = attention_forward(q[None, None], k[None, None], v[None, None], causal=causal, bias=b)
    weights = cache["weights"]
    lim = float(np.abs(scores).max()) or 1.0
    o = out[0, 0]
    olim = float(np.abs(o).max()) or 1.0
    panels = [
        (
            "scores q k\u1d40/\u221ad" + (" + bias" if bias is not None else ""),
            scores,
            tokens,
            dict(vmin=-lim, vmax=lim, cmap="coolwarm", fmt="{:.1f}"),
            "score",
        )
    ]
    if causal:  # without a mask this panel would repeat the scores
        masked = np.where(causal_mask(T, T), scores, np.nan)  # -inf drawn as blank
        panels.append(
            (
                "masked (blank = -inf)",
                masked,
                tokens,
                dict(vmin=-lim, vmax=lim, cmap="coolwarm", fmt="{:.1f}"),
                "score",
            )
        )
    panels += [
        ("softmax weights", weights[0, 0], tokens, {}, "weight"),
        (
            "output = weights v",
            o,
            None,
            dict(vmin=-olim, vmax=olim, cmap="coolwarm", annotate_max=0),
            "value",
        ),
    ]
    s = _cell(T, T <= ANNOTATE_MAX) + 0.5
    fig = new_figure(len(panels) * (s + 0.5) + 0.4, s + 0.9)
    axes = fig.subplots(1, len(panels))
    for ax, (title, values, xlabels, style, bar) in zip(axes, panels):
        im = heatmap(ax, values, xlabels, tokens, **style)
        fig.colorbar(im, ax=ax, shrink=0.8, label=bar)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("key" if xlabels is not None else "d_head", fontsize=8)
        ax.set_ylabel("query", fontsize=8)
    which = "" if layer is None else f"layer {layer}" + ("" if head is None else f", head {head}")
    mask = "causal" if causal else "no mask (bidirectional)"
    fig.suptitle(f"one attention head step by step{': ' + which if which else ''} ({mask})", fontsize=10)
    return finish(fig, path)
