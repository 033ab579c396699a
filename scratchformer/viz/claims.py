"""What a figure may say about its data, computed from the data.

A title or caption that states what the data shows is built here from the numbers it
describes, so a figure of a model that does not show the pattern does not claim it:
"falls with distance" only when the curve falls, "grows at every block" only when it grows.
Each function returns a short phrase; the figures put it in their titles.
"""

from __future__ import annotations

import numpy as np

FLAT = 0.1  # |mean cosine| below this at every distance: "about 0 at every distance"


def distance_similarity(mean_by_distance) -> str:
    """mean_by_distance[d]: mean cosine similarity of positions d apart (d = 0, 1, ...).
    Only distances up to 3/4 of the table are judged: beyond, a mean holds too few pairs."""
    m = np.asarray(mean_by_distance, dtype=np.float64)
    m = m[: max(3, (3 * len(m)) // 4 + 1)]
    if len(m) < 3:
        return "too few positions to say how similarity depends on distance"
    far = min(25, len(m) - 1)
    values = f"similarity at distance 1: {m[1]:.2f}, at {far}: {m[far]:.2f}"
    if np.all(np.abs(m[1:]) < FLAT):
        return f"{values}; about 0 at every distance"
    rises = np.flatnonzero(np.diff(m[1:]) > 0.01) + 2  # distances where it is higher than one step closer
    if rises.size == 0:
        return f"{values}; falls with distance"
    shown = ", ".join(str(int(d)) for d in rises[:4]) + (", ..." if rises.size > 4 else "")
    return f"{values}; not monotone (rises again at distance {shown})"


def neighbour_similarity(table) -> str:
    """Do neighbouring rows of a (P, C) table look alike, compared with rows far apart?"""
    t = np.asarray(table, dtype=np.float64)
    if len(t) < 3:
        return "too few positions to compare neighbours"
    unit = t / np.maximum(np.linalg.norm(t, axis=1, keepdims=True), 1e-12)
    sim = unit @ unit.T
    near = float(np.mean(np.diag(sim, 1)))
    P = len(t)
    dist = np.abs(np.arange(P)[:, None] - np.arange(P)[None, :])
    far = float(sim[dist >= max(2, P // 4)].mean())
    verdict = (
        "nearby positions look alike"
        if near - far > 0.2
        else "no more alike than distant ones: no smooth structure"
    )
    return f"neighbouring positions' cosine {near:.2f}, distant ones' {far:.2f}: {verdict}"


def residual_growth(norms) -> str:
    """norms[i]: the residual stream's mean token norm after the embedding (0) and block i."""
    n = np.asarray(norms, dtype=np.float64)
    if len(n) < 2:
        return f"norm {n[0]:.2f}" if len(n) else "no residual stream"
    change = f"{n[0]:.3g} -> {n[-1]:.3g}"
    if abs(n[-1] - n[0]) < 0.1 * abs(n[0]):
        return f"{change}: changes by less than 10% over the blocks"
    steps = np.diff(n)
    if np.all(steps > 0):
        return f"{change}: grows at every block"
    if np.all(steps < 0):
        return f"{change}: shrinks at every block"
    return f"{change}: not monotone"


def curve_or_scatter(xy) -> str:
    """Points in order (N, 2): do consecutive ones lie close together (a curve), or not?"""
    xy = np.asarray(xy, dtype=np.float64)
    if len(xy) < 4:
        return "too few points to see a shape"
    step = float(np.mean(np.linalg.norm(np.diff(xy, axis=0), axis=1)))
    pairs = np.linalg.norm(xy[:, None] - xy[None, :], axis=-1)
    typical = float(pairs[np.triu_indices(len(xy), 1)].mean())
    ratio = step / max(typical, 1e-12)
    shape = "they trace a curve" if ratio < 0.5 else "scattered, no curve"
    return f"consecutive positions {ratio:.2f} x as far apart as a typical pair: {shape}"


def explained_variance(x) -> float:
    """Share of the variance of the rows of x on their first two principal components."""
    x = np.asarray(x, dtype=np.float64)
    x = x - x.mean(axis=0)
    s = np.linalg.svd(x, compute_uv=False)
    total = float(np.sum(s**2))
    return float(np.sum(s[:2] ** 2) / total) if total > 0 else 0.0
