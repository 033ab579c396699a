"""Issue 9 end to end on tiny runs: a diverging run, two writers, a torn log, changed data,
a kill during a checkpoint, Ctrl-C, resume semantics, and the conveniences of `sample`/`eval`."""

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tiny_run import tiny

from scratchformer.cli.main import main
from scratchformer.training.checkpoint import load_checkpoint
from scratchformer.training.rundir import RunLock, read_log
from scratchformer.training.trainer import resume_config

ROOT = Path(__file__).resolve().parents[2]
TINY = tiny(n_embd=8, eval_batches=1)


def cli(capsys, *argv):
    """(exit code, stdout, stderr lines) of one command."""
    capsys.readouterr()
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, [line for line in err.splitlines() if line.strip()]


def subprocess_cli(*argv, env=None, **kw):
    env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.Popen(
        [sys.executable, "-m", "scratchformer.cli.main", *map(str, argv)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )


def steps(log):
    return [r["step"] for r in read_log(log)[0]]


# -- non-finite training ----------------------------------------------------------------------
def test_diverging_run_stops_in_one_line_and_saves_no_nan(tmp_path, capsys):
    out = tmp_path / "run"
    code, _, err = cli(
        capsys, "train", *TINY, "--max-steps", "30", "--eval-interval", "1", "--lr", "1e4", "--out", out
    )
    assert code == 2 and len(err) == 1 and "became" in err[0] and "lower --lr" in err[0], err
    for which in ("best", "last"):
        if (out / which).exists():  # steps before the divergence: finite weights and losses
            ck = load_checkpoint(out / which)  # refuses non-finite weights
            assert all(math.isfinite(v) for v in ck.extra.values() if isinstance(v, float))


def test_eval_json_is_valid_json_when_the_loss_is_not_finite(tmp_path, capsys):
    from safetensors.numpy import load_file, save_file

    out = tmp_path / "run"
    assert cli(capsys, "train", *TINY, "--max-steps", "2", "--out", out)[0] == 0
    for which in ("best", "last"):
        p = out / which / "model.safetensors"
        save_file({k: (v * 1e16).astype(v.dtype) for k, v in load_file(p).items()}, p)
    code, stdout, err = cli(capsys, "eval", out, "--json")
    result = json.loads(stdout.strip().splitlines()[-1])  # valid JSON: null and the names of the bad fields
    assert code == 2 and len(err) == 1 and "diverged" in err[0]
    assert result["loss"] is None and "loss" in result["non_finite"]


# -- the run directory -------------------------------------------------------------------------
def test_second_writer_fails_at_once(tmp_path, capsys):
    out = tmp_path / "run"
    with RunLock(out):  # another training holds the directory
        code, _, err = cli(capsys, "train", *TINY, "--max-steps", "2", "--out", out)
    assert code == 2 and len(err) == 1 and "in use by another training" in err[0] and str(out) in err[0]
    assert not (out / "last").exists() and not (out / "log.jsonl").exists()


def test_torn_log_line_is_dropped_on_resume_with_a_note(tmp_path, capsys):
    out = tmp_path / "run"
    assert (
        cli(
            capsys,
            "train",
            *TINY,
            "--max-steps",
            "4",
            "--eval-interval",
            "2",
            "--log-interval",
            "1",
            "--out",
            out,
        )[0]
        == 0
    )
    with open(out / "log.jsonl", "ab") as f:
        f.write(b'{"step": 5, "lr": 0.00')  # a kill in the middle of a row
    code, stdout, _ = cli(capsys, "train", "--resume", "--out", out, "--max-steps", "6", "--no-progress")
    assert code == 0 and "dropped a torn last line" in stdout
    rows, note = read_log(out / "log.jsonl")
    assert note is None and [r["step"] for r in rows if "grad_norm" in r] == [1, 2, 3, 4, 5, 6]


def test_fresh_run_refuses_a_stale_log_unless_overwrite(tmp_path, capsys):
    out = tmp_path / "run"  # a run killed before its first checkpoint left rows behind
    out.mkdir()
    (out / "log.jsonl").write_text('{"step": 1, "train_loss": 9.0}\n{"step": 2, "train_loss": 9.0}\n')
    code, _, err = cli(capsys, "train", *TINY, "--max-steps", "2", "--log-interval", "1", "--out", out)
    assert code == 2 and len(err) == 1 and "log.jsonl" in err[0] and "--overwrite" in err[0], err
    assert steps(out / "log.jsonl") == [1, 2]  # untouched
    code, _, err = cli(capsys, "train", "--resume", "--out", out)
    assert code == 2 and len(err) == 1 and "only log.jsonl" in err[0] and "--overwrite" in err[0], err
    assert (
        cli(capsys, "train", *TINY, "--max-steps", "2", "--log-interval", "1", "--out", out, "--overwrite")[0]
        == 0
    )
    assert all(r.get("train_loss") != 9.0 for r in read_log(out / "log.jsonl")[0])
    assert steps(out / "log.jsonl") == [1, 2, 2]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A 4-step run whose best/ (step 4) and last/ (step 4) the tests below copy."""
    out = tmp_path_factory.mktemp("finished") / "run"
    assert main(["train", *TINY, "--max-steps", "4", "--eval-interval", "2", "--out", str(out)]) == 0
    return out


def copy_run(finished_run, dest, keep):
    """A copy of `finished_run` holding only the entries in `keep` (name -> name in the copy)."""
    dest.mkdir()
    for name, as_name in keep.items():
        src = finished_run / name
        shutil.copytree(src, dest / as_name) if src.is_dir() else shutil.copy(src, dest / as_name)
    return dest


@pytest.mark.parametrize(
    "keep",
    [{"best": "best"}, {"last": ".last.old", "best": ".best.old"}, {"last": "last"}, {"best": ".best.old"}],
)
def test_fresh_run_never_touches_an_existing_run(finished_run, tmp_path, capsys, keep):
    out = copy_run(finished_run, tmp_path / "run", keep)
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    code, _, err = cli(capsys, "train", *TINY, "--max-steps", "2", "--out", out)
    assert code == 2 and len(err) == 1 and "already holds a run" in err[0] and "--overwrite" in err[0], err
    after = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file() and p.name != ".lock"}
    assert after == before  # nothing written, nothing deleted
    code, _, err = cli(capsys, "train", *TINY, "--max-steps", "2", "--out", out, "--overwrite")
    assert code == 0 and load_checkpoint(out / "best").step == 2 and load_checkpoint(out / "last").step == 2
    assert not list(out.glob(".*.old"))


def test_a_refused_head_lr_leaves_the_run_it_would_overwrite(finished_run, tmp_path, capsys):
    """--head-lr on a model without a fresh head is refused with the other settings, before
    --overwrite deletes anything: the run in --out is left as it was."""
    out = copy_run(finished_run, tmp_path / "run", {"best": "best", "last": "last"})
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    code, _, err = cli(
        capsys, "train", *TINY, "--max-steps", "2", "--out", out, "--overwrite", "--head-lr", "1e-2"
    )
    assert code == 2 and len(err) == 1 and "fresh head" in err[0], err
    after = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file() and p.name != ".lock"}
    assert after == before


def test_an_interrupted_saves_backup_is_read_and_resumed(finished_run, tmp_path, capsys):
    out = copy_run(
        finished_run, tmp_path / "run", {"last": ".last.old", "best": "best", "log.jsonl": "log.jsonl"}
    )
    assert load_checkpoint(out / "last").step == 4  # every reader reads through the backup
    assert cli(capsys, "eval", out / "last")[0] == 0
    code, stdout, err = cli(capsys, "train", "--resume", "--out", out, "--max-steps", "6", "--no-progress")
    assert code == 0 and "step 6" in stdout, err
    assert (
        (out / "last").is_dir()
        and not (out / ".last.old").exists()
        and load_checkpoint(out / "last").step == 6
    )


def test_resume_with_only_best_says_how_to_start_over(finished_run, tmp_path, capsys):
    out = copy_run(finished_run, tmp_path / "run", {"best": "best"})
    code, _, err = cli(capsys, "train", "--resume", "--out", out)
    assert code == 2 and len(err) == 1 and "only best/" in err[0] and "--overwrite" in err[0], err
    assert "without --resume" not in err[0]
    code, _, err = cli(capsys, "train", "--resume", "--overwrite", "--out", out)
    assert code == 2 and len(err) == 1 and "one of them" in err[0]


def test_log_rows_have_milliseconds_per_step_and_mfu_that_is_right_or_absent(tmp_path, capsys, monkeypatch):
    # no figure here depends on the machine's speed: the GEMM rates are planted
    from scratchformer.limits import gemm as limits

    monkeypatch.setattr(limits, "gemm_peak_flops", lambda: 1.0)  # measured under load: far too low
    monkeypatch.setattr(limits, "gemm_rate", lambda: 1e30)  # measured again: the machine is free
    out = tmp_path / "run"
    assert cli(capsys, "train", *TINY, "--max-steps", "2", "--log-interval", "1", "--out", out)[0] == 0
    rows = [r for r in read_log(out / "log.jsonl")[0] if "grad_norm" in r]
    assert len(rows) == 2 and all(r["ms_per_step"] >= 0 and 0 <= r["mfu"] < 1e-6 for r in rows), rows
    monkeypatch.setattr(limits, "gemm_rate", lambda: 1.0)  # every measurement wrong: no MFU written at all
    assert (
        cli(capsys, "train", *TINY, "--max-steps", "2", "--log-interval", "1", "--out", out, "--overwrite")[0]
        == 0
    )
    rows = [r for r in read_log(out / "log.jsonl")[0] if "grad_norm" in r]
    assert len(rows) == 2 and not any("mfu" in r for r in rows), rows


def test_mfu_formula_on_fixed_inputs():
    from scratchformer.limits import mfu

    assert mfu(6_000.0, 1e6, 1e10) == 0.6  # 6e9 model FLOP/s of a 1e10 FLOP/s peak
    assert mfu(6_000.0, 1e6, 6e9) == 1.0
    assert mfu(1.0, 1.0, 3.0) == 0.333  # three significant digits
    assert mfu(1.0, 1e-3, 1e9) == 1e-12  # a tiny model on a fast machine still reads > 0
    assert mfu(6_000.0, 1e6, 1e9) is None  # 6x the rate measured: that measurement was wrong
    for bad_peak in (0.0, -1.0, float("nan"), float("inf"), None):
        assert mfu(6_000.0, 1e6, bad_peak) is None


def test_changed_data_stops_eval_and_resume_unless_allowed(tmp_path, capsys):
    data, out = tmp_path / "words.txt", tmp_path / "run"
    data.write_text("".join(f"word{i}\n" for i in range(150)))
    assert cli(capsys, "train", *TINY, "--max-steps", "2", "--data", data, "--out", out)[0] == 0
    with open(data, "a") as f:
        f.write("word1\n")  # same characters: only the fingerprint tells
    for argv in (["eval", out], ["train", "--resume", "--out", out, "--max-steps", "3", "--no-progress"]):
        code, _, err = cli(capsys, *argv)
        assert (
            code == 2
            and len(err) == 1
            and "changed since training" in err[0]
            and "--allow-changed-data" in err[0]
        )
        assert cli(capsys, *argv, "--allow-changed-data")[0] == 0


def test_a_changed_copy_given_with_data_on_resume_is_refused(tmp_path, capsys):
    """TEST-GAPS: the --data override is checked against the recorded fingerprint: a changed
    copy is refused by `train --resume --data` (even with nothing left to do) and by
    LMJob.from_checkpoint; an unchanged copy is accepted."""
    from scratchformer.errors import DataChangedError
    from scratchformer.training.checkpoint import load_checkpoint
    from scratchformer.training.lm import LMJob

    data, out = tmp_path / "words.txt", tmp_path / "run"
    data.write_text("".join(f"word{i}\n" for i in range(150)))
    assert cli(capsys, "train", *TINY, "--max-steps", "2", "--data", data, "--out", out)[0] == 0
    same, changed = tmp_path / "same.txt", tmp_path / "changed.txt"
    same.write_bytes(data.read_bytes())
    changed.write_bytes(data.read_bytes() + b"word1\n")  # same characters: only the fingerprint tells
    resume = ["train", "--resume", "--out", out, "--max-steps", "2", "--no-progress"]  # nothing left to do
    code, _, err = cli(capsys, *resume, "--data", changed)
    assert code == 2 and len(err) == 1 and "changed since training" in err[0], err
    assert cli(capsys, *resume, "--data", same)[0] == 0
    ck = load_checkpoint(out / "last")
    with pytest.raises(DataChangedError):
        LMJob.from_checkpoint(ck, data=changed)
    assert LMJob.from_checkpoint(ck, data=same).data_spec["path"] == str(same)


def test_hand_edited_run_file_is_one_line_naming_file_and_field(tmp_path, capsys):
    from scratchformer.errors import RunFileError

    out = tmp_path / "run"
    assert cli(capsys, "train", *TINY, "--max-steps", "2", "--out", out)[0] == 0
    config = json.loads((out / "last/config.json").read_text())
    config["model"]["n_layer"] = "2"
    (out / "last/config.json").write_text(json.dumps(config))
    with pytest.raises(RunFileError, match=r"last/config.json: field model.n_layer must be an integer >= 1"):
        load_checkpoint(out / "last")
    code, _, err = cli(capsys, "train", "--resume", "--out", out, "--max-steps", "3")
    assert code == 2 and len(err) == 1 and "field model.n_layer" in err[0]


def test_resume_of_a_run_without_a_checkpoint_says_so(tmp_path, capsys):
    code, _, err = cli(capsys, "train", "--resume", "--out", tmp_path / "empty")
    assert code == 2 and len(err) == 1 and "nothing to resume" in err[0] and "without --resume" in err[0]


# -- interruptions -----------------------------------------------------------------------------
KILL_DURING_SAVE = """
import os, signal, sys
from scratchformer.training import checkpoint
real, calls = checkpoint.write_file, [0]
def write_then_die(path, data):
    calls[0] += 1
    if calls[0] == int(sys.argv[1]):  # in the middle of writing a checkpoint's files
        os.kill(os.getpid(), signal.SIGKILL)
    real(path, data)
checkpoint.write_file = write_then_die
from scratchformer.cli.main import main
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.parametrize("nth_file", [12, 14])  # inside a checkpoint of step 4 (step 2 has best and last)
def test_kill_during_checkpoint_keeps_a_usable_run(tmp_path, capsys, nth_file):
    out = tmp_path / "run"
    argv = ["train", *TINY, "--max-steps", "6", "--eval-interval", "2", "--out", str(out)]
    proc = subprocess.run(
        [sys.executable, "-c", KILL_DURING_SAVE, str(nth_file), *argv],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == -signal.SIGKILL
    assert cli(capsys, "eval", out)[0] == 0
    code, stdout, _ = cli(capsys, "train", "--resume", "--out", out, "--no-progress", "--quiet")
    assert code == 0 and "step 6" in stdout
    assert load_checkpoint(out / "last").step == 6


def test_ctrl_c_writes_a_checkpoint_of_the_current_step_and_exits_130(tmp_path, capsys):
    out = tmp_path / "run"
    proc = subprocess_cli(
        "train",
        *TINY,
        "--max-steps",
        "100000",
        "--eval-interval",
        "100000",
        "--log-interval",
        "1",
        "--out",
        out,
    )
    deadline = time.time() + 60
    while (
        time.time() < deadline and len(steps(out / "log.jsonl") if (out / "log.jsonl").exists() else []) < 3
    ):
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "checkpoint written to" in err and str(out / "last") in err and "Traceback" not in err
    ck = load_checkpoint(out / "last")
    assert ck.step >= 3 and steps(out / "log.jsonl")[-1] <= ck.step
    code, stdout, _ = cli(
        capsys, "train", "--resume", "--out", out, "--max-steps", ck.step + 2, "--no-progress", "--quiet"
    )
    assert code == 0 and f"step {ck.step + 2}" in stdout


def test_sigterm_saves_a_checkpoint_and_exits_143(tmp_path, capsys):
    out = tmp_path / "run"  # its own process group, signalled whole, as systemd and Slurm do
    proc = subprocess_cli(
        "train",
        *TINY,
        "--max-steps",
        "100000",
        "--eval-interval",
        "100000",
        "--workers",
        "2",
        "--log-interval",
        "1",
        "--out",
        out,
        start_new_session=True,
    )
    deadline = time.time() + 60
    while (
        time.time() < deadline and len(steps(out / "log.jsonl") if (out / "log.jsonl").exists() else []) < 3
    ):
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    lines = [line for line in err.splitlines() if line.strip()]
    assert proc.returncode == 143 and len(lines) == 1, err
    assert "terminated (SIGTERM)" in err and str(out / "last") in err and "--resume" in err
    ck = load_checkpoint(out / "last")
    assert ck.step >= 3 and steps(out / "log.jsonl")[-1] <= ck.step
    code, stdout, _ = cli(
        capsys, "train", "--resume", "--out", out, "--max-steps", ck.step + 1, "--no-progress", "--quiet"
    )
    assert code == 0 and f"step {ck.step + 1}" in stdout


VERBOSE = [a for a in TINY if a != "--quiet"]


def test_a_closed_stdout_saves_first_and_ends_cleanly(tmp_path):
    out = tmp_path / "run"  # train ... | head -1: evaluations print at every step, the reader leaves
    proc = subprocess_cli("train", *VERBOSE, "--max-steps", "100000", "--eval-interval", "1", "--out", out)
    for line in proc.stdout:  # the reader leaves after the evaluation of step 2
        if line.startswith("step 2:"):
            break
    proc.stdout.close()
    proc.wait(timeout=60)
    err = proc.stderr.read()
    lines = [line for line in err.splitlines() if line.strip()]
    assert (
        proc.returncode == 141 and len(lines) == 1 and "stdout was closed" in err and "Traceback" not in err
    ), err
    ck = load_checkpoint(out / "last")
    assert ck.step >= 2 and load_checkpoint(out / "best").step <= ck.step


def test_an_ascii_stdout_cannot_stop_a_run(tmp_path):
    data, out = tmp_path / "noms.txt", tmp_path / "run"
    data.write_text(
        "".join(f"{n}{i}\n" for i in range(100) for n in ("zoé", "josé", "noël")), encoding="utf-8"
    )
    proc = subprocess_cli(
        "train",
        *VERBOSE,
        "--data",
        data,
        "--max-steps",
        "3",
        "--eval-interval",
        "1",
        "--num-samples",
        "20",
        "--out",
        out,
        env={"PYTHONIOENCODING": "ascii"},
    )
    stdout, err = proc.communicate(timeout=120)
    assert proc.returncode == 0 and "Traceback" not in err, err
    assert "\\x" in stdout or "\\u" in stdout  # non-ASCII samples are printed as escapes
    assert load_checkpoint(out / "last").step == 3


SLOW_SAVES = """
import os, sys, time
from scratchformer.training import checkpoint
real_replace, real_rmtree = os.replace, checkpoint.shutil.rmtree
def slow_replace(src, dst):  # widen the windows between a save's renames, where readers used to fail
    real_replace(src, dst)
    time.sleep(0.003)
def slow_rmtree(path, *a, **kw):
    time.sleep(0.003)
    real_rmtree(path, *a, **kw)
checkpoint.os.replace, checkpoint.shutil.rmtree = slow_replace, slow_rmtree
from scratchformer.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def test_loading_while_training_saves_every_step_never_fails(tmp_path):
    from scratchformer.training.jobs import checkpoint_dir

    out = tmp_path / "run"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            SLOW_SAVES,
            "train",
            *TINY,
            "--max-steps",
            "100000",
            "--time-limit",
            "4",
            "--eval-interval",
            "1",
            "--workers",
            "1",
            "--out",
            str(out),
        ],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline, seen = time.time() + 120, set()
    try:
        while not (out / "last").exists() and proc.poll() is None and time.time() < deadline:
            time.sleep(0.01)
        while proc.poll() is None and time.time() < deadline:  # about 4 seconds of loads
            seen.add(load_checkpoint(out / "last").step)
            seen.add(load_checkpoint(checkpoint_dir(out)).step)
    finally:
        proc.kill() if proc.poll() is None else None
        err = proc.communicate(timeout=60)[1]
    assert proc.returncode == 0, err
    assert len(seen) >= 3, seen  # the loads really overlapped many saves


WITHOUT_FCNTL = """
import sys
sys.modules["fcntl"] = None  # as on Windows: importing fcntl raises ImportError
from scratchformer.cli.main import main
out = sys.argv[1]
tiny = sys.argv[2:]
assert main(["train", *tiny, "--max-steps", "2", "--out", out]) == 0
assert main(["train", "--resume", "--out", out, "--max-steps", "3", "--no-progress", "--quiet"]) == 0
"""


def test_runs_train_and_resume_where_fcntl_is_missing(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-c", WITHOUT_FCNTL, str(out), *TINY, "--workers", "1"],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "is not locked" in proc.stdout  # said once per training, in one line
    assert load_checkpoint(out / "last").step == 3


WITHOUT_FCNTL_OR_FORK = """
import os, sys
sys.modules["fcntl"] = None  # as on Windows: no fcntl (runs are not locked) ...
del os.fork                  # ... and no fork (one training process)
from scratchformer.cli.main import COMMANDS, main
for command in COMMANDS:
    try:
        main([command, "--help"])
    except SystemExit as e:
        assert e.code == 0, (command, e.code)
out = sys.argv[1]
tiny = sys.argv[2:]
assert main(["train", *tiny, "--max-steps", "2", "--workers", "2", "--out", out]) == 0
assert main(["train", "--resume", "--out", out, "--max-steps", "3", "--no-progress", "--quiet"]) == 0
"""


def test_every_command_works_without_fcntl_and_fork(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-c", WITHOUT_FCNTL_OR_FORK, str(out), *TINY],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.count("usage: scratchformer") >= 8  # every command's --help
    assert "is not locked" in proc.stdout and "cannot fork worker processes" in proc.stdout
    assert load_checkpoint(out / "last").step == 3
    assert load_checkpoint(out / "last").extra["train_config"]["workers"] == 1  # what really ran


# -- resume semantics ----------------------------------------------------------------------------
def test_resume_config_keeps_the_schedule_and_says_what_an_extension_does():
    saved = {"max_steps": 100, "lr": 1e-3, "min_lr": 1e-4, "warmup_steps": 10}
    cfg, note = resume_config(saved, {})
    assert note is None and cfg.schedule_steps == 100
    cfg, note = resume_config(saved, {"max_steps": 150})
    assert cfg.max_steps == 150 and cfg.schedule_steps == 100 and "keeps its length of 100" in note
    cfg, note = resume_config(saved, {"max_steps": 150, "decay_steps": 150})
    assert cfg.schedule_steps == 150 and "extending the run from 100 to 150 steps" in note
    assert "--decay-steps 150 instead of the run's none: the steps from here will not repeat" in note


def test_finished_run_says_nothing_to_do_and_an_extension_runs_at_min_lr(tmp_path, capsys):
    out = tmp_path / "run"
    assert (
        cli(
            capsys,
            "train",
            *TINY,
            "--max-steps",
            "4",
            "--warmup-steps",
            "1",
            "--min-lr",
            "1e-4",
            "--log-interval",
            "1",
            "--out",
            out,
        )[0]
        == 0
    )
    code, stdout, err = cli(capsys, "train", "--resume", "--out", out)
    assert code == 0 and "nothing to do" in stdout and not err
    code, stdout, _ = cli(
        capsys, "train", "--resume", "--out", out, "--max-steps", "6", "--no-progress", "--quiet"
    )
    assert code == 0 and "extending the run from 4 to 6 steps" in stdout
    lrs = {r["step"]: r["lr"] for r in read_log(out / "log.jsonl")[0] if "grad_norm" in r}
    assert lrs[5] == lrs[6] == pytest.approx(1e-4) and lrs[2] > 1e-4


# -- sample and eval conveniences ------------------------------------------------------------------
@pytest.fixture(scope="module")
def names_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("names") / "run"
    assert main(["train", *TINY, "--max-steps", "2", "--out", str(out)]) == 0
    return out


def test_sample_draws_fresh_names_and_prints_the_seed(names_run, capsys):
    code, first, err = cli(capsys, "sample", names_run, "-n", "8")
    assert code == 0 and len(err) == 1 and err[0].startswith("seed ")
    seed = err[0].split()[1]
    code, again, err = cli(capsys, "sample", names_run, "-n", "8", "--seed", seed)
    assert code == 0 and again == first and not err


def test_sample_marks_items_of_the_training_data(names_run, capsys, monkeypatch):
    from scratchformer.training.jobs import load_job
    from scratchformer.training.lm import LMJob

    known = load_job(names_run).dataset.train.lines[0]
    monkeypatch.setattr(LMJob, "samples", lambda self, n, rng, **kw: [known, "qzqzqzq"])
    code, out, _ = cli(capsys, "sample", names_run, "--seed", "1")
    assert code == 0 and out.splitlines() == [f"{known} (in training data)", "qzqzqzq"]


def test_prompt_file(names_run, tmp_path, capsys):
    prompt = tmp_path / "p.txt"
    prompt.write_text("ma\n")
    code, out, _ = cli(capsys, "sample", names_run, "-n", "3", "--seed", "1", "--prompt-file", prompt)
    assert code == 0 and all(line.startswith("ma") for line in out.splitlines())
    code, _, err = cli(capsys, "sample", names_run, "--prompt-file", tmp_path / "none.txt")
    assert code == 2 and len(err) == 1 and "none.txt" in err[0]


def test_bundled_shakespeare_trains_and_text_has_no_test_split(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, stdout, _ = cli(
        capsys, "train", *TINY, "--data", "shakespeare", "--max-steps", "1", "--block-size", "16"
    )
    assert code == 0 and "-> out/tinyshakespeare" in stdout
    config = json.loads((tmp_path / "out/tinyshakespeare/last/config.json").read_text())
    assert config["data"]["path"] is None and config["data"]["name"] == "shakespeare"
    assert config["data"]["format"] == "text" and len(config["data"]["sha256"]) == 64
    code, stdout, _ = cli(capsys, "eval", "out/tinyshakespeare", "--json")
    assert code == 0 and json.loads(stdout.splitlines()[-1])["split"] == "val"
    code, _, err = cli(capsys, "eval", "out/tinyshakespeare", "--split", "test")
    assert code == 2 and len(err) == 1 and "only train and val" in err[0]
