"""The grokking progress measures of a modadd run (training/modadd.py) over training, from the
"modadd" entries of diagnostics.jsonl, and the three phases of Nanda et al. 2023 (section 5.2:
memorisation, circuit formation, cleanup) located in them by the rules of `phases`.

    grokking_summary(records)   the steps docs/results.md and the titles read, from the records
    phases(records)             where each phase starts and ends, or None where the run has none
    grokking_figure(records)    train and test loss with the phases shaded; restricted and
                                excluded loss; the weight norm and the Gini coefficient of the
                                embedding's Fourier norms; the spectrum at the last record
    slider_frames(records)      per record, what report.html's step slider draws of them

The rules read the curves the paper reads (its boundaries were drawn by eye at their inflection
points, 1.4k and 9.4k of its 14k epochs):

    memorisation        from step 0 to the excluded loss's lowest record: "a decline of both
                        excluded and train loss"
    circuit formation   from there until the excluded loss has made CLEANUP_RISE of its rise to
                        its highest record after that: "excluded loss rises ... restricted loss
                        starts to fall"
    cleanup             from there until the test loss first falls below CLEANUP_END_LOSS: "excluded
                        loss plateaus ... test loss suddenly drops"
"""

from __future__ import annotations

import numpy as np

from scratchformer.errors import DataError
from scratchformer.viz._plot import finish, new_figure

GROKKED_ACCURACY = 0.99  # test accuracy that counts as grokked (docs/results.md)
MEMORISED_ACCURACY = 0.99  # train accuracy that counts as memorised
# Generalisation is delayed (issue 39's bars): test accuracy below DELAYED_BELOW when the training set
# is memorised, and >= GROKKED_ACCURACY at a step at least DELAYED_FACTOR times later
DELAYED_BELOW, DELAYED_FACTOR = 0.5, 3
CLEANUP_RISE = 0.9  # circuit formation ends when the excluded loss has made this part of its rise
CLEANUP_END_LOSS = 0.01  # cleanup ends when the test loss falls below this (nats)
PHASES = ("memorisation", "circuit formation", "cleanup")
MEASURES = (
    "train_loss",
    "test_loss",
    "train_accuracy",
    "test_accuracy",
    "restricted_loss",
    "excluded_loss",
    "weight_norm",
    "gini",
    "fourier_check",
)


def modadd_series(records: list[dict]) -> dict:
    """The records' modadd measures as arrays: step (n,), one (n,) array per scalar measure (NaN
    where a record lacks it: a file written before the measure existed), freq_norms (n, K),
    key_freqs (a list per record); only the records that hold modadd measures."""
    rows = [r for r in records if isinstance(r.get("modadd"), dict)]
    if not rows:
        raise DataError(
            "no modadd progress measures in these records: train with --task modadd and --diag-interval > 0"
        )
    out = {"step": np.array([r["step"] for r in rows])}
    for key in MEASURES:
        out[key] = np.array(
            [np.nan if r["modadd"].get(key) is None else r["modadd"][key] for r in rows], float
        )
    out["freq_norms"] = np.array([r["modadd"]["freq_norms"] for r in rows], dtype=float)
    out["key_freqs"] = [r["modadd"]["key_freqs"] for r in rows]
    return out


def first_step(steps: np.ndarray, ok: np.ndarray) -> int | None:
    """The first step where `ok` holds, or None."""
    hit = np.flatnonzero(ok)
    return int(steps[hit[0]]) if hit.size else None


