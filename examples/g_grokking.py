"""Grokking modular addition on a CPU (Nanda et al. 2023, "Progress measures for grokking via
mechanistic interpretability"; the TransformerLens Grokking demo).

A 1-layer GPT without LayerNorm reads `a b =` and answers (a + b) mod p at '='. Trained
full-batch with strong weight decay on a fraction of the p^2 pairs, it first memorises them
(train loss falls, test loss rises), then, much later, generalises (test loss collapses). The
progress measures of the paper are recorded during training in diagnostics.jsonl: the key
frequencies of the token embedding's Fourier transform, the restricted loss (the logits kept
only on those frequencies) and the excluded loss (those frequencies removed), the weight norm.

This script trains the fast preset (`FAST_PRESET` in scratchformer/training/modadd.py: p = 31,
70% of the pairs, lr 3e-3; the paper's p = 113, 30% and lr 1e-3 take ~14,000 steps, see
docs/results.md) through the same `train` as `scratchformer train --task modadd`.

What it shows: train/test loss on a log scale with the step where test loss falls below 1
marked from the data; restricted and excluded loss; the embedding's Fourier spectrum
(grokking.png).
What to notice (each sentence printed below is computed from this run's numbers):
  - memorisation comes first: train loss falls below 0.04 long before test loss falls below 1;
  - the excluded loss rises while the model still memorises: the key frequencies already carry
    the answer before the test loss shows it;
  - the Fourier decomposition of the logits sums back to the logits in float64;
  - a verdict line: grokked (test accuracy >= 99%) or not, and at which step.
Run: python examples/g_grokking.py [--quick] [--out DIR]   (full: the fast preset, a few minutes)
"""

# %% Set-up: the fast preset, or a tiny smoke run with --quick
from _common import setup

from scratchformer.training.diagnostics import DIAG_FILE, read_records
from scratchformer.training.jobs import build_job
from scratchformer.training.modadd import FAST_PRESET
from scratchformer.training.trainer import train
from scratchformer.viz.grokking import grokking_figure, grokking_summary

out, quick = setup("g_grokking", __doc__)
model, settings, data = dict(FAST_PRESET["model"]), dict(FAST_PRESET["train"]), dict(FAST_PRESET["data"])
if quick:  # a smoke run: a small model, a few steps (it does not grok)
    model.update(n_embd=32, n_inner=64)
    data.update(modulus=11)
    settings.update(max_steps=20, diag_interval=5, eval_interval=10)
job, cfg = build_job("modadd", model, {**settings, "workers": 1}, data)
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

# %% The figure: losses, restricted/excluded loss, the embedding's spectrum
grokking_figure(records, out / "grokking.png")
print(f"key frequencies at step {s['last_step']}: {s['key_freqs']}")

# %% What to notice, from this run's numbers
fit, fall = s["train_below_0.04"], s["test_below_1"]
if fit is not None and fall is not None:
    print(
        f"memorisation first: train loss < 0.04 at step {fit}, test loss < 1 at step {fall} "
        f"({fall - fit} steps later; paper: ~200 and ~13,800)"
    )
else:
    print(f"train loss < 0.04 at step {fit}, test loss < 1 at step {fall} (None: not within this run)")
print(f"test loss peak: {s['test_peak']:.2f} at step {s['test_peak_step']} (paper: ~34 near 1,400)")
print(f"excluded loss rises before the test loss falls: {s['excluded_rose_first']}")
grokked = s["grokked_step"]
print(
    f"verdict: {'grokked' if grokked is not None else 'not grokked'} -- test accuracy "
    f"{s['last_test_accuracy']:.4f} at step {s['last_step']}"
    + (f", >= 99% from step {grokked}" if grokked is not None else "")
)
