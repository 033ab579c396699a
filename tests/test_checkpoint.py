"""Checkpoint round trip, crash safety of the atomic directory swap, corrupt files."""

import errno
import json
import os
import stat

import numpy as np
import pytest

from scratchformer.errors import CheckpointError
from scratchformer.training import checkpoint as ckpt_mod
from scratchformer.runfiles import write_atomic
from scratchformer.training.checkpoint import save_checkpoint
from scratchformer.training.checkpoint import load_checkpoint as load_run_checkpoint


def load_checkpoint(path):
    """These tests save free-form configs: read without the run-file schemas."""
    return load_run_checkpoint(path, run_files=False)


def make_state(seed):
    rng = np.random.default_rng(seed)
    model = {"wte.weight": rng.standard_normal((5, 3)).astype(np.float32),
             "ln.bias": rng.standard_normal(3).astype(np.float32)}
    opt = {"kind": "AdamW", "step": seed, "num_params": 2,
           "m.0": np.ones((5, 3), np.float32), "v.0": np.zeros((5, 3), np.float32),
           "m.1": np.ones(3, np.float32), "v.1": np.zeros(3, np.float32)}
    return model, opt


def save(path, seed, **kw):
    model, opt = make_state(seed)
    rng = np.random.default_rng(seed)
    rng.random(3)  # advance so the state is not the initial one
    return save_checkpoint(path, model_state=model, config={"n_layer": 2, "seed": seed},
                           tokenizer={"type": "char", "chars": ["a", "é"], "special": "<eot>"},
                           optimizer_state=opt, rng_state={"data": rng.bit_generator.state},
                           extra={"best_val_loss": 1.5}, **kw)


def test_round_trip(tmp_path):
    path = save(tmp_path / "ckpt", seed=3)
    assert sorted(os.listdir(path)) == sorted(ckpt_mod.CHECKPOINT_FILES)
    ck = load_checkpoint(tmp_path / "ckpt")
    model, opt = make_state(3)
    assert ck.step == 3 and ck.config == {"n_layer": 2, "seed": 3}
    assert ck.tokenizer["chars"] == ["a", "é"] and ck.extra == {"best_val_loss": 1.5}
    for k, v in model.items():
        np.testing.assert_array_equal(ck.model_state[k], v)
        assert ck.model_state[k].dtype == np.float32
    assert ck.optimizer_state.keys() == opt.keys()
    for k, v in opt.items():
        np.testing.assert_array_equal(ck.optimizer_state[k], v)
    # The 128-bit PCG64 state survives JSON: a restored generator continues identically.
    rng = np.random.default_rng(3)
    rng.random(3)
    restored = np.random.default_rng()
    restored.bit_generator.state = ck.rng_state["data"]
    np.testing.assert_array_equal(restored.random(5), rng.random(5))
    assert not list(tmp_path.glob(".ckpt*"))  # no temp or backup directories left


def test_optional_parts_and_overwrite(tmp_path):
    save(tmp_path / "ckpt", seed=1)
    save_checkpoint(tmp_path / "ckpt", model_state={"w": np.zeros(2)}, config={})
    ck = load_checkpoint(tmp_path / "ckpt")
    assert ck.tokenizer is None and ck.optimizer_state is None and ck.rng_state is None
    assert ck.step == 0 and set(ck.model_state) == {"w"}
    assert sorted(os.listdir(tmp_path / "ckpt")) == ["config.json", "model.safetensors", "trainer_state.json"]


