"""Position and embedding figures: the sinusoidal table, similarity against distance, a
learned position table, token against position norms, and PCA of the embeddings."""

from __future__ import annotations

import numpy as np

from scratchformer.nn.positional import sinusoidal_table
from scratchformer.viz import claims
from scratchformer.viz._plot import finish, heatmap, new_figure, paired_bars, pca_2d, show_token, token_axis

__all__ = [
    "sinusoidal_encoding",
    "position_similarity",
    "learned_positions",
    "embedding_norms",
    "embedding_pca",
]


def _table_heatmap(table, title, path):
    table = np.asarray(table, dtype=np.float64)
    fig = new_figure(7, 4)
    ax = fig.subplots()
    lim = float(np.abs(table).max()) or 1.0
    im = heatmap(ax, table, annotate_max=0, vmin=-lim, vmax=lim, cmap="RdBu_r")
    ax.set_xlabel("embedding dimension")
    ax.set_ylabel("position")
    fig.colorbar(im, ax=ax, label="value")
    ax.set_title(title, fontsize=9)
    return finish(fig, path)


def sinusoidal_encoding(max_len: int = 64, n_embd: int = 64, path=None):
    """PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(...), as a heatmap."""
    return _table_heatmap(
        sinusoidal_table(max_len, n_embd),
        "sinusoidal positions: fast waves on the left, slow on the right",
        path,
    )


def learned_positions(table, path=None):
    """A learned (P, C) position-embedding table as a heatmap."""
    return _table_heatmap(
        table,
        "learned position embeddings (position x dimension)\n" + claims.neighbour_similarity(table),
        path,
    )


def position_similarity(table, path=None):
    """Cosine similarity between positions: the full matrix, and its mean against distance."""
    t = np.asarray(table, dtype=np.float64)
    unit = t / np.maximum(np.linalg.norm(t, axis=1, keepdims=True), 1e-12)
    sim = unit @ unit.T  # (P, P)
    P = len(t)
    dist = np.abs(np.arange(P)[:, None] - np.arange(P)[None, :])
    mean = np.array([sim[dist == d].mean() for d in range(P)])
    fig = new_figure(9, 3.8)
    a, b = fig.subplots(1, 2)
    im = heatmap(a, sim, annotate_max=0, vmin=-1, vmax=1, cmap="RdBu_r")
    a.set_xlabel("position")
    a.set_ylabel("position")
    a.set_title("cosine similarity of every pair", fontsize=10)
    fig.colorbar(im, ax=a, label="cosine similarity")
    b.plot(range(P), mean, marker=".")
    b.set_xlabel("distance |i - j|")
    b.set_ylabel("mean cosine similarity")
    b.axhline(0, color="grey", lw=0.5)
    b.set_title("mean over the pairs at each distance", fontsize=10)
    fig.suptitle("position vectors: " + claims.distance_similarity(mean), fontsize=10)
    return finish(fig, path)


def embedding_norms(token_table, position_table, ids, tokens, path=None):
    """Per position of one input: |token embedding| against |position embedding|."""
    ids = np.asarray(ids).ravel()
    tok = np.linalg.norm(np.asarray(token_table, np.float64)[ids], axis=1)
    pos = np.linalg.norm(np.asarray(position_table, np.float64)[: len(ids)], axis=1)
    fig = new_figure(max(6, 0.22 * len(ids) + 2), 3.5)
    ax = fig.subplots()
    paired_bars(ax, tok, pos, ("token embedding", "position embedding"))
    token_axis(ax, tokens, len(ids))
    ax.set_ylabel("L2 norm")
    ax.legend(fontsize=8)
    ax.set_title("which one dominates the sum the first block sees?", fontsize=10)
    return finish(fig, path)


def embedding_pca(token_table, position_table, ids, tokens, vocab_labels=None, path=None, token_ids=None):
    """PCA (2-D) of the token table (labelled with the vocabulary), of the positions (labelled
    with their index), and of token + position for one input (labelled with its tokens).
    token_ids: the vocabulary rows to show (default: all, or this input's for a vocabulary over
    128), e.g. only the tokens a task uses: unused rows would dominate the components."""
    token_table = np.asarray(token_table, np.float64)
    position_table = np.asarray(position_table, np.float64)
    ids = np.asarray(ids).ravel()
    if vocab_labels is None:
        vocab_labels = [str(i) for i in range(len(token_table))]
    # a large vocabulary (BERT's 30k WordPieces) is shown through this input's tokens only
    if token_ids is not None:
        rows = np.unique(np.asarray(token_ids, dtype=np.int64))
    else:
        rows = np.arange(len(token_table)) if len(token_table) <= 128 else np.unique(ids)
    n_pos = min(len(position_table), 64)
    every = max(1, n_pos // 32)  # label every position, or every other one when there are many
    which = (
        "token embeddings"
        if len(rows) == len(token_table)
        else "token embeddings (the task's)"
        if token_ids is not None
        else "token embeddings (this input's)"
    )
    positions = pca_2d(position_table[:n_pos])
    panels = [
        (which, pca_2d(token_table[rows]), [vocab_labels[i] for i in rows]),
        ("position embeddings", positions, [str(i) if i % every == 0 else "" for i in range(n_pos)]),
        (
            "token + position (this input)",
            pca_2d(token_table[ids] + position_table[: len(ids)]),
            list(tokens),
        ),
    ]
    sources = (token_table[rows], position_table[:n_pos], token_table[ids] + position_table[: len(ids)])
    fig = new_figure(13, 4.4)
    for ax, (title, xy, labels), x in zip(fig.subplots(1, 3), panels, sources):
        title = f"{title}\nPC 1 + 2: {claims.explained_variance(x):.0%} of the variance"
        ax.scatter(xy[:, 0], xy[:, 1], s=8, c=np.arange(len(xy)), cmap="viridis")
        for (px, py), lab in zip(xy, labels):
            if lab == "":
                continue
            ax.annotate(show_token(lab), (px, py), fontsize=7, xytext=(2, 2), textcoords="offset points")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("PC 1")
        ax.set_ylabel("PC 2")
    fig.suptitle("PCA of the embeddings; positions: " + claims.curve_or_scatter(positions), fontsize=10)
    return finish(fig, path)
