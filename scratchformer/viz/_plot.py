"""Shared plotting helpers: a Figure on the Agg canvas (no pyplot, no global backend switch),
an atomic PNG save, and a labelled heatmap.

matplotlib is imported here, inside `new_figure`, so `import scratchformer` never loads it.
"""

from __future__ import annotations

import io
import warnings

import numpy as np

from scratchformer.runfiles import write_atomic

DPI = 100  # PNG pixels = figsize (inches) * DPI


def new_figure(width: float, height: float):
    """A matplotlib Figure drawn by the Agg canvas, with constrained layout."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def finish(fig, path=None):
    """Save `fig` as a PNG at `path` (atomically, scratchformer.runfiles.write_atomic); return fig.
    A character the font lacks (a rune, an emoji in a token label) is drawn as an empty box,
    without matplotlib's "Glyph ... missing from font" warning on stderr."""
    if path is not None:
        write_atomic(path, png_bytes(fig))
    return fig


def png_bytes(fig) -> bytes:
    """`fig` as PNG bytes: the same image and metadata as `fig.savefig(..., format="png")`,
    in one drawing pass. savefig draws a figure with a layout engine twice (once, not rendered,
    to lay it out; once to render); the canvas's own draw lays the figure out and renders it
    in one pass, which is about a fifth of a figure's time."""
    from matplotlib.image import imsave

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Glyph .* missing from font")
        fig.canvas.draw()
    png = io.BytesIO()
    imsave(png, fig.canvas.buffer_rgba(), format="png", origin="upper", dpi=DPI)
    return png.getvalue()


def heatmap(
    ax,
    values,
    xlabels=None,
    ylabels=None,
    annotate_max: int = 12,
    vmin=0.0,
    vmax=1.0,
    cmap="viridis",
    fmt="{:.2f}",
):
    """Draw a 2-D array with imshow; tick labels on both axes; the values written in the cells
    when both sides are at most `annotate_max` long. Returns the AxesImage."""
    values = np.asarray(values, dtype=np.float64)
    im = ax.imshow(values, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto", interpolation="nearest")
    rows, cols = values.shape
    small = max(rows, cols) <= 24
    for labels, n, set_ticks, set_labels in (
        (xlabels, cols, ax.set_xticks, ax.set_xticklabels),
        (ylabels, rows, ax.set_yticks, ax.set_yticklabels),
    ):
        if labels is None:
            continue
        step = max(1, n // 24)  # at most ~24 labels per axis, so they never overlap
        set_ticks(range(0, n, step))
        set_labels([show_token(labels[i]) for i in range(0, n, step)], fontsize=8 if small else 6)
    if xlabels is not None:  # long labels stand up; one character stays upright (a turned "m" reads "E")
        for label in ax.get_xticklabels():
            label.set_rotation(90 if len(label.get_text()) > 1 else 0)
    if rows <= annotate_max and cols <= annotate_max:
        for i in range(rows):
            for j in range(cols):
                if not np.isfinite(values[i, j]):
                    continue  # a blank cell (e.g. a masked score) stays blank
                text = fmt.format(values[i, j])
                if abs(values[i, j]) < 1:
                    text = text.replace("0.", ".", 1)  # ".25": short enough for a small cell
                ax.text(
                    j, i, text, ha="center", va="center", fontsize=6, color=_text_colour(im, values[i, j])
                )
    return im


def _text_colour(im, value) -> str:
    """White on a dark cell, black on a light one, judged by the cell's own colour's luminance
    (a diverging map is pale in the middle, so the value's place in the range is not enough)."""
    r, g, b, _ = im.cmap(im.norm(value))
    return "white" if 0.299 * r + 0.587 * g + 0.114 * b < 0.5 else "black"


def show_token(tok) -> str:
    """A token label that is visible: spaces and newlines shown as symbols."""
    s = str(tok)
    return {" ": "\u2423", "\n": "\u21b5", "": "\u2205"}.get(s, s.replace("\n", "\u21b5"))


def token_axis(ax, tokens, n: int) -> None:
    """x ticks at positions 0..n-1 labelled with `tokens` (every k-th: about 40 labels at most)."""
    x = np.arange(n)
    step = max(1, n // 40)
    ax.set_xticks(x[::step], [show_token(tokens[i]) for i in x[::step]], fontsize=8)


def paired_bars(ax, first, second, labels: tuple[str, str]) -> None:
    """Two bars at each x = 0..len(first)-1: `first` on the left, `second` on the right."""
    x = np.arange(len(first))
    ax.bar(x - 0.2, first, width=0.4, label=labels[0])
    ax.bar(x + 0.2, second, width=0.4, label=labels[1])


def pca_2d(x: np.ndarray) -> np.ndarray:
    """(N, C) -> (N, 2): projection on the two principal components (SVD of the centred rows).
    With fewer than two components (one row, or width 1) the missing coordinates are 0."""
    x = np.asarray(x, dtype=np.float64)
    x = x - x.mean(axis=0)
    _, _, vt = np.linalg.svd(x, full_matrices=False)
    xy = x @ vt[:2].T
    return np.pad(xy, ((0, 0), (0, 2 - xy.shape[1])))
