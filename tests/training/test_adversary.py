"""The adversary's classes (issue 26): nothing a user leaves in or links to a run directory is
lost or stops a training, a second writer stays out, and every bad input is one line."""

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from tiny_run import tiny

from scratchformer.cli.main import main
from scratchformer.errors import CheckpointError, RunLockedError
from scratchformer.training.checkpoint import load_checkpoint, save_checkpoint
from scratchformer.training.rundir import RunLock, clear_run, read_log, recover_run, run_files
from scratchformer.training.trainer import resume_config

ROOT = Path(__file__).resolve().parents[2]
TINY = tiny(n_embd=8, eval_batches=1)


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
    (out / ".best.tmp-drafts").mkdir()  # a directory of that name: not ours either
    (out / ".best.tmp-drafts" / "a").write_text("mine")
    (out / ".diagnostics.jsonl.tmp-99-3").write_text("{}")  # a kill -9 leftover: ours
    assert ".bashrc.old" not in " ".join(run_files(out))
    assert cli(capsys, "train", *TINY, "--max-steps", "2", "--out", out, "--overwrite")[0] == 0
    assert (out / ".bashrc.old").read_text() == "mine" and (
        out / ".notes.old" / "a"
    ).read_text() == "mine too"
    assert (out / ".last.tmp-notes").exists() and not (out / ".diagnostics.jsonl.tmp-99-3").exists()
    assert (out / ".best.tmp-drafts" / "a").read_text() == "mine"  # survived every save of the run


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
    code, _, err = cli(
        capsys,
        "train",
        "--resume",
        "--out",
        out,
        "--max-steps",
        "4",
        "--eval-interval",
        "1",
        "--no-progress",
        "--quiet",
    )
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
        code, _, err = cli(
            capsys,
            "train",
            "--resume",
            "--out",
            out,
            "--max-steps",
            max_steps,
            "--eval-interval",
            "1",
            "--no-progress",
            "--quiet",
        )
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
    code, _, err = cli(
        capsys, "train", "--resume", "--out", out, "--max-steps", "3", "--no-progress", "--quiet"
    )
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
    code, stdout, _ = cli(
        capsys,
        "train",
        "--resume",
        "--out",
        out,
        "--max-steps",
        "3",
        "--workers",
        "1",
        "--no-progress",
        "--quiet",
    )
    assert code == 0 and "--workers 1 instead of the run's 2: the steps from here will not repeat" in stdout


# -- tracebacks become one line ----------------------------------------------------------------
@pytest.fixture(scope="module")
def diverged_run(tmp_path_factory):
    """A run whose diagnostics recorder wrote null for the NaN and infinities of a diverging
    model (relu at --lr 1e4), stopped by the divergence."""
    out = tmp_path_factory.mktemp("diverged") / "run"
    code = main(
        [
            "train",
            *TINY,
            "--max-steps",
            "12",
            "--eval-interval",
            "1",
            "--diag-interval",
            "1",
            "--activation",
            "relu",
            "--lr",
            "1e4",
            "--workers",
            "1",
            "--out",
            str(out),
        ]
    )
    assert code == 2
    assert b"null" in (out / "diagnostics.jsonl").read_bytes()  # what the recorder wrote
    return out


def _draw_diagnostics(run):
    from scratchformer.viz import diagnostics as D

    records = D.diag_records(run)
    for figure in (D.activation_histograms, D.gradient_histograms, D.update_ratios, D.saturation_dead):
        figure(records)
    return records


def test_the_diagnostics_of_a_diverged_run_draw(diverged_run):
    records = _draw_diagnostics(diverged_run)
    values = [v for r in records for layer in r["layers"] for v in (layer["mean"], layer["std"])]
    assert any(np.isnan(v) for v in values) or any(np.isnan(r["act_range"]).any() for r in records)


def _diag_lines(run):
    lines = (run / "diagnostics.jsonl").read_text().splitlines()
    return lines[0], [json.loads(line) for line in lines[1:]]


