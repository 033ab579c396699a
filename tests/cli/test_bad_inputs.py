"""A catalogue of bad command lines (issue 9, item 8): every one must end with exit code 2,
exactly one non-empty line on stderr, and no traceback.

Each case is a row of CASES: (id, argv). argv words starting with "@" are filled in
per test (see `expand`):

    @tiny            a tiny model and 2 steps, so a case that wrongly trains finishes at once
    @lm @rev @maj @txt   private copies of tiny trained runs (names LM, reverse seq2seq,
                     majority classifier, a text LM on a small file), made once per session
    @forge:NAME      a copy of @lm (or @txt for data forgeries) edited by FORGERIES[NAME]
    @file:NAME       a data file with the bytes DATA_FILES[NAME]
    @hf:NAME         a Hugging Face directory with the files HF_DIRS[NAME]
    @tmp             this test's temporary directory (also the working directory)

The cases that would exhaust memory (huge sizes) are refused by estimates made before
anything is allocated (scratchformer/limits/), so they fail fast here too.
"""

import json
import shutil
import traceback
from pathlib import Path

import numpy as np
import pytest
from json_edits import DELETE, edited
from tiny_run import tiny

from scratchformer.cli.main import main

TINY = ["--max-steps", "2", *tiny(n_embd=8, eval_batches=1)]
QUIET = ["--no-progress", "--quiet"]
DIGITS_5000 = "1" * 5000

DATA_FILES = {
    "empty": b"",
    "not_utf8": b"emma\n\xff\xfe\xfd\nolivia\n",
    "one_line": b"emma\n",
    "blank_lines": b"\n\n\n\n",
    "short_text": b"to be or not",
    # issue 9: block 200,001 -> a 37 GB batch; 200 names around it, so the format is guessed as lines
    "long_line": b"".join(f"name{i}\n".encode() for i in range(200)) + b"x" * 200_000 + b"\n",
    "names": b"".join(f"name{i}\n".encode() for i in range(200)),
}


# Hugging Face directories that are not a causal LM scratchformer reads: {name: {file: text}}
HF_DIRS = {
    "bert": {"config.json": '{"model_type": "bert"}'},  # another architecture
    "no_tokenizer": {
        "config.json": '{"model_type": "gpt2"}'
    },  # neither tokenizer.json nor vocab.json + merges.txt
}


# -- forged run directories ------------------------------------------------------------------
def _edit_json(name, edit):
    """A forgery that rewrites `name` (in best/ and last/) with edit(parsed) (or edit's text
    when it returns a str)."""

    def forge(run: Path):
        for ck in ("best", "last"):
            p = run / ck / name
            new = edit(json.loads(p.read_text()))
            p.write_text(new if isinstance(new, str) else json.dumps(new))

    return forge


def _set(path, value):
    """edit(doc): doc with the field at `path` (keys) set to value (deleted for DELETE)."""
    return lambda doc: edited(doc, path, value)


def _nan_weights(run: Path):
    from safetensors.numpy import load_file, save_file

    for ck in ("best", "last"):
        p = run / ck / "model.safetensors"
        save_file({k: np.full_like(v, np.nan) for k, v in load_file(p).items()}, p)


def _huge_weights(run: Path):  # what a run diverging without NaN (relu, --lr 1e4) leaves
    from safetensors.numpy import load_file, save_file

    for ck in ("best", "last"):
        p = run / ck / "model.safetensors"
        save_file({k: (v * 1e16).astype(v.dtype) for k, v in load_file(p).items()}, p)


def _truncate(name, keep):
    def forge(run: Path):
        for ck in ("best", "last"):
            p = run / ck / name
            p.write_bytes(p.read_bytes()[:keep])

    return forge


def _delete(name):
    def forge(run: Path):
        for ck in ("best", "last"):
            (run / ck / name).unlink()

    return forge


def _log(text: bytes):
    def forge(run: Path):
        (run / "log.jsonl").write_bytes(text)

    return forge


def _keep_only(**entries):
    """A forgery that leaves only some entries of the run, renamed: last="best" keeps last/ as
    best/; an entry not named is deleted (what a crash or a user's cleanup may leave)."""

    def forge(run: Path):
        staged = run.parent / "staged"
        staged.mkdir()
        for name, as_name in entries.items():
            (run / name).rename(staged / as_name)
        for name in ("best", "last", "log.jsonl"):
            p = run / name
            shutil.rmtree(p) if p.is_dir() else p.unlink(missing_ok=True)
        for p in staged.iterdir():
            p.rename(run / p.name)
        staged.rmdir()

    return forge


def _moved_data(edit_bytes):
    """(For @txt) copy the data file next to the run, point config.json at the copy, then
    edit the copy (edit_bytes(old) -> new bytes, or None to delete it)."""

    def forge(run: Path):
        for ck in ("best", "last"):
            p = run / ck / "config.json"
            cfg = json.loads(p.read_text())
            data = run.parent / "data.txt"
            if not data.exists():
                shutil.copy(cfg["data"]["path"], data)
            cfg["data"]["path"] = str(data)
            p.write_text(json.dumps(cfg))
        new = edit_bytes(data.read_bytes())
        data.unlink() if new is None else data.write_bytes(new)

    return forge


