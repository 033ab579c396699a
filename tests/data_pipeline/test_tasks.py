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


# -- the task registry: one entry per task, everything else derives ----------------------------------
def test_unknown_task_is_refused_by_name():
    from scratchformer.data.tasks import get_task

    for call in (
        lambda: make_task("shuffle", 3, 0),
        lambda: make_split("shuffle", 3, 3),
        lambda: get_task("shuffle"),
    ):
        with pytest.raises(ConfigError, match=r"unknown task 'shuffle': choose one of \['majority', 'copy'"):
            call()


def test_the_registry_feeds_run_defaults_jobs_and_validation():
    from scratchformer.data.datasets import FORMATS
    from scratchformer.training.jobs import FINETUNE_RUN_KINDS, JOBS, LM_TASKS, RUN_DEFAULTS, build_job
    from scratchformer.training.schema import CONFIG

    # a language model's run kind is its data format; `finetune` starts from its own rows
    assert set(RUN_DEFAULTS) == {*FORMATS, *TASKS, *LM_TASKS, *FINETUNE_RUN_KINDS}
    for name, task in TASKS.items():
        assert task.kind in JOBS and RUN_DEFAULTS[name]["kind"] == task.kind
        assert RUN_DEFAULTS[name]["data"]["max_len"] == task.max_len
        if task.kind == "classifier":
            assert task.n_classes is not None
    job, _ = build_job("majority", data={"n_train": 20, "n_test": 5})
    assert job.model.config.n_classes == TASKS["majority"].n_classes
    # a classifier's config naming a seq2seq task is refused when read (the task decides the kind)
    config = job.config_dict()
    CONFIG.check(config, "")
    with pytest.raises(Exception, match="task must be one of 'majority'"):
        CONFIG.check({**config, "task": "copy"}, "")


def test_a_registered_task_needs_no_other_edit(monkeypatch):
    """A new task is one Task entry: make_task generates it by its rule."""
    from scratchformer.data import tasks

    monkeypatch.setitem(
        tasks.TASKS, "rotate", tasks.Task("rotate", "seq2seq", lambda x: x[1:] + x[:1], max_len=3)
    )
    data = make_task("rotate", 4, 0)
    for src, tgt in zip(data.src, data.tgt_out):
        x = [int(i) for i in src if i != PAD]
        assert format_digits(tgt) == " ".join(map(str, x[1:] + x[:1]))
