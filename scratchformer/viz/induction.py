"""The induction task's progress measures over training (diagnostics.jsonl records written by
training/induction.py): the loss on the first copy and on the repeat with the phase change
marked where the data put it, and every head's prefix-matching score over the steps.

    phase_change(records)          (step before, step after, fall) of the steepest fall of the
                                   repeat loss, or None when it never falls by PHASE_MIN_FALL
    induction_claims(records)      the titles' phrases, computed from the numbers
    progress_figure(records)       the figure
    slider_frames(records)         per record, what report.html's step slider draws of them
"""

from __future__ import annotations

import numpy as np

from scratchformer.viz._plot import finish, new_figure

PHASE_MIN_FALL = 0.5  # nats: a smaller total fall of the repeat loss is no phase change
INDUCTION_HEAD = 0.5  # prefix-matching score above which a head is called an induction head


def has_measures(records) -> bool:
    """Do these diagnostics records hold the induction progress measures?"""
    return bool(records) and all("prefix_matching" in r for r in records)


def _series(records, key) -> np.ndarray:
    return np.array([np.nan if r[key] is None else r[key] for r in records], dtype=np.float64)


def phase_change(records) -> tuple[int, int, float] | None:
    """(step a, step b, fall): the two consecutive records between which the repeat loss falls
    fastest per step, and how much it falls there; None when the loss falls by less than
    PHASE_MIN_FALL over the whole run (or there are fewer than two records)."""
    if len(records) < 2:
        return None
    steps, rep = np.array([r["step"] for r in records], float), _series(records, "loss_repeat")
    if not np.isfinite(rep).all() or rep[0] - np.min(rep) < PHASE_MIN_FALL:
        return None
    rate = -np.diff(rep) / np.maximum(np.diff(steps), 1)
    i = int(np.argmax(rate))
    return int(steps[i]), int(steps[i + 1]), float(rep[i] - rep[i + 1])


def head_label(records, layer: int, head: int) -> str:
    return f"{records[-1]['heads'][layer]}H{head}"


def induction_claims(records) -> dict[str, str]:
    """{"loss": ..., "heads": ...}: what the two panels show, from their numbers."""
    last, first = records[-1], records[0]
    pc = phase_change(records)
    if pc is None:
        loss = (
            f"repeat loss {first['loss_repeat']:.2f} -> {last['loss_repeat']:.2f} (first copy "
            f"{last['loss_first']:.2f}): no phase change"
        )
    else:
        loss = (
            f"repeat loss {first['loss_repeat']:.2f} -> {last['loss_repeat']:.2f} (first copy "
            f"{last['loss_first']:.2f}); steepest fall ({pc[2]:.2f}) between steps {pc[0]} and {pc[1]}"
        )
    scores = np.asarray(last["prefix_matching"], float)
    layer, head = np.unravel_index(int(np.nanargmax(scores)), scores.shape)
    best = float(scores[layer, head])
    name = head_label(records, layer, head)
    if best > INDUCTION_HEAD:
        n = int((scores > INDUCTION_HEAD).sum())
        heads = (
            f"{name} prefix-matches at {best:.2f} (> {INDUCTION_HEAD}); ablating it costs "
            f"{last['ablate_best']:+.2f} nats on the repeat, all {n} such heads "
            f"{last.get('ablate_induction', float('nan')):+.2f}"
        )
    else:
        heads = f"no induction head: the best, {name}, prefix-matches at {best:.2f} (<= {INDUCTION_HEAD})"
    return {"loss": loss, "heads": heads}


def progress_figure(records, path=None):
    """Left: loss on the first copy and on the repeat over training, the phase change shaded.
    Right: each head's prefix-matching score over training (induction heads rise above 0.5)."""
    steps = [r["step"] for r in records]
    claims = induction_claims(records)
    fig = new_figure(11, 3.8)
    a, b = fig.subplots(1, 2)
    a.plot(steps, _series(records, "loss_first"), marker=".", label="first copy (unpredictable)")
    a.plot(steps, _series(records, "loss_repeat"), marker=".", label="repeat")
    pc = phase_change(records)
    if pc is not None:
        a.axvspan(pc[0], pc[1], color="orange", alpha=0.25, label="steepest fall")
    a.set_xlabel("step")
    a.set_ylabel("loss (nats per token)")
    a.set_ylim(0, None)
    a.legend(fontsize=7)
    a.set_title(claims["loss"], fontsize=8, wrap=True)
    scores = np.array([r["prefix_matching"] for r in records], dtype=np.float64)  # (R, L, H)
    for layer in range(scores.shape[1]):
        for head in range(scores.shape[2]):
            b.plot(
                steps,
                scores[:, layer, head],
                label=head_label(records, layer, head),
                linestyle="-" if layer == scores.shape[1] - 1 else "--",
            )
    b.axhline(INDUCTION_HEAD, color="grey", linewidth=0.8, linestyle=":")
    b.set_xlabel("step")
    b.set_ylabel("prefix-matching score")
    b.set_ylim(0, 1)
    b.legend(fontsize=6, ncol=2)
    b.set_title(claims["heads"], fontsize=8, wrap=True)
    fig.suptitle("Induction heads forming: progress measures recorded during training", fontsize=10)
    return finish(fig, path)


def _finite(v) -> float | None:
    """A number for the page's JSON: NaN and infinity (a diverging run's) as None (null)."""
    return float(v) if v is not None and np.isfinite(v) else None


def slider_frames(records) -> list[dict]:
    """Per record, the induction measures report.html's step slider replays (the `progress`
    entry of viz/html.py's frames): the two losses and the best and weakest heads' ablation
    costs as curves over training with the phase change shaded where `phase_change` finds it,
    and each head's prefix-matching score at that step as bars (red: above INDUCTION_HEAD)."""
    pc = phase_change(records)
    spans = [] if pc is None else [[pc[0], pc[1], f"steepest fall of the repeat loss: steps {pc[0]}-{pc[1]}"]]
    frames = []
    for r in records:
        scores = np.asarray(r["prefix_matching"], dtype=np.float64)  # (L, H)
        labels = [
            f"{r['heads'][layer]}H{head}"
            for layer in range(scores.shape[0])
            for head in range(scores.shape[1])
        ]
        flat = scores.ravel()
        best = head_label([r], *r["best_head"])
        note = (
            f"best head {best}: prefix matching {scores[tuple(r['best_head'])]:.2f}, ablating it costs "
            f"{r['ablate_best']:+.2f} nats on the repeat; the weakest other head "
            f"{head_label([r], *r['worst_head'])}: {r['ablate_worst']:+.2f}"
        )
        frames.append(
            {
                "title": "Induction progress measures",
                "series": [
                    [name, _finite(r[key])]
                    for name, key in (
                        ("loss first copy", "loss_first"),
                        ("loss repeat", "loss_repeat"),
                        ("ablate best head", "ablate_best"),
                        ("ablate weakest head", "ablate_worst"),
                    )
                ],
                "log": False,
                "spans": spans,
                "bars": {
                    "title": "prefix-matching score per head at this step (red: > 0.5)",
                    "labels": labels,
                    "values": [_finite(v) or 0.0 for v in flat],
                    "on": [bool(v > INDUCTION_HEAD) for v in flat],
                    "line": INDUCTION_HEAD,
                },
                "note": note,
            }
        )
    return frames