def _diagnostics(edit):
    """A forgery that edits the last record of diagnostics.jsonl (edit(record) in place)."""

    def forge(run: Path):
        lines = (run / "diagnostics.jsonl").read_text().splitlines()
        records = [json.loads(line) for line in lines[1:]]
        edit(records[-1])
        (run / "diagnostics.jsonl").write_text("\n".join([lines[0], *map(json.dumps, records)]) + "\n")

    return forge


def _replace_checkpoint(which, make):
    """A forgery replacing best/ or last/ by what make(path) creates there (a file, a loop)."""

    def forge(run: Path):
        shutil.rmtree(run / which)
        make(run / which)

    return forge


MT19937 = {"bit_generator": "MT19937", "state": {"key": list(range(624)), "pos": 624}}
FORGERIES = {
    "config_list": _edit_json("config.json", lambda d: [1, 2]),
    "config_no_model": _edit_json("config.json", _set(("model",), DELETE)),
    "config_no_data": _edit_json("config.json", _set(("data",), DELETE)),
    "config_kind": _edit_json("config.json", _set(("kind",), "rnn")),
    "config_n_embd_str": _edit_json("config.json", _set(("model", "n_embd"), "8")),
    "config_n_embd_10": _edit_json("config.json", _set(("model", "n_embd"), 10)),
    "config_n_layer_bool": _edit_json("config.json", _set(("model", "n_layer"), True)),
    "config_unknown_field": _edit_json("config.json", _set(("model", "colour"), "red")),
    "config_activation": _edit_json("config.json", _set(("model", "activation"), "swish")),
    "config_5000_digits": _edit_json(
        "config.json", lambda d: json.dumps(d).replace('"n_layer": 1', f'"n_layer": {DIGITS_5000}')
    ),
    "config_huge_vocab": _edit_json("config.json", _set(("model", "vocab_size"), 10**12)),
    "config_huge_n_embd": _edit_json("config.json", _set(("model", "n_embd"), 2**20)),
    "config_not_json": _truncate("config.json", 20),
    "state_step_str": _edit_json("trainer_state.json", _set(("step",), "2")),
    "state_step_negative": _edit_json("trainer_state.json", _set(("step",), -3)),
    "state_5000_digits": _edit_json(
        "trainer_state.json", lambda d: json.dumps(d).replace('"step": 2', f'"step": {DIGITS_5000}')
    ),
    "state_deep": _edit_json("trainer_state.json", _set(("extra", "deep"), "x")),  # text replaced below
    "state_mt19937": _edit_json("trainer_state.json", _set(("rng_state", "data"), MT19937)),
    "state_rng_list": _edit_json("trainer_state.json", _set(("rng_state",), [1, 2])),
    "state_list": _edit_json("trainer_state.json", lambda d: []),
    "state_version_str": _edit_json("trainer_state.json", _set(("version",), "1")),
    "state_no_train_config": _edit_json("trainer_state.json", _set(("extra", "train_config"), DELETE)),
    "state_train_config_str": _edit_json(
        "trainer_state.json", _set(("extra", "train_config", "batch_size"), "8")
    ),
    "tokenizer_list": _edit_json("tokenizer.json", lambda d: []),
    "tokenizer_dupes": _edit_json("tokenizer.json", _set(("chars",), ["a", "a", "b"])),
    "tokenizer_long_char": _edit_json("tokenizer.json", _set(("chars", 0), "ab")),
    "tokenizer_missing": _delete("tokenizer.json"),
    "weights_truncated": _truncate("model.safetensors", 100),
    "weights_nan": _nan_weights,
    "weights_huge": _huge_weights,
    "log_bad_middle": _log(b'{"step": 1}\n{"step": 2, garbage\n{"step": 2}\n'),
    "log_step_str": _log(b'{"step": "1"}\n'),
    "log_not_utf8": _log(b'{"step": 1, "note": "\xff\xfe"}\n{"step": 2}\n'),
    "log_400_digits": _log(b'{"step": 1, "train_loss": ' + b"9" * 400 + b'}\n{"step": 2}\n'),
    "log_5000_digits": _log(b'{"step": 1, "train_loss": ' + b"9" * 5000 + b'}\n{"step": 2}\n'),
    "log_deep": _log(b'{"step": 1, "x": ' + b"[" * 100_000 + b"]" * 100_000 + b'}\n{"step": 2}\n'),
    "run_best_only": _keep_only(best="best"),
    "run_backups_only": _keep_only(last=".last.old", best=".best.old"),
    "run_log_only": _keep_only(**{"log.jsonl": "log.jsonl"}),
    "data_changed": _moved_data(lambda b: b + b"to be or not to be\n"),  # same characters, more text
    "data_missing": _moved_data(lambda b: None),
    # issue 26: the adversary's run directories
    "diag_mean_string": _diagnostics(lambda r: r["layers"][0].update(mean="0.5")),
    "diag_no_probe": _diagnostics(lambda r: r.pop("probe")),
    "diag_ragged_attention": _diagnostics(lambda r: r["probe"]["attention"][0][0].pop()),
    "best_is_a_file": _replace_checkpoint("best", lambda p: p.write_text("not a checkpoint")),
    "best_links_to_itself": _replace_checkpoint("best", lambda p: p.symlink_to(p)),
}
_deep = "[" * 100_000 + "]" * 100_000
FORGERIES["state_deep"] = _edit_json(
    "trainer_state.json", lambda d: json.dumps(d).replace('"step": 2', f'"step": {_deep}')
)


# -- the catalogue ---------------------------------------------------------------------------
def train(*words):
    return ["train", *words]


