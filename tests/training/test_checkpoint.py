"""Checkpoint round trip, crash safety of the atomic directory swap, corrupt files; run files
checked against the config declarations on save as on load; checkpoints of previous versions."""

import argparse
import dataclasses
import errno
import json
import math
import os
import shutil
import stat
from pathlib import Path

import numpy as np
import pytest

from scratchformer.errors import CheckpointError, ConfigError, RunFileError
from scratchformer.models import GPTConfig
from scratchformer.runfiles import write_atomic
from scratchformer.specs import Int, Maybe, Num
from scratchformer.training import checkpoint as ckpt_mod
from scratchformer.training.checkpoint import load_checkpoint as load_run_checkpoint
from scratchformer.training.checkpoint import save_checkpoint as save_run_checkpoint
from scratchformer.training.config import TrainConfig


def load_checkpoint(path):
    """These tests save free-form configs: read without the run-file schemas."""
    return load_run_checkpoint(path, run_files=False)


def save_checkpoint(path, **kw):
    """... and write them without the schemas too."""
    return save_run_checkpoint(path, run_files=False, **kw)


def make_state(seed):
    rng = np.random.default_rng(seed)
    model = {
        "wte.weight": rng.standard_normal((5, 3)).astype(np.float32),
        "ln.bias": rng.standard_normal(3).astype(np.float32),
    }
    opt = {
        "kind": "AdamW",
        "step": seed,
        "num_params": 2,
        "m.0": np.ones((5, 3), np.float32),
        "v.0": np.zeros((5, 3), np.float32),
        "m.1": np.ones(3, np.float32),
        "v.1": np.zeros(3, np.float32),
    }
    return model, opt


def save(path, seed, **kw):
    model, opt = make_state(seed)
    rng = np.random.default_rng(seed)
    rng.random(3)  # advance so the state is not the initial one
    return save_checkpoint(
        path,
        model_state=model,
        config={"n_layer": 2, "seed": seed},
        tokenizer={"type": "char", "chars": ["a", "é"], "special": "<eot>"},
        optimizer_state=opt,
        rng_state={"data": rng.bit_generator.state},
        extra={"best_val_loss": 1.5},
        **kw,
    )


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


@pytest.mark.parametrize(
    "name", ["model.safetensors", "optimizer.safetensors", "trainer_state.json", "config.json"]
)
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


# -- run files: one declaration, checked on save as on load, old versions upgraded ----------------
OLD = Path(__file__).parents[1] / "data" / "old_checkpoints"
# Two previous versions: 6038e8c (the last before the declarations) and a46efc8 (task models
# still wrote d_model / d_ff; train_config had no workers). Each ran `scratchformer train` for 2
# steps on a tiny model; <run>.eval.json is what that version's `eval --workers 1` printed.
OLD_RUNS = [(v, r) for v in ("6038e8c", "a46efc8") for r in ("names", "majority")]


@pytest.mark.parametrize("version, run", OLD_RUNS)
def test_checkpoints_of_previous_versions_load_and_give_the_same_losses(version, run):
    from scratchformer.training.jobs import load_job

    job = load_job(OLD / version / run)
    expected = json.loads((OLD / version / f"{run}.eval.json").read_text())
    got = job.evaluate(expected["split"])
    for key, value in expected.items():
        if key != "split":
            assert got[key] == pytest.approx(value, rel=1e-6, abs=1e-9), key


def test_oldest_checkpoint_resumes(tmp_path):
    """a46efc8's train_config has no workers: the upgrade gives 1 (how it trained)."""
    from scratchformer.training.jobs import job_class
    from scratchformer.training.trainer import resume_config, train

    shutil.copytree(OLD / "a46efc8" / "names", tmp_path / "last")
    ck = load_run_checkpoint(tmp_path / "last")
    assert ck.extra["train_config"]["workers"] == 1
    cfg, _ = resume_config(ck.extra["train_config"], {"max_steps": 3})
    job = job_class(ck).from_checkpoint(ck)
    summary = train(job, cfg, tmp_path, resume=True, progress=False, verbose=False, checkpoint=ck)
    assert summary["step"] == 3 and math.isfinite(summary["val_loss"])
    assert load_run_checkpoint(tmp_path / "last").extra["train_config"]["workers"] == 1


