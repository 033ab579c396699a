"""The grokking progress measures of a modadd run (training/modadd.py) over training, from the
"modadd" entries of diagnostics.jsonl: train and test loss on a log scale with the step where
test loss first falls below 1 marked (found in the data, not assumed), restricted and excluded
loss, and the token embedding's Fourier spectrum at the last record with its key frequencies.
Titles are computed from the records. `slider_frames` gives report.html's step slider the same
measures per record.
"""

from __future__ import annotations

import numpy as np

from scratchformer.errors import DataError
from scratchformer.viz._plot import finish, new_figure

GROKKED_ACCURACY = 0.99  # test accuracy that counts as grokked (docs/results.md)


def modadd_series(records: list[dict]) -> dict:
    """The records' modadd measures as arrays: step (n,), and one (n,) array per scalar measure,
    freq_norms (n, K); only the records that hold modadd measures."""
    rows = [r for r in records if isinstance(r.get("modadd"), dict)]
    if not rows:
        raise DataError(
            "no modadd progress measures in these records: train with --task modadd and --diag-interval > 0"
        )
    out = {"step": np.array([r["step"] for r in rows])}
    for key in (
        "train_loss",
        "test_loss",
        "train_accuracy",
        "test_accuracy",
        "restricted_loss",
        "excluded_loss",
        "weight_norm",
        "fourier_check",
    ):
        out[key] = np.array(
            [np.nan if r["modadd"][key] is None else r["modadd"][key] for r in rows], dtype=float
        )
    out["freq_norms"] = np.array([r["modadd"]["freq_norms"] for r in rows], dtype=float)
    out["key_freqs"] = [r["modadd"]["key_freqs"] for r in rows]
    return out


def first_step(steps: np.ndarray, ok: np.ndarray) -> int | None:
    """The first step where `ok` holds, or None."""
    hit = np.flatnonzero(ok)
    return int(steps[hit[0]]) if hit.size else None


def grokking_summary(records: list[dict]) -> dict:
    """What the figure and docs/results.md read: the first step with train loss < 0.04, the step
    and value of the test-loss peak, the first steps with test loss < 1 and < 0.01 and with test
    accuracy >= 99%, whether excluded loss rose (its maximum after the train loss fell below 0.04
    is above its value there) before test loss fell below 1, and the last key frequencies."""
    s = modadd_series(records)
    st = s["step"]
    fit = first_step(st, s["train_loss"] < 0.04)
    below1 = first_step(st, s["test_loss"] < 1)
    peak = int(np.nanargmax(s["test_loss"]))
    rose = None
    if fit is not None and below1 is not None and below1 > fit:
        window = (st >= fit) & (st <= below1)
        rose = bool(np.nanmax(s["excluded_loss"][window]) > s["excluded_loss"][st == fit][0] * 1.05)
    return {
        "train_below_0.04": fit,
        "test_peak": float(s["test_loss"][peak]),
        "test_peak_step": int(st[peak]),
        "test_below_1": below1,
        "test_below_0.01": first_step(st, s["test_loss"] < 0.01),
        "grokked_step": first_step(st, s["test_accuracy"] >= GROKKED_ACCURACY),
        "excluded_rose_first": rose,
        "key_freqs": s["key_freqs"][-1],
        "last_step": int(st[-1]),
        "last_test_accuracy": float(s["test_accuracy"][-1]),
        "max_fourier_check": float(np.nanmax(s["fourier_check"])),
    }


