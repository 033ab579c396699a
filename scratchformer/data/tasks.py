"""Toy tasks for the encoder classifier and the encoder-decoder model.

Vocabulary (shared by source and target): digits 0-9 are ids 0..9, then

    PAD = 10    padding (inputs); padded *targets* are PAD too and the loss ignores them
    BOS = 11    first decoder input
    EOS = 12    last decoder target
    VOCAB_SIZE = 13

Sequence-to-sequence tasks (lengths uniform in min_len..max_len, digits uniform in 0-9):
    copy     y = x
    reverse  y = x[::-1]
    sort     y = sorted(x)            (minGPT's demo task, here on variable-length digits)
`make_task(name, n, rng, max_len)` -> Seq2SeqData(src (n, max_len), tgt_in (n, max_len + 1),
tgt_out (n, max_len + 1)): src = x + PAD..., tgt_in = BOS + y + PAD..., tgt_out = y + EOS + PAD...

Classification task:
    majority  8 tokens over {0, 1, 2}; label = the most frequent token, ties broken as
              numpy.argmax(numpy.bincount(x)) does (the smallest token).
`make_task("majority", n, rng)` -> ClassificationData(x (n, 8), y (n,)).

Modular addition (Nanda et al. 2023, "Progress measures for grokking"):
    modadd    inputs `a b =` with a, b in 0..p-1 (ids a, b) and '=' the id p; the answer
              (a + b) mod p, read at the last position (a GPT over p + 1 tokens).
`make_task("modadd", n, rng)` -> ClassificationData(x (n, 3), y (n,)) for p = MODADD_P; the run
itself uses `modadd_split(p, train_fraction, seed)`: all p^2 pairs, a seeded fraction of them
for training and the rest held out (the paper's split).

`TASKS` is the registry (name -> `Task`: the model kind that learns it, its rule, symbols,
length and classes); `get_task(name)` refuses a name it does not hold. Every generator checks
the memory its data will take before it draws any (`limits.check_fits`: one line naming the
option to lower, never a MemoryError).

Held-out data (`make_split`) are disjoint from the training data by construction: the test
set is drawn first from its own seed, without repeats and taking at most half of the possible
sequences of any length (so short lengths, where only 10 or 100 sequences exist, still appear
in training); the training set is then drawn from another seed, rejecting every sequence in
the test set.

The model and training settings that reach >= 99% held-out accuracy with
`scratchformer train --task NAME` are in `scratchformer.training.jobs.RUN_DEFAULTS`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from scratchformer.errors import ConfigError, DataError
from scratchformer.limits.memory import check_fits

PAD, BOS, EOS = 10, 11, 12
VOCAB_SIZE = 13
MODADD_P = 113  # the paper's modulus (the default of `train --task modadd`)


@dataclass(frozen=True)
class Task:
    """One toy task: everything the data, the model and the run need to know about it.

    kind: the model that learns it: "classifier" (an encoder and a class) or "seq2seq" (an
        encoder-decoder and an output sequence); the job of that kind trains it.
    rule: the answer for one input sequence (a list of ints): the class (classifier) or the
        output sequence, as long as the input (seq2seq).
    symbols: inputs are digits 0..symbols-1.
    max_len: the longest input by default; `fixed_length`: every input has exactly max_len.
    n_classes: the classifier's number of classes (None for seq2seq).
    """

    name: str
    kind: str
    rule: Callable[[list[int]], object]
    symbols: int = 10
    max_len: int = 12
    fixed_length: bool = False
    n_classes: int | None = None


def majority_label(seq) -> int:
    """The majority task's label of one sequence: its most frequent token, ties to the smallest."""
    return int(np.argmax(np.bincount(np.asarray(seq))))


