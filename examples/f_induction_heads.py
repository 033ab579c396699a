"""Induction heads forming (Olsson et al. 2022, "In-context learning and induction heads"): a
2-layer attention-only GPT on random tokens whose last part repeats a random segment, trained
here while the progress measures are recorded, beside a 1-layer model trained the same way.

What it shows:
  - `train --task induction` as a script: the run's defaults (RUN_DEFAULTS["induction"]), the
    library's trainer, and the progress measures it writes into diagnostics.jsonl at every
    record: the loss on the first copy and on the repeat, the in-context-learning score, every
    head's prefix-matching and previous-token score, and the loss the best (and the weakest)
    induction head's ablation costs (scratchformer.lens: head_scores, run_with_hooks);
  - the figure of those measures over training (viz/induction.py), its phase change located
    from the data, and the best head's attention on one held-out sequence.
What to notice (each sentence below is printed from this run's numbers, with a verdict):
  - the repeat's loss falls far below the first copy's, which no model can predict;
  - the heads of the last layer prefix-match (> 0.5): from a repeated token they look at the
    token after that token's previous occurrence, reading the previous-token heads of layer 0;
    zeroing them brings the repeat's loss back; with two of them sharing the work, zeroing one
    alone brings back only part of it (and the "weakest" is no bystander);
  - a 1-layer model, trained the same way, finds no such head and its repeat loss stays high:
    matching the previous token's *successor* needs a previous-token head in an earlier layer.
Run: python examples/f_induction_heads.py [--quick] [--out DIR]   (full: a few minutes)
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
    job, cfg = build_job("induction", model={"n_layer": n_layer}, train={**small, "workers": 1, "num_samples": 0},
                         data=small_data)
    run_dir = out / f"run_{n_layer}layer"
    train(job, cfg, run_dir, progress=False, verbose=False, overwrite=True)
    return job, read_records(run_dir / DIAG_FILE)[1]


job, records = run(2)
print(f"{job.model.num_parameters():,} parameters, attention only: {job.model.config.attn_only}; "
      f"{len(records)} records of the progress measures, every {records[1]['step'] - records[0]['step']} steps")

# %% The measures at the end of training
last = records[-1]
scores = np.asarray(last["prefix_matching"])
layer, head = last["best_head"]
wl, wh = last["worst_head"]
print(f"loss on the first copy {last['loss_first']:.3f}, on the repeat {last['loss_repeat']:.3f} "
      f"(log of the symbols: {np.log(job.model.config.vocab_size):.3f}); in-context-learning score "
      f"{last['icl_score']:+.3f}")
print("prefix-matching score per head (rows: layers): " + json.dumps(np.round(scores, 2).tolist()))
print("previous-token score per head (rows: layers): " + json.dumps(np.round(last["previous_token"], 2).tolist()))
advantage = last["loss_first"] - last["loss_repeat"]  # what the context is worth on the repeat


def share(cost: float) -> str:
    return f"{100 * cost / advantage:.0f}% of the repeat's advantage" if advantage > 0.05 else "no advantage yet"


kept = last["ablate_induction"] / advantage if advantage > 0.05 else 0.0
print(f"best induction head L{layer}H{head} ({scores[layer, head]:.2f}): ablating it costs "
      f"{last['ablate_best']:+.3f} nats on the repeat ({share(last['ablate_best'])}); the weakest of its layer, "
      f"L{wl}H{wh} ({scores[wl, wh]:.2f}): {last['ablate_worst']:+.3f}; all {len(last['induction_heads'])} heads "
      f"above 0.5 together: {last['ablate_induction']:+.3f} ({share(last['ablate_induction'])})")
pc = IND.phase_change(records)
print("phase change: " + ("none (the repeat loss never fell by 0.5)" if pc is None else
                          f"the repeat loss fell fastest between steps {pc[0]} and {pc[1]} (by {pc[2]:.2f})"))

# %% A 1-layer model, trained the same way
job1, records1 = run(1)
one = records1[-1]
print(f"1 layer: loss on the repeat {one['loss_repeat']:.3f}, first copy {one['loss_first']:.3f}, best "
      f"prefix-matching score {np.max(one['prefix_matching']):.2f}")

# %% What to notice, from the numbers above
formed = scores[layer, head] > 0.5
halves = last["loss_repeat"] < 0.5 * last["loss_first"]
back = kept > 0.5
alone = advantage > 0.05 and last["ablate_best"] > 0.5 * advantage
shared = abs(last["ablate_worst"]) >= 0.1 * max(last["ablate_best"], 1e-9)
fails = np.max(one["prefix_matching"]) <= 0.5 and one["loss_repeat"] > 2 * last["loss_repeat"]
print(f"the repeat's loss is {'below half' if halves else 'not below half'} of the first copy's; "
      f"the best head {'is' if formed else 'is not'} an induction head (> 0.5); ablating the induction heads brings "
      f"back {'most' if back else 'less than half'} of the repeat's advantage, the best one alone "
      f"{'most' if alone else 'less than half'}; the weakest head of its layer "
      f"{'shares the work (its ablation costs at least a tenth of the best one' + chr(39) + 's)' if shared else 'costs almost nothing'}; "
      f"the 1-layer model {'fails' if fails else 'does not clearly fail'}")
bars = [formed, halves, back, fails]
print(f"verdict: {sum(bars)} of 4 bars hold" + (" -- induction heads formed in 2 layers and not in 1" if all(bars)
                                               else " (a --quick run is too short for them)" if quick else ""))
if not quick:
    assert all(bars), "the induction bars did not hold: see the lines above"

# %% Figures: the measures over training, and the best head on one held-out sequence
IND.progress_figure(records, path=out / "induction_progress.png")
v = job.viz_inputs(None)
maps = viz.trace.attention_maps(job.model, np.asarray(v["ids"]))["encoder"]  # (n_layer, n_head, T, T)
viz.attention_grid(maps, list(v["tokens"]), title=f"induction run: every layer x head (best: L{layer}H{head})",
                   path=out / "attention_grid.png")
print(f"figures in {out}")
