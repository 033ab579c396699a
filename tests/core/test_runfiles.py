"""Run files checked on load (training/schema.py) and the run directory's lock, log and data
fingerprint (training/rundir.py)."""

import errno
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
from json_edits import DELETE, edited

from scratchformer.errors import CheckpointError, DataChangedError, DataError, RunFileError, RunLockedError
from scratchformer.runfiles import MAX_JSON_BYTES, read_json_file, read_regular_file
from scratchformer.training import rundir
from scratchformer.training.rundir import (
    LogWriter,
    RunLock,
    check_data_unchanged,
    fingerprint_file,
    read_log,
    start_log,
    truncate_log,
)
from scratchformer.training.schema import CONFIG, LOG_ROW, TOKENIZER, TRAINER_STATE, check_json, strict_json

GPT_CONFIG = {
    "kind": "gpt",
    "model": {
        "vocab_size": 27,
        "block_size": 16,
        "n_layer": 1,
        "n_head": 2,
        "n_embd": 8,
        "dropout": 0.1,
        "bias": True,
        "norm_first": True,
        "activation": "gelu",
        "positional": "learned",
        "tie_weights": False,
        "n_inner": None,
        "layer_norm_eps": 1e-05,
        "dtype": "float32",
        "init": "pytorch",
    },
    "data": {"path": None, "format": "lines", "seed": 1337, "block_size": 16},
}
SEQ2SEQ_CONFIG = {
    "kind": "seq2seq",
    "task": "reverse",
    "model": {
        "src_vocab_size": 13,
        "tgt_vocab_size": 13,
        "max_len": 13,
        "n_layer": 1,
        "n_head": 2,
        "n_embd": 8,
        "n_inner": None,
        "dropout": 0.0,
        "norm_first": True,
        "activation": "gelu",
        "share_embeddings": True,
        "label_smoothing": 0.0,
        "pad_id": 10,
        "bos_id": 11,
        "eos_id": 12,
        "n_encoder_layers": 1,
        "n_decoder_layers": 1,
    },
    "data": {"n_train": 50000, "n_test": 1000, "max_len": 12, "seed": 1337},
}
PCG = np.random.default_rng(0).bit_generator.state
TRAINER_STATE_OK = {
    "format": "scratchformer-checkpoint",
    "version": 1,
    "step": 2,
    "rng_state": {"data": PCG, "dropout": PCG},
    "extra": {
        "best_val_loss": 3.4,
        "val_loss": 3.4,
        "train_config": {
            "max_steps": 2,
            "batch_size": 64,
            "grad_accum": 1,
            "lr": 0.002,
            "min_lr": 0.0001,
            "warmup_steps": 200,
            "decay_steps": None,
            "weight_decay": 0.1,
            "decay_embeddings": False,
            "beta1": 0.9,
            "beta2": 0.99,
            "grad_clip": 1.0,
            "eval_interval": 1000,
            "eval_batches": None,
            "log_interval": 10,
            "num_samples": 5,
            "seed": 1337,
            "time_limit": None,
        },
    },
    "optimizer": {"kind": "AdamW", "step": 2, "num_params": 17},
    "files": [
        "config.json",
        "model.safetensors",
        "optimizer.safetensors",
        "tokenizer.json",
        "trainer_state.json",
    ],
}


def read_checked(path, schema):
    """What load_checkpoint does with each run file: read it (runfiles), check it (schema)."""
    value = read_json_file(path)
    check_json(value, schema, path)
    return value


def write_json(tmp_path, name, value) -> str:
    p = tmp_path / name
    p.write_text(json.dumps(value))
    return p


# -- schemas ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "schema, doc",
    [
        (CONFIG, GPT_CONFIG),
        (CONFIG, SEQ2SEQ_CONFIG),
        (TRAINER_STATE, TRAINER_STATE_OK),
        (TOKENIZER, {"type": "char", "version": 1, "special": "<eot>", "chars": list("abc")}),
    ],
)
def test_files_as_written_today_pass(tmp_path, schema, doc):
    assert read_checked(write_json(tmp_path, "f.json", doc), schema) == doc