def phases(records: list[dict]) -> dict[str, tuple[int, int]] | None:
    """{phase: (first step, last step)} by the rules of the module docstring, each boundary a
    recorded step; None when the run has not gone through all three (its test loss never falls
    below CLEANUP_END_LOSS, or its excluded loss never rises)."""
    s = modadd_series(records)
    st, excluded, test = s["step"], s["excluded_loss"], s["test_loss"]
    if not np.isfinite(excluded).any():
        return None
    low = int(np.nanargmin(excluded))
    top = low + int(np.nanargmax(excluded[low:]))
    if top == low:
        return None
    rise = excluded[low] + CLEANUP_RISE * (excluded[top] - excluded[low])
    formed = low + int(np.flatnonzero(excluded[low : top + 1] >= rise)[0])
    clean = np.flatnonzero((test < CLEANUP_END_LOSS) & (np.arange(len(st)) >= formed))
    if not clean.size:
        return None
    memorised, circuit, cleaned = int(st[low]), int(st[formed]), int(st[clean[0]])
    return {
        "memorisation": (int(st[0]), memorised),
        "circuit formation": (memorised, circuit),
        "cleanup": (circuit, cleaned),
    }


def grokking_summary(records: list[dict]) -> dict:
    """What the figure and docs/results.md read: the first step with train accuracy >= 99%
    (memorised) and the test accuracy there; the first step with test accuracy >= 99% (grokked);
    whether generalisation was delayed (test accuracy below DELAYED_BELOW when memorised, grokked
    at DELAYED_FACTOR times that step or later); the first step with train loss < 0.04, the step and
    value of the test-loss peak, the first steps with test loss < 1 and < 0.01; the phases; the
    last key frequencies."""
    s = modadd_series(records)
    st = s["step"]
    hit = np.flatnonzero(s["train_accuracy"] >= MEMORISED_ACCURACY)
    memorised = int(st[hit[0]]) if hit.size else None
    test_then = float(s["test_accuracy"][hit[0]]) if hit.size else None
    grokked = first_step(st, s["test_accuracy"] >= GROKKED_ACCURACY)
    delayed = None
    if memorised is not None and grokked is not None:
        delayed = test_then < DELAYED_BELOW and grokked >= DELAYED_FACTOR * max(memorised, 1)
    peak = int(np.nanargmax(s["test_loss"]))
    return {
        "memorised_step": memorised,
        "test_accuracy_when_memorised": test_then,
        "grokked_step": grokked,
        "delayed": delayed,
        "train_below_0.04": first_step(st, s["train_loss"] < 0.04),
        "test_peak": float(s["test_loss"][peak]),
        "test_peak_step": int(st[peak]),
        "test_below_1": first_step(st, s["test_loss"] < 1),
        "test_below_0.01": first_step(st, s["test_loss"] < 0.01),
        "phases": phases(records),
        "key_freqs": s["key_freqs"][-1],
        "last_step": int(st[-1]),
        "last_test_accuracy": float(s["test_accuracy"][-1]),
        "max_fourier_check": float(np.nanmax(s["fourier_check"])),
    }


PHASE_COLOURS = ("tab:blue", "tab:orange", "tab:green")


def _shade(ax, ph) -> None:
    for (name, (a, b)), colour in zip((ph or {}).items(), PHASE_COLOURS):
        ax.axvspan(a, b, color=colour, alpha=0.12, label=f"{name} {a:,}-{b:,}")


