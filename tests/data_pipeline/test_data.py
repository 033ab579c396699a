"""Tokenizer, line/text datasets, splits, format guessing and error messages."""

import numpy as np
import pytest

from scratchformer.data import (
    IGNORE_INDEX,
    CharTokenizer,
    LineDataset,
    TextDataset,
    guess_format,
    load_dataset,
)
from scratchformer.errors import ConfigError, DataError


def test_line_tokenizer_round_trip_and_boundary():
    tok = CharTokenizer.from_text(["emma", "ava"])
    assert tok.special == "<eot>" and tok.bos_id == tok.eos_id == tok.pad_id == 0
    assert tok.vocab_size == 1 + 4  # boundary + a, e, m, v
    ids = tok.encode("emma")
    assert ids.dtype == np.int64 and ids.tolist() == [2, 3, 3, 1]
    assert tok.decode([0, *ids, 0, IGNORE_INDEX]) == "emma"  # boundary and padding skipped


def test_text_tokenizer_has_no_special_tokens():
    tok = CharTokenizer.from_text("hello world\n")
    assert tok.special is None and tok.bos_id is None and tok.eos_id is None
    assert tok.vocab_size == len(set("hello world\n"))
    assert tok.decode(tok.encode("low\n")) == "low\n"
    with pytest.raises(DataError, match="valid ids are 0..8"):
        tok.decode([99])


def test_unknown_characters_error_lists_them_sorted():
    tok = CharTokenizer.from_text(["abc"])
    with pytest.raises(DataError) as e:
        tok.encode("aQ!b!")
    assert str(e.value) == "prompt contains characters not in the vocabulary: '!', 'Q'"


def test_tokenizer_json_and_file_round_trip(tmp_path):
    tok = CharTokenizer.from_text(["héllo", "wörld"])
    assert CharTokenizer.from_json(tok.to_json()) == tok
    tok.save(tmp_path / "tok.json")
    assert CharTokenizer.load(tmp_path / "tok.json") == tok
    with pytest.raises(DataError, match="not found"):
        CharTokenizer.load(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{nope")
    with pytest.raises(DataError, match="bad.json"):
        CharTokenizer.load(tmp_path / "bad.json")


def test_line_dataset_framing_and_padding():
    ds = LineDataset.from_lines(["emma\n", "  ", "bo"])
    tok = ds.tokenizer
    assert len(ds) == 2 and ds.block_size == 5
    e, m, a, b, o = (tok.encode(c)[0] for c in "emabo")
    assert ds.x[0].tolist() == [0, e, m, m, a]
    assert ds.y[0].tolist() == [e, m, m, a, 0]
    assert ds.x[1].tolist() == [0, b, o, 0, 0]
    assert ds.y[1].tolist() == [b, o, 0, IGNORE_INDEX, IGNORE_INDEX]
    batches = list(ds.all_batches(1))
    # batches are trimmed to their longest item: 'bo' needs 3 positions
    assert len(batches) == 2 and batches[0][0].shape == (1, 5) and batches[1][0].shape == (1, 3)
    with pytest.raises(DataError, match="block_size >= 5"):
        LineDataset.from_lines(["emma"], block_size=3)


def test_bundled_names_split_is_makemore_like_and_deterministic():
    d1 = load_dataset(seed=1337)
    d2 = load_dataset(seed=1337)
    d3 = load_dataset(seed=7)
    assert d1.format == "lines" and d1.tokenizer.vocab_size == 27
    total = len(d1.train) + len(d1.val) + len(d1.test)
    assert len(d1.test) == len(d1.val) == min(1000, int(total * 0.1))
    assert d1.block_size == max(len(s) for s in d1.train.lines + d1.val.lines + d1.test.lines) + 1
    assert d1.test.lines == d2.test.lines and d1.test.lines != d3.test.lines
    xa, ya = d1.train.batch(np.random.default_rng(0), 8)
    xb, yb = d2.train.batch(np.random.default_rng(0), 8)
    assert xa.shape == ya.shape and xa.shape[0] == 8 and xa.shape[1] <= d1.block_size and xa.dtype == np.int64
    assert (ya[:, -1] != IGNORE_INDEX).any()  # trimmed to the longest item of the batch
    np.testing.assert_array_equal(xa, xb)
    np.testing.assert_array_equal(ya, yb)


def test_format_guessing():
    assert guess_format("\n".join(f"name{i}" for i in range(150))) == "lines"
    assert guess_format("\n".join(f"name{i}" for i in range(50))) == "text"  # too few lines
    assert guess_format("\n".join("a long sentence of prose " * 3 for _ in range(200))) == "text"
    # a play: short lines, but speeches separated by blank lines (tinyshakespeare)
    play = "\n\n".join("FIRST CITIZEN:\nBefore we proceed any further,\nhear me speak." for _ in range(100))
    assert guess_format(play) == "text"


def test_text_dataset_batches_and_full_coverage():
    tok = CharTokenizer.from_text("abcdefghij")
    ids = tok.encode("abcdefghij" * 3)  # 30 tokens -> 29 targets
    ds = TextDataset(ids, tok, block_size=4)
    x, y = ds.batch(np.random.default_rng(0), 16)
    assert x.shape == y.shape == (16, 4)
    np.testing.assert_array_equal(y[:, :-1], x[:, 1:])  # y is x shifted by one
    xs, ys = zip(*ds.all_batches(3))
    X, Y = np.concatenate(xs), np.concatenate(ys)
    assert X.shape == (8, 4)  # ceil(29 / 4) windows
    assert Y.ravel()[:29].tolist() == ids[1:].tolist()  # every target once, in order
    assert X.ravel()[:29].tolist() == ids[:-1].tolist()
    assert (Y.ravel()[29:] == IGNORE_INDEX).all()


def test_load_text_file_split(tmp_path):
    p = tmp_path / "prose.txt"
    p.write_text("To be, or not to be, that is the question.\n" * 50, encoding="utf-8")
    d = load_dataset(p, block_size=16)
    assert d.format == "text" and d.test is d.val and d.block_size == 16
    n = len(d.train.ids) + len(d.val.ids)
    assert len(d.train.ids) == int(n * 0.9)


def test_error_messages(tmp_path):
    with pytest.raises(DataError, match="dataset file not found: .*nope.txt"):
        load_dataset(tmp_path / "nope.txt")
    empty = tmp_path / "empty.txt"
    empty.write_text("  \n\n")
    with pytest.raises(DataError, match="empty.txt is empty"):
        load_dataset(empty)
    latin = tmp_path / "latin1.txt"
    latin.write_bytes("café\n".encode("latin-1"))
    with pytest.raises(DataError, match="latin1.txt is not UTF-8"):
        load_dataset(latin)
    short = tmp_path / "short.txt"
    short.write_text("just a few words here")
    with pytest.raises(DataError, match="short.txt has 21 characters, too short for block_size=128"):
        load_dataset(short)
    with pytest.raises(DataError, match="at least 3"):
        load_dataset(short, format="lines")
    with pytest.raises(ConfigError, match="format must be"):
        load_dataset(short, format="csv")