CASES = [
    # train: values argparse rejects (the line is right, the usage block before it is not)
    ("train-n-layer-0", train("@tiny", "--n-layer", "0")),
    ("train-n-layer-negative", train("@tiny", "--n-layer", "-1")),
    ("train-n-layer-word", train("@tiny", "--n-layer", "four")),
    ("train-n-head-0", train("@tiny", "--n-head", "0")),
    ("train-n-embd-0", train("@tiny", "--n-embd", "0")),
    ("train-n-embd-float", train("@tiny", "--n-embd", "1.5")),
    ("train-block-size-0", train("@tiny", "--block-size", "0")),
    ("train-dropout-negative", train("@tiny", "--dropout", "-0.1")),
    ("train-dropout-word", train("@tiny", "--dropout", "some")),
    ("train-activation-unknown", train("@tiny", "--activation", "swish")),
    ("train-positional-unknown", train("@tiny", "--positional", "xpos")),
    ("train-norm-unknown", train("@tiny", "--norm", "middle")),
    ("train-init-unknown", train("@tiny", "--init", "xavier")),
    ("train-max-steps-0", train("@tiny", "--max-steps", "0")),
    ("train-max-steps-negative", train("@tiny", "--max-steps", "-5")),
    ("train-max-steps-float", train("@tiny", "--max-steps", "2.5")),
    ("train-max-steps-missing-value", train("@tiny", "--max-steps")),
    ("train-batch-size-0", train("@tiny", "--batch-size", "0")),
    ("train-grad-accum-0", train("@tiny", "--grad-accum", "0")),
    ("train-workers-0", train("@tiny", "--workers", "0")),
    ("train-lr-negative", train("@tiny", "--lr", "-1")),
    ("train-lr-nan", train("@tiny", "--lr", "nan")),
    ("train-lr-word", train("@tiny", "--lr", "fast")),
    ("train-min-lr-negative", train("@tiny", "--min-lr", "-1")),
    ("train-warmup-word", train("@tiny", "--warmup-steps", "ten")),
    ("train-decay-steps-0", train("@tiny", "--decay-steps", "0")),
    ("train-weight-decay-negative", train("@tiny", "--weight-decay", "-0.1")),
    ("train-beta1-negative", train("@tiny", "--beta1", "-0.5")),
    ("train-grad-clip-negative", train("@tiny", "--grad-clip", "-1")),
    ("train-eval-interval-0", train("@tiny", "--eval-interval", "0")),
    ("train-eval-batches-0", train("@tiny", "--eval-batches", "0")),
    ("train-log-interval-0", train("@tiny", "--log-interval", "0")),
    ("train-time-limit-negative", train("@tiny", "--time-limit", "-1")),
    ("train-time-limit-nan", train("@tiny", "--time-limit", "nan")),
    ("train-format-unknown", train("@tiny", "--format", "csv")),
    ("train-task-unknown", train("@tiny", "--task", "translate")),
    ("train-seed-word", train("@tiny", "--seed", "lucky")),
    ("train-split-seed-word", train("@tiny", "--split-seed", "x")),
    ("train-unknown-option", train("@tiny", "--learning-rate", "0.1")),
    ("train-stray-argument", train("@tiny", "names.txt")),
    # train: values argparse accepts that the code must refuse
    ("train-dropout-1", train("@tiny", "--dropout", "1.0")),
    ("train-dropout-1.5", train("@tiny", "--dropout", "1.5")),
    ("train-dropout-inf", train("@tiny", "--dropout", "inf")),
    ("train-n-head-not-dividing", train("@tiny", "--n-head", "3")),
    ("train-lr-0", train("@tiny", "--lr", "0")),
    ("train-lr-inf", train("@tiny", "--lr", "inf")),
    ("train-beta1-1", train("@tiny", "--beta1", "1.0")),
    ("train-beta2-1.5", train("@tiny", "--beta2", "1.5")),
    ("train-warmup-negative", train("@tiny", "--warmup-steps", "-1")),
    ("train-time-limit-0", train("@tiny", "--time-limit", "0")),
    ("train-weight-decay-inf", train("@tiny", "--weight-decay", "inf")),
    ("train-seed-negative", train("@tiny", "--seed", "-1")),
    ("train-split-seed-negative", train("@tiny", "--split-seed", "-1")),
    # issue 18 item 1: values beyond what a checkpoint holds are refused before training
    *[
        (f"train-{opt[2:]}-beyond-checkpoint", train("@tiny", opt, str(2**31)))
        for opt in (
            "--max-steps",
            "--eval-interval",
            "--log-interval",
            "--warmup-steps",
            "--decay-steps",
            "--eval-batches",
            "--num-samples",
        )
    ],
    *[(f"train-{opt[2:]}-2-to-63", train("@tiny", opt, str(2**63))) for opt in ("--seed", "--split-seed")],
    *[
        (f"train-{opt[2:]}-inf", train("@tiny", opt, "inf"))
        for opt in ("--grad-clip", "--time-limit", "--min-lr")
    ],
    (
        "train-resume-new-seed",
        ["train", "--resume", "--out", "@lm", "--seed", "5", *QUIET],
    ),  # issue 18 item 8
    ("train-num-samples-negative", train("@tiny", "--num-samples", "-1")),
    ("train-lr-1e4-nan", train("@tiny", "--max-steps", "20", "--lr", "1e4")),
    (
        "train-relu-lr-1e4-diverges",
        train("@tiny", "--max-steps", "20", "--activation", "relu", "--lr", "1e4"),
    ),
    # train: data files
    ("train-data-missing", train("@tiny", "--data", "@tmp/nope.txt")),
    ("train-data-empty-path", train("@tiny", "--data", "")),
    ("train-data-directory", train("@tiny", "--data", "@tmp")),
    ("train-data-not-utf8", train("@tiny", "--data", "@file:not_utf8")),
    ("train-data-empty-file", train("@tiny", "--data", "@file:empty")),
    ("train-data-one-line", train("@tiny", "--data", "@file:one_line")),
    ("train-data-blank-lines", train("@tiny", "--data", "@file:blank_lines")),
    ("train-data-text-too-short", train("@tiny", "--data", "@file:short_text", "--format", "text")),
    ("train-data-200k-char-line", train("@tiny", "--data", "@file:long_line")),
    # train: sizes that exhaust memory
    ("train-block-size-huge", train("@tiny", "--block-size", "1000000000")),
    ("train-batch-size-huge", train("@tiny", "--batch-size", "1000000000")),
    ("train-n-embd-huge", train("@tiny", "--n-embd", "1048576")),
    ("train-n-layer-huge", train("@tiny", "--n-layer", "100000000")),  # 10^6 tiny layers fit in 32 GB
    # train: output directories and resume
    ("train-out-empty", train("@tiny", "--out", "")),
    ("train-out-is-a-file", train("@tiny", "--out", "@file:names")),
    ("train-out-holds-a-run", train("@tiny", "--out", "@lm")),
    ("train-out-holds-best-only", train("@tiny", "--out", "@forge:run_best_only")),
    ("train-out-holds-backups-only", train("@tiny", "--out", "@forge:run_backups_only")),
    ("train-out-holds-a-log-only", train("@tiny", "--out", "@forge:run_log_only")),
    ("train-out-dangling-link", train("@tiny", "--out", "@dangling")),
    ("train-resume-with-best-only", train(*QUIET, "--resume", "--out", "@forge:run_best_only")),
    ("train-resume-with-a-log-only", train(*QUIET, "--resume", "--out", "@forge:run_log_only")),
    ("train-resume-and-overwrite", train(*QUIET, "--resume", "--overwrite", "--out", "@lm")),
    ("train-resume-nothing-there", train(*QUIET, "--resume", "--out", "@tmp/none")),
    ("train-resume-changes-model", train(*QUIET, "--resume", "--out", "@lm", "--n-layer", "2")),
    ("train-resume-changes-data", train(*QUIET, "--resume", "--out", "@lm", "--data", "@file:names")),
    ("train-resume-changes-task", train(*QUIET, "--resume", "--out", "@lm", "--task", "reverse")),
    ("train-task-with-data", train("@tiny", "--task", "majority", "--data", "@file:names")),
    ("train-task-with-block-size", train("@tiny", "--task", "reverse", "--block-size", "8")),
    ("train-task-with-format", train("@tiny", "--task", "copy", "--format", "text")),
]

