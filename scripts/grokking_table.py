"""Markdown rows for docs/results.md from modadd run directories (scripts/grokking_runs.sh):
where the training set is memorised (train accuracy >= 99%) and the test accuracy there, where
the run groks (test accuracy >= 99%) and how many times later, whether generalisation was
delayed by the bars of viz/grokking.py, the three phases located by its rules, the test-loss
peak, the key frequencies at the end, and the CPU (user + sys) and wall seconds of NAME.time
beside the run. Usage: python scripts/grokking_table.py RUN_DIR..."""

import sys
from pathlib import Path

from scratchformer.training.diagnostics import DIAG_FILE, read_records
from scratchformer.viz.grokking import grokking_summary

print(
    "| run | memorised at (test acc there) | grokked at (x later) | delayed | memorisation | "
    "circuit formation | cleanup | test-loss peak (step) | key k at the end | CPU (wall) |"
)
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for run in map(Path, (a for a in sys.argv[1:] if Path(a).is_dir())):
    s = grokking_summary(read_records(run / DIAG_FILE)[1])
    t = run.with_suffix(".time")
    time = ""
    if t.exists() and len(t.read_text().split()) >= 3:  # empty while the run is still going
        user, system, wall = map(float, t.read_text().split()[-3:])
        time = f"{user + system:.0f} s ({wall:.0f} s)"
    mem, grok = s["memorised_step"], s["grokked_step"]
    ratio = f" ({grok / max(mem, 1):.0f}x)" if mem is not None and grok is not None else ""
    ph = s["phases"] or {}
    spans = [
        f"{a:,}-{b:,}" if name in ph else "-"
        for name in ("memorisation", "circuit formation", "cleanup")
        for a, b in [ph.get(name, (0, 0))]
    ]
    grokked = f"{grok:,}" if grok is not None else f"not by {s['last_step']:,}"
    then = "" if s["test_accuracy_when_memorised"] is None else f" ({s['test_accuracy_when_memorised']:.1%})"
    print(
        f"| {run.name} | {'no' if mem is None else format(mem, ',')}{then} | {grokked}"
        f"{ratio} | {'yes' if s['delayed'] else 'no'} | {' | '.join(spans)} | {s['test_peak']:.1f} "
        f"({s['test_peak_step']:,}) | {s['key_freqs']} | {time} |"
    )