# The task registry: name -> Task. A new task is one entry here; `scratchformer train --task`,
# the run defaults (training/jobs.py RUN_DEFAULTS, by the task's kind) and checkpoint validation
# follow from it.
TASKS: dict[str, Task] = {
    t.name: t
    for t in (
        Task("majority", "classifier", majority_label, symbols=3, max_len=8, fixed_length=True, n_classes=3),
        Task("copy", "seq2seq", list),
        Task("reverse", "seq2seq", lambda x: x[::-1]),
        Task("sort", "seq2seq", sorted),  # minGPT's demo task, here on variable-length digits
        # Nanda et al.'s modular addition: a GPT reads `a b =` and answers (a + b) mod p at '='
        Task(
            "modadd",
            "modadd",
            lambda x: (x[0] + x[1]) % MODADD_P,
            symbols=MODADD_P,
            max_len=3,
            fixed_length=True,
            n_classes=MODADD_P,
        ),
    )
}


def get_task(name: str) -> Task:
    """The registered task `name`; an unknown name is a ConfigError listing the known ones."""
    if not isinstance(name, str) or name not in TASKS:
        raise ConfigError(f"unknown task {name!r}: choose one of {list(TASKS)}")
    return TASKS[name]


class Seq2SeqData(NamedTuple):
    src: np.ndarray  # (n, max_len) int64, PAD-padded
    tgt_in: np.ndarray  # (n, max_len + 1): BOS + y, PAD-padded
    tgt_out: np.ndarray  # (n, max_len + 1): y + EOS, PAD-padded (ignored by the loss)

    def __len__(self) -> int:  # number of examples (not the tuple's 3)
        return self.src.shape[0]

    def subset(self, idx) -> Seq2SeqData:
        return Seq2SeqData(self.src[idx], self.tgt_in[idx], self.tgt_out[idx])


class ClassificationData(NamedTuple):
    x: np.ndarray  # (n, T) int64
    y: np.ndarray  # (n,) int64

    def __len__(self) -> int:
        return self.x.shape[0]

    def subset(self, idx) -> ClassificationData:
        return ClassificationData(self.x[idx], self.y[idx])


# -- generators ----------------------------------------------------------------------------------
def _key(seq: np.ndarray) -> bytes:
    return np.asarray(seq, dtype=np.int16).tobytes()  # int16: modadd's ids reach p


def _draw_sequences(
    task: Task,
    n: int,
    rng: np.random.Generator,
    max_len: int,
    min_len: int,
    exclude: set[bytes] | None,
    unique: bool,
) -> list[np.ndarray]:
    """n raw sequences; vectorised draws, then a cheap Python filter for exclusion/uniqueness."""
    seen: set[bytes] = set()
    per_len: dict[int, int] = {}
    out: list[np.ndarray] = []
    tries = 0
    while len(out) < n:
        tries += 1
        if tries > 1000:
            raise DataError(f"could not draw {n} distinct {task.name} sequences of length <= {max_len}")
        m = max(2 * (n - len(out)), 64)
        if task.fixed_length:
            lengths = np.full(m, max_len)
        else:
            lengths = rng.integers(min_len, max_len + 1, size=m)
        digits = rng.integers(0, task.symbols, size=(m, max_len))
        for L, row in zip(lengths, digits):
            seq = row[:L]
            key = _key(seq)
            if exclude is not None and key in exclude:
                continue
            if unique:
                if key in seen:
                    continue
                space = task.symbols ** int(L)
                if per_len.get(int(L), 0) >= space // 2:  # leave half of each length to training
                    continue
                seen.add(key)
                per_len[int(L)] = per_len.get(int(L), 0) + 1
            out.append(seq)
            if len(out) == n:
                break
    return out


def check_task_fits(name: str, n: int, max_len: int) -> None:
    """ResourceError (one line) when `n` sequences of task `name` up to `max_len` long cannot fit
    in memory: measured, about 620 bytes a copy sequence of 12 (the draws, the keys, the rows)."""
    check_fits(
        n * (32 * max_len + 400), f"generating {n:,} {name} sequences", "--n-train, --n-test or --max-len"
    )