# every forgery, under the commands that read it
FORGED_COMMANDS = {
    "eval": lambda d: ["eval", d],
    "sample": lambda d: ["sample", d, "-n", "2"],
    "resume": lambda d: ["train", *QUIET, "--resume", "--out", d, "--max-steps", "3"],
    "viz": lambda d: ["viz", d],
}
FORGED = {  # forgery -> the commands it is tried under
    "config_list": ("eval sample resume"),
    "config_no_model": ("eval sample resume"),
    "config_no_data": ("eval resume"),
    "config_kind": ("eval sample"),
    "config_n_embd_str": ("eval sample"),
    "config_n_embd_10": ("eval sample"),
    "config_n_layer_bool": ("eval"),
    "config_unknown_field": ("eval sample"),
    "config_activation": ("sample"),
    "config_5000_digits": ("eval sample"),
    "config_huge_vocab": ("eval sample"),
    "config_huge_n_embd": ("sample"),
    "config_not_json": ("eval sample"),
    "state_step_str": ("eval resume"),
    "state_step_negative": ("resume"),
    "state_5000_digits": ("eval resume"),
    "state_deep": ("eval resume"),
    "state_mt19937": ("resume"),
    "state_rng_list": ("resume"),
    "state_list": ("eval"),
    "state_version_str": ("eval sample"),
    "state_no_train_config": ("resume"),
    "state_train_config_str": ("resume"),
    "tokenizer_list": ("eval sample"),
    "tokenizer_dupes": ("sample"),
    "tokenizer_long_char": ("sample"),
    "tokenizer_missing": ("sample"),
    "weights_truncated": ("eval sample"),
    "weights_nan": ("eval sample resume"),
    "weights_huge": ("sample"),
    "log_bad_middle": ("resume viz"),
    "log_step_str": ("resume viz"),
    "log_not_utf8": ("viz"),  # issue 18 item 19
    "log_400_digits": ("viz"),
    "log_5000_digits": ("viz"),
    "log_deep": ("viz"),
    "data_changed": ("eval resume"),
    "data_missing": ("eval"),
    "diag_mean_string": ("viz"),
    "diag_no_probe": ("viz"),
    "diag_ragged_attention": ("viz"),
    "best_is_a_file": ("resume"),
    "best_links_to_itself": ("resume"),
}
for forgery, commands in FORGED.items():
    for command in commands.split():
        CASES.append(
            (f"{command}-forged-{forgery.replace('_', '-')}", FORGED_COMMANDS[command](f"@forge:{forgery}"))
        )