def _set_diag(run, edit):
    header, records = _diag_lines(run)
    edit(records[-1])
    (run / "diagnostics.jsonl").write_text("\n".join([header, *map(json.dumps, records)]) + "\n")


NULLED = {  # every number the figures read, null (as the recorder writes NaN and infinity)
    "layer_stats": lambda r: r["layers"][0].update(mean=None, std=None, saturation=None, dead=None),
    "ranges": lambda r: r.update(act_range=[None, None], grad_range=[None, None]),
    "params": lambda r: [
        p.update(grad_mean=None, grad_std=None, update_ratio=None) for p in r["params"].values()
    ],
    "attention": lambda r: r["probe"]["attention"][0][0][0].__setitem__(0, None),
    "lr": lambda r: r.update(lr=None),
}


@pytest.mark.parametrize("name", NULLED)
def test_nulls_anywhere_in_a_record_draw(run2, tmp_path, name):
    out = copy(run2, tmp_path / "run")
    _set_diag(out, NULLED[name])
    _draw_diagnostics(out)


DAMAGED = {
    "layers_missing": lambda r: r.pop("layers"),
    "layers_not_list": lambda r: r.update(layers={"0": 1}),
    "layer_mean_string": lambda r: r["layers"][0].update(mean="0.5"),
    "hist_short": lambda r: r["layers"][0].update(hist=[1, 2]),
    "hist_strings": lambda r: r["layers"][0].update(hist=["a"] * 40),
    "range_one_number": lambda r: r.update(act_range=[0.0]),
    "params_list": lambda r: r.update(params=[1]),
    "param_not_object": lambda r: r["params"].update({next(iter(r["params"])): 3}),
    "grad_hist_null": lambda r: [p.update(grad_hist=None) for p in r["params"].values() if "grad_hist" in p],
    "probe_missing": lambda r: r.pop("probe"),
    "probe_tokens_numbers": lambda r: r["probe"].update(tokens=[1, 2]),
    "attention_ragged": lambda r: r["probe"]["attention"][0][0].pop(),
    "attention_string": lambda r: r["probe"]["attention"][0][0][0].__setitem__(0, "x"),
    "attention_wrong_tokens": lambda r: r["probe"].update(tokens=r["probe"]["tokens"] + ["z"]),
    "extra_layer": lambda r: r["layers"].append(dict(r["layers"][0])),
    "step_bool": lambda r: r.update(step=True),
}


@pytest.mark.parametrize("name", DAMAGED)
def test_a_damaged_record_is_one_line_naming_the_field(run2, tmp_path, name):
    from scratchformer.errors import RunFileError
    from scratchformer.viz.diagnostics import diag_records

    out = copy(run2, tmp_path / "run")
    _set_diag(out, DAMAGED[name])
    with pytest.raises(RunFileError) as e:
        diag_records(out)
    assert "diagnostics.jsonl" in str(e.value) and "\n" not in str(e.value)


def test_viz_all_on_a_damaged_record_exits_2_in_one_line(run2, tmp_path, capsys):
    out = copy(run2, tmp_path / "run")
    _set_diag(out, DAMAGED["layer_mean_string"])
    code, _, err = cli(capsys, "viz", out, "--all", "--out", tmp_path / "figs")
    assert code == 2 and len(err) == 1 and "diagnostics.jsonl record" in err[0] and "mean" in err[0], err


def test_a_resume_rewrites_nulls_as_nulls(run2, tmp_path, capsys):
    out = copy(run2, tmp_path / "run")
    _set_diag(out, NULLED["layer_stats"])
    assert (
        cli(capsys, "train", "--resume", "--out", out, "--max-steps", "3", "--no-progress", "--quiet")[0] == 0
    )
    _, records = _diag_lines(out)
    assert records[-2]["layers"][0]["mean"] is None and records[-1]["step"] == 3