def test_files_of_a_real_run_pass(tmp_path):
    from scratchformer.cli.main import main

    assert (
        main(
            [
                "train",
                "--out",
                str(tmp_path / "r"),
                "--max-steps",
                "2",
                "--n-layer",
                "1",
                "--n-embd",
                "8",
                "--n-head",
                "2",
                "--no-progress",
                "--quiet",
            ]
        )
        == 0
    )
    last = tmp_path / "r" / "last"
    read_checked(last / "config.json", CONFIG)
    read_checked(last / "trainer_state.json", TRAINER_STATE)
    read_checked(last / "tokenizer.json", TOKENIZER)
    rows, note = read_log(tmp_path / "r" / "log.jsonl")
    assert note is None and [r["step"] for r in rows] == [2, 2]


BAD_FILES = [  # (schema, document, words the one-line message must contain)
    (CONFIG, [1, 2], "field the top level must be an object"),
    (CONFIG, edited(GPT_CONFIG, ("model",), DELETE), "field model must be present"),
    (CONFIG, edited(GPT_CONFIG, ("kind",), "rnn"), "field kind must be one of 'gpt'"),
    (CONFIG, edited(GPT_CONFIG, ("model", "n_embd"), "8"), "field model.n_embd must be an integer >= 1"),
    (CONFIG, edited(GPT_CONFIG, ("model", "n_embd"), True), "model.n_embd"),
    (CONFIG, edited(GPT_CONFIG, ("model", "n_embd"), 10**12), "model.n_embd must be an integer >= 1 and <= "),
    (
        CONFIG,
        edited(GPT_CONFIG, ("model", "dropout"), 1.5),
        "model.dropout must be a finite number >= 0 and < 1",
    ),
    (CONFIG, edited(GPT_CONFIG, ("model", "colour"), 1), "field model.colour must be absent"),
    (CONFIG, edited(SEQ2SEQ_CONFIG, ("task",), "fly"), "field task must be one of"),
    (TRAINER_STATE, edited(TRAINER_STATE_OK, ("step",), "2"), "field step must be an integer >= 0"),
    (TRAINER_STATE, edited(TRAINER_STATE_OK, ("step",), -1), "field step"),
    (TRAINER_STATE, edited(TRAINER_STATE_OK, ("format",), "other"), "field format"),
    (
        TRAINER_STATE,
        edited(TRAINER_STATE_OK, ("extra", "val_loss"), math.nan),
        "extra.val_loss must be a finite",
    ),
    (
        TRAINER_STATE,
        edited(TRAINER_STATE_OK, ("extra", "train_config", "max_steps"), False),
        "train_config.max_steps",
    ),
    (
        TRAINER_STATE,
        edited(
            TRAINER_STATE_OK,
            ("rng_state", "data"),
            {"bit_generator": "MT19937", "state": {"key": [1, 2], "pos": 624}},
        ),
        "field rng_state.data.bit_generator must be one of 'PCG64'",
    ),
    (TRAINER_STATE, edited(TRAINER_STATE_OK, ("rng_state", "data", "state", "inc"), 2**130), "state.inc"),
    (
        TOKENIZER,
        {"type": "char", "chars": ["a", "a"]},
        "field chars must be a list of a string without repeats",
    ),
    (TOKENIZER, {"type": "char", "chars": ["ab"]}, "field chars[0]"),
    (LOG_ROW, {"step": "3", "lr": 0.1}, "field step"),
    (LOG_ROW, {"step": 3, "train_loss": "low"}, "field train_loss"),
]


@pytest.mark.parametrize("schema, doc, words", BAD_FILES)
def test_bad_file_is_one_line_naming_file_and_field(tmp_path, schema, doc, words):
    path = write_json(tmp_path, "run.json", doc)
    with pytest.raises(RunFileError) as e:
        read_checked(path, schema)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(str(path)) and words in msg, msg
    assert isinstance(e.value, CheckpointError)


