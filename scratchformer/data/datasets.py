"""Datasets: one item per line (makemore) or one long text (nanoGPT), and `load_dataset`.

A data set is a bundled name or a path, read once (`read_data` -> `DataFile`: its sha256, text
and guessed format from one read); `load_dataset` takes that DataFile, or a path it reads itself.
The bundled data sets ship inside the package (sources and licenses: data/README.md):

    resolve_data("names")        -> .../scratchformer/data/names.txt            (makemore)
    resolve_data("shakespeare")  -> .../scratchformer/data/tinyshakespeare.txt  (char-rnn, nanoGPT)
    resolve_data("my.txt")       -> Path("my.txt"), if it is a readable file
    bundled_name("shakespeare")  -> "shakespeare"; bundled_name("my.txt") -> None

A bundled name wins over a file of the same name in the current directory; write ./names
to mean that file.

Both datasets give int64 batches `(x, y)` of shape (B, T): `y[b, t]` is the token that follows
`x[b, :t+1]`. Padded target positions hold IGNORE_INDEX (-100) and must be skipped by the loss.
"""

from __future__ import annotations

import hashlib
import os
import statistics
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from importlib import resources
from pathlib import Path

import numpy as np

from scratchformer.checks import as_array, check_int_in_range, check_positive_int
from scratchformer.data.bpe import BPETokenizer
from scratchformer.data.tokenizer import IGNORE_INDEX, CharTokenizer
from scratchformer.errors import ConfigError, DataError, DTypeError, RunFileError
from scratchformer.limits.estimates import check_text_fits
from scratchformer.limits.memory import check_fits
from scratchformer.runfiles import read_regular_file

MAX_DATA_BYTES = 1 << 40  # a text file is refused by its memory estimate long before (check_text_fits)

DEFAULT_TEXT_BLOCK_SIZE = 128
# The one default seed (nanoGPT's): initial weights, batches, dropout and the split of a lines
# file all start from it unless told otherwise. `scratchformer.training.jobs` re-exports it.
DEFAULT_SEED = 1337
FORMATS = ("lines", "text")  # how a data file is read: one item per line, or continuous text
# How text becomes ids: one id per character (the vocabulary is the file's characters), or a
# byte-level BPE trained on the training split. Name -> class: the CLI's --tokenizer choices,
# config.json's data.tokenizer and tokenizer.json's "type" all read this table.
TOKENIZER_CLASSES = {"char": CharTokenizer, "bpe": BPETokenizer}
TOKENIZERS = tuple(TOKENIZER_CLASSES)
DEFAULT_BPE_VOCAB = 512  # --vocab-size when --tokenizer bpe is given without it
MAX_LINE_CHARS = 1000  # a "lines" data set is names and short items; 1,000 chars is generous


def tokenizer_from_json(d: dict) -> CharTokenizer | BPETokenizer:
    """A tokenizer.json's content -> its tokenizer, by its "type"."""
    cls = TOKENIZER_CLASSES.get(d.get("type") if isinstance(d, dict) else None)
    if cls is None:
        raise DataError(
            f"unknown tokenizer type {d.get('type') if isinstance(d, dict) else d!r}: "
            f"this version reads {list(TOKENIZERS)}"
        )
    return cls.from_json(d)