CASES += [
    ("eval-json-huge-weights", ["eval", "@forge:weights_huge", "--json"]),
    # sample
    ("sample-no-run", ["sample", "@tmp/none"]),
    ("sample-dir-is-a-file", ["sample", "@file:names"]),
    ("sample-n-0", ["sample", "@lm", "-n", "0"]),
    ("sample-n-negative", ["sample", "@lm", "-n", "-1"]),
    ("sample-n-word", ["sample", "@lm", "-n", "many"]),
    ("sample-max-new-tokens-0", ["sample", "@lm", "--max-new-tokens", "0"]),
    ("sample-temperature-negative", ["sample", "@lm", "--temperature", "-1"]),
    ("sample-temperature-nan", ["sample", "@lm", "--temperature", "nan"]),
    ("sample-temperature-inf", ["sample", "@lm", "--temperature", "inf"]),
    ("sample-temperature-denormal", ["sample", "@lm", "--temperature", "1e-320"]),
    ("sample-top-k-0", ["sample", "@lm", "--top-k", "0"]),
    ("sample-top-k-above-vocab", ["sample", "@lm", "--top-k", "1000"]),
    ("sample-top-p-0", ["sample", "@lm", "--top-p", "0"]),
    ("sample-top-p-1.5", ["sample", "@lm", "--top-p", "1.5"]),
    ("sample-seed-negative", ["sample", "@lm", "--seed", "-1"]),
    ("sample-seed-word", ["sample", "@lm", "--seed", "x"]),
    ("sample-prompt-unknown-chars", ["sample", "@lm", "--prompt", "ABC!"]),
    ("sample-task-model", ["sample", "@rev"]),
    ("sample-unknown-option", ["sample", "@lm", "--beam", "2"]),
    ("sample-n-huge", ["sample", "@lm", "-n", "1000000000"]),
    ("sample-max-new-tokens-huge", ["sample", "@lm", "--max-new-tokens", "1000000000"]),
    # eval
    ("eval-no-run", ["eval", "@tmp/none"]),
    ("eval-dir-is-a-file", ["eval", "@file:names"]),
    ("eval-split-train", ["eval", "@lm", "--split", "train"]),
    ("eval-beam-0", ["eval", "@rev", "--beam", "0"]),
    ("eval-beam-word", ["eval", "@rev", "--beam", "wide"]),
    ("eval-beam-on-lm", ["eval", "@lm", "--beam", "2"]),
    ("eval-beam-on-classifier", ["eval", "@maj", "--beam", "2"]),
    ("eval-split-test-on-text", ["eval", "@txt", "--split", "test"]),
    ("eval-unknown-option", ["eval", "@lm", "--temperature", "1"]),
    ("eval-beam-huge", ["eval", "@rev", "--beam", "1000000"]),  # issue 18 item 17
    # predict
    ("predict-missing-input", ["predict", "@rev"]),
    ("predict-no-run", ["predict", "@tmp/none", "1 2 3"]),
    ("predict-on-lm", ["predict", "@lm", "1 2 3"]),
    ("predict-letters", ["predict", "@rev", "a b c"]),
    ("predict-empty-input", ["predict", "@rev", ""]),
    ("predict-digit-out-of-vocab", ["predict", "@rev", "1 12 3"]),
    ("predict-negative-digit", ["predict", "@rev", "1 -2 3"]),
    ("predict-too-long", ["predict", "@rev", " ".join("1" * 40)]),
    ("predict-majority-digit-3", ["predict", "@maj", "0 1 3"]),
    ("predict-majority-too-long", ["predict", "@maj", " ".join("1" * 200)]),
    ("predict-beam-0", ["predict", "@rev", "1 2 3", "--beam", "0"]),
    ("predict-beam-on-classifier", ["predict", "@maj", "0 1 2", "--beam", "3"]),
    ("predict-beam-huge", ["predict", "@rev", "1 2 3", "--beam", "1000000"]),
    # embed
    ("embed-no-texts", ["embed"]),
    ("embed-model-missing", ["embed", "hello", "--model", "@tmp/none"]),
    ("embed-model-empty-dir", ["embed", "hello", "--model", "@tmp"]),
    ("embed-model-is-a-file", ["embed", "hello", "--model", "@file:names"]),
    ("embed-model-broken-config", ["embed", "hello", "--model", "@forge:weights_truncated"]),
    # a lone surrogate (what Python makes of invalid UTF-8 in argv)
    ("embed-invalid-utf8", ["embed", "caf\udce9", "--model", "@tmp/none"]),
    ("embed-model-empty-path", ["embed", "hello", "--model", ""]),
    # issue 18 items 7 and 20
    ("embed-out-directory", ["embed", "hello", "--out", "@tmp"]),
    ("embed-out-empty", ["embed", "hello", "--out", ""]),
    ("embed-lone-surrogate", ["embed", "caf\udce9"]),  # the installed model (or one line: not installed)
    ("embed-model-huge-config", ["embed", "hello", "--model", "@hugebert"]),
    ("embed-unknown-option", ["embed", "hello", "--pooling", "max"]),
    # viz (issue 18 items 19 and cosmetic)
    ("viz-out-empty", ["viz", "@lm", "--out", ""]),
    ("viz-bert-empty", ["viz", "--bert", "", "--text", "A sentence."]),
    ("viz-text-empty-on-text-model", ["viz", "@txt", "--text", ""]),
    ("viz-bert-missing-dir", ["viz", "--bert", "@tmp/none", "--text", "A sentence."]),
    # BPE runs, --init-from a Hugging Face directory, export
    ("train-vocab-size-without-bpe", train("@tiny", "--vocab-size", "300")),
    ("train-vocab-size-below-bytes", train("@tiny", "--tokenizer", "bpe", "--vocab-size", "100")),
    ("train-tokenizer-unknown", train("@tiny", "--tokenizer", "word")),
    ("train-tokenizer-on-task", train("@tiny", "--task", "majority", "--tokenizer", "bpe")),
    ("train-resume-with-tokenizer", ["train", "--resume", "--out", "@lm", "--tokenizer", "bpe", *QUIET]),
    (
        "train-init-from-other-architecture",
        ["train", "--init-from", "@hf:bert", "--data", "@file:names", *QUIET],
    ),
    (
        "train-init-from-no-tokenizer-files",
        ["train", "--init-from", "@hf:no_tokenizer", "--data", "@file:names", *QUIET],
    ),
    ("train-init-from-missing-dir", ["train", "--init-from", "@tmp/none", "--data", "@file:names", *QUIET]),
    (
        "train-init-from-with-tokenizer-bpe",
        ["train", "--init-from", "@hf:bert", "--tokenizer", "bpe", *QUIET],
    ),
    ("train-init-from-with-vocab-size", ["train", "--init-from", "@hf:bert", "--vocab-size", "300", *QUIET]),
    ("train-init-from-with-model-option", ["train", "--init-from", "@hf:bert", "--n-layer", "2", *QUIET]),
    ("train-init-from-with-resume", ["train", "--init-from", "@hf:bert", "--resume", "--out", "@lm", *QUIET]),
    ("train-init-from-on-task", ["train", "--init-from", "@hf:bert", "--task", "reverse", *QUIET]),
    ("sample-hf-other-architecture", ["sample", "--hf", "@hf:bert"]),
    ("sample-hf-no-tokenizer-files", ["sample", "--hf", "@hf:no_tokenizer"]),
    ("export-task-run", ["export", "@rev", "--hf", "@tmp/hf"]),
    ("export-no-out", ["export", "@lm"]),
    ("export-no-run", ["export", "@tmp/none", "--hf", "@tmp/hf"]),
    # the command itself
    ("unknown-command", ["finetune"]),
    ("unknown-global-option", ["--verbose", "train"]),
]


