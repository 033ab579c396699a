"""Every script in examples/ runs in --quick mode, writes its figures (non-empty PNGs) into
--out, and prints the claims its header makes (the checks a reader can break)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
PNG = b"\x89PNG\r\n\x1a\n"

# script -> (figures it writes, lines its output must contain (regular expressions))
EXPECTED = {
    "a_attention_lab": (
        ["attention_steps", "causal_vs_bidirectional", "multi_head", "sinusoidal", "position_similarity",
         "training_curves"],
        [r"row sums: \[1\.0, 1\.0, 1\.0, 1\.0, 1\.0\]", r"first token: \[1\.0, 0\.0, 0\.0, 0\.0, 0\.0\]",
         r"upper triangle of the causal weights is zero: True", r"every row sums to 1: True",
         r"varies with p by at most \d\.\de-1[0-9]", r"is the identity: True",
         r"lm_head.weight is wte.weight: True; 26,848 parameters against 27,712 untied"]),
    "b_majority_classifier": (
        ["classifier_attention", "attention_grid", "training_curves"],
        [r"held-out accuracy: [01]\.\d{4} after 30 steps", r"predicted [012]"]),
    "c_copy_encoder_decoder": (
        ["seq2seq_attention", "training_curves"],
        [r"encoder gradient after one backward: sum \|grad\| = \d+\.\d+", r"held-out exact match: [01]\.\d{4}",
         r"output changed: (True|False)", r"largest weight per target row \[[0-9., ]+\] \(uniform would be 0\.17\)"]),
    "d_names_gpt": (
        ["embedding_pca", "residual_norms", "residual_heatmap", "attention_grid", "training_curves"],
        [r"30033 training names, vocabulary 27", r"val loss \d\.\d{3}", r"\d+/10 are not in the training set",
         r"residual-stream norm after the embedding and each block: \[([0-9.]+, ){4}[0-9.]+\]"]),
    "e_reverse_beam_search": (
        ["masks", "seq2seq_attention", "training_curves"],
        [r"source mask of row 2: \[1, 1, 0, 0, 0, 0\]",
         r"held-out exact match after 40 steps: greedy [01]\.\d{4}, beam search \(4\) [01]\.\d{4}"]),
}


def test_every_example_is_tested():
    assert sorted(p.stem for p in EXAMPLES.glob("[a-z]_*.py")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_runs_quick(name, tmp_path):
    figures, claims = EXPECTED[name]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(EXAMPLES.parent), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run([sys.executable, str(EXAMPLES / f"{name}.py"), "--quick", "--out", str(tmp_path)],
                         capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    for claim in claims:
        assert re.search(claim, run.stdout), f"{name} did not print {claim!r}:\n{run.stdout}"
    for fig in figures:
        data = (tmp_path / f"{fig}.png").read_bytes()
        assert data.startswith(PNG) and len(data) > 5000, fig
    assert sorted(p.stem for p in tmp_path.glob("*.png")) == sorted(figures)
