"""Smoke runs of the measurement scripts behind docs/results.md (a few steps each)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from scratchformer.cli.main import main

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--n-layer", "1", "--n-head", "2", "--n-embd", "16", "--batch-size", "8", "--no-progress", "--quiet"]
TEXT = "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n" * 30


def run_script(*argv: str) -> str:
    done = subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def text_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("text")
    (tmp / "plays.txt").write_text(TEXT)
    out = tmp / "run"
    assert main(["train", "--data", str(tmp / "plays.txt"), "--block-size", "16", "--max-steps", "4",
                 "--eval-interval", "4", "--out", str(out), *TINY]) == 0
    return tmp


def test_nanogpt_estimates(text_run):
    out = run_script("scripts/nanogpt_estimates.py", str(text_run / "run"), "--draws", "5", "--eval-iters", "2",
                     "--batch-size", "3")
    whole = float(re.search(r"whole val split: ([0-9.]+)", out).group(1))
    mean, sd = map(float, re.search(r"mean ([0-9.]+), sd ([0-9.]+)", out).groups())
    assert 0 < whole < 5 and abs(mean - whole) < 1.0 and sd > 0  # random windows: estimates vary
    assert "5 estimates of 2 batches x 3" in out


def test_names_novelty(tmp_path):
    out = tmp_path / "names"
    assert main(["train", "--max-steps", "3", "--eval-interval", "3", "--out", str(out), *TINY]) == 0
    printed = run_script("scripts/names_novelty.py", str(out), "-n", "20", "--show", "3").rstrip("\n").split("\n")
    assert len(printed) == 4  # 3 shown samples, then the summary
    new, not_train = map(float, re.fullmatch(
        r"20 samples: ([0-9.]+)% not in names.txt, ([0-9.]+)% not in the training split", printed[-1]).groups())
    assert 0 <= new <= not_train <= 100  # a name absent from names.txt is absent from its training split


def test_lockstep_with_torch_gives_the_same_losses(text_run):
    pytest.importorskip("torch")
    out = run_script("benchmarks/shakespeare_lockstep.py", "--data", str(text_run / "plays.txt"), "--steps", "30")
    ours_theirs = re.search(r"torch ([0-9.]+), scratchformer ([0-9.]+)$", out.strip())
    assert ours_theirs and ours_theirs.group(1) == ours_theirs.group(2), out
    step_line = re.search(r"step 30: train loss torch ([0-9.]+), scratchformer ([0-9.]+)", out)
    assert step_line and step_line.group(1) == step_line.group(2), out


@pytest.mark.parametrize("script", ["scripts/nanogpt_estimates.py", "scripts/names_novelty.py"])
def test_scripts_reject_a_missing_run_in_one_line(script, tmp_path):
    done = subprocess.run([sys.executable, script, str(tmp_path / "missing")], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "not found" in done.stderr