# -- running a case --------------------------------------------------------------------------
@pytest.fixture(scope="session")
def trained_runs(tmp_path_factory):
    """Tiny runs made once: names LM, reverse (seq2seq), majority (classifier), text LM."""
    root = tmp_path_factory.mktemp("catalogue-runs")
    text = root / "text.txt"
    text.write_bytes(b"to be, or not to be, that is the question:\n" * 40)
    tiny = [*TINY, "--eval-batches", "1"]
    for name, extra in [
        ("lm", []),
        ("rev", ["--task", "reverse"]),
        ("maj", ["--task", "majority"]),
        ("txt", ["--data", str(text), "--block-size", "16"]),
    ]:
        assert main(["train", *tiny, "--out", str(root / name), *extra]) == 0
    return root


def expand(argv, tmp_path: Path, runs: Path) -> list[str]:
    out = []
    for word in argv:
        if word == "@tiny":
            out += TINY
        elif word in ("@lm", "@rev", "@maj", "@txt"):
            dest = tmp_path / word[1:]
            shutil.copytree(runs / word[1:], dest)
            out.append(str(dest))
        elif word.startswith("@forge:"):
            name = word.split(":", 1)[1]
            dest = tmp_path / "forged" / "run"
            shutil.copytree(runs / ("txt" if name.startswith("data_") else "lm"), dest)
            FORGERIES[name](dest)
            out.append(str(dest))
        elif word == "@dangling":  # a link to a directory that does not exist
            (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
            out.append(str(tmp_path / "dangling"))
        elif word == "@hugebert":  # a BERT config.json whose sizes ask for terabytes
            dest = tmp_path / "hugebert"
            dest.mkdir()
            (dest / "config.json").write_text(json.dumps({"hidden_size": 2**20, "num_attention_heads": 1}))
            out.append(str(dest))
        elif word.startswith("@hf:"):
            name = word.split(":", 1)[1]
            path = tmp_path / f"hf-{name}"
            path.mkdir()
            for file, text in HF_DIRS[name].items():
                (path / file).write_text(text)
            out.append(str(path))
        elif word.startswith("@file:"):
            name = word.split(":", 1)[1]
            path = tmp_path / f"{name}.txt"
            path.write_bytes(DATA_FILES[name])
            out.append(str(path))
        else:
            out.append(word.replace("@tmp", str(tmp_path)))
    return out


@pytest.mark.parametrize("argv", [pytest.param(argv, id=case_id) for case_id, argv in CASES])
def test_bad_input_is_one_line_and_exit_2(argv, tmp_path, trained_runs, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a case that wrongly trains with a default --out stays here
    argv = expand(argv, tmp_path, trained_runs)
    capsys.readouterr()
    try:
        code = main(argv)
    except SystemExit as e:
        code = e.code
    except BaseException:  # what the user would see as a traceback
        traceback.print_exc()
        code = "traceback"
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in err, err[-2000:]
    assert code == 2, f"exit code {code}; stderr: {err[-500:]}"
    assert len(lines) == 1, f"{len(lines)} stderr lines: {err[-500:]}"
    assert lines[0].startswith("scratchformer"), lines[0]


def test_messages_of_the_run_directory_cases(tmp_path, trained_runs, capsys):
    """The lines themselves: what to do next, and the link's target named."""

    def stderr(*argv):
        capsys.readouterr()
        assert main(expand(list(argv), tmp_path, trained_runs)) == 2
        return capsys.readouterr().err

    err = stderr("train", "@tiny", "--out", "@dangling")
    assert "is a link to" in err and "nowhere" in err and "does not exist" in err and "File exists" not in err
    err = stderr("train", "@tiny", "--out", "@forge:run_backups_only")
    assert ".best.old" in err and ".last.old" in err and "--resume" in err and "--overwrite" in err


LONG_LINE_AFTER_BLANKS = b"".join(f"name{i}\n\n".encode() for i in range(150)) + b"x" * 20_000 + b"\n"


def test_over_long_line_is_named_by_its_line_in_the_file(tmp_path, capsys):
    data = tmp_path / "blanks.txt"  # 150 names, each followed by an empty line, then the long one
    data.write_bytes(LONG_LINE_AFTER_BLANKS)
    capsys.readouterr()
    assert main(["train", *TINY, "--data", str(data), "--format", "lines", "--out", str(tmp_path / "o")]) == 2
    assert f"{data} line 301 has 20,000 characters" in capsys.readouterr().err


def test_items_split_on_newlines_only(tmp_path):
    from scratchformer.data import load_dataset

    data = tmp_path / "items.txt"  # U+2028, NEL and a form feed inside items; one CRLF line
    items = (
        [f"a\u2028b{i}" for i in range(50)]
        + [f"c\x85d{i}" for i in range(50)]
        + [f"e\x0cf{i}" for i in range(50)]
    )
    data.write_bytes(("\n".join(items[:-1]) + "\n" + items[-1] + "\r\n").encode("utf-8"))
    ds = load_dataset(data, format="lines")
    got = sorted(ds.train.lines + ds.val.lines + ds.test.lines)
    assert got == sorted(items)


SPECIAL_RUN_FILES = """
import os, sys
from scratchformer.cli.main import main
run, kind = sys.argv[1], sys.argv[2]
for ck in ("best", "last"):
    if kind == "fifo":
        os.unlink(f"{run}/{ck}/trainer_state.json")
        os.mkfifo(f"{run}/{ck}/trainer_state.json")  # reading it would wait for a writer forever
    else:
        os.unlink(f"{run}/{ck}/config.json")
        os.symlink("/dev/zero", f"{run}/{ck}/config.json")  # reading it would fill the memory
sys.exit(main(["sample", run, "-n", "1"]))
"""


@pytest.mark.parametrize("kind", ["fifo", "dev_zero"])
def test_run_files_that_are_not_regular_files_are_refused(tmp_path, trained_runs, kind):
    import os
    import subprocess
    import sys

    run = tmp_path / "run"
    shutil.copytree(trained_runs / "lm", run)
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        [sys.executable, "-c", SPECIAL_RUN_FILES, str(run), kind],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(root)},
        timeout=60,
    )  # a hang fails here
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and "not a regular file" in lines[0], proc.stderr


