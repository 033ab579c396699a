"""Runs on byte-level BPE tokens (`train --tokenizer bpe --vocab-size N`) and bits per
character: the tokenizer is trained on the training split only, kept in the run directory, and
used by eval, sample, viz and --resume; eval and log.jsonl report bits per character, which
equals loss / ln 2 for a character run."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from scratchformer.cli.main import main
from scratchformer.data import IGNORE_INDEX, BPETokenizer, load_dataset
from scratchformer.data.datasets import tokenizer_from_json
from scratchformer.errors import RunFileError
from scratchformer.training.checkpoint import load_checkpoint
from scratchformer.training.jobs import load_job

TINY = [
    "--max-steps",
    "2",
    "--eval-interval",
    "2",
    "--n-layer",
    "1",
    "--n-embd",
    "16",
    "--n-head",
    "2",
    "--batch-size",
    "4",
    "--no-progress",
    "--quiet",
    "--workers",
    "1",
    "--num-samples",
    "0",
]

# Train text (90%) and val text (10%): the val part alone repeats "qzqz", which a tokenizer
# trained on the whole file would merge.
TRAIN_TEXT = "the cat sat on the mat and the dog ran to the log. " * 70
VAL_TEXT = "qzqz qzqz qzqz the cat " * 15


def _run(*argv) -> int:
    return main([str(a) for a in argv])


def _eval_json(run, capsys, *extra) -> dict:
    capsys.readouterr()
    assert _run("eval", run, "--json", "--workers", "1", *extra) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def text_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("data") / "story.txt"
    text = TRAIN_TEXT + VAL_TEXT
    cut = int(len(text) * 0.9)
    assert "qzqz" not in text[:cut] and text[cut:].count("qzqz") > 10  # the premise of the leak test
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def bpe_text_run(text_file, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("runs") / "bpe_text"
    assert (
        _run(
            "train",
            "--data",
            text_file,
            "--format",
            "text",
            "--tokenizer",
            "bpe",
            "--vocab-size",
            "300",
            "--block-size",
            "16",
            *TINY,
            "--out",
            out,
        )
        == 0
    )
    return out


@pytest.fixture(scope="module")
def bpe_names_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("runs") / "bpe_names"
    assert (
        _run("train", "--tokenizer", "bpe", "--vocab-size", "320", *TINY, "--eval-batches", "1", "--out", out)
        == 0
    )
    return out


def test_bpe_is_trained_on_the_training_split_only(bpe_text_run, text_file):
    tok = tokenizer_from_json(load_checkpoint(bpe_text_run / "last").tokenizer)
    assert isinstance(tok, BPETokenizer) and tok.vocab_size <= 300
    vocab = tok._tok.get_vocab()
    assert not any("qz" in token for token in vocab)  # val-only text was never merged
    assert any(token.startswith("Ġcat") or token == "cat" for token in vocab)  # training text was
    # a tokenizer trained on the whole file learns the val-only pair: the check above can fail
    leaky = BPETokenizer.train([text_file.read_text()], 300)
    assert any("qz" in token for token in leaky._tok.get_vocab())


def test_run_files_record_the_tokenizer(bpe_text_run):
    ck = load_checkpoint(bpe_text_run / "last")
    assert ck.config["data"]["tokenizer"] == "bpe" and ck.config["data"]["vocab_size"] == 300
    tok = tokenizer_from_json(ck.tokenizer)
    assert ck.config["model"]["vocab_size"] == tok.vocab_size and tok.bos_id is None  # text: no framing
    assert ck.tokenizer["hf"]["model"]["type"] == "BPE"


def test_text_splits_are_encoded_from_the_character_cut(text_file):
    ds = load_dataset(text_file, "text", block_size=16, tokenizer="bpe", vocab_size=300)
    text = text_file.read_text()
    cut = int(len(text) * 0.9)
    assert ds.tokenizer.decode(ds.train.ids) == text[:cut] and ds.tokenizer.decode(ds.val.ids) == text[cut:]
    first = ds.tokenizer.decode(ds.val.ids[:1])
    assert ds.val.chars == len(text) - cut - len(first) and ds.val.n_targets == len(ds.val.ids) - 1


def test_bits_per_char_of_a_bpe_run(bpe_text_run, text_file, capsys):
    result = _eval_json(bpe_text_run, capsys)
    text = text_file.read_text()
    val = text[int(len(text) * 0.9) :]
    tok = load_job(bpe_text_run).tokenizer
    ids = tok.encode(val)
    tokens, chars = len(ids) - 1, len(val) - len(tok.decode(ids[:1]))
    assert tokens < chars  # merges happened, so bits per char differ from loss / ln 2
    assert result["bits_per_char"] == pytest.approx(
        result["loss"] * tokens / (chars * math.log(2)), rel=1e-12
    )
    rows = [json.loads(line) for line in (bpe_text_run / "log.jsonl").read_text().splitlines()]
    evals = [r for r in rows if "val_loss" in r]
    assert evals and all(
        r["val_bits_per_char"] == pytest.approx(r["val_loss"] * tokens / (chars * math.log(2))) for r in evals
    )


def test_bits_per_char_of_a_character_run_is_loss_over_ln2(text_file, tmp_path, capsys):
    out = tmp_path / "char"
    assert (
        _run("train", "--data", text_file, "--format", "text", "--block-size", "16", *TINY, "--out", out) == 0
    )
    result = _eval_json(out, capsys)
    assert result["bits_per_char"] == pytest.approx(result["loss"] / math.log(2), rel=1e-12)
    names = tmp_path / "names"
    assert _run("train", *TINY, "--eval-batches", "1", "--out", names) == 0
    result = _eval_json(names, capsys, "--split", "val")
    assert result["bits_per_char"] == pytest.approx(result["loss"] / math.log(2), rel=1e-12)
    ck = load_checkpoint(names / "last")  # a character run records its tokenizer as before
    assert ck.config["data"]["tokenizer"] == "char" and ck.config["data"]["vocab_size"] is None
    assert ck.tokenizer["type"] == "char"


def test_lines_are_framed_by_end_of_text_and_block_size_counts_tokens(bpe_names_run):
    job = load_job(bpe_names_run)
    tok, ds = job.tokenizer, job.dataset
    assert isinstance(tok, BPETokenizer) and tok.bos_id == tok.eos_id == tok.end_id
    every = ds.train.lines + ds.val.lines + ds.test.lines
    longest = max(len(tok.encode(s)) for s in every)
    assert job.model.config.block_size == ds.block_size == longest + 1
    assert longest < max(map(len, every))  # in tokens, not characters
    line, x, y = ds.train.lines[0], ds.train.x[0], ds.train.y[0]
    ids = tok.encode(line)
    assert x[0] == tok.end_id and (x[1 : len(ids) + 1] == ids).all()
    assert (
        (y[: len(ids)] == ids).all()
        and y[len(ids)] == tok.end_id
        and (y[len(ids) + 1 :] == IGNORE_INDEX).all()
    )
    # bits per char: each name and its end count as len(name) + 1 characters
    assert ds.test.chars == sum(len(s) + 1 for s in ds.test.lines)


def test_sample_viz_and_resume_use_the_run_tokenizer(bpe_names_run, capsys):
    job = load_job(bpe_names_run)
    a = job.samples(3, np.random.default_rng(0), prompt="Em", temperature=0)
    assert all(s.startswith("Em") for s in a) and a == job.samples(
        3, np.random.default_rng(0), prompt="Em", temperature=0
    )
    inputs = job.viz_inputs("Emmanuel")
    tok = job.tokenizer
    assert inputs["tokens"] == ["<|endoftext|>", *tok.token_texts(tok.encode("Emmanuel"))]
    assert "".join(inputs["tokens"][1:]) == "Emmanuel" and len(inputs["tokens"]) < len("Emmanuel") + 1
    assert (
        len(inputs["vocab_labels"]) == tok.vocab_size
        and inputs["vocab_labels"][tok.end_id] == "<|endoftext|>"
    )
    assert (
        _run(
            "train",
            "--resume",
            "--out",
            bpe_names_run,
            "--max-steps",
            "3",
            "--no-progress",
            "--quiet",
            "--workers",
            "1",
        )
        == 0
    )
    assert load_checkpoint(bpe_names_run / "last").step == 3
    assert _run("sample", bpe_names_run, "-n", "2", "--seed", "1") == 0


def test_damaged_bpe_tokenizer_json_is_one_line(bpe_text_run, tmp_path):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(bpe_text_run, run)
    path = run / "last" / "tokenizer.json"
    doc = json.loads(path.read_text())
    doc["hf"]["model"]["type"] = "WordPiece"
    path.write_text(json.dumps(doc))
    with pytest.raises(RunFileError, match=r"tokenizer.json: field hf.model.type must be one of 'BPE'"):
        load_checkpoint(run / "last")


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--vocab-size", "300"], "--vocab-size applies to --tokenizer bpe only"),
        (["--tokenizer", "bpe", "--vocab-size", "100"], "--vocab-size: expected an integer >= 257"),
        (["--task", "majority", "--tokenizer", "bpe"], "--tokenizer does not apply to the majority task"),
    ],
)
def test_bad_tokenizer_options_are_one_line(argv, message, tmp_path, capsys):
    with pytest.raises(SystemExit) if "expected" in message else _no_exit():
        code = _run("train", *argv, *TINY, "--out", tmp_path / "r")
        assert code == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


class _no_exit:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


# -- --init-from a Hugging Face GPT-2, and export back ------------------------------------------
@pytest.fixture(scope="module")
def gpt2_dir(text_file, tmp_path_factory):
    """A tiny random GPT2LMHeadModel saved by transformers, with a small BPE of matching vocabulary
    (GPT-2's vocab.json + merges.txt)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    path = tmp_path_factory.mktemp("gpt2")
    tok = BPETokenizer.train([text_file.read_text()], 280)
    tok._tok.model.save(str(path))
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=2, n_head=2, n_embd=16, vocab_size=tok.vocab_size, n_positions=32)
    transformers.GPT2LMHeadModel(cfg).eval().save_pretrained(path, safe_serialization=True)
    return path


