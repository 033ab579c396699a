"""The induction task (Olsson et al. 2022): random tokens, then a random segment repeated.

A sequence of `length` tokens (the model's block_size) is a prefix of random tokens followed by
`repeats` copies of one random segment, every token drawn uniformly from `symbols` symbols. The
segment's length s varies from sequence to sequence (uniform in [length // (2 repeats),
length // repeats]) and the prefix fills the rest (length - repeats * s tokens), so a copy
sits at no fixed distance from its original: only the content says where the previous
occurrence of a token is (with a fixed distance, one layer attending by position alone would
copy it, which is no induction head). The model is a GPT language model reading the whole
sequence:

    x = seq (length,)            y = seq[1:] + [IGNORE_INDEX]   (nothing follows the last token)

The prefix and the first copy are unpredictable (the loss there stays near log(symbols)); every
later token repeats the token s positions back, which a model predicts by finding the previous
occurrence of the current token and reading what followed it: an induction head. `target_masks`
says which targets are which.

The symbols are the characters INDUCTION_SYMBOLS[:symbols] (digits, then A-Z, then a-z), so the
run's tokenizer is a plain `CharTokenizer` and `sample --prompt`, `viz --text` and the lens read
sequences such as "7Q3KQ03KQ0".

Held-out data are disjoint from the training data by construction (`make_induction_split`): the
test set is drawn first from its own seed, the training set then from another, rejecting every
sequence in the test set.
"""

from __future__ import annotations

import numpy as np

from scratchformer.data.tokenizer import CharTokenizer
from scratchformer.errors import ConfigError
from scratchformer.limits.memory import check_fits
from scratchformer.ops.loss import IGNORE_INDEX

INDUCTION_SYMBOLS = (
    "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"  # sorted, as CharTokenizer sorts
)
MIN_SEGMENT = 2  # a segment of one token leaves nothing to copy after the first


def check_induction_sizes(symbols: int, length: int, repeats: int) -> tuple[int, int]:
    """(shortest, longest) segment; ConfigError (one line) for sizes that make no induction task."""
    if not 2 <= symbols <= len(INDUCTION_SYMBOLS):
        raise ConfigError(
            f"--symbols for the induction task must be 2 to {len(INDUCTION_SYMBOLS)}, got {symbols}"
        )
    if repeats < 2:
        raise ConfigError(f"--repeats must be at least 2 (a segment and its repeat), got {repeats}")
    longest = length // repeats
    if longest < MIN_SEGMENT:
        raise ConfigError(
            f"--block-size {length} leaves segments shorter than {MIN_SEGMENT} tokens for "
            f"--repeats {repeats}: give at least {MIN_SEGMENT * repeats}"
        )
    return max(MIN_SEGMENT, length // (2 * repeats)), longest


def induction_tokenizer(symbols: int) -> CharTokenizer:
    """The task's tokenizer: one character per symbol, no special tokens (ids 0..symbols-1)."""
    return CharTokenizer(INDUCTION_SYMBOLS[:symbols], special=None)


def make_induction(n: int, symbols: int, length: int, repeats: int, rng: np.random.Generator) -> np.ndarray:
    """(n, length) int64: a random prefix, then `repeats` copies of a random segment."""
    lo, hi = check_induction_sizes(symbols, length, repeats)
    seqs = rng.integers(0, symbols, size=(n, length)).astype(np.int64)
    seg = rng.integers(lo, hi + 1, size=n)
    for s in np.unique(seg):
        rows = np.flatnonzero(seg == s)
        start = length - repeats * s  # the prefix's length
        block = seqs[np.ix_(rows, np.arange(start, start + s))]
        seqs[np.ix_(rows, np.arange(start, length))] = np.tile(block, (1, repeats))
    return seqs


def segment_lengths(seqs: np.ndarray, repeats: int) -> np.ndarray:
    """(n,) the segment length of each sequence: the shortest s whose last `repeats` copies of
    s tokens agree (a random prefix that happens to extend the pattern is counted as prefix)."""
    n, length = seqs.shape
    found = np.zeros(n, dtype=np.int64)
    for s in range(MIN_SEGMENT, length // repeats + 1):
        tail = seqs[:, length - repeats * s :]
        same = (tail[:, s:] == tail[:, :-s]).all(axis=1) & (found == 0)
        found[same] = s
    return found


def check_split_fits(n_train: int, n_test: int, length: int) -> None:
    """ResourceError (one line) when a split's sequences cannot fit in memory: measured, about
    26 bytes a token (the rows, the draws, the held-out keys); 40 here."""
    check_fits(
        40 * (n_train + n_test) * length,
        f"generating {n_train + n_test:,} induction sequences",
        "--n-train or --n-test",
    )


def make_induction_split(
    n_train: int, n_test: int, symbols: int, length: int, repeats: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """(train (n_train, length), test (n_test, length)), disjoint (see the module docstring)."""
    check_induction_sizes(symbols, length, repeats)
    check_split_fits(n_train, n_test, length)
    test = make_induction(n_test, symbols, length, repeats, np.random.default_rng([seed, 1]))
    held = {row.tobytes() for row in test}
    rng, rows = np.random.default_rng([seed, 0]), []
    while sum(len(r) for r in rows) < n_train:
        draw = make_induction(n_train, symbols, length, repeats, rng)
        rows.append(draw[[row.tobytes() not in held for row in draw]])
    return np.concatenate(rows)[:n_train], test


def inputs_targets(seqs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """seqs (B, T) -> (x (B, T), y (B, T)): y[:, t] = seqs[:, t + 1], the last IGNORE_INDEX."""
    y = np.full_like(seqs, IGNORE_INDEX)
    y[:, :-1] = seqs[:, 1:]
    return seqs, y


def target_masks(seqs: np.ndarray, repeats: int) -> tuple[np.ndarray, np.ndarray]:
    """(first, repeated), bool (B, T) over target positions t (the target is token t + 1):
    `first` where it is in the prefix or the first copy (unpredictable), `repeated` where it is
    in a later copy and is not that copy's first token (its previous occurrence has a token
    before it that the current token matches, so an induction head can find it). The first
    token of each later copy is in neither (nothing in the content says the copy starts); the
    last position has no target."""
    B, T = seqs.shape
    s = segment_lengths(seqs, repeats)[:, None]
    first_copy_end = T - (repeats - 1) * s  # the first position of the second copy
    target = np.arange(T)[None, :] + 1
    repeated = (target > first_copy_end) & (target < T) & ((target - first_copy_end) % s != 0)
    return target < first_copy_end, repeated
