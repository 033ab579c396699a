"""Figures of the lens analyses (`scratchformer.lens`), one function each, taking the
analysis's result and returning a matplotlib Figure; `path=` also saves a PNG. Tokens are
passed as display strings."""

from __future__ import annotations

import numpy as np

from scratchformer.viz._plot import finish, heatmap, new_figure, show_token

__all__ = [
    "logit_lens_figure",
    "attribution_figure",
    "ablation_figure",
    "patching_figure",
    "saliency_figure",
    "head_scores_figure",
]


def logit_lens_figure(lens, tokens: list[str], decode, path=None):
    """Layers (rows) x positions (columns): each cell the layer's likeliest next token
    (`decode(id) -> str`), coloured by its probability."""
    L, T = lens.top_ids.shape[:2]
    fig = new_figure(max(4.0, 0.6 * T + 1.5), max(2.5, 0.4 * L + 1.2))
    ax = fig.add_subplot()
    im = heatmap(ax, lens.top_probs[:, :, 0], xlabels=tokens, ylabels=lens.layers, annotate_max=0)
    for i in range(L):
        for t in range(T):
            ax.text(
                t,
                i,
                show_token(decode(int(lens.top_ids[i, t, 0]))),
                ha="center",
                va="center",
                fontsize=7,
                color="white" if lens.top_probs[i, t, 0] < 0.5 else "black",
            )
    ax.set_xlabel("input position (the cell: the predicted next token)")
    ax.set_title("logit lens: top-1 token per layer")
    fig.colorbar(im, ax=ax, label="probability")
    return finish(fig, path)


def attribution_figure(dla, token_label: str, path=None):
    """Each part's direct contribution to one logit, as horizontal bars."""
    n = len(dla.labels)
    fig = new_figure(5.0, max(2.5, 0.22 * n + 1.0))
    ax = fig.add_subplot()
    colours = ["tab:red" if v < 0 else "tab:blue" for v in dla.contributions]
    ax.barh(range(n), dla.contributions, color=colours)
    ax.set_yticks(range(n))
    ax.set_yticklabels(dla.labels, fontsize=7)
    ax.invert_yaxis()
    ax.axvline(0, color="black", lw=0.5)
    ax.set_title(
        f"direct logit attribution: {token_label} (logit {dla.logit:.3f}, bias {dla.bias:.3f})", fontsize=9
    )
    return finish(fig, path)


def _hide_nan_labels(ax) -> None:
    """Cells without a value (a head score that does not apply) stay blank, not "nan"."""
    for text in ax.texts:
        if text.get_text() == "nan":
            text.set_visible(False)


def _diverging(ax, values, xlabels, ylabels, fmt="{:.2f}"):
    lim = float(np.nanmax(np.abs(values))) if np.isfinite(values).any() else 1.0
    im = heatmap(
        ax, values, xlabels=xlabels, ylabels=ylabels, vmin=-lim or -1, vmax=lim or 1, cmap="RdBu_r", fmt=fmt
    )
    _hide_nan_labels(ax)
    return im


def ablation_figure(table, path=None):
    """Attentions (rows) x heads (columns): the metric's change when the head is ablated."""
    fig = new_figure(max(3.0, 0.6 * table.change.shape[1] + 2), max(2.0, 0.4 * len(table.labels) + 1.2))
    ax = fig.add_subplot()
    im = _diverging(ax, table.change, [f"H{h}" for h in range(table.change.shape[1])], table.labels, "{:.3f}")
    ax.set_title(f"{table.mode}-ablation: change of the metric (baseline {table.baseline:.3f})", fontsize=9)
    fig.colorbar(im, ax=ax)
    return finish(fig, path)


def patching_figure(patch, tokens: list[str], path=None):
    """Left: the residual stream at each layer x position; right: each head's output; the
    fraction of the logit difference that patching it from the clean run recovers."""
    fig = new_figure(max(6.0, 0.5 * len(tokens) + 4), max(2.5, 0.4 * patch.residual.shape[0] + 1.5))
    left, right = fig.subplots(1, 2, width_ratios=[max(2, len(tokens)), max(2, patch.heads.shape[1])])
    im = _diverging(left, patch.residual, tokens, [f"L{i}" for i in range(patch.residual.shape[0])])
    left.set_title("residual stream (block input)", fontsize=9)
    _diverging(right, patch.heads, [f"H{h}" for h in range(patch.heads.shape[1])], patch.head_labels)
    right.set_title("head outputs", fontsize=9)
    recovered = (
        "fraction of the logit difference recovered"
        if patch.defined
        else "fraction recovered undefined: clean and corrupted runs give the same metric"
    )
    fig.suptitle(
        f"activation patching: {recovered} (clean {patch.clean_diff:.3f}, corrupted "
        f"{patch.corrupt_diff:.3f})",
        fontsize=9,
    )
    fig.colorbar(im, ax=[left, right])
    return finish(fig, path)


def saliency_figure(tokens: list[str], rows: dict[str, np.ndarray], path=None):
    """One strip per attribution (name -> (T,) values) over the input tokens."""
    values = np.stack([np.asarray(v, dtype=np.float64) for v in rows.values()])
    values = values / np.maximum(np.abs(values).max(axis=1, keepdims=True), 1e-30)  # each strip to [-1, 1]
    fig = new_figure(max(4.0, 0.5 * len(tokens) + 2), 0.5 * len(rows) + 1.2)
    ax = fig.add_subplot()
    heatmap(ax, values, xlabels=tokens, ylabels=list(rows), vmin=-1, vmax=1, cmap="RdBu_r", annotate_max=0)
    ax.set_title("saliency per input token (each row scaled to its largest magnitude)", fontsize=9)
    return finish(fig, path)


def head_scores_figure(scores, path=None):
    """One panel per score (previous, first, same; diagonal, anti-diagonal for cross attention):
    attentions (rows) x heads (columns)."""
    shown = {k: v for k, v in scores.scores.items() if np.isfinite(v).any()}
    H = next(iter(shown.values())).shape[1]
    fig = new_figure(max(4.0, len(shown) * (0.5 * H + 1.5)), max(2.0, 0.4 * len(scores.labels) + 1.2))
    for ax, (name, values) in zip(np.atleast_1d(fig.subplots(1, len(shown))), shown.items()):
        heatmap(ax, values, xlabels=[f"H{h}" for h in range(H)], ylabels=scores.labels)
        _hide_nan_labels(ax)
        ax.set_title(name.replace("_", "-"), fontsize=9)
    fig.suptitle("head scores: mean attention weight", fontsize=9)
    return finish(fig, path)