def test_crash_while_writing_files_keeps_previous_checkpoint(tmp_path, monkeypatch):
    save(tmp_path / "ckpt", seed=1)
    real_write, calls = ckpt_mod.write_file, []

    def crashing_write(path, data):
        calls.append(path)
        if len(calls) == 3:
            real_write(path, data[: len(data) // 2])  # a half-written file, then "power off"
            raise OSError("simulated crash")
        real_write(path, data)

    monkeypatch.setattr(ckpt_mod, "write_file", crashing_write)
    with pytest.raises(OSError, match="simulated crash"):
        save(tmp_path / "ckpt", seed=2)
    monkeypatch.undo()
    assert load_checkpoint(tmp_path / "ckpt").step == 1  # old checkpoint intact
    save(tmp_path / "ckpt", seed=2)
    assert load_checkpoint(tmp_path / "ckpt").step == 2


def test_crash_between_renames_recovers_from_backup(tmp_path, monkeypatch):
    save(tmp_path / "ckpt", seed=1)
    real_replace, calls = os.replace, []

    def crashing_replace(src, dst):
        calls.append((src, dst))
        if len(calls) == 2:  # after target -> backup, before temp -> target
            raise OSError("simulated crash")
        real_replace(src, dst)

    monkeypatch.setattr(ckpt_mod.os, "replace", crashing_replace)
    with pytest.raises(OSError, match="simulated crash"):
        save(tmp_path / "ckpt", seed=2)
    monkeypatch.undo()
    assert not (tmp_path / "ckpt").exists()
    ck = load_checkpoint(tmp_path / "ckpt")  # read from the backup
    assert ck.step == 1
    np.testing.assert_array_equal(ck.model_state["wte.weight"], make_state(1)[0]["wte.weight"])
    save(tmp_path / "ckpt", seed=2)  # the next save settles everything
    assert load_checkpoint(tmp_path / "ckpt").step == 2
    assert not list(tmp_path.glob(".ckpt*"))


def crash_between_renames(path, monkeypatch):
    """A save of step 2 into `path` that dies after target -> backup, before temp -> target."""
    real_replace, calls = os.replace, []

    def crashing_replace(src, dst):
        calls.append(src)
        if len(calls) == 2:
            raise OSError("simulated crash")
        real_replace(src, dst)

    with monkeypatch.context() as m:
        m.setattr(ckpt_mod.os, "replace", crashing_replace)
        with pytest.raises(OSError, match="simulated crash"):
            save(path, seed=2)


def test_a_lone_backup_is_restored_even_when_the_next_save_fails(tmp_path, monkeypatch):
    save(tmp_path / "ckpt", seed=1)
    crash_between_renames(tmp_path / "ckpt", monkeypatch)
    assert not (tmp_path / "ckpt").exists() and (tmp_path / ".ckpt.old").is_dir()

    def disk_full(path, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with monkeypatch.context() as m:  # the next save fails before its renames
        m.setattr(ckpt_mod, "write_file", disk_full)
        with pytest.raises(OSError, match="No space left") as e:
            save(tmp_path / "ckpt", seed=3)
    assert e.value.filename == str(tmp_path / "ckpt" / "model.safetensors")  # the file, not a temp name
    assert load_checkpoint(tmp_path / "ckpt").step == 1  # the backup was restored, not dropped
    assert not list(tmp_path.glob(".ckpt*"))


def test_files_and_directories_follow_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        path = save(tmp_path / "ckpt", seed=1)
        write_atomic(tmp_path / "log.jsonl", b"")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o755  # a teammate can read a shared run
    assert stat.S_IMODE((path / "model.safetensors").stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "log.jsonl").stat().st_mode) == 0o644


@pytest.mark.parametrize("name", ["model.safetensors", "optimizer.safetensors", "trainer_state.json", "config.json"])
def test_truncated_file_names_the_file(tmp_path, name):
    path = save(tmp_path / "ckpt", seed=1)
    data = (path / name).read_bytes()
    (path / name).write_bytes(data[: len(data) - 7])
    with pytest.raises(CheckpointError, match=rf"{name}: (invalid JSON, )?corrupt or truncated"):
        load_checkpoint(path)


def test_missing_directory_and_file(tmp_path):
    with pytest.raises(CheckpointError, match="checkpoint directory not found: .*nope"):
        load_checkpoint(tmp_path / "nope")
    path = save(tmp_path / "ckpt", seed=1)
    (path / "tokenizer.json").unlink()
    with pytest.raises(CheckpointError, match="tokenizer.json is missing"):
        load_checkpoint(path)


def test_refuses_to_replace_a_foreign_directory(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("mine")
    with pytest.raises(CheckpointError, match="notes.txt"):
        save(tmp_path / "out", seed=1)
    assert (tmp_path / "out" / "notes.txt").read_text() == "mine"


def test_unserialisable_extra_is_a_checkpoint_error(tmp_path):
    with pytest.raises(CheckpointError, match="cannot save trainer state"):
        save_checkpoint(tmp_path / "c", model_state={}, config={}, extra={"f": object()})
    assert not (tmp_path / "c").exists()


def test_write_atomic(tmp_path):
    p = tmp_path / "sub" / "log.json"
    write_atomic(p, b'{"a": 1}')
    write_atomic(p, b'{"a": 2}')
    assert json.loads(p.read_bytes()) == {"a": 2}
    assert os.listdir(p.parent) == ["log.json"]