def test_catalogue_is_large_and_ids_are_unique():
    ids = [case[0] for case in CASES]
    assert len(ids) >= 120 and len(set(ids)) == len(ids)
    for cmd in ("train", "sample", "eval", "predict", "embed"):
        assert sum(1 for case in CASES if case[1][:1] == [cmd] or case[0].startswith(cmd)) >= 8, cmd


# -- API calls: a typed error from scratchformer.errors, never a silent cast (issue 18 items 13, 21) --
def _api_cases():
    from scratchformer.inference.beam import beam_search
    from scratchformer.models import GPT, GPTConfig, Seq2SeqConfig, Seq2SeqTransformer
    from scratchformer.nn import MultiHeadAttention

    cfg = GPTConfig(vocab_size=5, block_size=4, n_layer=1, n_head=1, n_embd=4)
    gpt = GPT(cfg, seed=0)
    idx = np.zeros((1, 3), dtype=np.int64)
    s2s = Seq2SeqTransformer(
        Seq2SeqConfig(src_vocab_size=13, tgt_vocab_size=13, max_len=6, n_embd=8, n_head=2, n_layer=1), seed=0
    )
    src = np.ones((2, 3), dtype=np.int64)

    def gpt_backward(dloss):
        gpt.train()
        gpt(idx, idx)
        gpt.backward(dloss)

    def s2s_backward(grad):
        s2s.train()
        s2s(src, src, src)
        s2s.backward(grad_output=grad)

    return {
        "attention-0-positions": lambda: MultiHeadAttention(4, 1)(np.zeros((1, 0, 4), np.float32)),
        "backward-grad-wrong-shape": lambda: s2s_backward(np.zeros((2, 3, 5), np.float32)),
        "backward-dloss-string": lambda: gpt_backward("1"),
        "backward-dloss-array": lambda: gpt_backward(np.ones(3)),
        "generate-rng-negative": lambda: gpt.generate(idx, 2, rng=-1),
        "gpt-seed-string": lambda: GPT(cfg, seed="x"),
        "to-float16": lambda: GPT(cfg, seed=0).to(np.float16),
        "load-int-weights": lambda: gpt.load_state_dict(
            {k: v.astype(np.int64) for k, v in gpt.state_dict().items()}
        ),
        "load-bool-weights": lambda: gpt.load_state_dict({k: v > 0 for k, v in gpt.state_dict().items()}),
        "load-complex-weights": lambda: gpt.load_state_dict({k: v + 0j for k, v in gpt.state_dict().items()}),
        "beam-width-float": lambda: beam_search(s2s, src, beam_width=2.0),
    }


