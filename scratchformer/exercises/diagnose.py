"""The "diagnose this run" exercise (`solutions/diagnose_runs.py`): four small recorded runs,
each with one planted fault, and the learner names each run's fault.

`make_runs(directory)` trains the four runs (a names GPT of 2 layers, 16 wide, ReLU
feed-forwards, 40 steps of 16 names, a diagnostics record every 4 steps and at step 0; about 2 s
each on a core) into directory/a .. directory/d; `scratchformer exercise diagnose_runs` makes
them beside the stub. Each is an ordinary run directory: `scratchformer viz DIR --all` draws
its figures (diag_*.png: the diagnostics) and
`training.diagnostics.read_records(DIR / "diagnostics.jsonl")` reads its records.
The faults, and the records that show them (makemore part 3's readings):

    lr_too_high         lr 1.0: the update:data ratios sit near 10^-1 (the guide is ~10^-3),
                        the loss climbs from 3.3 to over 10, and ReLUs die as the run goes on
    dead_relu           the first feed-forward's biases start at -10: every hidden unit is dead
                        (`dead` = 1 in every record), so the feed-forwards' first layers never learn
    vanishing_gradient  block 0's second feed-forward layer starts 1000x too small: the gradient
                        reaching block 0's hidden units (`grad_std` of the layers) is 1000x below
                        block 1's at step 0
    init_too_large      the output layer starts 30x too large: the loss begins near 20, far above
                        the -log(1/27) = 3.3 of a uniform guess, and every gradient is ~30x larger

The grader compares the answers with RUNS; the records' signs are checked by
tests/exercises/test_exercises_more.py on runs it makes.
"""

from __future__ import annotations

from pathlib import Path

from scratchformer.exercises.catalogue import Verdict

FAULTS = {
    "lr_too_high": "the update:data ratios (about 10^-1, the guide is 10^-3) and a rising loss",
    "dead_relu": "the fraction of dead hidden units (1.0 from step 0)",
    "vanishing_gradient": "the gradient reaching one block's hidden units, far below the other block's at step 0",
    "init_too_large": "the first loss, far above -log(1/vocab), with every gradient large from step 0",
}
RUNS = {"a": "vanishing_gradient", "b": "lr_too_high", "c": "init_too_large", "d": "dead_relu"}
RUNS_DIR = "diagnose_runs"
UNKNOWN = "draw each run's figures (scratchformer viz diagnose_runs/a --all) and compare them with each other"


def _plant(fault: str, params: dict) -> None:
    if fault == "dead_relu":
        for name, p in params.items():
            if name.endswith("ff.fc1.bias"):
                p.data[...] = -10.0
    elif fault == "vanishing_gradient":
        params["h.0.ff.fc2.weight"].data *= 1e-3
    elif fault == "init_too_large":
        params["lm_head.weight"].data *= 30.0


def make_runs(directory: str | Path) -> Path:
    """Train the four runs into directory/a .. directory/d (RUNS: the fault of each)."""
    from scratchformer.training.jobs import build_job
    from scratchformer.training.trainer import train

    directory = Path(directory)
    for name, fault in RUNS.items():
        lr = 1.0 if fault == "lr_too_high" else 3e-3
        job, cfg = build_job(
            "lines",
            model=dict(n_layer=2, n_head=2, n_embd=16, dropout=0.0, activation="relu"),
            train=dict(
                max_steps=40,
                batch_size=16,
                lr=lr,
                min_lr=lr / 10,
                warmup_steps=0,
                diag_interval=4,
                eval_interval=40,
                workers=1,
                num_samples=0,
            ),
        )
        _plant(fault, dict(job.model.named_parameters()))
        train(job, cfg, directory / name, progress=False, verbose=False)
    return directory


def setup(stub: Path) -> str:
    """Beside the stub: the runs to diagnose (made once; kept if already there)."""
    runs = stub.parent / RUNS_DIR
    if not all((runs / name / "diagnostics.jsonl").is_file() for name in RUNS):
        make_runs(runs)
    return (
        f"the runs to diagnose are in {runs}/ (a, b, c, d): scratchformer viz {runs}/a --all draws one's "
        "figures, the diagnostics among them"
    )


def grade(diagnose, progress) -> Verdict:
    progress("your diagnose")
    got = diagnose()
    if not isinstance(got, dict) or set(got) != set(RUNS):
        return Verdict(
            False,
            f"diagnose returned {got!r}; it must return a dict with one answer for each run, "
            f"{{{', '.join(repr(r) + ': ...' for r in RUNS)}}}",
        )
    for run, fault in RUNS.items():
        answer = got[run]
        if answer not in FAULTS:
            return Verdict(False, f"run {run}: {answer!r} is not one of the faults: {', '.join(FAULTS)}")
        if answer != fault:
            return Verdict(
                False,
                f"run {run}: not {answer}",
                f"{answer} shows as {FAULTS[answer]}; run {run}'s records do not: look at the other readings",
            )
    return Verdict(True, f"every run's fault is named ({', '.join(f'{r}: {f}' for r, f in RUNS.items())})")
