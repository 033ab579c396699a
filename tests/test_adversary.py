"""The adversary's classes (issue 26): nothing a user leaves in or links to a run directory is
lost or stops a training, a second writer stays out, and every bad input is one line."""

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from scratchformer.cli.main import main
from scratchformer.errors import CheckpointError, RunLockedError
from scratchformer.training.checkpoint import load_checkpoint, save_checkpoint
from scratchformer.training.rundir import RunLock, clear_run, read_log, recover_run, run_files
from scratchformer.training.trainer import resume_config

TINY = ["--n-layer", "1", "--n-head", "2", "--n-embd", "8", "--batch-size", "8", "--eval-batches", "1",
        "--no-progress", "--quiet"]


def cli(capsys, *argv):
    """(exit code, stdout, stderr lines) of one command."""
    capsys.readouterr()
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, [line for line in err.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def run2(tmp_path_factory):
    """A finished 2-step run (best/ and last/ of step 2) the tests copy."""
    out = tmp_path_factory.mktemp("adv") / "run"
    assert main(["train", *TINY, "--max-steps", "2", "--eval-interval", "2", "--out", str(out)]) == 0
    return out


def copy(run2, dest):
    shutil.copytree(run2, dest)
    (dest / ".lock").unlink(missing_ok=True)
    return dest


# -- --overwrite deletes only what a run writes -----------------------------------------------
def test_overwrite_keeps_a_users_dot_old_files(run2, tmp_path, capsys):
    out = copy(run2, tmp_path / "run")
    (out / ".bashrc.old").write_text("mine")
    (out / ".notes.old").mkdir()
    (out / ".notes.old" / "a").write_text("mine too")
    (out / ".last.tmp-notes").write_text("not a temporary of ours")  # not the PID-N pattern
    (out / ".diagnostics.jsonl.tmp-99-3").write_text("{}")           # a kill -9 leftover: ours
    assert ".bashrc.old" not in " ".join(run_files(out))
    assert cli(capsys, "train", *TINY, "--max-steps", "2", "--out", out, "--overwrite")[0] == 0
    assert (out / ".bashrc.old").read_text() == "mine" and (out / ".notes.old" / "a").read_text() == "mine too"
    assert (out / ".last.tmp-notes").exists() and not (out / ".diagnostics.jsonl.tmp-99-3").exists()


def test_clear_run_removes_a_link_never_its_target(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep").write_text("x")
    out = tmp_path / "run"
    out.mkdir()
    (out / "best").symlink_to(elsewhere)
    (out / ".last.old").mkdir()
    clear_run(out)
    assert not os.path.lexists(out / "best") and not (out / ".last.old").exists()
    assert (elsewhere / "keep").read_text() == "x"


def test_recover_run_sweeps_only_the_runs_own_temporaries(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    ours = [".diagnostics.jsonl.tmp-123-0", ".log.jsonl.tmp-7-12"]
    theirs = [".diagnostics.jsonl.tmp-mine", ".other.tmp-1-2", "diagnostics.jsonl.tmp-1-2", ".bashrc.old"]
    for name in ours + theirs:
        (out / name).write_text("x")
    (out / ".last.tmp-5-1").mkdir()  # a save's temporary directory
    recover_run(out)
    assert sorted(p.name for p in out.iterdir()) == sorted(theirs)


# -- a save never fails on what a user left in or linked to a checkpoint ----------------------
@pytest.mark.parametrize("which", ["last", "best"])
def test_a_stray_file_in_a_checkpoint_survives_the_save_and_the_resume(run2, tmp_path, capsys, which):
    out = copy(run2, tmp_path / "run")
    (out / which / ".model.safetensors.swp").write_text("editor")
    (out / which / "figs").mkdir()  # `viz --out` pointed inside a checkpoint
    (out / which / "figs" / "loss.png").write_bytes(b"png")
    code, _, err = cli(capsys, "train", "--resume", "--out", out, "--max-steps", "4", "--eval-interval", "1",
                       "--no-progress", "--quiet")
    assert code == 0, err
    assert load_checkpoint(out / "last").step == 4
    assert (out / which / ".model.safetensors.swp").read_text() == "editor"
    assert (out / which / "figs" / "loss.png").read_bytes() == b"png"
    assert not (out / f".{which}.old").exists()


def test_a_crash_after_the_swap_still_hands_the_users_files_over(tmp_path):
    state = {"w": np.zeros(2, np.float32)}
    ck = tmp_path / "ck"
    save_checkpoint(ck, model_state=state, config={}, run_files=False)
    (ck / "notes.txt").write_text("mine")
    os.replace(ck, tmp_path / ".ck.old")  # steps 1 and 2 of a save, then a kill before 2b
    save_checkpoint(tmp_path / "fresh", model_state=state, config={}, run_files=False)
    os.replace(tmp_path / "fresh", ck)
    save_checkpoint(ck, model_state=state, config={}, run_files=False)  # the next save recovers first
    assert (ck / "notes.txt").read_text() == "mine" and not (tmp_path / ".ck.old").exists()


@pytest.mark.parametrize("which", ["last", "best"])
def test_a_linked_checkpoint_directory_is_followed(run2, tmp_path, capsys, which):
    out = copy(run2, tmp_path / "run")
    disk2 = tmp_path / "disk2"
    disk2.mkdir()
    shutil.move(out / which, disk2 / which)
    (out / which).symlink_to(disk2 / which)
    for max_steps in (3, 4):  # a save, then a resume reading through the link, then a save again
        code, _, err = cli(capsys, "train", "--resume", "--out", out, "--max-steps", max_steps, "--eval-interval", "1",
                           "--no-progress", "--quiet")
        assert code == 0, err
    assert (out / which).is_symlink() and load_checkpoint(disk2 / which).step in (3, 4)
    assert load_checkpoint(out / "last").step == 4
    assert not list(disk2.glob(".*")) and not list(out.glob(".*.old"))


@pytest.mark.parametrize("make", ["file", "link_to_file", "loop", "foreign_dir", "dangling_far"])
def test_a_checkpoint_path_no_save_can_replace_is_refused_at_the_start(run2, tmp_path, capsys, make):
    out = copy(run2, tmp_path / "run")
    best = out / "best"
    shutil.rmtree(best)
    if make == "file":
        best.write_text("x")
    elif make == "link_to_file":
        (tmp_path / "f").write_text("x")
        best.symlink_to(tmp_path / "f")
    elif make == "loop":
        best.symlink_to(best)
    elif make == "foreign_dir":
        best.mkdir()
        (best / "thesis.tex").write_text("x")
    else:
        best.symlink_to(tmp_path / "no" / "such" / "best")
    code, _, err = cli(capsys, "train", "--resume", "--out", out, "--max-steps", "3", "--no-progress", "--quiet")
    assert code == 2 and len(err) == 1 and str(best) in err[0], err
    assert load_checkpoint(out / "last").step == 2 and [r["step"] for r in read_log(out)[0]][-1] == 2
    if make == "foreign_dir":
        assert (best / "thesis.tex").read_text() == "x"


def test_save_checkpoint_refuses_a_directory_of_other_files(tmp_path):
    (tmp_path / "thesis.tex").write_text("x")
    with pytest.raises(CheckpointError, match="not part of a checkpoint"):
        save_checkpoint(tmp_path, model_state={"w": np.zeros(1, np.float32)}, config={}, run_files=False)
    assert (tmp_path / "thesis.tex").read_text() == "x"


# -- one writer, even when .lock is deleted ----------------------------------------------------
def test_deleting_the_lock_file_lets_no_second_writer_in(tmp_path):
    out = tmp_path / "run"
    with RunLock(out):
        (out / ".lock").unlink()
        with pytest.raises(RunLockedError, match="in use by another training"):
            RunLock(out).acquire()
        (out / ".lock").write_text("")  # a new .lock (another inode) changes nothing either
        with pytest.raises(RunLockedError):
            RunLock(out).acquire()
    with RunLock(out):  # released: the next writer gets in
        pass


def test_a_second_training_is_refused_when_lock_was_deleted(tmp_path, capsys):
    out = tmp_path / "run"
    with RunLock(out):
        (out / ".lock").unlink()
        code, _, err = cli(capsys, "train", *TINY, "--max-steps", "2", "--out", out)
    assert code == 2 and len(err) == 1 and "in use by another training" in err[0]


def test_a_run_directory_replaced_during_training_is_not_written(tmp_path):
    out = tmp_path / "run"
    lock = RunLock(out).acquire()
    try:
        lock.check_held()
        os.rename(out, tmp_path / "moved")
        out.mkdir()  # another training may lock this one now
        with pytest.raises(RunLockedError, match="moved or deleted during the training"):
            lock.check_held()
    finally:
        lock.release()


# -- --resume with another --workers says so -------------------------------------------------
def test_resume_with_other_workers_says_it_will_not_repeat_the_run():
    saved = {"max_steps": 10, "workers": 1}  # the default is 2
    cfg, note = resume_config(saved, {"workers": 2})
    assert cfg.workers == 2 and "will not repeat the uninterrupted run bit for bit" in note
    assert "--workers 1" in note and len(note.splitlines()) == 1
    assert resume_config(saved, {"workers": 1})[1] is None and resume_config(saved, {})[1] is None
    both = resume_config(saved, {"workers": 3, "max_steps": 12})[1].splitlines()
    assert len(both) == 2 and "extending" in both[0] and "--workers 3" in both[1]


def test_resume_cli_prints_the_workers_line(run2, tmp_path, capsys):
    out = copy(run2, tmp_path / "run")
    code, stdout, _ = cli(capsys, "train", "--resume", "--out", out, "--max-steps", "3", "--workers", "1",
                          "--no-progress", "--quiet")
    assert code == 0 and "--workers 1 instead of the run's 2: the steps from here will not repeat" in stdout