def make_task(
    name: str,
    n: int,
    rng: np.random.Generator | int,
    max_len: int | None = None,
    min_len: int = 1,
    exclude: set[bytes] | None = None,
    unique: bool = False,
):
    """n examples of task `name`, deterministic given `rng` (a Generator or an int seed).

    max_len: longest sequence (default: the task's; a fixed-length task's only length).
    exclude: keys (`sequence_keys`) of sequences never to produce. unique: no repeats, and at
    most half the sequences of any length (used for held-out sets).
    """
    task = get_task(name)
    if isinstance(rng, (int, np.integer)):
        rng = np.random.default_rng(int(rng))
    if max_len is None:
        max_len = task.max_len
    if n < 0 or max_len < 1 or not 1 <= min_len <= max_len:
        raise ConfigError(
            f"make_task needs n >= 0 and 1 <= min_len <= max_len, got n={n}, "
            f"min_len={min_len}, max_len={max_len}"
        )
    check_task_fits(name, n, max_len)
    if task.kind == "modadd":
        return _modadd_draw(task, n, rng, exclude, unique)
    seqs = _draw_sequences(task, n, rng, max_len, min_len, exclude, unique)
    if task.kind == "classifier":
        x = np.array(seqs, dtype=np.int64).reshape(n, max_len)
        y = np.array([task.rule(s.tolist()) for s in seqs], dtype=np.int64)
        return ClassificationData(x, y)
    src = np.full((n, max_len), PAD, dtype=np.int64)
    tgt_in = np.full((n, max_len + 1), PAD, dtype=np.int64)
    tgt_out = np.full((n, max_len + 1), PAD, dtype=np.int64)
    for i, s in enumerate(seqs):
        L = len(s)
        y = list(task.rule(s.tolist()))
        src[i, :L] = s
        tgt_in[i, 0] = BOS
        tgt_in[i, 1 : L + 1] = y
        tgt_out[i, :L] = y
        tgt_out[i, L] = EOS
    return Seq2SeqData(src, tgt_in, tgt_out)


def _modadd_draw(
    task: Task, n: int, rng: np.random.Generator, exclude: set[bytes] | None, unique: bool
) -> ClassificationData:
    """n rows `a b =` (the '=' id is p) drawn uniformly, and their answers (a + b) mod p."""
    p = task.symbols
    if unique and n > p * p // 2:
        raise DataError(f"at most {p * p // 2} distinct held-out modadd pairs exist (half of {p}^2)")
    rows, seen = [], set()
    while len(rows) < n:
        for a, b in rng.integers(0, p, size=(max(2 * (n - len(rows)), 64), 2)):
            row = np.array([a, b, p], dtype=np.int64)
            key = _key(row)
            if (exclude is not None and key in exclude) or (unique and key in seen):
                continue
            seen.add(key)
            rows.append(row)
            if len(rows) == n:
                break
    x = np.array(rows, dtype=np.int64).reshape(n, 3)
    return ClassificationData(x, (x[:, 0] + x[:, 1]) % p)


def modadd_split(p: int, train_fraction: float, seed: int) -> tuple[ClassificationData, ClassificationData]:
    """(train, test) of modular addition mod p: every pair (a, b) once, rows `a b =` (x (n, 3),
    '=' is the id p) and answers (a + b) mod p (y (n,)); the pairs are shuffled by
    default_rng([seed, 2]) and the first round(train_fraction * p^2) train, the rest are held out."""
    if not isinstance(p, (int, np.integer)) or p < 3 or p % 2 == 0:
        raise ConfigError(
            f"--modulus must be an odd integer >= 3 (the Fourier measures pair a cosine and a sine "
            f"per frequency), got {p!r}"
        )
    if not 0 < train_fraction < 1:
        raise ConfigError(f"--train-fraction must be in (0, 1), got {train_fraction!r}")
    # measured: 96 bytes a pair (the pairs, their shuffle, the two splits)
    check_fits(128 * p * p, f"the {p * p:,} pairs of modular addition mod {p}", "--modulus")
    a, b = np.divmod(np.arange(p * p), p)
    x = np.stack([a, b, np.full(p * p, p)], axis=1).astype(np.int64)
    order = np.random.default_rng([seed, 2]).permutation(p * p)
    n_train = int(round(train_fraction * p * p))
    if not 0 < n_train < p * p:
        raise ConfigError(
            f"--train-fraction {train_fraction} leaves no training or no held-out pair of {p * p}"
        )
    data = ClassificationData(x[order], (x[order, 0] + x[order, 1]) % p)
    return data.subset(slice(0, n_train)), data.subset(slice(n_train, None))


