"""Smoke tests of the training loop on the language-model job: the loss falls, files appear,
resume equals the uninterrupted run bit for bit, time limits stop cleanly."""

import json

import numpy as np
import pytest

from scratchformer.errors import CheckpointError, ConfigError
from scratchformer.training.checkpoint import load_checkpoint
from scratchformer.training.jobs import load_job
from scratchformer.training.lm import LMJob
from scratchformer.training.trainer import TrainConfig, train

TINY = dict(n_layer=1, n_head=2, n_embd=16)


def tiny_job(seed=0, split_seed=1337, **model):
    return LMJob.create("lines", {**TINY, **model}, {"split_seed": split_seed}, seed)


def tiny_cfg(**kw):
    base = dict(
        max_steps=20,
        batch_size=16,
        eval_interval=10,
        eval_batches=2,
        lr=5e-3,
        warmup_steps=2,
        log_interval=1,
        num_samples=2,
        seed=3,
        decay_steps=20,
    )
    return TrainConfig(**{**base, **kw})


def read_log(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_loss_falls_and_files_appear(tmp_path):
    summary = train(
        tiny_job(), tiny_cfg(max_steps=40, decay_steps=40), tmp_path, progress=False, verbose=False
    )
    rows = [r for r in read_log(tmp_path / "log.jsonl") if "tokens_per_s" in r]
    assert len(rows) == 40
    first, last = np.mean([r["train_loss"] for r in rows[:5]]), np.mean([r["train_loss"] for r in rows[-5:]])
    assert last < first - 0.3, (first, last)
    for which in ("best", "last"):
        for f in (
            "model.safetensors",
            "config.json",
            "tokenizer.json",
            "optimizer.safetensors",
            "trainer_state.json",
        ):
            assert (tmp_path / which / f).is_file()
    assert summary["step"] == 40 and summary["stopped_by"] == "max_steps"
    assert {"step", "lr", "train_loss", "grad_norm", "tokens_per_s"} <= set(rows[0])
    assert any("val_loss" in r for r in read_log(tmp_path / "log.jsonl"))


def test_the_progress_bar_starts_no_thread_before_the_workers_fork(tmp_path, monkeypatch):
    # tqdm's monitor thread would make the fork of DataParallel's workers a fork of a multi-threaded
    # process (a deadlock risk; Python 3.12+ warns). Threads other code left running are not ours.
    import os
    import threading

    names_at_fork = []
    fork = os.fork
    monkeypatch.setattr(
        os, "fork", lambda: names_at_fork.append({t.name for t in threading.enumerate()}) or fork()
    )
    before = {t.name for t in threading.enumerate()}
    train(
        tiny_job(),
        tiny_cfg(max_steps=2, workers=2, batch_size=64, eval_interval=100, num_samples=0),
        tmp_path,
        progress=True,
        verbose=False,
    )
    assert len(names_at_fork) == 1 and names_at_fork[0] <= before  # one worker forked; no thread started


@pytest.mark.parametrize("workers", [1, 2])
def test_resume_equals_uninterrupted_run(tmp_path, monkeypatch, workers):
    # batches of 64 names (>= 512 tokens): workers=2 splits them over two processes (training.parallel.DataParallel)
    from scratchformer.training.parallel import DataParallel

    split_steps = []
    split_forward = DataParallel._split_forward
    monkeypatch.setattr(
        DataParallel,
        "_split_forward",
        lambda self, *a: split_steps.append(self.module.training) or split_forward(self, *a),
    )
    a, b = tmp_path / "a", tmp_path / "b"
    job_a = tiny_job(dropout=0.1)
    train(job_a, tiny_cfg(workers=workers, batch_size=64), a, progress=False, verbose=False)
    train(
        tiny_job(dropout=0.1),
        tiny_cfg(max_steps=10, workers=workers, batch_size=64),
        b,
        progress=False,
        verbose=False,
    )
    ck = load_checkpoint(b / "last")
    job_b = LMJob.from_checkpoint(ck)
    train(
        job_b,
        tiny_cfg(workers=workers, batch_size=64),
        b,
        resume=True,
        progress=False,
        verbose=False,
        checkpoint=ck,
    )
    assert split_steps.count(True) == (0 if workers == 1 else 2 * 20)  # every step of both runs was split
    assert split_steps.count(False) == (0 if workers == 1 else 4 * 2)  # 4 evaluations of 2 batches each
    sa, sb = job_a.model.state_dict(), job_b.model.state_dict()
    assert sa.keys() == sb.keys()
    for k in sa:
        np.testing.assert_array_equal(sa[k], sb[k], err_msg=k)

    # same losses, learning rates and grad norms at every step (throughput naturally differs)
    def strip(rows):
        return [{k: v for k, v in r.items() if k not in ("tokens_per_s", "ms_per_step", "mfu")} for r in rows]

    assert strip(read_log(a / "log.jsonl")) == strip(read_log(b / "log.jsonl"))


def test_time_limit_stops_and_saves(tmp_path):
    summary = train(
        tiny_job(), tiny_cfg(max_steps=10_000, time_limit=0.5), tmp_path, progress=False, verbose=False
    )
    assert summary["stopped_by"] == "time_limit"
    assert 0 < summary["step"] < 10_000
    assert (tmp_path / "last" / "model.safetensors").is_file()


def test_refuses_to_overwrite_a_run_and_resume_needs_one(tmp_path):
    train(tiny_job(), tiny_cfg(max_steps=2, eval_interval=2), tmp_path, progress=False, verbose=False)
    with pytest.raises(ConfigError, match="--resume"):
        train(tiny_job(), tiny_cfg(max_steps=2), tmp_path, progress=False, verbose=False)
    with pytest.raises(CheckpointError, match="not found"):
        train(tiny_job(), tiny_cfg(), tmp_path / "nothing", resume=True, progress=False, verbose=False)


def test_checkpoint_round_trip_gives_identical_model(tmp_path):
    job = tiny_job()
    train(job, tiny_cfg(max_steps=10), tmp_path, progress=False, verbose=False)
    loaded = load_job(tmp_path)  # a run directory: its best/ checkpoint, as eval and sample read it
    x, y = job.dataset.val.batch(np.random.default_rng(0), 8)
    job.model.eval(), loaded.model.eval()
    np.testing.assert_array_equal(job.model(x, y)[0], loaded.model(x, y)[0])
    assert loaded.evaluate("val") == job.evaluate("val")


def test_samples_are_deterministic_under_a_seed():
    job = tiny_job()
    s1 = job.samples(5, np.random.default_rng(7))
    s2 = job.samples(5, np.random.default_rng(7))
    assert s1 == s2 and len(s1) == 5
    assert all(set(s) <= set(job.tokenizer.chars) for s in s1)


def test_bad_train_config_is_rejected():
    with pytest.raises(ConfigError, match="batch_size"):
        TrainConfig(batch_size=0)
    with pytest.raises(ConfigError, match="lr"):
        TrainConfig(lr=-1.0)


def test_a_floor_above_the_peak_is_refused():
    """cosine_lr would climb from lr to min_lr: TrainConfig refuses it, whoever builds it."""
    with pytest.raises(ConfigError, match="min_lr 0.0001 is above lr 3e-05"):
        TrainConfig(lr=3e-5, min_lr=1e-4)
    with pytest.raises(ConfigError, match="min_lr"):
        TrainConfig.from_dict({"lr": 1e-3, "min_lr": 2e-3})  # what a resumed run is built from
    assert TrainConfig(lr=1e-3, min_lr=1e-3).final_lr == 1e-3  # a constant rate is a schedule


@pytest.mark.parametrize("kind", ["majority", "copy"])
def test_a_lowered_peak_takes_the_default_floor_down_with_it(kind):
    """Given lr alone, the row's min_lr keeps its ratio to the row's lr (never above the peak);
    a given min_lr is kept."""
    from scratchformer.training.jobs import RUN_DEFAULTS, build_job

    row = RUN_DEFAULTS[kind]["train"]
    small = {"n_train": 40, "n_test": 20}
    _, cfg = build_job(kind, train={"lr": 3e-5}, data=small)
    assert cfg.lr == 3e-5 and cfg.min_lr == pytest.approx(3e-5 * row["min_lr"] / row["lr"], rel=1e-6)
    _, cfg = build_job(kind, train={"lr": 3e-5, "min_lr": 1e-6}, data=small)
    assert cfg.min_lr == 1e-6
    with pytest.raises(ConfigError, match="above lr"):
        build_job(kind, train={"lr": 3e-5, "min_lr": 1e-4}, data=small)


def _scripted_val(job, losses):
    """job's evaluations return these validation losses in turn (the run's own weights decide nothing)."""
    it = iter(losses)

    def evaluation(split, batches=None):
        yield from ()  # reads no batch
        return {"loss": next(it)}

    job.evaluation = evaluation
    return job


def test_patience_stops_after_evaluations_without_a_lower_val_loss(tmp_path):
    cfg = tiny_cfg(max_steps=10, eval_interval=1, num_samples=0, patience=2, workers=1)
    summary = train(
        _scripted_val(tiny_job(), [3.0, 2.0, 2.5, 2.4, 1.0]), cfg, tmp_path, progress=False, verbose=False
    )
    assert summary["stopped_by"] == "patience" and summary["step"] == 4 and summary["best_val_loss"] == 2.0
    assert load_checkpoint(tmp_path / "best").step == 2 and load_checkpoint(tmp_path / "last").step == 4
    # without patience the same losses run to max_steps
    summary = train(
        _scripted_val(tiny_job(), [3.0, 2.0, 2.5, 2.4, 1.0, 1, 1, 1, 1, 1]),
        tiny_cfg(max_steps=10, eval_interval=1, num_samples=0, workers=1),
        tmp_path / "all",
        progress=False,
        verbose=False,
    )
    assert summary["stopped_by"] == "max_steps" and summary["step"] == 10


def test_patience_counts_across_a_resume(tmp_path):
    """The evaluations since the best are saved: a resumed run stops where an uninterrupted one would."""
    cfg = tiny_cfg(max_steps=3, decay_steps=10, eval_interval=1, num_samples=0, patience=2, workers=1)
    train(_scripted_val(tiny_job(), [3.0, 2.0, 2.5]), cfg, tmp_path, progress=False, verbose=False)
    cfg.max_steps = 10
    job = _scripted_val(tiny_job(), [2.4, 1.0])
    summary = train(job, cfg, tmp_path, resume=True, progress=False, verbose=False)
    assert summary["stopped_by"] == "patience" and summary["step"] == 4


def test_trimmed_batches_give_the_same_loss_as_full_blocks():
    job = tiny_job()
    ds = job.dataset.val
    x, y = next(ds.all_batches(16))
    assert x.shape[1] < ds.block_size  # trimmed
    job.model.eval()
    _, trimmed = job.model(x, y)
    _, full = job.model(ds.x[:16], ds.y[:16])
    assert abs(trimmed - full) < 1e-6


def test_weight_seed_does_not_move_the_held_out_split():
    a, b = tiny_job(seed=0), tiny_job(seed=5)
    assert a.dataset.test.lines == b.dataset.test.lines
    assert not np.array_equal(a.model.wte.weight.data, b.model.wte.weight.data)
    c = tiny_job(seed=0, split_seed=7)
    assert c.dataset.test.lines != a.dataset.test.lines


def test_decay_embeddings_decays_only_the_embedding_tables(tmp_path):
    """`decay_embeddings` adds nanoGPT's decay of wte/wpe; without weight decay it changes nothing."""

    def one_step(out, **kw):
        job = tiny_job()
        train(job, tiny_cfg(max_steps=1, decay_steps=1, **kw), tmp_path / out, progress=False, verbose=False)
        return {k: v.copy() for k, v in job.model.state_dict().items()}

    plain, decayed = one_step("a", weight_decay=0.5), one_step("b", weight_decay=0.5, decay_embeddings=True)
    changed = {k for k in plain if not np.array_equal(plain[k], decayed[k])}
    assert changed == {"wte.weight", "wpe.weight"}
    no_wd = one_step("c", weight_decay=0.0), one_step("d", weight_decay=0.0, decay_embeddings=True)
    assert all(np.array_equal(no_wd[0][k], no_wd[1][k]) for k in no_wd[0])


# -- the run registry and the defaults table (scratchformer.training.jobs) ------------------------
def test_defaults_table_covers_every_run_kind_with_dataclass_field_names():
    from dataclasses import fields

    from scratchformer.data import DEFAULT_SEED
    from scratchformer.data.tasks import TASKS
    from scratchformer.training.jobs import FINETUNE_RUN_KINDS, JOBS, LM_TASKS, RUN_DEFAULTS, run_defaults

    assert set(RUN_DEFAULTS) == {"lines", "text", *TASKS, *LM_TASKS, *FINETUNE_RUN_KINDS}
    train_fields = {f.name for f in fields(TrainConfig)}
    for kind, row in RUN_DEFAULTS.items():
        job_cls = JOBS[row["kind"]]
        assert job_cls.kind == row["kind"]
        assert set(row["model"]) <= {f.name for f in fields(job_cls.config_class)}, kind
        assert set(row["train"]) <= train_fields and "seed" not in row["train"], kind
        assert set(row["data"]) == (
            {"block_size", "split_seed", "tokenizer", "vocab_size"}
            if row["kind"] == "gpt"
            else {"base", "val_fraction", "split_seed"}
            if kind in FINETUNE_RUN_KINDS
            else {"modulus", "train_fraction", "max_len"}
            if kind == "modadd"
            else {"symbols", "block_size", "repeats", "n_train", "n_test"}
            if kind == "induction"
            else {"n_train", "n_test", "max_len"}
        ), kind
        assert set(row.get("init_from", {})) <= train_fields and (
            row["kind"] == "gpt" or "init_from" not in row
        )
        resolved = run_defaults(kind)
        assert resolved["train"]["seed"] == DEFAULT_SEED == 1337
        assert set(resolved["train"]) == train_fields
        for train in (resolved["train"], {**resolved["train"], **resolved["init_from"]}):  # noqa: F402
            TrainConfig.from_dict(train)  # every default schedule decays: its floor is at most its peak
    # values the published results depend on (docs/results.md)
    assert (
        RUN_DEFAULTS["lines"]["train"]["max_steps"] == 16000
        and RUN_DEFAULTS["sort"]["train"]["max_steps"] == 2500
    )
    assert (
        RUN_DEFAULTS["copy"]["train"]["max_steps"] == 1500
        and RUN_DEFAULTS["text"]["data"]["block_size"] == 64
    )


def test_every_job_class_implements_the_protocol():
    from scratchformer.training.jobs import JOBS, Job

    methods = [name for name in vars(Job) if not name.startswith("_") and callable(getattr(Job, name))]
    assert {
        "create",
        "from_checkpoint",
        "train_batch",
        "batch_tokens",
        "evaluation",
        "evaluate",
        "samples",
        "predict",
        "config_dict",
        "tokenizer_dict",
        "check_compatible",
    } <= set(methods)
    for kind, cls in JOBS.items():
        missing = [name for name in methods if not callable(getattr(cls, name, None))]
        assert not missing, (kind, missing)


@pytest.mark.parametrize("run_kind", ["majority", "reverse"])
def test_build_job_and_load_job_round_trip_a_task_run(run_kind, tmp_path):
    from scratchformer.training.jobs import build_job

    job, cfg = build_job(
        run_kind,
        {"n_layer": 1, "n_embd": 16},
        {"max_steps": 2, "eval_batches": 1},
        {"n_train": 300, "n_test": 30},
    )
    assert cfg.max_steps == 2 and cfg.eval_interval == (120 if run_kind == "majority" else 300)  # the table's
    train(job, cfg, tmp_path, progress=False, verbose=False)
    loaded = load_job(tmp_path)
    assert type(loaded) is type(job) and loaded.config_dict() == job.config_dict()
    assert loaded.evaluate("test") == job.evaluate("test")
    with pytest.raises(ConfigError, match="--data"):
        load_job(tmp_path, data="somewhere.txt")  # task data are generated, not read
    with pytest.raises(ConfigError, match="--bias does not apply"):
        build_job(run_kind, {"bias": False})


def test_options_a_job_does_not_take_are_typed_errors():
    job = tiny_job()
    with pytest.raises(ConfigError, match="--beam"):
        job.evaluate("val", 1, beam=2)
    with pytest.raises(ConfigError, match="sample"):
        job.predict("0 1 2")


def test_load_job_reads_the_checkpoint_once(tmp_path, monkeypatch):
    from scratchformer.training import jobs

    train(tiny_job(), tiny_cfg(max_steps=2, eval_interval=2), tmp_path, progress=False, verbose=False)
    calls = []
    monkeypatch.setattr(jobs, "load_checkpoint", lambda d: calls.append(d) or load_checkpoint(d))
    job = jobs.load_job(tmp_path)
    assert len(calls) == 1 and job.kind == "gpt"
