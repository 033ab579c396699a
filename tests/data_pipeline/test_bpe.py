"""Byte-level BPE (`scratchformer.data.bpe`) and sampling from a Hugging Face directory
(`scratchformer sample --hf`), checked against `transformers`' GPT-2 tokenizers and model."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from scratchformer.data.bpe import END_OF_TEXT, BPETokenizer  # noqa: E402
from scratchformer.data.datasets import resolve_data  # noqa: E402
from scratchformer.errors import CheckpointError, ConfigError, DataError  # noqa: E402
from scratchformer.interop.hf_lm import hf_samples, load_hf_causal_lm  # noqa: E402
from scratchformer.ops import IGNORE_INDEX  # noqa: E402

SHAKESPEARE = resolve_data("shakespeare").read_text(encoding="utf-8")
LINES = SHAKESPEARE.split("\n")


@pytest.fixture(scope="module")
def tok():
    return BPETokenizer.train(LINES, 400)


@pytest.fixture(scope="module")
def vocab_dir(tok, tmp_path_factory):
    """The tokenizer as GPT-2's vocab.json + merges.txt."""
    path = tmp_path_factory.mktemp("bpe")
    tok._tok.model.save(str(path))
    return path


def test_round_trip_on_all_of_tinyshakespeare(tok):
    ids = tok.encode(SHAKESPEARE)
    assert ids.dtype == np.int64 and ids.min() >= 0 and ids.max() < tok.vocab_size
    assert tok.decode(ids) == SHAKESPEARE
    assert 1.5 < len(SHAKESPEARE) / len(ids) < 3  # merges happened: fewer tokens than characters


def test_every_text_has_an_encoding(tok):
    for text in ["", "é", "日本語", "😀 emoji", "\x00\x7f", "tab\tnew\nline\r\n", "\u2028"]:
        assert tok.decode(tok.encode(text)) == text


def test_training_is_deterministic_and_sized():
    a, b = BPETokenizer.train(LINES[:2000], 300), BPETokenizer.train(LINES[:2000], 300)
    assert a == b and a.vocab_size == 300 and a.special == END_OF_TEXT


@pytest.mark.parametrize("cls_name", ["GPT2TokenizerFast", "GPT2Tokenizer"])
def test_ids_equal_transformers_gpt2_tokenizer_on_10000_lines(tok, vocab_dir, cls_name):
    transformers = pytest.importorskip("transformers")
    ref = getattr(transformers, cls_name)(str(vocab_dir / "vocab.json"), str(vocab_dir / "merges.txt"))
    lines = LINES[:10000]
    assert len(lines) == 10000
    mismatched = [line for line in lines if ref.encode(line) != tok.encode(line).tolist()]
    assert mismatched == []
    # and the same vocabulary read back from GPT-2's two files
    from_files = BPETokenizer.from_hf_dir(vocab_dir)
    assert all(from_files.encode(line).tolist() == tok.encode(line).tolist() for line in lines[:500])


def test_json_and_hf_file_round_trips(tok, tmp_path):
    assert BPETokenizer.from_json(json.loads(json.dumps(tok.to_json()))) == tok
    tok.save_hf(tmp_path / "tokenizer.json")
    back = BPETokenizer.from_hf_dir(tmp_path)
    assert back.vocab_size == tok.vocab_size and back.end_id == tok.end_id
    assert back.encode("To be, or not to be").tolist() == tok.encode("To be, or not to be").tolist()


def test_boundary_ids_for_line_runs():
    t = BPETokenizer.train(["emma", "olivia", "ava"], 260, boundary=True)
    assert t.bos_id == t.eos_id == t.pad_id == t.end_id is not None
    plain = BPETokenizer.train(["emma"], 260)
    assert plain.bos_id is None and plain.end_id is not None


def test_decode_skips_padding_and_special_tokens(tok):
    ids = np.concatenate([tok.encode("abc"), [tok.end_id, IGNORE_INDEX]])
    assert tok.decode(ids) == "abc"


@pytest.mark.parametrize("size", [10, 256, 0, 2.5, True, 1 << 21])
def test_bad_vocab_size_is_one_line(size):
    with pytest.raises(ConfigError, match="--vocab-size must be an integer from 257"):
        BPETokenizer.train(["abc"], size)