def sequence_keys(data) -> set[bytes]:
    """Keys of the input sequences of a dataset (for `make_task(exclude=...)`)."""
    if isinstance(data, ClassificationData):
        return {_key(row) for row in data.x}
    return {_key(row[row != PAD]) for row in data.src}


def make_split(
    name: str, n_train: int, n_test: int, seed: int = 0, max_len: int | None = None, min_len: int = 1
):
    """(train, test): the test set is drawn first from default_rng([seed, 1]) (unique, at most
    half of each length's sequences), then the training set from default_rng([seed, 0]),
    rejecting every test sequence."""
    test = make_task(name, n_test, np.random.default_rng([seed, 1]), max_len, min_len, unique=True)
    train = make_task(
        name, n_train, np.random.default_rng([seed, 0]), max_len, min_len, exclude=sequence_keys(test)
    )
    return train, test


# -- text <-> ids ----------------------------------------------------------------------------------
def parse_digits(text: str) -> np.ndarray:
    """'3 1 4 1 5' -> array([3, 1, 4, 1, 5]). Tokens are single digits separated by spaces."""
    if not isinstance(text, str):
        raise DataError(f"expected a string of space-separated digits, got {type(text).__name__}")
    tokens = text.split()
    if not tokens:
        raise DataError("empty input: expected space-separated digits 0-9, e.g. '3 1 4 1 5'")
    bad = [t for t in tokens if len(t) != 1 or t not in "0123456789"]
    if bad:
        raise DataError(f"bad token(s) {bad[:5]}: expected space-separated single digits 0-9")
    return np.array([int(t) for t in tokens], dtype=np.int64)


def format_digits(ids: Iterable[int]) -> str:
    """ids -> '3 1 4 1 5': stops at the first EOS, skips PAD and BOS."""
    out = []
    for i in np.asarray(list(ids) if not isinstance(ids, np.ndarray) else ids).reshape(-1).tolist():
        if i == EOS:
            break
        if i in (PAD, BOS):
            continue
        if not 0 <= i <= 9:
            raise DataError(f"id {i} is not a digit (0-9) or PAD/BOS/EOS")
        out.append(str(i))
    return " ".join(out)


def encode_sources(texts: Iterable[str], max_len: int | None = None) -> np.ndarray:
    """Several '3 1 4' strings -> (n, max_len) PAD-padded source ids."""
    seqs = [parse_digits(t) for t in texts]
    longest = max((len(s) for s in seqs), default=0)
    width = longest if max_len is None else max_len
    if longest > width:
        raise DataError(f"input of length {longest} is longer than max_len={width}")
    src = np.full((len(seqs), width), PAD, dtype=np.int64)
    for i, s in enumerate(seqs):
        src[i, : len(s)] = s
    return src


def exact_match(pred: np.ndarray, tgt_out: np.ndarray) -> np.ndarray:
    """(n,) bool: decoded ids (up to EOS) equal the target (up to EOS)."""
    return np.array([format_digits(p) == format_digits(t) and _has_eos(p, t) for p, t in zip(pred, tgt_out)])


def _has_eos(pred, tgt) -> bool:
    # a prediction that runs past the target without EOS is wrong even if its prefix matches
    n = int(np.argmax(np.asarray(tgt) == EOS))
    return len(pred) > n and int(pred[n]) == EOS