def grokking_figure(records: list[dict], path=None):
    """Four panels (see the module docstring) -> a matplotlib Figure, saved as PNG at `path`."""
    s, summary = modadd_series(records), grokking_summary(records)
    st, ph = s["step"], summary["phases"]
    fig = new_figure(18, 4.5)
    ax_loss, ax_fourier, ax_weights, ax_spec = fig.subplots(1, 4)
    ax_loss.plot(st, s["train_loss"], label="train loss")
    ax_loss.plot(st, s["test_loss"], label="test loss")
    _shade(ax_loss, ph)
    ax_loss.set_yscale("log")
    ax_loss.set_xlabel("step")
    if summary["grokked_step"] is not None:
        ax_loss.set_title(
            f"memorised (train acc >= 99%) at step {summary['memorised_step']} with test acc "
            f"{summary['test_accuracy_when_memorised']:.0%};\ngrokked (test acc >= 99%) at step "
            f"{summary['grokked_step']}",
            fontsize=9,
        )
    else:
        ax_loss.set_title(
            f"not grokked by step {summary['last_step']}: test accuracy {summary['last_test_accuracy']:.1%}",
            fontsize=9,
        )
    ax_loss.legend(fontsize=7)

    ax_fourier.plot(st, s["restricted_loss"], label="restricted loss (key frequencies kept)")
    ax_fourier.plot(st, s["excluded_loss"], label="excluded loss (key frequencies removed; train)")
    ax_fourier.plot(st, s["train_loss"], label="train loss", alpha=0.5)
    _shade(ax_fourier, ph)
    ax_fourier.set_yscale("log")
    ax_fourier.set_xlabel("step")
    ax_fourier.set_title(
        "phases: " + ("; ".join(f"{n} {a:,}-{b:,}" for n, (a, b) in ph.items()) if ph else "not all three"),
        fontsize=8,
    )
    ax_fourier.legend(fontsize=7)

    ax_weights.plot(st, s["weight_norm"], color="tab:purple", label="weight norm (l2)")
    ax_weights.set_xlabel("step")
    ax_weights.set_ylabel("weight norm", color="tab:purple")
    ax_gini = ax_weights.twinx()
    ax_gini.plot(st, s["gini"], color="tab:brown", label="Gini of the embedding's Fourier norms")
    ax_gini.set_ylabel("Gini coefficient", color="tab:brown")
    _shade(ax_weights, ph)
    ax_weights.set_title("weight norm and the embedding's Fourier sparsity (Gini)", fontsize=9)

    norms = s["freq_norms"][-1]
    ks = np.arange(1, len(norms) + 1)
    key = set(summary["key_freqs"])
    ax_spec.bar(ks, norms, color=["tab:red" if k in key else "tab:gray" for k in ks])
    ax_spec.set_xlabel("frequency k")
    ax_spec.set_ylabel("norm of the embedding's Fourier component")
    share = float((norms[[k - 1 for k in sorted(key)]] ** 2).sum() / max((norms**2).sum(), 1e-300))
    ax_spec.set_title(
        f"embedding spectrum, step {summary['last_step']}:\nkey k = {sorted(key)} hold {share:.0%} of its norm^2",
        fontsize=9,
    )
    return finish(fig, path)


def _finite(v) -> float | None:
    """A number for the page's JSON: NaN and infinity (a diverging run's) as None (null)."""
    return float(v) if v is not None and np.isfinite(v) else None


def slider_frames(records: list[dict]) -> list[dict | None]:
    """Per record, the grokking measures report.html's step slider replays (the `progress` entry
    of viz/html.py's frames; None for a record without them): train, test, restricted and
    excluded loss as curves over training (log scale) with the three phases shaded where `phases`
    puts them, and the embedding's Fourier spectrum at that step as bars (red: its key
    frequencies)."""
    ph = phases(records)
    spans = [[a, b, f"{name}: steps {a:,}-{b:,}"] for name, (a, b) in (ph or {}).items()]
    frames = []
    for r in records:
        m = r.get("modadd")
        if not isinstance(m, dict):
            frames.append(None)
            continue
        norms, key = [_finite(v) or 0.0 for v in m["freq_norms"]], set(m["key_freqs"])
        gini = m.get("gini")
        frames.append(
            {
                "title": "Grokking progress measures",
                "series": [
                    [name.replace("_", " "), _finite(m[name])]
                    for name in ("train_loss", "test_loss", "restricted_loss", "excluded_loss")
                ],
                "log": True,
                "spans": spans,
                "bars": {
                    "title": "the embedding's Fourier spectrum at this step (red: key frequencies)",
                    "labels": [str(k) for k in range(1, len(norms) + 1)],
                    "values": norms,
                    "on": [k in key for k in range(1, len(norms) + 1)],
                    "line": None,
                },
                "note": (
                    f"test accuracy {m['test_accuracy']:.1%}, train accuracy {m['train_accuracy']:.1%}; "
                    f"key frequencies {sorted(key)}; weight norm {m['weight_norm']:.1f}"
                    + ("" if gini is None else f"; Gini of the embedding's Fourier norms {gini:.2f}")
                    + ("" if ph else "; the three phases are not all in this run")
                ),
            }
        )
    return frames