@pytest.mark.parametrize(
    "text, words",
    [
        ("1" * 5000, "too large to read"),  # Python refuses ints past 4,300 digits
        ('{"step": ' + "1" * 5000 + "}", "too large to read"),
        ("[" * 100_000 + "]" * 100_000, "nested"),  # RecursionError in the parser
        ("[" * 40 + "]" * 40, "nested more than 32"),  # parses, but deeper than any run file
        ('{"step": 1', "invalid JSON"),
        ("", "invalid JSON"),
    ],
)
def test_unreadable_json_is_one_line(tmp_path, text, words):
    path = tmp_path / "trainer_state.json"
    path.write_text(text)
    with pytest.raises(RunFileError, match=words) as e:
        read_checked(path, TRAINER_STATE)
    assert "\n" not in str(e.value) and str(path) in str(e.value)


def test_missing_and_non_utf8_files(tmp_path):
    with pytest.raises(FileNotFoundError):  # each caller words it (checkpoint: "is incomplete")
        read_json_file(tmp_path / "nope.json")
    (tmp_path / "bin.json").write_bytes(b"\xff\xfe{}")
    with pytest.raises(RunFileError, match="not UTF-8"):
        read_json_file(tmp_path / "bin.json")


READ_IN_A_CHILD = """
import sys
from scratchformer.errors import RunFileError
from scratchformer.runfiles import read_json_file
from scratchformer.training.rundir import read_log
try:
    (read_log if sys.argv[1].endswith(".jsonl") else read_json_file)(sys.argv[1])
except RunFileError as e:
    print(e)
"""