def test_the_upgrade_is_the_one_reader_of_old_names():
    from scratchformer.training.schema import upgrade_run_files

    config = json.loads((OLD / "a46efc8" / "majority" / "config.json").read_text())
    assert {"d_model", "d_ff"} <= set(config["model"])
    upgraded, _ = upgrade_run_files(config, {})
    assert upgraded["model"]["n_embd"] == config["model"]["d_model"] and "d_model" not in upgraded["model"]
    from scratchformer.models import ClassifierConfig

    with pytest.raises(ConfigError, match="unknown ClassifierConfig fields"):  # from_dict itself is strict
        ClassifierConfig.from_dict(config["model"])


GPT_RUN = {
    "kind": "gpt",
    "model": GPTConfig(vocab_size=5, block_size=4, n_layer=1, n_head=1, n_embd=4).to_dict(),
    "data": {"path": None, "format": "lines", "seed": 0, "block_size": 4},
}


def save_run(path, config=GPT_RUN, train_config=None):
    extra = {} if train_config is None else {"train_config": train_config}
    return save_run_checkpoint(path, model_state={}, config=config, extra=extra)


def test_a_checkpoint_the_readers_would_refuse_is_never_written(tmp_path):
    bad = {**GPT_RUN, "model": {**GPT_RUN["model"], "positional": "xpos"}}
    with pytest.raises(RunFileError, match="config.json: field model.positional must be one of"):
        save_run(tmp_path / "c", bad)
    assert not (tmp_path / "c").exists()
    with pytest.raises(RunFileError, match="train_config.colour must be absent"):
        save_run(tmp_path / "c", train_config={**vars(TrainConfig()), "colour": 1})
    assert not (tmp_path / "c").exists()


def test_a_choice_added_to_the_config_is_accepted_by_the_writer_and_the_readers(tmp_path, monkeypatch):
    """The obvious place to add a choice (the field's declaration) is the only place."""
    spec = GPTConfig.spec("positional")
    monkeypatch.setattr(spec, "choices", (*spec.choices, "xpos"))
    assert GPTConfig(positional="xpos").positional == "xpos"
    config = {**GPT_RUN, "model": {**GPT_RUN["model"], "positional": "xpos"}}
    save_run(tmp_path / "c", config)
    assert load_run_checkpoint(tmp_path / "c").config["model"]["positional"] == "xpos"


def test_train_config_from_dict_is_strict():
    with pytest.raises(ConfigError, match=r"unknown TrainConfig fields \['colour'\]"):
        TrainConfig.from_dict({"colour": 1})
    with pytest.raises(ConfigError, match="TrainConfig.max_steps must be an integer >= 1"):
        TrainConfig(max_steps=0)


def _boundaries(spec):
    """(values the spec accepts at its edges, values just beyond them), as command-line text."""
    inner = spec.spec if isinstance(spec, Maybe) else spec
    if isinstance(inner, Int):
        return [str(inner.min), str(inner.max)], [str(inner.min - 1), str(inner.max + 1), "1.5", "inf"]
    assert isinstance(inner, Num) and inner.finite
    ok, bad = ["1e308"], ["inf", "-inf", "nan"]
    if inner.min is not None:
        ok, bad = ok + [repr(float(inner.min))], bad + [repr(math.nextafter(inner.min, -math.inf))]
    if inner.above is not None:
        ok, bad = ok + [repr(math.nextafter(inner.above, math.inf))], bad + [repr(float(inner.above))]
    if inner.below is not None:
        ok = [repr(math.nextafter(inner.below, -math.inf))] + [v for v in ok if float(v) < inner.below]
        bad += [repr(float(inner.below))]
    return ok, bad


def _train_option(dest):
    from scratchformer.cli.main import build_parser

    return next(a for a in build_parser().commands["train"]._actions if a.dest == dest)