def test_a_run_failing_before_its_first_row_leaves_nothing_that_blocks_the_retry(tmp_path, capsys):
    out = tmp_path / "run"
    code, _, err = cli(
        capsys,
        "train",
        *TINY,
        "--max-steps",
        "20",
        "--lr",
        "1e4",
        "--log-interval",
        "50",
        "--eval-interval",
        "50",
        "--out",
        out,
    )
    assert code == 2 and len(err) == 1 and "became" in err[0], err
    assert not (out / "log.jsonl").exists() and not (out / "diagnostics.jsonl").exists()
    assert cli(capsys, "train", *TINY, "--max-steps", "2", "--out", out)[0] == 0  # no --overwrite needed


def test_a_stale_log_with_rows_is_never_dropped_by_a_failed_start(tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    (out / "log.jsonl").write_text('{"step": 1, "train_loss": 9.0}\n')
    code, _, err = cli(capsys, "train", *TINY, "--out", out)
    assert code == 2 and "--overwrite" in err[0]
    assert (out / "log.jsonl").read_text() == '{"step": 1, "train_loss": 9.0}\n'


@pytest.fixture(scope="module")
def bert_files(tmp_path_factory):
    pytest.importorskip("transformers")
    from tiny_bert import make_bert_dir, make_csv

    d = tmp_path_factory.mktemp("bert")
    files = {"bert": make_bert_dir(d / "bert"), "train": make_csv(d / "train.csv"), "root": d}
    rows = files["train"].read_text().splitlines()
    rows[3] = ",love"  # line 4: an empty text
    rows[9] = '"   ",war'  # line 10: a text of spaces
    (d / "empty.csv").write_text("\n".join(rows) + "\n")
    run = d / "run"
    assert (
        main(
            [
                "finetune",
                "--model",
                str(files["bert"]),
                "--data",
                str(files["train"]),
                "--out",
                str(run),
                "--max-length",
                "16",
                "--batch-size",
                "8",
                "--max-steps",
                "2",
                "--no-progress",
                "--quiet",
            ]
        )
        == 0
    )
    files["run"] = run
    return files


@pytest.mark.parametrize("seed", ["1", "2", "3"])
def test_finetune_refuses_empty_texts_up_front_whatever_the_seed(bert_files, tmp_path, capsys, seed):
    out = tmp_path / "ft"
    code, _, err = cli(
        capsys,
        "finetune",
        "--model",
        bert_files["bert"],
        "--data",
        bert_files["root"] / "empty.csv",
        "--out",
        out,
        "--max-length",
        "16",
        "--max-steps",
        "2",
        "--seed",
        seed,
        "--no-progress",
    )
    assert code == 2 and len(err) == 1 and "line 4: the text is empty" in err[0], err
    assert not (out / "log.jsonl").exists()


@pytest.mark.parametrize("text", ["caf\udce9 love", "\udcff", "love \ud800 war"])
def test_non_utf8_text_into_a_fine_tuned_classifier_is_one_line(bert_files, capsys, text):
    code, _, err = cli(capsys, "predict", bert_files["run"], text)
    assert code == 2 and len(err) == 1 and "not valid UTF-8 text" in err[0], err


def test_non_utf8_text_into_viz_of_a_fine_tuned_classifier_is_one_line(bert_files, tmp_path, capsys):
    code, _, err = cli(capsys, "viz", bert_files["run"], "--text", "caf\udce9 love", "--out", tmp_path / "f")
    assert code == 2 and len(err) == 1 and "--text is not valid UTF-8 text (byte 0xe9" in err[0], err


def test_a_classifier_job_refuses_non_strings_and_bad_text_in_python(bert_files):
    from scratchformer.errors import DataError, DTypeError
    from scratchformer.training.jobs import load_job

    job = load_job(bert_files["run"])
    with pytest.raises(DataError, match="not valid UTF-8"):
        job.predict("caf\udce9")
    with pytest.raises(DTypeError, match="must be a string"):
        job.predict(b"love")


@pytest.mark.parametrize("lines", [["love"], ["[PAD]"], ["", ""]])
def test_duplicate_lines_in_vocab_txt_are_one_line(bert_files, tmp_path, capsys, lines):
    bert = shutil.copytree(bert_files["bert"], tmp_path / "bert")
    with open(bert / "vocab.txt", "a", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    code, _, err = cli(
        capsys,
        "finetune",
        "--model",
        bert,
        "--data",
        bert_files["train"],
        "--out",
        tmp_path / "ft",
        "--max-length",
        "16",
        "--max-steps",
        "1",
        "--no-progress",
    )
    assert code == 2 and len(err) == 1 and "vocab.txt line" in err[0] and "repeats the token" in err[0], err


def test_a_vocab_txt_longer_than_the_models_vocabulary_is_refused(bert_files, tmp_path, capsys):
    bert = shutil.copytree(bert_files["bert"], tmp_path / "bert")
    with open(bert / "vocab.txt", "a", encoding="utf-8") as f:
        f.write("zzz\n")
    code, _, err = cli(
        capsys,
        "finetune",
        "--model",
        bert,
        "--data",
        bert_files["train"],
        "--out",
        tmp_path / "ft",
        "--max-length",
        "16",
        "--max-steps",
        "1",
        "--no-progress",
    )
    assert code == 2 and len(err) == 1 and "vocab_size" in err[0], err


GPT2_HF = {
    "model_type": "gpt2",
    "vocab_size": 50,
    "n_positions": 16,
    "n_embd": 8,
    "n_layer": 1,
    "n_head": 2,
    "resid_pdrop": 0.1,
    "layer_norm_epsilon": 1e-5,
    "tie_word_embeddings": True,
}
LLAMA_HF = {
    "model_type": "llama",
    "vocab_size": 50,
    "hidden_size": 8,
    "intermediate_size": 16,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "max_position_embeddings": 16,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "attention_dropout": 0.0,
    "head_dim": 4,
    "tie_word_embeddings": False,
}


@pytest.mark.parametrize("family", ["gpt2", "llama"])
@pytest.mark.parametrize("bad", ["abc", "1e-5", None, [1], {"a": 1}, True, -1, float("nan"), 10**30])
def test_a_hf_config_with_a_bad_value_anywhere_is_a_typed_error(family, bad):
    from scratchformer.errors import ScratchformerError
    from scratchformer.interop.gpt2 import gpt2_config_from_hf
    from scratchformer.interop.llama import llama_config_from_hf

    read, config = (gpt2_config_from_hf, GPT2_HF) if family == "gpt2" else (llama_config_from_hf, LLAMA_HF)
    read(config)  # the unchanged config reads
    for key in config:
        if key == "model_type":
            continue
        try:
            read({**config, key: bad})
        except ScratchformerError as e:
            assert "\n" not in str(e)
        # a value that reads (None: the default; -1 eps...) must not be a bare builtin error


@pytest.mark.parametrize(
    "key,bad",
    [
        ("tie_word_embeddings", "false"),
        ("layer_norm_epsilon", "1e-5"),
        ("resid_pdrop", "0.1"),
        ("scale_attn_by_inverse_layer_idx", "false"),
        ("scale_attn_weights", "true"),
        ("add_cross_attention", 0),
    ],
)
def test_a_string_where_hf_config_wants_a_number_or_flag_is_refused_not_guessed(key, bad):
    from scratchformer.errors import ConfigError
    from scratchformer.interop.gpt2 import gpt2_config_from_hf

    with pytest.raises(ConfigError, match=f"{key} must be"):
        gpt2_config_from_hf({**GPT2_HF, key: bad})


@pytest.fixture(scope="module")
def bpe_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("bpe")
    text = d / "text.txt"
    words = "the cat sat on the mat and the dog ran to the cat while a bird sang".split()
    rng = np.random.default_rng(0)
    text.write_text(" ".join(rng.choice(words, 3000)) + "\n")
    out = d / "run"
    assert (
        main(
            [
                "train",
                "--data",
                str(text),
                "--format",
                "text",
                "--tokenizer",
                "bpe",
                "--vocab-size",
                "280",
                "--block-size",
                "16",
                "--bias",
                "--tie-weights",
                *TINY,
                "--max-steps",
                "2",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    return out


def _full_disk(*a, **kw):
    import errno

    raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize("writer", ["weights", "tokenizer_config"])
def test_export_on_a_full_disk_is_one_line_and_leaves_no_directory(
    bpe_run, tmp_path, capsys, monkeypatch, writer
):
    import pathlib

    import scratchformer.interop.hf_files as hf_files
    import scratchformer.runfiles as runfiles

    # the first file written (the weights, by the directory writer) or the last one, after every other
    owner, full = (
        (hf_files, "model.safetensors") if writer == "weights" else (runfiles, "tokenizer_config.json")
    )
    real = owner.write_atomic
    monkeypatch.setattr(
        owner,
        "write_atomic",
        lambda path, data: _full_disk() if pathlib.Path(path).name == full else real(path, data),
    )
    hf = tmp_path / "exports" / "hf"
    code, _, err = cli(capsys, "export", bpe_run, "--hf", hf)
    assert code == 2 and len(err) == 1 and "No space left on device" in err[0], err
    assert not hf.exists() and list((tmp_path / "exports").iterdir()) == []
    monkeypatch.undo()
    assert cli(capsys, "export", bpe_run, "--hf", hf)[0] == 0  # the retry needs nothing cleaned
    assert {p.name for p in hf.iterdir()} >= {"config.json", "model.safetensors", "tokenizer_config.json"}


def test_export_into_an_empty_directory_still_works(bpe_run, tmp_path, capsys):
    hf = tmp_path / "hf"
    hf.mkdir()
    assert cli(capsys, "export", bpe_run, "--hf", hf)[0] == 0 and (hf / "config.json").is_file()


def test_sample_hf_with_a_string_in_config_json_is_one_line(bpe_run, tmp_path, capsys):
    hf = tmp_path / "hf"
    assert cli(capsys, "export", bpe_run, "--hf", hf)[0] == 0
    config = json.loads((hf / "config.json").read_text())
    (hf / "config.json").write_text(json.dumps({**config, "layer_norm_epsilon": "tiny"}))
    code, _, err = cli(capsys, "sample", "--hf", hf, "-n", "1", "--max-new-tokens", "2")
    assert code == 2 and len(err) == 1 and "layer_norm_epsilon must be a number" in err[0], err


# -- memory estimated before the tokenizers library can exhaust it ------------------------------
@pytest.fixture
def limit_60mb(monkeypatch):
    """A memory limit of 60 MB, as `ulimit -v` or a cgroup would set it (limits.memory_limits)."""
    from scratchformer.limits import memory as limits

    monkeypatch.setattr(limits, "memory_limits", lambda: {"the test's limit": 60 << 20})


def _text_file(path, nbytes):
    words = "the cat sat on the mat and the dog ran to the cat while a bird sang\n"
    path.write_text(words * (nbytes // len(words)))
    return path


def test_bpe_training_on_a_big_text_under_a_limit_is_one_line(tmp_path, capsys, limit_60mb):
    data = _text_file(tmp_path / "big.txt", 1 << 20)  # 1 MB: reading it fits, training a BPE on it does not
    code, _, err = cli(
        capsys,
        "train",
        "--data",
        data,
        "--format",
        "text",
        "--tokenizer",
        "bpe",
        "--vocab-size",
        "300",
        *TINY,
        "--workers",
        "1",
        "--max-steps",
        "1",
        "--out",
        tmp_path / "run",
    )
    assert (
        code == 2
        and len(err) == 1
        and "training a BPE tokenizer on" in err[0]
        and "under the test's limit" in err[0]
    ), err


def test_bpe_encoding_a_long_prompt_file_under_a_limit_is_one_line(bpe_run, tmp_path, capsys, limit_60mb):
    hf = tmp_path / "hf"
    assert cli(capsys, "export", bpe_run, "--hf", hf)[0] == 0
    prompt = _text_file(tmp_path / "prompt.txt", 400_000)
    code, _, err = cli(
        capsys, "sample", "--hf", hf, "--prompt-file", prompt, "-n", "1", "--max-new-tokens", "2"
    )
    assert code == 2 and len(err) == 1 and "BPE-encoding --prompt" in err[0], err
    code, _, err = cli(capsys, "sample", bpe_run, "--prompt-file", prompt, "-n", "1", "--max-new-tokens", "2")
    assert code == 2 and len(err) == 1 and "BPE-encoding" in err[0], err


def test_a_prompt_file_too_big_to_read_is_refused_before_reading(tmp_path, capsys, limit_60mb):
    prompt = tmp_path / "prompt.txt"
    with open(prompt, "wb") as f:
        f.truncate(100 << 20)  # sparse: 100 MB on paper, nothing on disk
    code, _, err = cli(capsys, "sample", "--hf", tmp_path, "--prompt-file", prompt)
    assert code == 2 and len(err) == 1 and "--prompt-file" in err[0] and "smaller" in err[0], err


def test_an_init_from_model_too_big_to_train_is_refused_before_its_weights_are_read(
    tmp_path, capsys, limit_60mb
):
    from scratchformer.data.bpe import BPETokenizer
    from scratchformer.interop.gpt2 import gpt2_config_to_hf
    from scratchformer.models import GPTConfig

    hf = tmp_path / "big"
    hf.mkdir()
    BPETokenizer.train(["the cat sat on the mat " * 50], 280).save_hf(hf / "tokenizer.json")
    config = GPTConfig(vocab_size=280, block_size=64, n_layer=8, n_head=8, n_embd=512)  # ~25M parameters
    (hf / "config.json").write_text(json.dumps(gpt2_config_to_hf(config)))
    # no model.safetensors: a check made after reading the weights would name the missing file instead
    data = _text_file(tmp_path / "text.txt", 5000)
    code, _, err = cli(capsys, "train", "--init-from", hf, "--data", data, "--out", tmp_path / "out")
    assert code == 2 and len(err) == 1 and "training state" in err[0], err


def test_bpe_estimates_in_python(limit_60mb, monkeypatch):
    from scratchformer.data.bpe import BPETokenizer
    from scratchformer.errors import ResourceError
    from scratchformer.limits import memory as limits

    tok = BPETokenizer.train(["the cat sat on the mat " * 50], 280)
    with pytest.raises(ResourceError, match="BPE-encoding the text"):
        tok.encode("the cat " * 50_000, what="the text")  # 400 KB: ~100 MB in the library
    with pytest.raises(ResourceError, match="training a BPE tokenizer"):
        BPETokenizer.train(["the cat " * 80_000], 280)  # 640 KB: ~77 MB
    monkeypatch.setattr(limits, "memory_limits", lambda: {})  # no limit known: nothing refused
    assert len(tok.encode("the cat " * 50_000)) > 0


def test_a_kill_9_leftover_is_swept_by_the_next_fresh_run_and_resume(run2, tmp_path, capsys):
    out = tmp_path / "fresh"
    out.mkdir()
    (out / ".diagnostics.jsonl.tmp-4242-7").write_text('{"format": "scratch')  # what kill -9 mid-write leaves
    assert (
        cli(capsys, "train", *TINY, "--max-steps", "2", "--out", out)[0] == 0
    )  # no --overwrite: not a run file
    assert not (out / ".diagnostics.jsonl.tmp-4242-7").exists()
    resumed = copy(run2, tmp_path / "resumed")
    (resumed / ".log.jsonl.tmp-4242-8").write_text("{")
    assert (
        cli(capsys, "train", "--resume", "--out", resumed, "--max-steps", "3", "--no-progress", "--quiet")[0]
        == 0
    )
    assert not (resumed / ".log.jsonl.tmp-4242-8").exists()