def _hf_logits(path, ids):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    hf = transformers.GPT2LMHeadModel.from_pretrained(path).eval()
    with torch.no_grad():
        return hf(torch.tensor(ids)).logits.numpy()


@pytest.fixture(scope="module")
def init_run(gpt2_dir, text_file, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("runs") / "init"
    assert (
        _run(
            "train",
            "--init-from",
            gpt2_dir,
            "--data",
            text_file,
            "--format",
            "text",
            "--block-size",
            "16",
            "--max-steps",
            "2",
            "--eval-interval",
            "2",
            "--batch-size",
            "4",
            "--no-progress",
            "--quiet",
            "--workers",
            "1",
            "--num-samples",
            "0",
            "--out",
            out,
        )
        == 0
    )
    return out


def test_init_from_starts_from_the_checkpoint_weights(gpt2_dir, text_file):
    from scratchformer.nn import eval_mode
    from scratchformer.training.jobs import build_job_from_hf

    job, cfg = build_job_from_hf(
        gpt2_dir, "text", {"max_steps": 2}, {"path": str(text_file), "block_size": 16}
    )
    # fine-tuning rates, not the from-scratch 1e-3 of the text row
    assert (cfg.lr, cfg.min_lr, cfg.warmup_steps, cfg.max_steps) == (5e-5, 5e-6, 100, 2)
    _, cfg = build_job_from_hf(gpt2_dir, "text", {"lr": 1e-4}, {"path": str(text_file), "block_size": 16})
    assert (cfg.lr, cfg.min_lr) == (1e-4, 1e-5)  # the floor follows a given peak
    x, _ = job.train_batch(np.random.default_rng(0), 2)
    with eval_mode(job.model):
        ours, _ = job.model(x)
    np.testing.assert_allclose(ours, _hf_logits(gpt2_dir, x), rtol=1e-4, atol=1e-5)
    ids = BPETokenizer.from_hf_dir(gpt2_dir).encode(TRAIN_TEXT[:200])
    assert (job.tokenizer.encode(TRAIN_TEXT[:200]) == ids).all()  # the checkpoint's own tokenizer


def test_init_from_run_is_an_ordinary_run(init_run, gpt2_dir, capsys):
    from scratchformer.interop.gpt2 import load_hf_gpt2

    ck = load_checkpoint(init_run / "last")
    assert (
        ck.config["model"] == load_hf_gpt2(gpt2_dir).config.to_dict()
    )  # its own config, block size included
    assert ck.config["data"]["init_from"] == str(gpt2_dir.resolve()) and ck.config["data"]["block_size"] == 16
    start = load_hf_gpt2(gpt2_dir).state_dict()
    assert any(not np.array_equal(v, start[k]) for k, v in ck.model_state.items())  # it trained
    assert np.isfinite(_eval_json(init_run, capsys)["bits_per_char"])
    assert (
        _run(
            "train",
            "--resume",
            "--out",
            init_run,
            "--max-steps",
            "3",
            "--no-progress",
            "--quiet",
            "--workers",
            "1",
        )
        == 0
    )
    assert load_checkpoint(init_run / "last").step == 3
    capsys.readouterr()
    assert (
        _run("sample", init_run, "-n", "1", "--seed", "0", "--prompt", "the cat", "--max-new-tokens", "5")
        == 0
    )
    assert any(line.startswith("the cat") for line in capsys.readouterr().out.splitlines())
    tokens = load_job(init_run).viz_inputs("the cat")["tokens"]
    assert "".join(tokens) == "the cat" and tokens[-1] == " cat"  # labelled by BPE tokens


def test_export_is_read_by_transformers(init_run, tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    out = tmp_path / "hf"
    assert _run("export", init_run, "--hf", out) == 0
    job = load_job(init_run)
    ids = job.tokenizer.encode(TRAIN_TEXT[:60])[None, :]
    from scratchformer.nn import eval_mode

    with eval_mode(job.model):
        ours, _ = job.model(ids)
    np.testing.assert_allclose(_hf_logits(out, ids), ours, rtol=1e-4, atol=1e-5)
    hf_tok = transformers.AutoTokenizer.from_pretrained(out)
    assert hf_tok.encode(VAL_TEXT) == job.tokenizer.encode(VAL_TEXT).tolist()
    assert hf_tok.eos_token == "<|endoftext|>"
    assert _run("export", init_run, "--hf", out) == 2  # never over an earlier export
    assert "is not empty" in capsys.readouterr().err


def test_export_of_a_bpe_run_trained_here(text_file, tmp_path):
    out = tmp_path / "run"
    assert (
        _run(
            "train",
            "--data",
            text_file,
            "--format",
            "text",
            "--tokenizer",
            "bpe",
            "--vocab-size",
            "300",
            "--block-size",
            "16",
            "--bias",
            "--tie-weights",
            *TINY,
            "--out",
            out,
        )
        == 0
    )
    assert _run("export", out, "--hf", tmp_path / "hf") == 0
    job = load_job(out)
    ids = job.tokenizer.encode(TRAIN_TEXT[:60])[None, :16]
    from scratchformer.nn import eval_mode

    with eval_mode(job.model):
        ours, _ = job.model(ids)
    np.testing.assert_allclose(_hf_logits(tmp_path / "hf", ids), ours, rtol=1e-4, atol=1e-5)


def test_samples_of_a_lines_run_are_one_per_line(bpe_names_run, capsys, monkeypatch):
    """A byte-level BPE can emit a line break in a lines run (its items never hold one): each
    sample still takes one output line, the break shown as \\n."""
    from scratchformer.training.lm import LMJob

    monkeypatch.setattr(LMJob, "samples", lambda self, n, rng, **kw: ["ab\ncd", "e\r\nf", "gh"][:n])
    assert _run("sample", str(bpe_names_run), "-n", "3", "--seed", "1") == 0
    assert capsys.readouterr().out.splitlines() == ["ab\\ncd", "e\\r\\nf", "gh"]