@pytest.mark.parametrize("name", [f.name for f in dataclasses.fields(TrainConfig)])
def test_every_train_option_at_its_boundaries_is_stored_and_read_back(tmp_path, name, capsys):
    """Issue: train accepted values its checkpoint then refused. Every value the option accepts
    at the edges of its range is written and read back unchanged; one step beyond is refused
    by the command line with one line."""
    from scratchformer.cli.main import main

    spec = TrainConfig.spec(name)
    if _train_option(name).type is None:  # a bool: nothing between true and false
        return
    ok, bad = _boundaries(spec)
    flag = "--" + name.replace("_", "-")
    for text in ok:
        value = _train_option(name).type(text)
        together = {"lr": max(value, 1e-3)} if name == "min_lr" else {}  # a floor is at most its peak
        cfg = TrainConfig.from_dict({name: value, **together})
        save_run(tmp_path / "c", train_config=vars(cfg))
        saved = load_run_checkpoint(tmp_path / "c").extra["train_config"]
        assert TrainConfig.from_dict(saved) == cfg and saved[name] == value, (name, text)
    for text in bad:
        with pytest.raises(SystemExit) as e:
            main(["train", flag, text])
        err = capsys.readouterr().err
        assert e.value.code == 2 and len(err.strip().splitlines()) == 1 and flag in err, (name, text, err)


def _model_and_data_options():
    from scratchformer.cli.main import MODEL_HELP

    return [*MODEL_HELP, "block_size", *DATA_OPTIONS]


DATA_OPTIONS = {
    "split_seed": "seed",
    "tokenizer": "tokenizer",
    "vocab_size": "vocab_size",
}  # option -> data field


@pytest.mark.parametrize("dest", _model_and_data_options())
def test_model_and_data_options_at_their_boundaries_are_stored_and_read_back(tmp_path, dest):
    """Every value a model or data option accepts at its edges (every choice, both bools) is
    written into config.json and read back unchanged."""
    from scratchformer.specs import Bool, Maybe, Str
    from scratchformer.training.schema import LM_DATA

    spec = LM_DATA.fields[DATA_OPTIONS[dest]] if dest in DATA_OPTIONS else GPTConfig.spec(dest)
    action = _train_option(dest)
    if isinstance(spec, Bool):
        values = [True, False]
    elif isinstance(spec, Str) or (isinstance(spec, Maybe) and isinstance(spec.spec, Str)):
        choices = spec.choices if isinstance(spec, Str) else spec.spec.choices
        assert tuple(action.choices) == choices  # the option offers exactly the declared choices
        values = list(choices) + ([None] if isinstance(spec, Maybe) else [])  # None: the default's "unset"
    else:
        ok, bad = _boundaries(spec)
        values = [action.type(text) for text in ok]
        for text in bad:
            with pytest.raises(argparse.ArgumentTypeError):
                action.type(text)
    for value in values:
        if dest in DATA_OPTIONS:
            config = {**GPT_RUN, "data": {**GPT_RUN["data"], DATA_OPTIONS[dest]: value}}
        else:
            config = {**GPT_RUN, "model": {**GPT_RUN["model"], dest: value}}
        save_run(tmp_path / "c", config)
        assert load_run_checkpoint(tmp_path / "c").config == config


def test_training_refuses_settings_a_checkpoint_cannot_hold_before_the_first_step(tmp_path):
    from scratchformer.training.jobs import build_job
    from scratchformer.training.trainer import train

    job, cfg = build_job(
        "majority",
        model={"n_layer": 1, "n_embd": 8, "n_head": 2},
        train={"max_steps": 2},
        data={"n_train": 20, "n_test": 5},
    )
    cfg.max_steps = 2**40  # changed after the config was built
    with pytest.raises(ConfigError, match="max_steps must be an integer >= 1 and <= 2147483647"):
        train(job, cfg, tmp_path / "run", progress=False, verbose=False)
    cfg.max_steps = 2
    job.data_spec["seed"] = -1
    with pytest.raises(RunFileError, match="field data.seed must be an integer >= 0"):
        train(job, cfg, tmp_path / "run", progress=False, verbose=False)
    assert not (tmp_path / "run" / "last").exists()