class LineDataset:
    """Each line is one item, framed makemore style (B = boundary token, id 0):

        line "emma", block_size 6:   x = [B, e, m, m, a, 0]
                                     y = [e, m, m, a, B, -100]

    x is padded with 0 (the boundary id; causal attention never lets real positions see it)
    and y with IGNORE_INDEX (ignored by the loss). Rows are precomputed: x, y are (N, block_size) int64.
    """

    def __init__(
        self, lines: list[str], tokenizer: CharTokenizer, block_size: int | None = None, source: str = "lines"
    ):
        if tokenizer.bos_id is None:
            raise DataError("LineDataset needs a tokenizer with a boundary token (special='<eot>')")
        self.lines = list(lines)
        self.tokenizer = tokenizer
        encoded = [tokenizer.encode(line, what=f"item {i} of {source}") for i, line in enumerate(self.lines)]
        max_len = max((len(ids) for ids in encoded), default=0)
        self.block_size = max_len + 1 if block_size is None else int(block_size)
        if self.block_size < max_len + 1:
            raise DataError(
                f"block_size={self.block_size} is too small for the longest line in {source} "
                f"({max_len} {'characters' if isinstance(tokenizer, CharTokenizer) else 'tokens'}): "
                f"use block_size >= {max_len + 1}"
            )
        # characters the targets cover: each line and the end that follows it (the newline of
        # the file), so a character run scores exactly one target per character
        self.chars = sum(len(line) + 1 for line in self.lines)
        n, T = len(self.lines), self.block_size
        self.x = np.zeros((n, T), dtype=np.int64)
        self.y = np.full((n, T), IGNORE_INDEX, dtype=np.int64)
        for i, ids in enumerate(encoded):
            L = len(ids)
            self.x[i, 0] = tokenizer.bos_id
            self.x[i, 1 : L + 1] = ids
            self.y[i, :L] = ids
            self.y[i, L] = tokenizer.eos_id

    @classmethod
    def from_lines(
        cls, lines: Iterable[str], tokenizer: CharTokenizer | None = None, block_size: int | None = None
    ) -> LineDataset:
        """Strip lines, drop empty ones; build a line tokenizer from them when none is given."""
        lines = [s.strip() for s in lines]
        lines = [s for s in lines if s]
        if tokenizer is None:
            tokenizer = CharTokenizer.from_text(lines)
        return cls(lines, tokenizer, block_size)

    def __len__(self) -> int:
        return len(self.lines)

    @property
    def n_targets(self) -> int:
        """Target tokens of the whole split: each line's tokens and its end token."""
        return int((self.y != IGNORE_INDEX).sum())

    def batch(self, rng: np.random.Generator, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
        """Random items (with replacement): x, y of shape (batch_size, T), int64, where
        T <= block_size is the longest item in the batch (see `_trim`)."""
        if len(self) == 0:
            raise DataError("cannot sample a batch from an empty dataset split")
        idx = rng.integers(0, len(self), size=batch_size)
        return _trim(self.x[idx], self.y[idx])

    def all_batches(self, batch_size: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Every item once, in order; the last batch may be smaller. Trimmed as `batch`."""
        for i in range(0, len(self), batch_size):
            yield _trim(self.x[i : i + batch_size], self.y[i : i + batch_size])


def _trim(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Drop the trailing columns where every target is padding. Exact: with causal attention
    those positions never influence earlier ones, and the loss ignores them. Names average
    7 tokens in a 16-token block, so this roughly halves the work of a step."""
    real = (y != IGNORE_INDEX).any(axis=0)
    T = int(np.flatnonzero(real)[-1]) + 1 if real.any() else 1
    return x[:, :T], y[:, :T]


class TextDataset:
    """One long token stream; items are windows of `block_size` tokens (nanoGPT style).

    `batch` draws random windows: x = ids[i : i+T], y = ids[i+1 : i+1+T].
    `all_batches` walks non-overlapping windows from the start so every target position
    1..N-1 is scored exactly once; the last, partial window is kept and padded (x with 0,
    y with IGNORE_INDEX), so nothing is dropped.
    """

    def __init__(
        self,
        ids: np.ndarray,
        tokenizer: CharTokenizer | BPETokenizer,
        block_size: int,
        source: str = "text",
        chars: int | None = None,
    ):
        """chars: the characters the targets cover (the text less its first token's), for bits
        per character; default one per target (a character tokenizer's stream)."""
        ids = as_array(ids, "ids")
        if ids.ndim != 1 or (ids.size and not np.issubdtype(ids.dtype, np.integer)):
            raise DataError(
                f"ids must be a 1-D array of integer token ids, got {ids.dtype} of shape {ids.shape}"
            )
        check_positive_int("block_size", block_size)
        if chars is not None:
            check_int_in_range("chars", chars, 0, 2**63)
        self.ids = np.asarray(ids, dtype=np.int64)
        self.tokenizer = tokenizer
        self.chars = len(self.ids) - 1 if chars is None else int(chars)
        self.block_size = int(block_size)
        if self.block_size < 1:
            raise ConfigError(f"block_size must be >= 1, got {block_size}")
        if len(self.ids) < self.block_size + 1:
            raise DataError(
                f"{source} has {len(self.ids)} tokens, too few for block_size={self.block_size} "
                f"(needs at least {self.block_size + 1}): use a smaller block_size or a longer text"
            )

    def __len__(self) -> int:
        """Number of target positions (tokens that have a predecessor)."""
        return len(self.ids) - 1

    @property
    def n_targets(self) -> int:
        return len(self.ids) - 1

    def batch(self, rng: np.random.Generator, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
        """Random windows: x, y of shape (batch_size, block_size), int64."""
        T = self.block_size
        starts = rng.integers(0, len(self.ids) - T, size=batch_size)  # last start: N-1-T
        idx = starts[:, None] + np.arange(T)  # (B, T) gather indices
        return self.ids[idx], self.ids[idx + 1]

    def all_batches(self, batch_size: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Non-overlapping windows in order, covering every target once (last one padded)."""
        T, n_targets = self.block_size, len(self.ids) - 1
        n_windows = -(-n_targets // T)  # ceil
        # Pad the stream so it splits evenly; padded targets become IGNORE_INDEX.
        x = np.zeros(n_windows * T, dtype=np.int64)
        y = np.full(n_windows * T, IGNORE_INDEX, dtype=np.int64)
        x[:n_targets] = self.ids[:-1]
        y[:n_targets] = self.ids[1:]
        x, y = x.reshape(n_windows, T), y.reshape(n_windows, T)
        for i in range(0, n_windows, batch_size):
            yield x[i : i + batch_size], y[i : i + batch_size]


@dataclass
class Dataset:
    """What `load_dataset` returns: a tokenizer and three splits of the same kind."""

    tokenizer: CharTokenizer | BPETokenizer
    train: LineDataset | TextDataset
    val: LineDataset | TextDataset
    test: LineDataset | TextDataset  # the val split again for text
    format: str  # "lines" | "text"
    block_size: int
    source: str  # file path, or "names.txt (bundled)"
    sha256: str | None = None  # of the file's bytes, read in the same pass as the text


@dataclass(eq=False)
class DataFile:
    """A data file read once: its bytes' sha256 (what config.json's data.sha256 records), then its
    text (decoded on first use: DataError for a non-UTF-8 or empty file) and the format it looks
    like. `read_data` makes one; `load_dataset` takes it in place of a path."""

    path: Path  # the file (a bundled data set's inside the package)
    name: str | None  # the bundled data set's name ("names", "shakespeare"), None for any other file
    source: str  # how messages name it: the path, or "names.txt (bundled)"
    sha256: str
    raw: bytes | None = field(default=None, repr=False)  # dropped once decoded

    @cached_property
    def text(self) -> str:
        """The text, BOM and Windows newlines removed."""
        if self.raw is None:
            raise DataError(
                f"the text of {self.source} was handed over already (release): read the file again"
            )
        try:
            text = self.raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise DataError(
                f"{self.source} is not UTF-8 (bad byte at offset {e.start}): convert it to UTF-8 "
                "(e.g. iconv -t utf-8)"
            ) from None
        text = text.removeprefix("\ufeff").replace("\r\n", "\n")  # BOM / Windows newlines
        if not text.strip():
            raise DataError(f"{self.source} is empty: give a file with some text")
        self.raw = None
        return text

    @cached_property
    def format(self) -> str:
        """ "lines" or "text", as `guess_format` reads the text."""
        return guess_format(self.text)

    def release(self) -> str:
        """The text, handed over once: the file keeps only its name, sha256 and format, so a
        caller still holding it (the CLI, through a training run) holds no copy of the data."""
        text = self.text
        self.__dict__.pop("text")
        return text


# the data sets shipped inside the package, by name (sources and licenses: data/README.md)
DATA_DIR = Path(__file__).resolve().parent
BUNDLED = {
    "names": "names.txt",
    "shakespeare": "tinyshakespeare.txt",
    "tinyshakespeare": "tinyshakespeare.txt",
}
DEFAULT = "names"


def bundled_name(name_or_path: str | os.PathLike | None = None) -> str | None:
    """The bundled data set that `name_or_path` names (None: the default, names), or None for a
    path. Only a str names one: a Path is always a path."""
    if name_or_path is None:
        return DEFAULT
    return name_or_path if isinstance(name_or_path, str) and name_or_path in BUNDLED else None


def resolve_data(name_or_path: str | os.PathLike | None = None) -> Path:
    """The file behind a bundled data set's name, or `name_or_path` as a checked path.
    None means the default data set (names). Raises DataError (one line) for an empty
    name, a missing file or a directory."""
    name = bundled_name(name_or_path)
    if name is not None:
        return DATA_DIR / BUNDLED[name]
    path = Path(name_or_path)
    if str(name_or_path) == "":
        raise DataError(
            f"empty data path: pass a file, or one of the bundled data sets ({', '.join(BUNDLED)})"
        )
    if not path.exists():
        raise DataError(
            f"data file not found: {path}: check the path, or use a bundled data set ({', '.join(BUNDLED)})"
        )
    if not path.is_file():
        raise DataError(f"{path} is not a file: pass a UTF-8 text file")
    return path


def _read_file(path: Path, name: str | None = None) -> DataFile:
    """The bytes of the data file `path` and their sha256, in one read; `name`: the bundled data
    set it is (the default one is read through importlib.resources, as the package ships it).
    DataError for a missing, unreadable or directory path; a file too large to read and
    encode in memory is refused before it is read."""
    if name == DEFAULT:
        data = resources.files("scratchformer.data").joinpath("names.txt").read_bytes()
        return DataFile(path, name, "names.txt (bundled)", hashlib.sha256(data).hexdigest(), data)
    source = str(path)
    if not path.exists():
        raise DataError(f"dataset file not found: {path}: check the path")
    if path.is_dir():
        raise DataError(f"dataset path is a directory: {path}: pass a text file")
    try:
        check_text_fits(path.stat().st_size, source)  # ~10 bytes of memory per byte of text
        data = read_regular_file(path, MAX_DATA_BYTES, hint="give a text file")
    except OSError as e:
        raise DataError(f"cannot read dataset file {path}: {e.strerror}") from None
    except RunFileError as e:  # a pipe or a device (a link to /dev/zero) would never end
        raise DataError(str(e)) from None
    return DataFile(path, name, source, hashlib.sha256(data).hexdigest(), data)


def read_data(name_or_path: str | os.PathLike | None = None) -> DataFile:
    """A data set read once: a bundled name ("names", the default for None; "shakespeare") or a
    path, resolved once by `resolve_data` (one line for an empty name, a missing file or a
    directory; a bundled name wins over a file of that name), then read by `_read_file`."""
    path, name = resolve_data(name_or_path), bundled_name(name_or_path)
    return _read_file(path, name)


def _read_path(path: str | os.PathLike | None) -> DataFile:
    """`load_dataset`'s and `read_text`'s file: None the bundled names, anything else a path
    taken as it is (a file called "names" is that file, not the bundled set)."""
    return read_data(None) if path is None else _read_file(Path(path))


def read_text(path: Path | None) -> tuple[str, str]:
    """(text, source name) of a UTF-8 data file (None: the bundled names.txt), BOM and Windows
    newlines removed; raises DataError for a missing, unreadable, non-UTF-8 or empty file."""
    file = _read_path(path)
    return file.text, file.source


def check_line_lengths(lines, path, limit: int = MAX_LINE_CHARS, option: str = "--format text") -> None:
    """Refuse a lines data set with a line longer than `limit` characters (its block size,
    and every batch, would grow with it), naming the first such line (1-based)."""
    for number, line in enumerate(lines, start=1):
        if len(line) > limit:
            raise DataError(
                f"{path} line {number} has {len(line):,} characters (the limit for a lines file is "
                f"{limit:,}): shorten it, or train on the file with {option}"
            )


def split_lines(text: str) -> list[str]:
    """The lines of a lines file: split on "\\n" only, a trailing "\\r" dropped. Not
    str.splitlines, which also splits on U+2028, NEL, form feed and others, breaking one item
    in two; those stay inside their item."""
    lines = [line.removesuffix("\r") for line in text.split("\n")]
    return lines[:-1] if lines and lines[-1] == "" else lines  # the newline ending the last line


def guess_format(text: str) -> str:
    """ "lines" when the text looks like a list of short items: >= 100 non-empty lines, median
    length <= 40 characters and (almost) no blank lines; else "text". Blank lines mark
    paragraphs or speeches, which lists do not have: tinyshakespeare's lines are short too,
    but one line in six is blank."""
    if not isinstance(text, str):
        raise DTypeError(f"text must be a str, got {type(text).__name__}")
    lines = [s.strip() for s in split_lines(text.strip())]
    items = [s for s in lines if s]
    if len(items) < 100 or statistics.median(len(s) for s in items) > 40:
        return "text"
    return "lines" if len(lines) - len(items) <= 0.01 * len(lines) else "text"


def load_dataset(
    path: str | Path | DataFile | None = None,
    format: str | None = None,
    block_size: int | None = None,
    seed: int = DEFAULT_SEED,
    test_size: int = 1000,
    val_fraction: float = 0.1,
    tokenizer: str | CharTokenizer | BPETokenizer = "char",
    vocab_size: int | None = None,
) -> Dataset:
    """Read a file (default: the bundled names.txt; a DataFile: one already read) and split it.

    Lines: items shuffled with `np.random.default_rng(seed)`, then test = min(test_size,
    int(n * val_fraction)) items (makemore holds out min(1000, 10%)), val = as many,
    train = the rest. block_size defaults to the longest line + 1.
    Text: first (1 - val_fraction) of the characters train, the rest val (nanoGPT); test is
    the val split. block_size defaults to 128.
    tokenizer "char": built from the whole file, so every split encodes. "bpe": a byte-level BPE
    of `vocab_size` ids (default DEFAULT_BPE_VOCAB) trained on the training split only (every
    text has a byte encoding, so nothing of val or test leaks into it); lines are framed by its
    end-of-text token and block_size counts tokens; text splits are cut at the same character
    as for "char" and each encoded once. A BPETokenizer object is used as it is (a run's own,
    or a pretrained checkpoint's): nothing is trained.
    """
    if format is not None and format not in FORMATS:
        raise ConfigError(f"format must be one of {list(FORMATS)} or None (guess), got {format!r}")
    given = tokenizer if isinstance(tokenizer, BPETokenizer) else None
    if given is not None:
        tokenizer = "bpe"
    if tokenizer not in TOKENIZERS:
        raise ConfigError(f"tokenizer must be one of {list(TOKENIZERS)}, got {tokenizer!r}")
    if tokenizer != "bpe" and vocab_size is not None:
        raise ConfigError(
            "--vocab-size applies to --tokenizer bpe only (a character vocabulary is the file's "
            "characters): add --tokenizer bpe or drop --vocab-size"
        )
    bpe_size = DEFAULT_BPE_VOCAB if vocab_size is None else vocab_size
    if not 0.0 < val_fraction < 1.0:
        raise ConfigError(f"val_fraction must be in (0, 1), got {val_fraction}")
    file = path if isinstance(path, DataFile) else _read_path(path)
    fmt = format or file.format
    text, source = file.release(), file.source

    if fmt == "lines":
        lines = [s.strip() for s in split_lines(text)]
        check_line_lengths(lines, source)  # numbered as in the file: before the empty lines are dropped
        lines = [s for s in lines if s]
        if len(lines) < 3:
            raise DataError(
                f"{source} has {len(lines)} non-empty lines; the line format needs at least 3 "
                "(train, val, test): add lines or use format='text'"
            )
        if block_size is not None:  # the rows are precomputed: x and y, (n, block_size) int64 each
            check_fits(
                2 * len(lines) * block_size * 8,
                f"{len(lines):,} lines at --block-size {block_size}",
                "--block-size",
            )
        order = np.random.default_rng(seed).permutation(len(lines))
        lines = [lines[i] for i in order]
        n_test = max(1, min(test_size, int(len(lines) * val_fraction)))
        n_test = min(n_test, (len(lines) - 1) // 2)  # keep at least one training line
        if given is not None:  # items framed by its end-of-text token
            if given.end_id is None:
                raise DataError(
                    "this tokenizer has no end-of-text token to frame items with: read the file "
                    "as --format text"
                )
            tok = given if given.boundary else BPETokenizer(given._tok, given.special, boundary=True)
        elif tokenizer == "bpe":
            tok = BPETokenizer.train(lines[2 * n_test :], bpe_size, boundary=True)
        else:
            tok = CharTokenizer.from_text(lines)
        if block_size is None:  # the longest item in tokens, and its start token
            block_size = max(len(tok.encode(s, what=source)) for s in lines) + 1
        test = LineDataset(lines[:n_test], tok, block_size, f"{source} (test)")
        val = LineDataset(lines[n_test : 2 * n_test], tok, block_size, f"{source} (val)")
        train = LineDataset(lines[2 * n_test :], tok, block_size, f"{source} (train)")
        return Dataset(tok, train, val, test, "lines", block_size, source, file.sha256)

    if block_size is None:
        block_size = DEFAULT_TEXT_BLOCK_SIZE
    n_train = int(len(text) * (1.0 - val_fraction))  # nanoGPT's cut, in characters
    if tokenizer == "bpe":
        tok = given or BPETokenizer.train([text[:n_train]], bpe_size)
        parts = [text[:n_train], text[n_train:]]
        ids = [tok.encode(part, what=source) for part in parts]
        # the first token of each split is never a target
        chars = [len(part) - len(tok.decode(i[:1])) for part, i in zip(parts, ids)]
    else:
        tok = CharTokenizer.from_text(text)
        whole = tok.encode(text, what=source)
        ids, chars = [whole[:n_train], whole[n_train:]], [None, None]
    if min(len(ids[0]), len(ids[1])) < block_size + 1:
        unit = "tokens" if tokenizer == "bpe" else "characters"
        raise DataError(
            f"{source} has {sum(map(len, ids))} {unit}, too short for block_size={block_size}: each "
            f"split (train {1 - val_fraction:.0%}, val {val_fraction:.0%}) needs at least "
            f"{block_size + 1}; use a smaller block_size or a longer file"
        )
    train = TextDataset(ids[0], tok, block_size, f"{source} (train)", chars[0])
    val = TextDataset(ids[1], tok, block_size, f"{source} (val)", chars[1])
    return Dataset(tok, train, val, val, "text", block_size, source, file.sha256)
