"""Toy task data: formats, determinism, held-out disjointness, parsing helpers."""

from __future__ import annotations

import numpy as np
import pytest

from scratchformer.data.tasks import (
    BOS,
    EOS,
    PAD,
    TASKS,
    VOCAB_SIZE,
    ClassificationData,
    Seq2SeqData,
    encode_sources,
    exact_match,
    format_digits,
    make_split,
    make_task,
    parse_digits,
    sequence_keys,
)
from scratchformer.errors import ConfigError, DataError


def test_vocabulary():
    assert (PAD, BOS, EOS, VOCAB_SIZE) == (10, 11, 12, 13)


@pytest.mark.parametrize("name", ["copy", "reverse", "sort"])
def test_seq2seq_format(name):
    d = make_task(name, 200, np.random.default_rng(0), max_len=12)
    assert isinstance(d, Seq2SeqData) and len(d) == 200
    assert d.src.shape == (200, 12) and d.tgt_in.shape == d.tgt_out.shape == (200, 13)
    lengths = (d.src != PAD).sum(axis=1)
    assert lengths.min() == 1 and lengths.max() == 12  # variable lengths 1..12
    for src, tin, tout, L in zip(d.src, d.tgt_in, d.tgt_out, lengths):
        x = src[:L].tolist()
        assert (src[L:] == PAD).all() and all(0 <= v <= 9 for v in x)
        y = {"copy": x, "reverse": x[::-1], "sort": sorted(x)}[name]
        assert tin.tolist() == [BOS] + y + [PAD] * (12 - L)
        assert tout.tolist() == y + [EOS] + [PAD] * (12 - L)
        assert (tin[1 : L + 1] == tout[:L]).all()  # shifted by one


def test_majority_labels_and_ties():
    d = make_task("majority", 500, np.random.default_rng(0))
    assert isinstance(d, ClassificationData) and d.x.shape == (500, 8) and d.y.shape == (500,)
    assert d.x.min() >= 0 and d.x.max() <= 2
    for x, y in zip(d.x, d.y):
        counts = np.bincount(x, minlength=3)
        assert y == int(np.flatnonzero(counts == counts.max())[0])  # ties -> smallest token
    assert set(np.unique(d.y)) == {0, 1, 2}


@pytest.mark.parametrize("name", TASKS)
def test_deterministic(name):
    a = make_task(name, 50, np.random.default_rng(7))
    b = make_task(name, 50, 7)  # an int seed works too
    for u, v in zip(a, b):
        np.testing.assert_array_equal(u, v)
    c = make_task(name, 50, np.random.default_rng(8))
    assert any(not np.array_equal(u, v) for u, v in zip(a, c))
    tr1, te1 = make_split(name, 100, 40, seed=3)
    tr2, te2 = make_split(name, 100, 40, seed=3)
    for u, v in zip(tr1 + te1, tr2 + te2):
        np.testing.assert_array_equal(u, v)


@pytest.mark.parametrize("name,n_test", [("copy", 1000), ("reverse", 1000), ("majority", 400)])
def test_split_disjoint_and_covers_short_lengths(name, n_test):
    train, test = make_split(name, 5000, n_test, seed=0)
    test_keys = sequence_keys(test)
    assert len(test_keys) == n_test  # held-out examples are distinct
    assert not test_keys & sequence_keys(train)
    if name != "majority":
        train_lengths = set(((train.src != PAD).sum(axis=1)).tolist())
        test_lengths = set(((test.src != PAD).sum(axis=1)).tolist())
        assert train_lengths == test_lengths == set(range(1, 13))


def test_parse_and_format():
    np.testing.assert_array_equal(parse_digits("3 1 4 1 5"), [3, 1, 4, 1, 5])
    np.testing.assert_array_equal(parse_digits("  7\t0 "), [7, 0])
    assert format_digits([3, 1, 4, EOS, 9]) == "3 1 4"
    assert format_digits([BOS, 2, PAD]) == "2"
    for bad in ["", "1 2 x", "12 3", "1,2", "-1"]:
        with pytest.raises(DataError):
            parse_digits(bad)
    with pytest.raises(DataError):
        format_digits([1, 42])
    src = encode_sources(["1 2 3", "4"])
    np.testing.assert_array_equal(src, [[1, 2, 3], [4, PAD, PAD]])
    assert encode_sources(["5"], max_len=4).shape == (1, 4)
    with pytest.raises(DataError):
        encode_sources(["1 2 3"], max_len=2)


def test_exact_match():
    tout = np.array([[1, 2, EOS, PAD], [3, EOS, PAD, PAD]])
    pred = np.array([[1, 2, EOS, PAD], [3, 3, EOS, PAD]])
    np.testing.assert_array_equal(exact_match(pred, tout), [True, False])
    np.testing.assert_array_equal(exact_match(np.array([[1, 2], [3, EOS]]), tout), [False, True])


def test_errors():
    with pytest.raises(ConfigError):
        make_task("nope", 3, 0)
    with pytest.raises(ConfigError):
        make_task("copy", 3, 0, max_len=0)
