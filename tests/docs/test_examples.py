"""Every script in examples/ writes its figures (non-empty PNGs) and prints the claims its header
makes (the checks a reader can break), in its quick mode.

Each example runs once: as its notebook, in a kernel without torch (tests/docs/test_notebooks.py,
which checks the figures and claims listed here on what the notebook printed and wrote); the
notebook is the script's code line for line (test_notebook_cells_are_the_script) with _common.py
pasted in. What only the command line does, `--quick --out DIR` through _common.setup, the same
for every script, runs here on the quickest script."""

import os
import re
import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PNG = b"\x89PNG\r\n\x1a\n"

# script -> (figures it writes, lines its output must contain (regular expressions))
EXPECTED = {
    "a_attention_lab": (
        [
            "attention_steps",
            "causal_vs_bidirectional",
            "multi_head",
            "sinusoidal",
            "position_similarity",
            "training_curves",
        ],
        [
            r"row sums: \[1\.0, 1\.0, 1\.0, 1\.0, 1\.0\]",
            r"first token: \[1\.0, 0\.0, 0\.0, 0\.0, 0\.0\]",
            r"upper triangle of the causal weights is zero: True",
            r"every row sums to 1: True",
            r"varies with p by at most \d\.\de-1[0-9]",
            r"is the identity: True",
            r"lm_head.weight is wte.weight: True; 26,336 parameters against 27,200 untied",
            r"as in_proj_weight \(24, 8\): same output as cell 1: True",
            r"cos\(PE\[0\], PE\[k\]\) for k = 1, 5, 10, 25 \(the lab's table and its k\): \[0\.9662, 0\.7345, 0\.6579, "
            r"0\.6292\] -- not monotone, it rises again at k = \[6, 11, 12, 17",
            r"pre-norm, 4 layers, lr 1e-2 without warmup, 3 seeds: val loss \[\d\.\d+, \d\.\d+, \d\.\d+\]",
            r"post-norm, 4 layers, lr 1e-2 without warmup, 3 seeds: val loss",
            r"verdict: pre-norm",
        ],
    ),
    "b_majority_classifier": (
        ["classifier_attention", "attention_grid", "training_curves"],
        [
            r"held-out accuracy: [01]\.\d{4} after 30 steps",
            r"predicted [012]",
            r"held-out accuracy by margin \(majority count minus runner-up's\): 0: [01]\.\d{3}",
            r"verdict: the hardest sequences are those with margin \d",
            r"majority-class baseline \(always answer [012], the most frequent training label\): 0\.\d{4}",
            r"the tutorial's split: 86 of its 400 test sequences are training sequences; always answering 0 scores "
            r"0\.4325 on its test labels, the 43\.2% its own code reached",
        ],
    ),
    "c_copy_encoder_decoder": (
        ["seq2seq_attention", "training_curves"],
        [
            r"encoder gradient after one backward: sum \|grad\| = \d+\.\d+",
            r"held-out exact match: [01]\.\d{4}",
            r"output changed: (True|False)",
            r"held-out exact match with the tutorial's bug \(cross_attn\(x, src_mask\)\): [01]\.\d{4}, "
            r"final train loss \d+\.\d{3}; fixed: [01]\.\d{4}",
            r"verdict: ",
            r"largest weight per target row \[[0-9., ]+\] \(uniform would be 0\.17\)",
        ],
    ),
    "d_names_gpt": (
        [
            "embedding_pca",
            "residual_norms",
            "residual_heatmap",
            "attention_grid",
            "training_curves",
            "residual_init_vs_trained",
        ],
        [
            r"30033 training names, vocabulary 27",
            r"val loss \d\.\d{3}",
            r"\d+/10 are not in the training set",
            r"vowel-vowel -?\d\.\d{3}, consonant-consonant -?\d\.\d{3}, vowel-consonant -?\d\.\d{3}",
            r"verdict: the vowels (sit|are not)",
            r"mean \d\.\d\d against 0\.\d\d for uniform heads",
            r"verdict: most heads (rest|do not rest)",
            r"residual-stream norm after the embedding and each block: \[([0-9.]+, ){4}[0-9.]+\]",
            r"residual-stream norm with the tutorial's init, untrained: \[([0-9.]+, ){4}[0-9.]+\]; with this model's "
            r"init, untrained: \[([0-9.]+, ){4}[0-9.]+\]; trained here",
        ],
    ),
    "e_reverse_beam_search": (
        ["masks", "seq2seq_attention", "training_curves"],
        [
            r"source mask of row 2: \[1, 1, 0, 0, 0, 0\]",
            r"weight on the keys the series' mask hides: 2\.00 if passed as a bool mask as it is, 0\.00 with "
            r'mask_means="masked"',
            r"held-out exact match after 40 steps: greedy [01]\.\d{4}, beam search \(4\) [01]\.\d{4}",
            r"greedy and beam search decode \d+ of 40 held-out sequences differently",
            r"verdict: ",
        ],
    ),
    "f_induction_heads": (
        ["induction_progress", "attention_grid"],
        [
            r"39,808 parameters, attention only: True; 3 records of the progress measures, every 10 steps",
            r"loss on the first copy \d\.\d{3}, on the repeat \d\.\d{3} \(log of the symbols: 3\.466\)",
            r"prefix-matching score per head \(rows: layers\): \[\[",
            r"best induction head L\dH\d \(0\.\d\d\): ablating it costs [+-]\d\.\d{3} nats",
            r"phase change: (none|the repeat loss fell fastest)",
            r"1 layer: loss on the repeat \d\.\d{3}",
            r"the repeat's loss is (below|not below) half",
            r"verdict: \d of 4 bars hold",
        ],
    ),
    "g_grokking": (
        ["grokking"],
        [
            r"p = 11: \d+ training pairs, \d+ held out; [\d,]+ parameters, normalization=none",
            r"trained 20 steps; 5 records of the progress measures",
            r"sum of their 2-D Fourier components\| over the run: \d\.\de-1\d \(exact: True\)",
            r"key frequencies at step 20: \[[\d, ]*\] \(their share of the embedding's squared Fourier norm \d+%; "
            r"Gini coefficient of its Fourier norms 0\.\d\d\)",
            r"memorised (\(train accuracy >= 99%\) )?at step",
            r"phases \(Nanda et al\. 2023, section 5\.2; paper: memorisation 0-1\.4k, circuit formation 1\.4k-9\.4k, "
            r"cleanup 9\.4k-14k\): ",
            r"verdict: (grokked|not grokked) -- test accuracy [01]\.\d{4} at step 20",
        ],
    ),
}


