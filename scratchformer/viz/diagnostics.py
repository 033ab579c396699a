"""Training diagnostics over time, drawn as in makemore part 3, from a run's diagnostics.jsonl
(written by `train`, see scratchformer.training.diagnostics for what each record holds).

    diag_records(path)                (header, records) of a run directory's diagnostics.jsonl, or None
    activation_histograms(recs)       the feed-forward activations per layer at the last record
    activation_gradients(recs)        the gradient arriving at each layer's activation, last record
    gradient_histograms(recs)         one panel per weight matrix, each on its own range, last record
    update_ratios(recs)               log10 update:data ratio over training: the weight matrices
                                      (labelled, with the 1e-3 guide) and, apart, biases and gains
    saturation_dead(recs)             saturation and dead fraction per layer over training
    is_matrix(name, p)                whether a parameter's record is a weight matrix's (2-D)

Each histogram function takes `step` to draw that record instead of the last.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from scratchformer.training.diagnostics import (
    ACT_GRAD_STDS,
    DIAG_FILE,
    HIST_BINS,
    SATURATED_SLOPE,
    read_records,
)
from scratchformer.viz._plot import finish, new_figure

__all__ = [
    "diag_records",
    "activation_histograms",
    "activation_gradients",
    "gradient_histograms",
    "update_ratios",
    "saturation_dead",
    "is_matrix",
]

GUIDE_RATIO = -3.0  # makemore's rule of thumb: updates about 1e-3 of the data


def diag_records(run) -> list[dict] | None:
    """The records of `run`'s diagnostics.jsonl (`run`: the run directory, its log.jsonl or the
    file itself), every field checked and every null (a diverging run's NaN) read as NaN; None
    when the run has none (trained with --diag-interval 0). A damaged record: RunFileError."""
    path = Path(run)
    if path.is_dir():
        path = path / DIAG_FILE
    elif path.name != DIAG_FILE:
        path = path.parent / DIAG_FILE
    if not path.is_file():
        return None
    return read_records(path, nulls_as_nan=True)[1] or None


def is_matrix(name: str, p: dict) -> bool:
    """A weight matrix (2-D: linear layers, embedding tables), as opposed to a bias or a norm
    gain. Records before `shape` was recorded: the matrices are the ones with a histogram."""
    return len(p["shape"]) == 2 if "shape" in p else "grad_hist" in p


def _centres(lo: float, hi: float) -> np.ndarray:
    edges = np.linspace(lo, hi, HIST_BINS + 1)
    return (edges[:-1] + edges[1:]) / 2


def _pick(records: list[dict], step) -> dict:
    if step is None:
        return records[-1]
    for r in records:
        if r["step"] == step:
            return r
    raise ValueError(f"no diagnostics record at step {step}; recorded: {[r['step'] for r in records]}")


def _fmt(x, spec: str) -> str:
    return "n/a" if x is None or not math.isfinite(x) else format(x, spec)


def activation_histograms(records: list[dict], path=None, step=None):
    """Histogram of the feed-forward activations f(h) of every layer on the probe batch, at
    the last record; the legend gives each layer's mean, std, saturation and dead fraction."""
    rec = _pick(records, step)
    x = _centres(*rec["act_range"])
    fig = new_figure(8, 3.6)
    ax = fig.subplots()
    for i, layer in enumerate(rec["layers"]):
        counts = np.asarray(layer["hist"], float)
        ax.plot(
            x,
            counts / max(counts.sum(), 1),
            label=f"layer {i}: mean {_fmt(layer['mean'], '+.2f')}, "
            f"std {_fmt(layer['std'], '.2f')}, saturated {100 * layer['saturation']:.1f}%, "
            f"dead {100 * layer['dead']:.1f}%",
        )
    ax.set_xlabel("activation f(h) of the feed-forward hidden units")
    ax.set_ylabel("fraction of probe values")
    ax.set_title(f"Feed-forward activations per layer at step {rec['step']}", fontsize=10)
    ax.legend(fontsize=7)
    return finish(fig, path)


def activation_gradients(records: list[dict], path=None, step=None):
    """makemore's gradient distribution: the gradient of the probe batch's loss arriving at each
    layer's feed-forward activation f(h) (its exact zeros, the positions without a loss, left
    out), all layers on one range (+- ACT_GRAD_STDS times the widest
    layer's std; the legend gives the share beyond it), at the last record. Layers whose widths differ
    much learn at different speeds (gradients vanishing or exploding through depth)."""
    rec = _pick(records, step)
    fig = new_figure(8, 3.6)
    ax = fig.subplots()
    title = f"Gradient arriving at each layer's activation at step {rec['step']}"
    if "act_grad_range" in rec:
        x = _centres(*rec["act_grad_range"])
        for i, layer in enumerate(rec["layers"]):
            counts = np.asarray(layer["grad_hist"], float)
            drawn = counts.sum() + layer.get("grad_outside", 0)  # the values not exactly 0
            ax.plot(
                x,
                counts / max(drawn, 1),
                label=f"layer {i}: mean {_fmt(layer['grad_mean'], '+.1e')}, "
                f"std {_fmt(layer['grad_std'], '.1e')}, {100 * layer.get('grad_outside', 0) / max(drawn, 1):.1f}% "
                "beyond the range",
            )
        first = rec["layers"][0] if rec["layers"] else {}
        zero = first.get("grad_zero", 0)
        if zero:
            drawn = sum(first["grad_hist"]) + first.get("grad_outside", 0)
            title += (
                f"\n{100 * zero / (zero + drawn):.0f}% of the values are exactly 0 (positions no loss "
                "depends on: padding) and are not drawn"
            )
        ax.legend(fontsize=7)
        ax.ticklabel_format(axis="x", style="sci", scilimits=(-2, 2))
    else:
        ax.text(
            0.5,
            0.5,
            "this run's diagnostics predate activation gradients",
            ha="center",
            transform=ax.transAxes,
        )
    ax.set_xlabel(
        f"d loss / d f(h) at the feed-forward hidden units (probe batch; \u00b1{ACT_GRAD_STDS} std of the "
        "widest layer)"
    )
    ax.set_ylabel("fraction of the nonzero values")
    ax.set_title(title, fontsize=10)
    return finish(fig, path)


def gradient_histograms(records: list[dict], path=None, step=None):
    """One histogram per weight matrix of the gradient the optimiser stepped with, at the last
    record, each on its own x-range (their widths differ by orders of magnitude: on one range
    most would fill a bin or two); its title gives the gradient's std."""
    rec = _pick(records, step)
    mats = [(n, p) for n, p in rec["params"].items() if is_matrix(n, p) and "grad_hist" in p]
    cols = min(4, max(1, len(mats)))
    rows = max(1, -(-len(mats) // cols))
    fig = new_figure(3 * cols, 1.9 * rows + 0.5)
    axes = np.atleast_1d(fig.subplots(rows, cols)).ravel()
    for ax, (name, p) in zip(axes, mats):
        lo, hi = p.get("grad_range", rec.get("grad_range", (-1.0, 1.0)))
        counts = np.asarray(p["grad_hist"], float)
        x = _centres(lo, hi) if hi > lo else _centres(lo - 0.5, hi + 0.5)
        frac = counts / max(counts.sum(), 1)
        ax.plot(x, frac, drawstyle="steps-mid", lw=1)
        ax.fill_between(x, frac, step="mid", alpha=0.3)
        ax.set_title(f"{name}\nstd {_fmt(p['grad_std'], '.1e')}", fontsize=7)
        ax.tick_params(labelsize=6)
        ax.ticklabel_format(axis="x", style="sci", scilimits=(-2, 2))
        ax.xaxis.get_offset_text().set_fontsize(6)
        ax.set_yticks([])
    for ax in axes[len(mats) :]:
        ax.set_axis_off()
    fig.suptitle(
        f"Gradient of each weight matrix at step {rec['step']} (each panel on its own x-range)", fontsize=10
    )
    return finish(fig, path)


def _kind(name: str) -> str:
    return "biases" if name.rsplit(".", 1)[-1] == "bias" else "norm gains and other vectors"


def update_ratios(records: list[dict], path=None):
    """log10(std(update) / std(data)) over training. Left: the weight matrices, one labelled line
    each, with makemore's guide line at -3 (updates about a thousandth of the values). Right,
    apart: the biases and norm gains (small, often zero-initialised vectors whose ratio sits far
    above the matrices' and says little), coloured by kind. Step 0 has no update."""
    steps = [r["step"] for r in records]
    last = records[-1]["params"]
    mats = [n for n, p in last.items() if is_matrix(n, p)]
    vecs = [n for n, p in last.items() if not is_matrix(n, p)]
    fig = new_figure(13, 4.4)
    a, b = fig.subplots(1, 2, width_ratios=[3, 2])
    cmap = _colours(len(mats))

    def ys(name):
        v = [r["params"].get(name, {}).get("update_ratio") for r in records]
        return [np.nan if y is None else y for y in v]

    marker = "." if len(steps) < 40 else None
    for i, name in enumerate(mats):
        a.plot(steps, ys(name), marker=marker, lw=1.2, color=cmap[i], label=name)
    a.axhline(GUIDE_RATIO, color="black", ls="--", lw=1, label="1e-3 guide")
    a.set_title("Update:data ratio of each weight matrix", fontsize=10)
    a.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1), borderaxespad=0)
    colours = {"biases": "tab:orange", "norm gains and other vectors": "tab:green"}
    seen = set()
    for name in vecs:
        kind = _kind(name)
        b.plot(
            steps,
            ys(name),
            lw=0.8,
            alpha=0.6,
            color=colours[kind],
            label=None if kind in seen else f"{kind} ({sum(_kind(n) == kind for n in vecs)})",
        )
        seen.add(kind)
    b.axhline(GUIDE_RATIO, color="black", ls="--", lw=1, label="1e-3 guide")
    b.set_title("Biases and norm gains, apart (not makemore's picture)", fontsize=10)
    b.legend(fontsize=7)
    for ax in (a, b):
        ax.set_xlabel("step")
        ax.set_ylabel("log10 update : data (std)")
    return finish(fig, path)


def _colours(n: int) -> list:
    """n distinguishable colours: tab20, then cycled."""
    from matplotlib import colormaps

    tab = colormaps["tab20"]
    return [tab(i % 20) for i in range(n)]


def saturation_dead(records: list[dict], path=None):
    """Per layer over training: the saturated fraction (|f'(h)| < SATURATED_SLOPE) and the dead
    fraction (units never positive on the probe batch)."""
    steps = [r["step"] for r in records]
    n_layers = len(records[-1]["layers"])
    fig = new_figure(9, 3.6)
    a, b = fig.subplots(1, 2)
    for i in range(n_layers):
        a.plot(steps, [100 * r["layers"][i]["saturation"] for r in records], marker=".", label=f"layer {i}")
        b.plot(steps, [100 * r["layers"][i]["dead"] for r in records], marker=".", label=f"layer {i}")
    a.set_title(f"Saturated units (|f'(h)| < {SATURATED_SLOPE:g})", fontsize=10)
    b.set_title("Dead units (never > 0 on the probe batch)", fontsize=10)
    for ax in (a, b):
        ax.set_xlabel("step")
        ax.set_ylabel("% of feed-forward units")
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=7)
    return finish(fig, path)
