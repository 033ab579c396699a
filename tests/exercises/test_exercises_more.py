"""The exercises that are not a layer's backward: one BPE merge step (graded against the
library's trainer), "diagnose this run" (four recorded runs with one planted fault each) and
"find the induction head" (graded by ablation on a shipped model). Their stubs, reference
solutions and learner bugs are graded with the others in test_exercises.py; here, what their
graders rest on."""

import math
import sys
from pathlib import Path

import numpy as np
import pytest

from scratchformer.cli.main import main
from scratchformer.exercises import EXERCISES, bpe, check, diagnose, induction, solution_source


def _write(tmp_path, name, source):
    path = tmp_path / f"{name}.py"
    path.write_text(source, encoding="utf-8")
    return path


# -- bpe_merge --------------------------------------------------------------------------------
def test_the_bpe_text_has_one_most_frequent_pair_at_each_graded_merge():
    # the trainer's tie-breaking (its id order) never decides, so any right merge_step agrees with it
    words, merges = bpe.text_words(), bpe.trainer_merges()
    assert len(merges) == bpe.MERGES
    for want in merges:
        counts = bpe.pair_counts(words)
        top = max(counts.values())
        assert [p for p, c in counts.items() if c == top] == [want]
        words = bpe.merged(words, want)


def test_the_bpe_text_separates_the_counting_mistakes():
    # counting each word once, or each pair once per word, picks another pair within the graded merges
    def run(count):
        words, chosen = bpe.text_words(), []
        for _ in range(bpe.MERGES):
            c = count(words)
            chosen.append(max(c, key=c.get))
            words = bpe.merged(words, chosen[-1])
        return chosen

    right = bpe.trainer_merges()
    once = lambda ws: {p: sum(p in set(zip(w, w[1:])) for w in ws) for w in ws for p in zip(w, w[1:])}  # noqa: E731
    per_word = (
        lambda ws: {
            p: sum(n for w, n in ws.items() if p in set(zip(w, w[1:])))  # noqa: E731
            for w in ws
            for p in zip(w, w[1:])
        }
    )
    assert run(bpe.pair_counts) == right and run(once) != right and run(per_word) != right


def test_the_graded_merges_follow_the_trainer(monkeypatch, tmp_path):
    # the grader's answer comes from BPETokenizer.train: a trainer with other merges fails the reference
    from scratchformer.exercises import grading

    right = bpe.trainer_merges()
    monkeypatch.setattr(bpe, "trainer_merges", lambda: [right[1], right[0]] + right[2:])
    verdict = grading._verdict(
        EXERCISES["bpe_merge"],
        grading._class_from_source(solution_source("bpe_merge"), "merge_step", "<bpe>"),
        "<bpe>",
    )
    assert not verdict.right and verdict.text.startswith(f"merge 1: you merged {right[0]!r}")


# -- induction_head ---------------------------------------------------------------------------
def test_the_shipped_model_is_the_induction_run_s_and_small():
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
    import make_induction_exercise  # the task's defaults with two heads a layer

    from scratchformer.training.jobs import RUN_DEFAULTS

    model, data = induction.load_model()
    c = model.config
    made = {**RUN_DEFAULTS["induction"]["model"], **make_induction_exercise.MODEL}
    assert {k: getattr(c, k) for k in made} == made
    assert (c.vocab_size, c.block_size) == (data["symbols"], data["block_size"])
    assert (induction.MODEL_DIR / "model.safetensors").stat().st_size < 200_000
    assert not list(induction.MODEL_DIR.glob("*.pkl")) and not list(induction.MODEL_DIR.glob("*.pt"))


def test_one_later_head_does_most_of_the_induction():
    model, data = induction.load_model()
    tokens = induction.probe_tokens(data)
    table = induction.ablations(model, tokens, data["repeats"])
    later = np.sort(table[1:].ravel())
    assert later[-1] > 0.5  # zeroing the induction head costs the repeated half over half a nat
    assert later[-2] < induction.MOST * later[-1]  # one answer passes, not every head of the layer
    # the repeated half is predicted: far below the first copy's loss (about log 32)
    assert induction.repeat_loss(model, tokens, data["repeats"]) < 0.5 * math.log(data["symbols"])


def test_reordered_heads_compute_the_same_function():
    model, data = induction.load_model()
    x = induction.probe_tokens(data, 8)
    reordered = induction.permuted_heads(model, [1, 0])
    np.testing.assert_allclose(reordered(x)[0], model(x)[0], rtol=1e-5, atol=1e-5)
    t = induction.ablations(model, x, data["repeats"])
    np.testing.assert_allclose(induction.ablations(reordered, x, data["repeats"]), t[:, ::-1], atol=1e-5)


