"""Training diagnostics over time, drawn as in makemore part 3, from a run's diagnostics.jsonl
(written by `train`, see scratchformer.training.diagnostics for what each record holds).

    diag_records(path)            (header, records) of a run directory's diagnostics.jsonl, or None
    activation_histograms(recs)   the feed-forward activations per layer at the last record
    gradient_histograms(recs)     the gradients of every weight matrix at the last record
    update_ratios(recs)           log10 update:data ratio per parameter over training, 1e-3 guide
    saturation_dead(recs)         saturation and dead fraction per layer over training
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from scratchformer.training.diagnostics import DIAG_FILE, HIST_BINS, SATURATED_SLOPE, read_records
from scratchformer.viz._plot import finish, new_figure

__all__ = ["diag_records", "activation_histograms", "gradient_histograms", "update_ratios", "saturation_dead"]

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


def _centres(lo: float, hi: float) -> np.ndarray:
    edges = np.linspace(lo, hi, HIST_BINS + 1)
    return (edges[:-1] + edges[1:]) / 2


def activation_histograms(records: list[dict], path=None):
    """Histogram of the feed-forward activations f(h) of every layer on the probe batch, at
    the last record; the legend gives each layer's mean, std, saturation and dead fraction."""
    rec = records[-1]
    x = _centres(*rec["act_range"])
    fig = new_figure(8, 3.6)
    ax = fig.subplots()
    for i, layer in enumerate(rec["layers"]):
        counts = np.asarray(layer["hist"], float)
        ax.plot(x, counts / max(counts.sum(), 1), label=f"layer {i}: mean {layer['mean']:+.2f}, std {layer['std']:.2f}, "
                f"saturated {100 * layer['saturation']:.1f}%, dead {100 * layer['dead']:.1f}%")
    ax.set_xlabel("activation f(h) of the feed-forward hidden units")
    ax.set_ylabel("fraction of probe values")
    ax.set_title(f"Feed-forward activations per layer at step {rec['step']}", fontsize=10)
    ax.legend(fontsize=7)
    return finish(fig, path)


def gradient_histograms(records: list[dict], path=None):
    """Histogram of each weight matrix's gradient at the last record; the legend gives its std
    and the grad:data ratio is left to `update_ratios`."""
    rec = records[-1]
    x = _centres(*rec["grad_range"])
    fig = new_figure(8, 3.6)
    ax = fig.subplots()
    for name, p in rec["params"].items():
        if "grad_hist" not in p:
            continue
        counts = np.asarray(p["grad_hist"], float)
        ax.plot(x, counts / max(counts.sum(), 1), label=f"{name}: std {p['grad_std']:.2e}")
    ax.set_xlabel("gradient value")
    ax.set_ylabel("fraction of entries")
    ax.set_title(f"Gradients of the weight matrices at step {rec['step']}", fontsize=10)
    ax.legend(fontsize=6, ncol=2)
    return finish(fig, path)


def update_ratios(records: list[dict], path=None):
    """log10(std(update) / std(data)) of every parameter at each record, with makemore's guide
    line at -3 (updates about a thousandth of the values)."""
    steps = [r["step"] for r in records]
    names = list(records[-1]["params"])
    fig = new_figure(9, 4)
    ax = fig.subplots()
    for name in names:
        ys = [r["params"].get(name, {}).get("update_ratio") for r in records]
        ys = [np.nan if y is None else y for y in ys]
        ax.plot(steps, ys, marker="." if len(steps) < 30 else None, lw=1,
                label=name if len(names) <= 16 else None)
    ax.axhline(GUIDE_RATIO, color="black", ls="--", lw=1, label="1e-3 guide")
    ax.set_xlabel("step")
    ax.set_ylabel("log10 update : data (std)")
    ax.set_title("Update:data ratio per parameter over training", fontsize=10)
    ax.legend(fontsize=6, ncol=2)
    return finish(fig, path)


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