def grokking_figure(records: list[dict], path=None):
    """Three panels (see the module docstring) -> a matplotlib Figure, saved as PNG at `path`."""
    s, summary = modadd_series(records), grokking_summary(records)
    st = s["step"]
    fig = new_figure(15, 4.5)
    ax_loss, ax_fourier, ax_spec = fig.subplots(1, 3)
    ax_loss.plot(st, s["train_loss"], label="train loss")
    ax_loss.plot(st, s["test_loss"], label="test loss")
    ax_loss.set_yscale("log")
    ax_loss.set_xlabel("step")
    grok = summary["test_below_1"]
    if grok is not None:
        ax_loss.axvline(grok, color="k", ls="--", lw=1, label=f"test loss < 1 (step {grok})")
        ax_loss.set_title(
            f"grokking: test loss below 1 at step {grok} (peak {summary['test_peak']:.1f} "
            f"at step {summary['test_peak_step']})",
            fontsize=9,
        )
    else:
        ax_loss.set_title(
            f"not grokked by step {summary['last_step']}: test loss "
            f"{s['test_loss'][-1]:.2f}, peak {summary['test_peak']:.1f}",
            fontsize=9,
        )
    ax_loss.legend(fontsize=8)

    ax_fourier.plot(st, s["restricted_loss"], label="restricted loss (key frequencies only)")
    ax_fourier.plot(st, s["excluded_loss"], label="excluded loss (key frequencies removed)")
    ax_fourier.plot(st, s["train_loss"], label="train loss", alpha=0.5)
    ax_fourier.set_yscale("log")
    ax_fourier.set_xlabel("step")
    rose = summary["excluded_rose_first"]
    ax_fourier.set_title(
        "excluded loss "
        + {
            True: "rises before test loss falls",
            False: "does not rise first",
            None: "(no fall of the test loss to compare)",
        }[rose],
        fontsize=9,
    )
    ax_fourier.legend(fontsize=8)

    norms = s["freq_norms"][-1]
    ks = np.arange(1, len(norms) + 1)
    key = set(summary["key_freqs"])
    ax_spec.bar(ks, norms, color=["tab:red" if k in key else "tab:gray" for k in ks])
    ax_spec.set_xlabel("frequency k")
    ax_spec.set_ylabel("norm of the embedding's Fourier component")
    share = float((norms[[k - 1 for k in sorted(key)]] ** 2).sum() / max((norms**2).sum(), 1e-300))
    ax_spec.set_title(
        f"embedding spectrum at step {summary['last_step']}: key k = {sorted(key)} hold {share:.0%} of it",
        fontsize=9,
    )
    return finish(fig, path)


def _finite(v) -> float | None:
    """A number for the page's JSON: NaN and infinity (a diverging run's) as None (null)."""
    return float(v) if v is not None and np.isfinite(v) else None


def slider_frames(records: list[dict]) -> list[dict | None]:
    """Per record, the grokking measures report.html's step slider replays (the `progress` entry
    of viz/html.py's frames; None for a record without them): train, test, restricted and
    excluded loss as curves over training (log scale) with the step test loss first falls below
    1 marked, and the embedding's Fourier spectrum at that step as bars (red: its key
    frequencies)."""
    below1 = grokking_summary(records)["test_below_1"]
    frames = []
    for r in records:
        m = r.get("modadd")
        if not isinstance(m, dict):
            frames.append(None)
            continue
        norms, key = [_finite(v) or 0.0 for v in m["freq_norms"]], set(m["key_freqs"])
        frames.append(
            {
                "title": "Grokking progress measures",
                "series": [
                    [name.replace("_", " "), _finite(m[name])]
                    for name in ("train_loss", "test_loss", "restricted_loss", "excluded_loss")
                ],
                "log": True,
                "span": None if below1 is None else [below1, below1],
                "span_label": None if below1 is None else f"test loss below 1 at step {below1}",
                "bars": {
                    "title": "the embedding's Fourier spectrum at this step (red: key frequencies)",
                    "labels": [str(k) for k in range(1, len(norms) + 1)],
                    "values": norms,
                    "on": [k in key for k in range(1, len(norms) + 1)],
                    "line": None,
                },
                "note": (
                    f"test accuracy {m['test_accuracy']:.1%}, train accuracy {m['train_accuracy']:.1%}; "
                    f"key frequencies {sorted(key)}; total weight norm {m['weight_norm']:.1f}"
                ),
            }
        )
    return frames