def test_an_answer_written_in_fails_on_the_reordered_model(tmp_path):
    written = "def find_induction_head(model, tokens):\n    return 1, {}\n"
    grade = check("induction_head", _write(tmp_path, "ih0", written.format(0)))  # right on the model only
    assert not grade.passed and grade.lines[0].startswith(
        "wrong: induction_head: the model with its heads reordered"
    )
    assert "an answer written in" in grade.cause
    grade = check("induction_head", _write(tmp_path, "ih1", written.format(1)))  # the weaker head of layer 1
    assert not grade.passed and grade.lines[0].startswith(
        "wrong: induction_head: the model: zeroing head (1, 1)"
    )
    # the reference answers (1, 0) then (1, 1)
    assert (
        "head (1, 0) of the model"
        in check("induction_head", _write(tmp_path, "ok", solution_source("induction_head"))).report()
    )


# -- diagnose_runs ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The four runs, made as the learner gets them: by writing the stub (about 10 s)."""
    d = tmp_path_factory.mktemp("course")
    import os

    cwd = os.getcwd()
    os.chdir(d)
    try:
        assert main(["exercise", "diagnose_runs"]) == 0
    finally:
        os.chdir(cwd)
    assert (d / "diagnose_runs.py").is_file()
    return d / diagnose.RUNS_DIR


def _reading(run: Path) -> dict:
    """What the diagnostics say of a run, as the hint names them."""
    import json

    from scratchformer.training.diagnostics import read_records

    _, records = read_records(run / "diagnostics.jsonl")
    first, later = records[0], records[1:]
    losses = [
        json.loads(line)["train_loss"]
        for line in (run / "log.jsonl").read_text().splitlines()
        if "train_loss" in line
    ]
    ratios = [
        v["update_ratio"]
        for r in later
        for name, v in r["params"].items()
        if v["update_ratio"] is not None and len(v["shape"]) == 2
    ]
    grad_std = [layer["grad_std"] for layer in first["layers"]]
    return {
        "dead": min(layer["dead"] for layer in first["layers"]),
        "update": float(np.median(ratios)),
        "grad_spread": max(grad_std) / min(grad_std),
        "first_loss": losses[0],
    }


def test_each_run_shows_its_fault_and_no_other(runs):
    signs = {
        "dead_relu": lambda r: r["dead"] > 0.99,
        "lr_too_high": lambda r: r["update"] > -1.5,
        "vanishing_gradient": lambda r: r["grad_spread"] > 100,
        "init_too_large": lambda r: r["first_loss"] > 2 * math.log(27) and r["update"] < -1.5,
    }
    for name, fault in diagnose.RUNS.items():
        reading = _reading(runs / name)
        shown = [f for f, sign in signs.items() if sign(reading)]
        assert shown == [fault], (name, reading)


def test_the_runs_are_made_once_and_graded(runs, tmp_path):
    stamp = (runs / "a" / "diagnostics.jsonl").stat().st_mtime_ns
    assert "diagnose_runs/" in diagnose.setup(runs.parent / "x.py")  # already there: kept
    assert (runs / "a" / "diagnostics.jsonl").stat().st_mtime_ns == stamp
    assert check("diagnose_runs", _write(tmp_path, "d", solution_source("diagnose_runs"))).passed
    wrong = (
        "def diagnose():\n"
        "    return {'a': 'dead_relu', 'b': 'lr_too_high', 'c': 'init_too_large', 'd': 'dead_relu'}\n"
    )
    grade = check("diagnose_runs", _write(tmp_path, "w", wrong))
    assert (
        grade.report().startswith("wrong: diagnose_runs: run a: not dead_relu")
        and "fraction of dead" in grade.cause
    )


def test_the_hints_name_the_figures_that_show_the_faults():
    from scratchformer.exercises.catalogue import HINTS
    from scratchformer.viz.bundle import DIAGNOSTICS_FIGURES

    named = [f for f in DIAGNOSTICS_FIGURES if f in HINTS["diagnose_runs"]]
    assert set(named) >= {"diag_activation_gradients", "diag_saturation", "diag_update_ratio"}
    assert "log.jsonl" in HINTS["diagnose_runs"]


# -- one home for the finite differences (issue 29) --------------------------------------------
def test_the_grader_s_finite_differences_are_gradcheck_s(monkeypatch):
    from scratchformer import gradcheck
    from scratchformer.exercises import grading

    calls = []

    def spy(f, x, eps=1e-6, points=2):
        calls.append((eps, points))
        return gradcheck.numerical_gradient(f, x, eps, points)

    monkeypatch.setattr(grading, "numerical_gradient", spy)
    ex = EXERCISES["gelu"]
    cls = grading.reference_class(ex)
    grading.finite_differences(cls, grading._spec(cls, ex.cases[0]))
    assert calls == [(grading.FD_EPS, grading.FD_POINTS)]
    assert "flat[i] = orig + " not in Path(grading.__file__).read_text()
