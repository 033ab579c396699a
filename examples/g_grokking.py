"""Grokking modular addition on a CPU (Nanda et al. 2023, "Progress measures for grokking via
mechanistic interpretability"; the TransformerLens Grokking demo).

A 1-layer GPT without LayerNorm reads `a b =` and answers (a + b) mod p at '='. Trained
full-batch with strong weight decay on a fraction of the p^2 pairs, it first memorises them
(train loss falls, test loss rises), then, much later, generalises (test loss collapses). The
progress measures of the paper are recorded during training in diagnostics.jsonl: the key
frequencies of the token embedding's Fourier transform, the restricted loss (the logits kept
only on those frequencies) and the excluded loss (those frequencies removed), the weight norm.

This script trains the fast preset (`PRESETS["fast"]` in scratchformer/training/modadd.py, the
same as `scratchformer train --task modadd --preset fast`: a smaller modulus, a smaller share of
the pairs, a larger learning rate; the paper's preset takes ~10,000 steps, see docs/results.md)
through the same `train` as the command line.

What it shows: train/test loss on a log scale, restricted and excluded loss, the weight norm and
the Gini coefficient of the embedding's Fourier norms, with the three phases of the paper
(memorisation, circuit formation, cleanup) shaded where the rules of viz/grokking.py put them;
the embedding's Fourier spectrum with its key frequencies (grokking.png).
What to notice (each sentence printed below is computed from this run's numbers):
  - generalisation is delayed: the test accuracy is low when the training set is memorised, and
    reaches 99% only at a step several times later;
  - the excluded loss (the key frequencies removed) rises while the test loss is still high: the
    key frequencies carry the answer before the test accuracy shows it;
  - the Fourier decomposition of the logits sums back to the logits in float64;
  - a verdict line: grokked (test accuracy >= 99%) or not, and at which step.
Run: python examples/g_grokking.py [--quick] [--out DIR]
(full run: 121 s of CPU, 73 s wall on an AMD EPYC; docs/course.md)
"""

# %% Set-up: the fast preset, or a tiny smoke run with --quick
from _common import setup

from scratchformer.training.diagnostics import DIAG_FILE, read_records
from scratchformer.training.jobs import build_job
from scratchformer.training.modadd import PRESETS
from scratchformer.training.trainer import train
from scratchformer.viz.grokking import grokking_figure, grokking_summary

out, quick = setup("g_grokking", __doc__)
preset = PRESETS["fast"]
model, settings, data = dict(preset["model"]), dict(preset["train"]), dict(preset["data"])
if quick:  # a smoke run: a small model, a few steps (it does not grok)
    model.update(n_embd=32, n_inner=64)
    data.update(modulus=11)
    settings.update(max_steps=20, diag_interval=5, eval_interval=10, workers=1)
job, cfg = build_job("modadd", model, settings, data)
p = job.p
print(
    f"p = {p}: {len(job.splits['train'])} training pairs, {len(job.splits['test'])} held out; "
    f"{job.model.num_parameters():,} parameters, normalization={job.model.config.normalization}"
)

# %% Train (full batch), recording the progress measures every diag_interval steps
run_dir = out / "run"
summary = train(job, cfg, run_dir, progress=False, verbose=False, overwrite=True)
_, records = read_records(run_dir / DIAG_FILE)
s = grokking_summary(records)
print(f"trained {summary['step']} steps; {len(records)} records of the progress measures")

# %% The Fourier check: the decomposition of the logits sums back (float64)
print(
    f"largest |logits - sum of their 2-D Fourier components| over the run: {s['max_fourier_check']:.1e} "
    f"(exact: {s['max_fourier_check'] < 1e-9})"
)

# %% The figure: losses, restricted/excluded loss, weight norm and Gini, the embedding's spectrum
grokking_figure(records, out / "grokking.png")
last = records[-1]["modadd"]
print(
    f"key frequencies at step {s['last_step']}: {s['key_freqs']} (their share of the embedding's squared "
    f"Fourier norm {last['key_share']:.0%}; Gini coefficient of its Fourier norms {last['gini']:.2f})"
)

# %% What to notice, from this run's numbers
memorised, then, grokked = s["memorised_step"], s["test_accuracy_when_memorised"], s["grokked_step"]
if memorised is not None and grokked is not None:
    print(
        f"memorised (train accuracy >= 99%) at step {memorised} with test accuracy {then:.1%}; grokked "
        f"(test accuracy >= 99%) at step {grokked}, {grokked / max(memorised, 1):.1f} times later: "
        f"generalisation delayed: {s['delayed']} (bars: test accuracy below 50% when memorised, "
        f"grokked at 3 times that step or later)"
    )
else:
    print(f"memorised at step {memorised}, grokked at step {grokked} (None: not within this run)")
ph = s["phases"]
print(
    "phases (Nanda et al. 2023, section 5.2; paper: memorisation 0-1.4k, circuit formation 1.4k-9.4k, "
    "cleanup 9.4k-14k): "
    + ("; ".join(f"{name} {a}-{b}" for name, (a, b) in ph.items()) if ph else "not all three within this run")
)
print(f"test loss peak: {s['test_peak']:.2f} at step {s['test_peak_step']} (paper: ~34 near 1,400)")
print(
    f"verdict: {'grokked' if grokked is not None else 'not grokked'} -- test accuracy "
    f"{s['last_test_accuracy']:.4f} at step {s['last_step']}"
    + (f", >= 99% from step {grokked}" if grokked is not None else "")
)