def test_bad_input_is_a_typed_error(tok, tmp_path):
    with pytest.raises(DataError, match="cannot be encoded"):
        tok.encode("lone \ud800 surrogate")
    with pytest.raises(DataError, match="cannot decode ids"):
        tok.decode([tok.vocab_size])
    with pytest.raises(DataError, match="holds no tokenizer"):
        BPETokenizer.from_hf_dir(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(DataError, match="not a tokenizer"):
        BPETokenizer.from_hf_dir(tmp_path)
    with pytest.raises(DataError, match="not a BPE tokenizer JSON"):
        BPETokenizer.from_json({"type": "char", "chars": []})


# -- sampling from a Hugging Face GPT-2 directory ---------------------------------------------


@pytest.fixture(scope="module")
def gpt2_dir(tok, vocab_dir, tmp_path_factory):
    """A tiny random GPT2LMHeadModel saved by transformers, with GPT-2's two tokenizer files."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    path = tmp_path_factory.mktemp("gpt2")
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(
        n_layer=2,
        n_head=2,
        n_embd=16,
        vocab_size=tok.vocab_size,
        n_positions=64,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    hf = transformers.GPT2LMHeadModel(cfg)
    with torch.no_grad():
        for p in hf.parameters():
            if p.ndim == 2:
                p.normal_(0.0, 0.3)  # logits far from ties, so greedy choices are stable
    hf.eval().save_pretrained(path, safe_serialization=True)
    for name in ("vocab.json", "merges.txt"):
        (path / name).write_bytes((vocab_dir / name).read_bytes())
    return path, hf


def test_greedy_samples_equal_transformers_generate(gpt2_dir, tok):
    torch = pytest.importorskip("torch")
    path, hf = gpt2_dir
    model, tokenizer = load_hf_causal_lm(path, dtype="float64")
    prompt = "ROMEO: what"
    with torch.no_grad():
        ref = hf.double().generate(
            torch.tensor([tok.encode(prompt).tolist()]),
            max_new_tokens=12,
            do_sample=False,
            eos_token_id=None,
            pad_token_id=0,
        )
    ref_text = prompt + tok.decode(ref[0, len(tok.encode(prompt)) :].numpy())
    ours = hf_samples(model, tokenizer, prompt, n=2, max_new_tokens=12, temperature=0)
    assert ours == [ref_text, ref_text]


def _cli(*args):
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}
    return subprocess.run(
        [sys.executable, "-m", "scratchformer", *args], capture_output=True, text=True, env=env, timeout=120
    )


def test_sample_hf_command(gpt2_dir):
    path, _ = gpt2_dir
    model, tokenizer = load_hf_causal_lm(path)
    expected = hf_samples(model, tokenizer, "To be", n=1, max_new_tokens=8, temperature=0)
    r = _cli(
        "sample",
        "--hf",
        str(path),
        "--prompt",
        "To be",
        "-n",
        "1",
        "--max-new-tokens",
        "8",
        "--temperature",
        "0",
        "--seed",
        "1",
    )
    assert r.returncode == 0, r.stderr
    assert expected[0].startswith("To be") and len(expected[0]) > len("To be")
    assert expected[0] in r.stdout


def test_sample_hf_bad_input_is_one_line(gpt2_dir, tmp_path):
    path, _ = gpt2_dir
    for args, message in [
        (["--hf", str(tmp_path / "missing")], "not a directory"),
        (["out/names", "--hf", str(path)], "not both"),
        (["--hf", str(tmp_path)], "has no config.json"),
    ]:
        r = _cli("sample", *args)
        assert r.returncode == 2, (args, r.stderr)
        assert message in r.stderr and "Traceback" not in r.stderr and len(r.stderr.strip().split("\n")) == 1
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert"}))
    with pytest.raises(ConfigError, match="model_type 'bert' is not a causal LM"):
        load_hf_causal_lm(tmp_path)
    (tmp_path / "config.json").write_text("[1, 2]")
    with pytest.raises(CheckpointError):
        load_hf_causal_lm(tmp_path)


def test_a_literal_end_of_text_in_a_text_is_text():
    """Training text may hold the characters "<|endoftext|>" (a scraped page, a code comment):
    they are encoded byte by byte like any other word, never as the end token, and come back in
    the decoded text."""
    tok = BPETokenizer.train(["the cat sat on the mat. " * 50 + "a literal <|endoftext|> here"], 300)
    text = "before <|endoftext|> after"
    ids = tok.encode(text, what="text")
    assert tok.end_id not in ids.tolist()
    assert tok.decode(ids) == text
    assert tok.decode(np.concatenate([ids, [tok.end_id]])) == text  # the real end token: never printed
