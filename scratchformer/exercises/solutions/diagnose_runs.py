"""Exercise diagnose_runs: name the fault planted in each of four small recorded runs.

`scratchformer exercise diagnose_runs` made four runs beside this file, in diagnose_runs/a ..
diagnose_runs/d: a names GPT (2 layers, 16 wide, ReLU feed-forwards) trained 40 steps, with a
diagnostics record at step 0 and every 4 steps. Each has one of these faults, each a different
one:

    lr_too_high          the learning rate is far too high
    dead_relu            the feed-forward's hidden units never fire
    vanishing_gradient   one layer's gradient vanishes
    init_too_large       the initialisation is far too large

Read their diagnostics (`scratchformer viz diagnose_runs/a --all` draws a run's figures, the
diagnostics among them: diag_*.png; `scratchformer.training.diagnostics.read_records(path)` reads
diagnose_runs/a/diagnostics.jsonl, and log.jsonl has the loss) and write `diagnose()`: return
{"a": FAULT, "b": FAULT, "c": FAULT, "d": FAULT}, each FAULT one of the four names above. (The
grader runs your file in a directory of its own: read the runs from beside it,
`Path(__file__).parent / "diagnose_runs"`.)
"""


def diagnose():
    """Returns {run name: fault name}."""
    # BEGIN SOLUTION
    return {"a": "vanishing_gradient", "b": "lr_too_high", "c": "init_too_large", "d": "dead_relu"}
    # END SOLUTION