def test_every_example_is_tested():
    assert sorted(p.stem for p in EXAMPLES.glob("[a-z]_*.py")) == sorted(EXPECTED)


def check_example(name: str, printed: str, folder: Path) -> None:
    """What example NAME promises: every claim printed, every figure written into `folder` (and
    nothing else)."""
    figures, claims = EXPECTED[name]
    for claim in claims:
        assert re.search(claim, printed), f"{name} did not print {claim!r}:\n{printed}"
    for fig in figures:
        data = (folder / f"{fig}.png").read_bytes()
        assert data.startswith(PNG) and len(data) > 5000, fig
    assert sorted(p.stem for p in folder.glob("*.png")) == sorted(figures)


def test_an_example_runs_from_the_command_line(tmp_path):
    name = "g_grokking"  # the quickest: the command line is _common.setup's, the same for every script
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(EXAMPLES.parent), os.environ.get("PYTHONPATH", "")]),
    }
    run = subprocess.run(
        [sys.executable, str(EXAMPLES / f"{name}.py"), "--quick", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    check_example(name, run.stdout, tmp_path)


COURSE = EXAMPLES.parent / "docs" / "course.md"
# docs/course.md's table of the measured full runs: | `python examples/NAME.py` | CPU s | wall s | ...
MEASURED_ROW = re.compile(r"^\| `python examples/([a-z]_\w+)\.py` \| ([\d,]+) s \| ([\d,]+) s \|", re.M)
# what an example's header says of its full run
STATED = re.compile(r"\(full run: ([\d,]+) s of CPU, ([\d,]+) s wall [^;)]*; docs/course\.md\)")
# the course's table of examples to start from: | ... | `python examples/NAME.py` | CPU s of CPU |
LISTED = re.compile(r"\| `python examples/([a-z]_\w+)\.py` \| ([\d,]+) s of CPU \|")


def test_each_example_states_the_time_of_its_measured_row():
    """An example's header states its full run's CPU and wall seconds; docs/course.md holds the
    measured row of the same command (with the machine and how it was measured); the two are the
    same numbers, and so is the course's first table, so they cannot drift apart."""
    course = COURSE.read_text(encoding="utf-8")
    rows = {name: (cpu, wall) for name, cpu, wall in MEASURED_ROW.findall(course)}
    assert sorted(rows) == sorted(EXPECTED), "docs/course.md lacks a measured row for an example"
    for name in EXPECTED:
        stated = STATED.search((EXAMPLES / f"{name}.py").read_text(encoding="utf-8"))
        assert stated, f"{name}.py's header states no measured full-run time"
        assert stated.groups() == rows[name], (
            f"{name}.py states {stated.groups()}, docs/course.md {rows[name]}"
        )
    listed = dict(LISTED.findall(course))
    assert listed and all(cpu == rows[name][0] for name, cpu in listed.items()), listed
