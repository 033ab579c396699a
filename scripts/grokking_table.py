"""Markdown rows for docs/results.md from modadd run directories: grokked or not, the steps
where train loss < 0.04, the test-loss peak, test loss < 1 and < 0.01, whether the excluded
loss rose first, the key frequencies, and the CPU/wall time in a NAME.time file beside the run
(scripts/grokking_runs.sh writes them). Usage: python scripts/grokking_table.py RUN_DIR..."""

import sys
from pathlib import Path

from scratchformer.training.diagnostics import DIAG_FILE, read_records
from scratchformer.viz.grokking import grokking_summary

print(
    "| run | last step | test acc | grokked (>= 99%) at | train < 0.04 | test peak (step) | test < 1 | "
    "test < 0.01 | excluded loss rose first | key k | time |"
)
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for run in map(Path, sys.argv[1:]):
    s = grokking_summary(read_records(run / DIAG_FILE)[1])
    t = run.with_suffix(".time")
    time = (t.read_text().strip().splitlines() or [""])[-1] if t.exists() else ""
    print(
        f"| {run.name} | {s['last_step']} | {s['last_test_accuracy']:.4f} | {s['grokked_step'] or 'no'} | "
        f"{s['train_below_0.04']} | {s['test_peak']:.1f} ({s['test_peak_step']}) | {s['test_below_1']} | "
        f"{s['test_below_0.01']} | {s['excluded_rose_first']} | {s['key_freqs']} | {time} |"
    )