@pytest.mark.parametrize("case", list(_api_cases()))
def test_bad_api_call_is_a_typed_error(case):
    from scratchformer.errors import ScratchformerError

    with pytest.raises(ScratchformerError) as e:
        _api_cases()[case]()
    assert "\n" not in str(e.value) and str(e.value)


def test_to_leaves_a_shared_config_alone():
    from scratchformer.models import GPT, GPTConfig

    cfg = GPTConfig(vocab_size=5, block_size=4, n_layer=1, n_head=1, n_embd=4)
    a, b = GPT(cfg, seed=0), GPT(cfg, seed=0)
    a.to(np.float64)
    assert a.config.dtype == "float64" and cfg.dtype == "float32" and b.config is cfg
    assert GPTConfig.from_dict(a.config.to_dict()).dtype == "float64"


# -- finetune (issue 21 item 7): bad CSVs, an unseen label at eval time, a model that is not BERT --
FINETUNE_CSVS = {
    "no_columns": b"sentence,category\nhello there,a\n",
    "empty": b"",
    "header_only": b"text,label\n",
    "not_utf8": b"text,label\n\xff\xfe,a\n",
    "unseen": b"text,label\nthe king,love\nthe sword,night\n",
}
FINETUNE_CASES = [
    ("finetune-csv-without-columns", ["finetune", "--model", "@bert", "--data", "@csv:no_columns"]),
    ("finetune-empty-csv", ["finetune", "--model", "@bert", "--data", "@csv:empty"]),
    ("finetune-csv-header-only", ["finetune", "--model", "@bert", "--data", "@csv:header_only"]),
    ("finetune-csv-not-utf8", ["finetune", "--model", "@bert", "--data", "@csv:not_utf8"]),
    ("finetune-csv-missing", ["finetune", "--model", "@bert", "--data", "@tmp/nothing.csv"]),
    ("finetune-no-data", ["finetune", "--model", "@bert"]),
    ("finetune-model-not-bert", ["finetune", "--model", "@gpt2", "--data", "@train"]),
    ("finetune-model-missing", ["finetune", "--model", "@tmp/nowhere", "--data", "@train"]),
    (
        "finetune-max-length-beyond-positions",
        ["finetune", "--model", "@bert", "--data", "@train", "--max-length", "100"],
    ),
    ("finetune-resume-nothing", ["finetune", "--resume", "--out", "@tmp/none"]),
    ("finetune-resume-train-run", ["finetune", "--resume", "--out", "@lm"]),
    ("eval-finetune-unseen-label", ["eval", "@ft", "--data", "@csv:unseen"]),
    ("eval-finetune-test-without-csv", ["eval", "@ft", "--split", "test"]),
    ("predict-finetune-empty-text", ["predict", "@ft", "  "]),
    ("viz-finetune-without-text", ["viz", "@ft"]),
]


@pytest.fixture(scope="module")
def finetune_files(tmp_path_factory):
    from tiny_bert import make_bert_dir, make_csv

    d = tmp_path_factory.mktemp("finetune_bad")
    files = {"bert": make_bert_dir(d / "bert"), "train": make_csv(d / "train.csv", n=20)}
    (d / "gpt2").mkdir()
    (d / "gpt2" / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_embd": 8}), encoding="utf-8")
    files["gpt2"] = d / "gpt2"
    assert (
        main(
            [
                "finetune",
                "--model",
                str(files["bert"]),
                "--data",
                str(files["train"]),
                "--out",
                str(d / "ft"),
                "--max-steps",
                "1",
                "--max-length",
                "8",
                "--no-progress",
                "--quiet",
            ]
        )
        == 0
    )
    files["ft"] = d / "ft"
    return files


@pytest.mark.parametrize("argv", [pytest.param(argv, id=case_id) for case_id, argv in FINETUNE_CASES])
def test_bad_finetune_input_is_one_line_and_exit_2(
    argv, tmp_path, finetune_files, trained_runs, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    words = []
    for word in argv:
        if word.startswith("@csv:"):
            path = tmp_path / f"{word[5:]}.csv"
            path.write_bytes(FINETUNE_CSVS[word[5:]])
            words.append(str(path))
        elif word[1:] in finetune_files:
            words.append(str(finetune_files[word[1:]]))
        else:
            words += expand([word], tmp_path, trained_runs)
    capsys.readouterr()
    try:
        code = main(words)
    except SystemExit as e:
        code = e.code
    except BaseException:
        traceback.print_exc()
        code = "traceback"
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("note:")]
    assert "Traceback" not in err, err[-2000:]
    assert code == 2, f"exit code {code}; stderr: {err[-500:]}"
    assert len(lines) == 1 and lines[0].startswith("scratchformer"), err[-500:]
