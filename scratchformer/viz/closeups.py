"""Close-ups the decoder-only names tutorial draws: the input's token ids, each query's attention
as bars, the residual stream's variance against the attention output's per position, and the
feed-forward's input against its output, dimension by dimension.

Each function takes arrays (`scratchformer.viz.trace` reads them out of a model) and returns a
matplotlib Figure; `path=` also saves it as a PNG. Titles that describe the data are computed
from it.
"""

from __future__ import annotations

import math

import numpy as np

from scratchformer.errors import ShapeError
from scratchformer.viz._plot import finish, new_figure, paired_bars, show_token, token_axis

__all__ = ["token_ids", "attention_bars", "residual_variance", "ff_scatter"]

MAX_QUERIES = 12  # attention_bars draws at most this many queries (the first ones)


def token_ids(ids, tokens, path=None):
    """The id each token of the input maps to, as bars (x: the tokens, y: the id)."""
    ids = np.asarray(ids).ravel()
    fig = new_figure(max(5, 0.3 * len(ids) + 2), 3.2)
    ax = fig.subplots()
    x = np.arange(len(ids))
    ax.bar(x, ids, color="tab:blue")
    for i, v in zip(x, ids):
        ax.text(i, v, str(int(v)), ha="center", va="bottom", fontsize=7)
    token_axis(ax, tokens, len(ids))
    ax.set_xlabel("token")
    ax.set_ylabel("id in the vocabulary")
    ax.set_title(f"{len(ids)} tokens, {len(np.unique(ids))} distinct ids", fontsize=10)
    return finish(fig, path)


def attention_bars(weights, tokens, layer: int = 0, head: int = 0, path=None):
    """One head's attention, one bar chart per query: how it spreads its weight over the keys.
    weights: (Tq, Tk) of that head; the first MAX_QUERIES queries are drawn."""
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 2:
        raise ShapeError(f"attention_bars takes one head's (Tq, Tk) weights, got shape {w.shape}")
    n = min(len(w), MAX_QUERIES)
    cols = min(n, 4)
    rows = math.ceil(n / cols)
    fig = new_figure(2.6 * cols + 0.4, 1.9 * rows + 0.6)
    axes = np.atleast_1d(fig.subplots(rows, cols, squeeze=False)).ravel()
    keys = [show_token(t) for t in tokens[: w.shape[1]]]
    for q in range(len(axes)):
        ax = axes[q]
        if q >= n:
            ax.set_axis_off()
            continue
        ax.bar(range(w.shape[1]), w[q], color="tab:blue")
        ax.set_ylim(0, 1)
        ax.set_xticks(range(w.shape[1]), keys if w.shape[1] <= 16 else [""] * w.shape[1], fontsize=7)
        ax.set_title(f"query {q} ({show_token(tokens[q])}): most on {keys[int(w[q].argmax())]}", fontsize=8)
        if q % cols == 0:
            ax.set_ylabel("weight", fontsize=8)
        if q >= n - cols:
            ax.set_xlabel("key", fontsize=8)
    shown = f"the first {n} of {len(w)} queries" if n < len(w) else f"all {n} queries"
    fig.suptitle(f"layer {layer}, head {head}: each query's attention over the keys ({shown})", fontsize=10)
    return finish(fig, path)


def residual_variance(residual, attn_update, tokens, layer: int = 0, path=None):
    """Per position: the variance over channels of the residual stream entering a block, and of
    what its attention adds. residual, attn_update: (T, C) (or (1, T, C))."""
    r = np.asarray(residual, dtype=np.float64).reshape(-1, np.shape(residual)[-1])
    a = np.asarray(attn_update, dtype=np.float64).reshape(r.shape)
    vr, va = r.var(axis=-1), a.var(axis=-1)
    fig = new_figure(max(6, 0.3 * len(vr) + 2), 3.4)
    ax = fig.subplots()
    paired_bars(ax, vr, va, ("residual stream (block input)", "attention output"))
    token_axis(ax, tokens, len(vr))
    ax.set_xlabel("position")
    ax.set_ylabel("variance over channels")
    ax.legend(fontsize=8)
    ratio = float(np.median(va / np.maximum(vr, 1e-30)))
    ax.set_title(
        f"block {layer}: the attention output's variance is {ratio:.3g} x the residual's "
        "(median over positions)",
        fontsize=9,
    )
    return finish(fig, path)


def ff_scatter(ff_in, ff_out, layer: int = 0, dims: int = 16, path=None):
    """A feed-forward's input against its output, one panel per channel (the first `dims`), one
    point per token. ff_in, ff_out: (T, C) (or (1, T, C))."""
    x = np.asarray(ff_in, dtype=np.float64).reshape(-1, np.shape(ff_in)[-1])
    y = np.asarray(ff_out, dtype=np.float64).reshape(-1, np.shape(ff_out)[-1])
    if x.shape != y.shape:
        raise ShapeError(f"ff_scatter: input {x.shape} and output {y.shape} must have the same shape")
    n = min(dims, x.shape[1])
    cols = min(n, 4)
    rows = math.ceil(n / cols)
    fig = new_figure(2.4 * cols + 0.4, 2.0 * rows + 0.6)
    axes = np.atleast_1d(fig.subplots(rows, cols, squeeze=False)).ravel()
    corr = []
    for j, ax in enumerate(axes):
        if j >= n:
            ax.set_axis_off()
            continue
        ax.scatter(x[:, j], y[:, j], s=8)
        c = (
            np.corrcoef(x[:, j], y[:, j])[0, 1]
            if len(x) > 2 and x[:, j].std() > 0 and y[:, j].std() > 0
            else np.nan
        )
        corr.append(c)
        ax.set_title(f"channel {j}: r = {c:.2f}", fontsize=8)
        if j % cols == 0:
            ax.set_ylabel("output", fontsize=8)
        if j >= n - cols:
            ax.set_xlabel("input", fontsize=8)
    typical = float(np.nanmedian(np.abs(corr))) if np.isfinite(corr).any() else float("nan")
    fig.suptitle(
        f"block {layer} feed-forward, input against output per channel, {len(x)} tokens: "
        f"median |correlation| {typical:.2f}",
        fontsize=10,
    )
    return finish(fig, path)
