"""The induction task (Olsson et al. 2022): random tokens whose second half repeats the first.

A sequence of `length` tokens is `repeats` copies of one segment of length // repeats tokens
drawn uniformly from `vocab` symbols (with repeats=2: its second half repeats the first). The
model is a GPT language model reading the whole sequence:

    x = seq (length,)            y = seq[1:] + [IGNORE_INDEX]   (nothing follows the last token)

The tokens of the first segment are unpredictable (the loss there stays near log(vocab)); every
later token is a copy of the token `segment` positions back, which a model can predict only by
finding the previous occurrence of the current token and reading what followed it: an
induction head. `target_masks` says which targets are which.

The symbols are the characters INDUCTION_SYMBOLS[:vocab] (digits, then A-Z, then a-z), so the
run's tokenizer is a plain `CharTokenizer` and `sample --prompt`, `viz --text` and the lens read
sequences such as "3KQ03KQ0".

Held-out data are disjoint from the training data by construction (`make_induction_split`): the
test set is drawn first from its own seed, the training set then from another, rejecting every
sequence in the test set.
"""

from __future__ import annotations

import numpy as np

from scratchformer.data.tokenizer import CharTokenizer
from scratchformer.errors import ConfigError
from scratchformer.ops.loss import IGNORE_INDEX

INDUCTION_SYMBOLS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"  # sorted, as CharTokenizer sorts
MIN_SEGMENT = 2  # a segment of one token leaves nothing to copy after the first


def check_induction_sizes(vocab: int, length: int, repeats: int) -> int:
    """The segment length; ConfigError (one line) for sizes that make no induction task."""
    if not 2 <= vocab <= len(INDUCTION_SYMBOLS):
        raise ConfigError(f"--symbols for the induction task must be 2 to {len(INDUCTION_SYMBOLS)}, got {vocab}")
    if repeats < 2:
        raise ConfigError(f"--repeats must be at least 2 (a segment and its repeat), got {repeats}")
    if length % repeats or length // repeats < MIN_SEGMENT:
        raise ConfigError(f"--block-size {length} must be a multiple of --repeats {repeats} with segments of at "
                          f"least {MIN_SEGMENT} tokens: try {repeats * max(MIN_SEGMENT, length // repeats)}")
    return length // repeats


def induction_tokenizer(vocab: int) -> CharTokenizer:
    """The task's tokenizer: one character per symbol, no special tokens (ids 0..vocab-1)."""
    return CharTokenizer(INDUCTION_SYMBOLS[:vocab], special=None)


def make_induction(n: int, vocab: int, length: int, repeats: int, rng: np.random.Generator) -> np.ndarray:
    """(n, length) int64: each row `repeats` copies of a random segment."""
    seg = check_induction_sizes(vocab, length, repeats)
    return np.tile(rng.integers(0, vocab, size=(n, seg)), (1, repeats)).astype(np.int64)


def make_induction_split(n_train: int, n_test: int, vocab: int, length: int, repeats: int,
                         seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train (n_train, length), test (n_test, length)), disjoint (see the module docstring)."""
    test = np.unique(make_induction(n_test, vocab, length, repeats, np.random.default_rng([seed, 1])), axis=0)
    held = {row.tobytes() for row in test}
    rng, rows = np.random.default_rng([seed, 0]), []
    while sum(len(r) for r in rows) < n_train:
        draw = make_induction(n_train, vocab, length, repeats, rng)
        rows.append(draw[[row.tobytes() not in held for row in draw]])
    return np.concatenate(rows)[:n_train], test


def inputs_targets(seqs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """seqs (B, T) -> (x (B, T), y (B, T)): y[:, t] = seqs[:, t + 1], the last IGNORE_INDEX."""
    y = np.full_like(seqs, IGNORE_INDEX)
    y[:, :-1] = seqs[:, 1:]
    return seqs, y


def target_masks(length: int, repeats: int) -> tuple[np.ndarray, np.ndarray]:
    """(first, repeated), bool (length,) over target positions: `first` where the target is a
    token of the first segment (unpredictable: t + 1 < segment), `repeated` where it is a copy
    whose previous occurrence has a token before it (t + 1 > segment), so an induction head can
    find it. The target at t = segment - 1 (the first token of the first repeat) is in neither:
    only position, not content, says it starts again; the last position has no target."""
    seg = length // repeats
    t = np.arange(length)
    return t + 1 < seg, (t + 1 > seg) & (t < length - 1)
