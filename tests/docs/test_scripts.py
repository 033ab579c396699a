"""Smoke runs of the measurement scripts behind docs/results.md (a few steps each)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from scratchformer.cli.main import main
from scratchformer.training.jobs import load_job

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--n-layer", "1", "--n-head", "2", "--n-embd", "16", "--batch-size", "8", "--no-progress", "--quiet"]
TEXT = "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n" * 30


def run_script(*argv: str) -> str:
    done = subprocess.run(
        [sys.executable, *argv], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def text_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("text")
    (tmp / "plays.txt").write_text(TEXT)
    out = tmp / "run"
    assert (
        main(
            [
                "train",
                "--data",
                str(tmp / "plays.txt"),
                "--block-size",
                "16",
                "--max-steps",
                "4",
                "--eval-interval",
                "4",
                "--out",
                str(out),
                *TINY,
            ]
        )
        == 0
    )
    return tmp


def test_nanogpt_estimates(text_run):
    out = run_script(
        "scripts/nanogpt_estimates.py",
        str(text_run / "run"),
        "--draws",
        "5",
        "--eval-iters",
        "2",
        "--batch-size",
        "3",
    )
    whole = float(re.search(r"whole val split: ([0-9.]+)", out).group(1))
    mean, sd = map(float, re.search(r"mean ([0-9.]+), sd ([0-9.]+)", out).groups())
    assert 0 < whole < 5 and abs(mean - whole) < 1.0 and sd > 0  # random windows: estimates vary
    assert "5 estimates of 2 batches x 3" in out


def test_names_novelty(tmp_path):
    out = tmp_path / "names"
    assert main(["train", "--max-steps", "3", "--eval-interval", "3", "--out", str(out), *TINY]) == 0
    printed = (
        run_script("scripts/names_novelty.py", str(out), "-n", "20", "--show", "3").rstrip("\n").split("\n")
    )
    assert len(printed) == 4  # 3 shown samples, then the summary
    new, not_train = map(
        float,
        re.fullmatch(
            r"20 samples: ([0-9.]+)% not in names.txt, ([0-9.]+)% not in the training split", printed[-1]
        ).groups(),
    )
    assert 0 <= new <= not_train <= 100  # a name absent from names.txt is absent from its training split


def test_lockstep_with_torch_gives_the_same_losses(text_run):
    pytest.importorskip("torch")
    out = run_script(
        "benchmarks/shakespeare_lockstep.py", "--data", str(text_run / "plays.txt"), "--steps", "10"
    )
    ours_theirs = re.search(r"torch ([0-9.]+), scratchformer ([0-9.]+)$", out.strip())
    assert ours_theirs and ours_theirs.group(1) == ours_theirs.group(2), out
    step_line = re.search(r"step 10: train loss torch ([0-9.]+), scratchformer ([0-9.]+)", out)
    assert step_line and step_line.group(1) == step_line.group(2), out


def test_icl_score_reads_the_late_and_early_token_of_validation_windows(text_run):
    out = run_script("scripts/icl_score.py", str(text_run / "run" / "last"), "--early", "3", "--late", "12")
    m = re.search(
        r"\(step 4\): in-context learning score ([-+][0-9.]+) nats \(loss on token 12 ([0-9.]+) minus on token 3 "
        r"([0-9.]+), (\d+) windows of 16 tokens, every 4\); best prefix-matching head \(8 tokens read twice\) "
        r"L0H\d 0\.\d\d",
        out,
    )
    assert m, out
    score, late, early, windows = float(m[1]), float(m[2]), float(m[3]), int(m[4])
    val = load_job(text_run / "run" / "last").dataset.val.ids
    assert abs(score - (late - early)) < 2e-3 and windows == len(
        range(0, len(val) - 16, 4)
    )  # all, every T / 4


def test_icl_repeats_reads_a_span_twice_at_a_distance_that_varies():
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from icl_repeats import BATCH, T, batch
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    ids = np.arange(20_000)  # every token says where it came from
    rng = np.random.default_rng(0)
    for length in (64, T):
        x, y = batch(ids, rng, length, 1.0, 8)
        assert x.shape == y.shape == (BATCH * T // length, length)  # the same tokens a step
        assert (x[:, 1:] == y[:, :-1]).all()
        spans, places = set(), set()
        for row in np.concatenate([x, y[:, -1:]], axis=1):  # the window of length + 1
            stop = int(np.argmax(row != row[0] + np.arange(len(row))))  # where the text stops
            at = int(row[stop] - row[0])  # the repeat reads the text again from there
            span = stop - at
            assert 8 <= span <= length // 2
            assert (row[stop : stop + span] == row[at:stop]).all()  # read twice
            assert (row[stop + span :] == row[0] + np.arange(stop + span, len(row))).all()  # then goes on
            spans.add(span)
            places.add(at)
        assert len(spans) > 1  # the distance to copy from varies
        assert places == {0} if length < T else len(places) > 1  # short windows: the span starts them
    x, y = batch(ids, rng, T, 0.0, 8)
    assert (np.diff(x, axis=1) == 1).all() and (y == x + 1).all()  # no repeat: the text as it is


@pytest.mark.parametrize(
    "argv",
    [
        ["scripts/icl_repeats.py", "--at", "5", "1"],  # steps out of order
        ["scripts/icl_repeats.py", "--at", "5", "--repeat-share", "2"],
        ["scripts/icl_repeats.py", "--at", "5", "--short-len", "100"],  # does not divide 512
        ["scripts/icl_score.py", "RUN", "--windows", "0"],
    ],
)
def test_icl_scripts_reject_bad_options_in_one_line(argv):
    done = subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "error:" in done.stderr and "usage:" not in done.stderr


def test_grokking_table_writes_a_row_per_run_with_its_time(tmp_path):
    out = tmp_path / "fast-s1"
    tiny = "--modulus 7 --n-embd 16 --max-steps 4 --eval-interval 4 --diag-interval 2 --workers 1".split()
    assert main(["train", "--task", "modadd", "--preset", "fast", *tiny, "--out", str(out)]) == 0
    (tmp_path / "fast-s1.time").write_text("10.5 0.5 30.2\n")  # user, sys, wall: scripts/grokking_runs.sh's
    rows = run_script("scripts/grokking_table.py", str(out)).splitlines()
    assert rows[0].startswith("| run | memorised at") and len(rows) == 3
    cells = [c.strip() for c in rows[2].strip("|").split("|")]
    assert cells[0] == "fast-s1" and cells[-1] == "11 s (30 s)" and len(cells) == rows[0].count("|") - 1


@pytest.mark.parametrize(
    "script", ["scripts/nanogpt_estimates.py", "scripts/names_novelty.py", "scripts/icl_score.py"]
)
def test_scripts_reject_a_missing_run_in_one_line(script, tmp_path):
    done = subprocess.run(
        [sys.executable, script, str(tmp_path / "missing")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "not found" in done.stderr


def test_random_bert_with_a_character_vocabulary_spells_words_out_and_trains(tmp_path):
    """docs/results.md's character-level baseline: one token per character of the CSV (lower
    case, accents stripped), and `finetune --model` trains it like any BERT directory."""
    from scratchformer.interop.wordpiece import WordPieceTokenizer
    from scratchformer.training.checkpoint import load_checkpoint

    csv = tmp_path / "train.csv"
    rows = [("Romeo, wherefore art thou?", "love"), ("Cry havoc! and let slip the dogs of war", "war")] * 10
    csv.write_text(
        "text,label\n" + "".join(f'"{t}",{label}\n' for t, label in rows) + '"Café",love\n', encoding="utf-8"
    )
    printed = run_script(
        "scripts/random_bert.py",
        str(tmp_path / "chars"),
        "--chars-of",
        str(csv),
        "--hidden-size",
        "16",
        "--heads",
        "2",
        "--layers",
        "1",
    )
    assert "character-level" in printed
    vocab = (tmp_path / "chars" / "vocab.txt").read_text(encoding="utf-8").split("\n")[:-1]
    letters = {c for text, _ in rows for c in text.lower() if c.isalpha()}
    assert (
        vocab[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] and "é" not in vocab and "C" not in vocab
    )
    assert set(letters) | {",", "?", "!"} <= set(vocab) and {"##" + c for c in letters} <= set(vocab)
    tokens = (
        WordPieceTokenizer.from_dir(tmp_path / "chars", max_length=64).tokenizer.encode("Romeo, café!").tokens
    )
    assert tokens == ["[CLS]", "r", "##o", "##m", "##e", "##o", ",", "c", "##a", "##f", "##e", "!", "[SEP]"]
    assert (
        main(
            [
                "finetune",
                "--model",
                str(tmp_path / "chars"),
                "--data",
                str(csv),
                "--out",
                str(tmp_path / "run"),
                "--max-steps",
                "2",
                "--batch-size",
                "4",
                "--eval-interval",
                "2",
                "--no-progress",
                "--quiet",
            ]
        )
        == 0
    )
    assert load_checkpoint(tmp_path / "run" / "last").config["model"]["vocab_size"] == len(vocab)
    # its 512-position table is most of a small model: eval reads the run (config and weights agree)
    assert main(["eval", str(tmp_path / "run"), "--data", str(csv), "--json"]) == 0


def test_unseen_words_set_keeps_every_test_noun_out_of_training(tmp_path):
    """make_unseen_words_csv.py: the labels come equally often, and no word that decides a test
    label (its noun) is a word of any training sentence; the same seed writes the same files."""
    import csv

    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from make_unseen_words_csv import NOUNS
        from make_unseen_words_csv import main as make
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    assert make([str(tmp_path / "a")]) == 0 and make([str(tmp_path / "b")]) == 0
    rows = {
        name: list(csv.DictReader(open(tmp_path / "a" / name, encoding="utf-8")))
        for name in ("train.csv", "test.csv")
    }
    assert [len(rows["train.csv"]), len(rows["test.csv"])] == [300, 120]
    assert {r["label"] for r in rows["test.csv"]} == set(NOUNS)
    assert all(sum(r["label"] == k for r in rows["train.csv"]) == 75 for k in NOUNS)
    train_words = {w for r in rows["train.csv"] for w in re.findall(r"[a-z]+", r["text"].lower())}
    for r in rows["test.csv"]:
        noun = next(n for n in NOUNS[r["label"]][1].split() if re.search(rf"\b{n}\b", r["text"]))
        assert noun not in train_words, r
    assert (tmp_path / "a" / "test.csv").read_bytes() == (tmp_path / "b" / "test.csv").read_bytes()


def test_cut_csv_keeps_the_header_and_a_seeded_sample_in_file_order(tmp_path, capsys):
    """cut_csv.py: N rows of the source, each once, in the source's order, the header first; the
    same seed writes the same file, another seed another sample; N beyond the rows is one line."""
    import csv

    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from cut_csv import main as cut
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    source = tmp_path / "all.csv"
    with open(source, "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows([["text", "label"], *([f"text, {i}", str(i % 3)] for i in range(50))])
    assert cut([str(source), "20", str(tmp_path / "a.csv")]) == 0
    assert cut([str(source), "20", str(tmp_path / "b.csv")]) == 0
    assert cut([str(source), "20", str(tmp_path / "c.csv"), "--seed", "1"]) == 0
    rows = list(csv.reader(open(tmp_path / "a.csv", newline="", encoding="utf-8")))
    assert rows[0] == ["text", "label"] and len(rows) == 21
    order = [int(r[0].split(", ")[1]) for r in rows[1:]]
    assert order == sorted(set(order)) and all(r[1] == str(int(r[0].split(", ")[1]) % 3) for r in rows[1:])
    assert (tmp_path / "a.csv").read_bytes() == (tmp_path / "b.csv").read_bytes()
    assert (tmp_path / "a.csv").read_bytes() != (tmp_path / "c.csv").read_bytes()
    capsys.readouterr()
    assert cut([str(source), "51", str(tmp_path / "d.csv")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "N must be 1 to 50" in err