@pytest.mark.parametrize(
    "name, kind",
    [
        ("trainer_state.json", "fifo"),
        ("trainer_state.json", "dev_zero"),
        ("trainer_state.json", "directory"),
        ("log.jsonl", "fifo"),
        ("log.jsonl", "dev_zero"),
    ],
)
def test_only_regular_files_are_read(tmp_path, kind, name):
    path = tmp_path / name
    if kind == "fifo":
        os.mkfifo(path)  # reading would wait for a writer forever
    elif kind == "dev_zero":
        path.symlink_to("/dev/zero")  # reading would never end
    else:
        path.mkdir()
    child = subprocess.run(
        [sys.executable, "-c", READ_IN_A_CHILD, str(path)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
        timeout=60,
    )  # a hang fails here
    assert child.returncode == 0 and child.stdout.strip().startswith(str(path)), child
    assert "not a regular file" in child.stdout or "a directory" in child.stdout


def test_a_huge_run_file_is_refused_before_it_is_read(tmp_path):
    path = tmp_path / "config.json"
    with open(path, "wb") as f:
        f.truncate(MAX_JSON_BYTES + 1)  # sparse: nothing is really written
    with pytest.raises(RunFileError, match="too large"):
        read_json_file(path)
    assert read_regular_file(tmp_path / "config.json", None)[:1] == b"\0"  # no bound: read


def test_strict_json_has_no_nan_and_says_which_fields():
    out = strict_json({"split": "val", "loss": math.nan, "ppl": math.inf, "acc": 0.5})
    doc = json.loads(out, parse_constant=lambda c: pytest.fail(f"{c} in output"))
    assert doc == {"split": "val", "loss": None, "ppl": None, "acc": 0.5, "non_finite": ["loss", "ppl"]}
    assert json.loads(strict_json({"loss": 1.25})) == {"loss": 1.25}


# -- the lock --------------------------------------------------------------------------------
def test_second_writer_fails_at_once_naming_dir_and_pid(tmp_path):
    with RunLock(tmp_path / "run"):
        with pytest.raises(RunLockedError) as e:
            RunLock(tmp_path / "run").acquire()
        assert str(tmp_path / "run") in str(e.value) and f"pid {os.getpid()}" in str(e.value)
    with RunLock(tmp_path / "run"):  # released on exit: the next writer gets it
        pass


def test_lock_held_by_another_process(tmp_path):
    code = (
        "import sys, time; from scratchformer.training.rundir import RunLock; "
        f"l = RunLock({str(tmp_path)!r}).acquire(); print('held', flush=True); sys.stdin.read()"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
        text=True,
    )
    try:
        assert child.stdout.readline().strip() == "held"
        with pytest.raises(RunLockedError, match=f"pid {child.pid}"):
            RunLock(tmp_path).acquire()
    finally:
        child.stdin.close()
        child.wait(timeout=30)
    RunLock(tmp_path).acquire().release()  # the lock died with its process


# -- the log ---------------------------------------------------------------------------------
def test_log_rows_round_trip_with_numpy_scalars(tmp_path):
    path = tmp_path / "log.jsonl"
    with LogWriter(path) as log:
        log.append({"step": 1, "train_loss": np.float32(2.5)})
        log.append({"step": 2, "train_loss": 2.25, "tokens_per_s": np.float64(10.0)})
    assert read_log(path) == (
        [{"step": 1, "train_loss": 2.5}, {"step": 2, "train_loss": 2.25, "tokens_per_s": 10.0}],
        None,
    )


def test_full_disk_leaves_no_half_row(tmp_path, monkeypatch):
    path = tmp_path / "log.jsonl"
    log = LogWriter(path)
    log.append({"step": 1, "train_loss": 2.5})
    before = path.read_bytes()
    real_write = os.write

    def half_then_enospc(fd, data):  # a disk that fills after half the row
        if len(data) > 4:
            return real_write(fd, data[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(rundir.os, "write", half_then_enospc)
    with pytest.raises(OSError, match="No space left") as e:
        log.append({"step": 2, "train_loss": 2.25})
    assert e.value.filename == str(path)  # the CLI prints "PATH: No space left on device"
    monkeypatch.undo()
    assert path.read_bytes() == before
    log.append({"step": 2, "train_loss": 2.0})  # the disk has room again
    log.close()
    assert [r["step"] for r in read_log(path)[0]] == [1, 2]


@pytest.mark.parametrize("torn", [b'{"step": 3, "train_lo', b'{"step": 3}', b'{"step": 3, "lr": \n'])
def test_torn_last_line_is_dropped_with_a_note(tmp_path, torn):
    path = tmp_path / "log.jsonl"
    path.write_bytes(b'{"step": 1}\n{"step": 2}\n' + torn)
    rows, note = read_log(path)
    assert rows == [{"step": 1}, {"step": 2}]
    assert note.startswith(f"{path}: dropped a torn last line") and "\n" not in note


def test_bad_line_in_the_middle_is_an_error_with_its_number(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_bytes(b'{"step": 1}\n{"step": 2, oops\n{"step": 3}\n')
    with pytest.raises(RunFileError, match="line 2: invalid JSON"):
        read_log(path)
    path.write_bytes(b'{"step": 1}\n["not", "a", "row"]\n')
    with pytest.raises(RunFileError, match="line 2: field the top level must be an object"):
        read_log(path)


def test_truncate_and_start_log(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_bytes(b'{"step": 1}\n{"step": 2}\n{"step": 3}\n{"step": 4, "lr')
    note = truncate_log(path, 2)
    assert "torn" in note and path.read_bytes() == b'{"step": 1}\n{"step": 2}\n'
    start_log(path)  # a fresh run into a directory with a stale log
    assert path.read_bytes() == b"" and read_log(path) == ([], None)


# -- data fingerprint ------------------------------------------------------------------------
def test_changed_data_is_one_line_naming_the_override(tmp_path):
    data = tmp_path / "d.txt"
    data.write_text("emma\nolivia\n")
    sha = fingerprint_file(data)
    assert sha == "8104bc91a3b553fa2fd58a8a3fbc3599753256a8b9891319e7c9c157ba186b60"
    check_data_unchanged(data, sha)  # unchanged: silent
    check_data_unchanged(data, None)  # nothing recorded (older runs): silent
    data.write_text("emma\nolivia\nava\n")
    with pytest.raises(
        DataChangedError, match=r"d.txt changed since training .* pass --use-changed-data"
    ) as e:
        check_data_unchanged(data, sha, option="--use-changed-data")
    assert isinstance(e.value, DataError) and "\n" not in str(e.value)
    with pytest.raises(DataError, match="cannot read data file"):
        fingerprint_file(tmp_path / "gone.txt")
