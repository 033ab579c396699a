"""Induction heads forming (Olsson et al. 2022, "In-context learning and induction heads"): a
2-layer attention-only GPT on random tokens whose last part repeats a random segment, trained
here while the progress measures are recorded, beside a 1-layer model trained the same way.

What it shows:
  - `train --task induction` as a script: the run's defaults (RUN_DEFAULTS["induction"]), the
    library's trainer, and the progress measures it writes into diagnostics.jsonl at every
    record: the loss on the first copy and on the repeat, the repeat advantage (the loss on the
    last quarter of the positions minus the first quarter), every head's prefix-matching and
    previous-token score, and the loss the best induction head's (and the weakest other head's)
    ablation costs (scratchformer.lens: head_scores, run_with_hooks);
  - the figure of those measures over training (viz/induction.py), its phase change located
    from the data, and the best head's attention on one held-out sequence.
What to notice (each sentence below is printed from this run's numbers, with a verdict):
  - the repeat's loss falls far below the first copy's, which no model can predict;
  - the last layer's head prefix-matches (> 0.5): from a repeated token it looks at the token
    after that token's previous occurrence, reading layer 0's previous-token head; zeroing it
    alone brings the repeat's loss back (the default model has one head per layer: with two,
    both heads of layer 1 share the work and either alone brings back a fifth of it);
  - the weakest other head is layer 0's previous-token head: low on prefix matching, yet
    zeroing it costs as much, since the induction head reads it (the model has no idle head);
  - a 1-layer model, trained the same way, finds no such head and its repeat loss stays high:
    matching the previous token's *successor* needs a previous-token head in an earlier layer.
Run: python examples/f_induction_heads.py [--quick] [--out DIR]
(full run: 18 s of CPU, 18 s wall on an AMD EPYC; docs/course.md)
"""

# %% Set-up: the run's defaults, smaller and shorter with --quick
import json

import numpy as np
from _common import setup

from scratchformer import viz
from scratchformer.training.diagnostics import DIAG_FILE, read_records
from scratchformer.training.jobs import build_job
from scratchformer.training.trainer import train
from scratchformer.viz import induction as IND

out, quick = setup("f_induction_heads", __doc__)
small = dict(max_steps=20, diag_interval=10, eval_interval=20) if quick else {}
small_data = dict(n_train=500, n_test=64) if quick else {}


def run(n_layer: int):
    """Train the default induction run with n_layer layers; -> (job, its diagnostics records)."""
    job, cfg = build_job(
        "induction",
        model={"n_layer": n_layer},
        train={**small, "workers": 1, "num_samples": 0},
        data=small_data,
    )
    run_dir = out / f"run_{n_layer}layer"
    train(job, cfg, run_dir, progress=False, verbose=False, overwrite=True)
    return job, read_records(run_dir / DIAG_FILE)[1]


job, records = run(2)
print(
    f"{job.model.num_parameters():,} parameters, attention only: {job.model.config.attn_only}; "
    f"{len(records)} records of the progress measures, every {records[1]['step'] - records[0]['step']} steps"
)

# %% The measures at the end of training
last = records[-1]
scores = np.asarray(last["prefix_matching"])
layer, head = last["best_head"]
wl, wh = last["worst_head"]
print(
    f"loss on the first copy {last['loss_first']:.3f}, on the repeat {last['loss_repeat']:.3f} "
    f"(log of the symbols: {np.log(job.model.config.vocab_size):.3f}); repeat advantage (last quarter "
    f"minus first quarter of the positions) {last['repeat_advantage']:+.3f}"
)
print("prefix-matching score per head (rows: layers): " + json.dumps(np.round(scores, 2).tolist()))
print(
    "previous-token score per head (rows: layers): "
    + json.dumps(np.round(last["previous_token"], 2).tolist())
)
advantage = last["loss_first"] - last["loss_repeat"]  # what the context is worth on the repeat


def share(cost: float) -> str:
    return (
        f"{100 * cost / advantage:.0f}% of the repeat's advantage" if advantage > 0.05 else "no advantage yet"
    )


print(
    f"best induction head L{layer}H{head} ({scores[layer, head]:.2f}): ablating it costs "
    f"{last['ablate_best']:+.3f} nats on the repeat ({share(last['ablate_best'])}); the weakest other head, "
    f"L{wl}H{wh} (prefix matching {scores[wl, wh]:.2f}, previous-token {last['previous_token'][wl][wh]:.2f}): "
    f"{last['ablate_worst']:+.3f} ({share(last['ablate_worst'])}); all {len(last['induction_heads'])} heads "
    f"above 0.5 together: {last['ablate_induction']:+.3f} ({share(last['ablate_induction'])})"
)
pc = IND.phase_change(records)
print(
    "phase change: "
    + (
        "none (the repeat loss never fell by 0.5)"
        if pc is None
        else f"the repeat loss fell fastest between steps {pc[0]} and {pc[1]} (by {pc[2]:.2f})"
    )
)

# %% A 1-layer model, trained the same way
job1, records1 = run(1)
one = records1[-1]
print(
    f"1 layer: loss on the repeat {one['loss_repeat']:.3f}, first copy {one['loss_first']:.3f}, best "
    f"prefix-matching score {np.max(one['prefix_matching']):.2f}"
)

# %% What to notice, from the numbers above
formed = scores[layer, head] > 0.5
halves = last["loss_repeat"] < 0.5 * last["loss_first"]
alone = advantage > 0.05 and last["ablate_best"] > 0.5 * advantage  # one head brings most of it back
reads = wl < layer and last["previous_token"][wl][wh] > 0.3 and last["ablate_worst"] > 0.5 * advantage
fails = np.max(one["prefix_matching"]) <= 0.5 and one["loss_repeat"] > 2 * last["loss_repeat"]
print(
    f"the repeat's loss is {'below half' if halves else 'not below half'} of the first copy's; "
    f"the best head {'is' if formed else 'is not'} an induction head (> 0.5) and ablating it alone brings back "
    f"{'most' if alone else 'less than half'} of the repeat's advantage; the weakest other head "
    f"{'is the earlier previous-token head it reads (ablating it costs as much: no idle head)' if reads else 'is not the previous-token head it reads'}; "  # noqa: E501
    f"the 1-layer model {'fails' if fails else 'does not clearly fail'}"
)
bars = [formed, halves, alone, fails]
print(
    f"verdict: {sum(bars)} of 4 bars hold"
    + (
        " -- an induction head formed in 2 layers and not in 1"
        if all(bars)
        else " (a --quick run is too short for them)"
        if quick
        else ""
    )
)
if not quick:
    assert all(bars), "the induction bars did not hold: see the lines above"

# %% Figures: the measures over training, and the best head on one held-out sequence
IND.progress_figure(records, path=out / "induction_progress.png")
v = job.viz_inputs(None)
maps = viz.trace.attention_maps(job.model, np.asarray(v["ids"]))["encoder"]  # (n_layer, n_head, T, T)
viz.attention_grid(
    maps,
    list(v["tokens"]),
    title=f"induction run: every layer x head (best: L{layer}H{head})",
    path=out / "attention_grid.png",
)
print(f"figures in {out}")
