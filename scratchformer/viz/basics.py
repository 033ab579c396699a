"""The building blocks on their own: activations and their derivatives, softmax under
temperature, and a run's training curves (from its log.jsonl)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from scratchformer import ops
from scratchformer.errors import DataError
from scratchformer.training.rundir import read_log
from scratchformer.viz._plot import finish, new_figure

__all__ = ["activation_functions", "softmax_temperatures", "training_curves"]


def log_rows(path) -> list[dict]:
    """The rows of a run's log.jsonl (`path`: the file or its run directory), read by the one
    strict log reader (training.rundir.read_log: a torn last line is dropped, any other bad
    line is a RunFileError naming it)."""
    path = Path(path)
    log = path / "log.jsonl" if path.is_dir() else path
    if not log.is_file():
        raise DataError(f"training log not found: {log} (train a run first)")
    return read_log(log)[0]


def activation_functions(path=None):
    """GELU (erf), tanh-GELU and ReLU (left) and their derivatives (right), from scratchformer.ops."""
    x = np.linspace(-4, 4, 401)
    ones = np.ones_like(x)
    fns = [
        ("GELU", ops.gelu_forward, ops.gelu_backward),
        ("tanh-GELU", ops.gelu_tanh_forward, ops.gelu_tanh_backward),
        ("ReLU", ops.relu_forward, ops.relu_backward),
    ]
    fig = new_figure(9, 3.6)
    a, b = fig.subplots(1, 2)
    for (name, fwd, bwd), style in zip(fns, ("-", "--", ":")):
        a.plot(x, fwd(x), style, label=name)
        b.plot(x, bwd(ones, x), style, label=name)
    a.set_title("f(x): GELU dips below 0 near x = -0.75", fontsize=10)
    b.set_title("f'(x): smooth for GELU, a step for ReLU", fontsize=10)
    for ax in (a, b):
        ax.axhline(0, color="grey", lw=0.5)
        ax.legend(fontsize=8)
        ax.set_xlabel("x")
    return finish(fig, path)


def softmax_temperatures(logits=None, temperatures=(0.5, 1.0, 2.0, 5.0), path=None):
    """softmax(logits / T) for several temperatures T: low T sharpens, high T flattens."""
    logits = np.array([2.0, 1.0, 0.5, 0.0, -0.5, -1.0, -2.0]) if logits is None else np.asarray(logits, float)
    fig = new_figure(8, 3.6)
    ax = fig.subplots()
    n, width = len(temperatures), 0.8 / len(temperatures)
    for i, t in enumerate(temperatures):
        ax.bar(
            np.arange(len(logits)) + (i - (n - 1) / 2) * width,
            ops.softmax_forward(logits / t),
            width=width,
            label=f"T = {t:g}",
        )
    ax.set_xticks(range(len(logits)), [f"{v:g}" for v in logits])
    ax.set_xlabel("logit")
    ax.set_ylabel("probability")
    ax.legend(fontsize=8)
    ax.set_title("softmax(logits / T): low T sharpens, high T flattens", fontsize=10)
    return finish(fig, path)


def _series(rows, key):
    """(steps, values) of the rows that have a finite number under `key`. A number too large
    for a float (a 400-digit integer: not something training writes) is a DataError."""
    pts = []
    for r in rows:
        value = r.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        try:
            value = float(value)
        except OverflowError:
            raise DataError(
                f"log.jsonl: {key} at step {r['step']} is a number too large to plot "
                f"({value.bit_length()} bits); restore the log or delete it"
            ) from None
        if math.isfinite(value):
            pts.append((r["step"], value))
    return [p[0] for p in pts], [p[1] for p in pts]


def training_curves(log, path=None):
    """Train / validation loss, learning rate, gradient norm and tokens/s against step.

    log: a log.jsonl path, its run directory, or its rows (as training.rundir.read_log, the
    one reader of logs, returns them: a malformed log is an error, never a partial plot).
    Rows missing a field are skipped for that curve only; a panel none of whose fields was
    logged is left out (the loss panel always stays, and says when there is no validation loss)."""
    rows = log if isinstance(log, list) else log_rows(log)
    panels = [
        ("loss", ("train_loss", "val_loss")),
        ("learning rate", ("lr",)),
        ("gradient norm (before clipping)", ("grad_norm",)),
        ("tokens / s", ("tokens_per_s",)),
    ]
    panels = [(t, keys) for t, keys in panels if t == "loss" or any(_series(rows, k)[0] for k in keys)]
    fig = new_figure(10, 6) if len(panels) == 4 else new_figure(3.6 * len(panels) + 0.4, 3.4)
    axes = fig.subplots(2, 2).ravel() if len(panels) == 4 else np.atleast_1d(fig.subplots(1, len(panels)))
    for ax, (title, keys) in zip(axes, panels):
        for key in keys:
            steps, values = _series(rows, key)
            if steps:
                ax.plot(steps, values, marker="." if len(steps) < 30 else None, label=key)
        if ax.lines:
            ax.legend(fontsize=8)
        else:
            ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes)
        if title == "loss" and not _series(rows, "val_loss")[0]:
            title = "loss (training only: no validation loss logged)"
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("step")
    return finish(fig, path)
