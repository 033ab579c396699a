"""Character-level tokenizer (makemore / nanoGPT shakespeare_char style).

Two flavours, chosen by `special`:
- line format (makemore): one boundary token at id 0 (written "<eot>") marks both the start
  and the end of an item, like makemore's '.'; characters get ids 1..n in sorted order.
- text format (nanoGPT): no special tokens; characters get ids 0..n-1 in sorted order.

Padded target positions use `IGNORE_INDEX` (-100, from ops/loss.py), which the loss skips, not a pad token.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from scratchformer.checks import check_id_sequence
from scratchformer.errors import DataError, DTypeError, RunFileError
from scratchformer.ops.loss import IGNORE_INDEX
from scratchformer.runfiles import read_json_file, write_atomic

DEFAULT_BOUNDARY = "<eot>"
_AUTO = "auto"


def decodable_ids(ids, vocab_size: int) -> np.ndarray:
    """ids (any int sequence/array) -> (n,) int64 ids to decode: IGNORE_INDEX (-100, a padded
    target) left out; an id outside 0..vocab_size-1 is a DataError naming it."""
    ids = check_id_sequence("ids", ids)
    ids = ids[ids != IGNORE_INDEX]
    bad = ids[(ids < 0) | (ids >= vocab_size)]
    if bad.size:
        raise DataError(
            f"cannot decode ids {sorted(set(bad.tolist()))[:5]}: valid ids are 0..{vocab_size - 1}"
        )
    return ids


def check_saved_json(d, cls, kind: str, field: str, field_type: type, what: str) -> None:
    """`d` must be the JSON `cls.save` writes: {"type": kind, field: a field_type, ...}; else a
    DataError naming the `what` tokenizer it should have been."""
    if not isinstance(d, dict) or d.get("type") != kind or not isinstance(d.get(field), field_type):
        shown = "[...]" if field_type is list else "{...}"
        raise DataError(
            f"not a {what} tokenizer JSON (expected {{'type': {kind!r}, {field!r}: {shown}}}): "
            f"was it saved by {cls.__name__}.save?"
        )


class CharTokenizer:
    """Maps characters <-> int ids.

    Attributes:
        chars: the vocabulary characters, sorted (ids start after the special tokens).
        special: the boundary token's name ("<eot>") or None.
        bos_id, eos_id: 0 for the line format (the same boundary token), None for text.
        pad_id: id used to pad *inputs* (= bos_id for lines, None for text); pad targets
            with IGNORE_INDEX instead.
        vocab_size: number of ids (special tokens included).
    """

    def __init__(self, chars: Iterable[str], special: str | None = None):
        if not isinstance(chars, (str, list, tuple, set, frozenset)):
            raise DTypeError(
                f"CharTokenizer chars must be a str or a list of characters, got {type(chars).__name__}"
            )
        if special is not None and not isinstance(special, str):
            raise DTypeError(f"CharTokenizer special must be a str or None, got {type(special).__name__}")
        chars = list(chars)
        if any(not isinstance(c, str) or len(c) != 1 for c in chars):
            raise DataError("CharTokenizer chars must be single characters")
        if len(set(chars)) != len(chars):
            raise DataError("CharTokenizer chars contain duplicates")
        self.chars = sorted(chars)
        self.special = special
        offset = 1 if special is not None else 0
        self._stoi = {c: i + offset for i, c in enumerate(self.chars)}
        self._itos = np.array(([""] if special is not None else []) + self.chars, dtype=object)
        self.bos_id = self.eos_id = self.pad_id = 0 if special is not None else None
        self._num_special = offset

    @classmethod
    def from_text(cls, text_or_lines: str | Iterable[str], special: str | None = _AUTO) -> CharTokenizer:
        """Build the vocabulary from a text (str) or an iterable of lines.

        special: the boundary token name, or None for none. Default: "<eot>" for lines,
        None for a single str (text format).
        """
        if isinstance(text_or_lines, str):
            chars = set(text_or_lines)
            default = None
        else:
            chars = set().union(*(set(line) for line in text_or_lines))
            default = DEFAULT_BOUNDARY
        return cls(chars, default if special == _AUTO else special)

    @property
    def vocab_size(self) -> int:
        return len(self.chars) + self._num_special

    def encode(self, text: str, what: str = "prompt") -> np.ndarray:
        """str -> (len(text),) int64 ids (no boundary tokens added).

        `what` names the text in the error message ("prompt", "line 12 of names.txt").
        """
        if not isinstance(text, str):
            raise DTypeError(f"{what} must be a str, got {type(text).__name__}")
        try:
            return np.fromiter((self._stoi[c] for c in text), dtype=np.int64, count=len(text))
        except KeyError:
            unknown = sorted(set(text) - self._stoi.keys())
            raise DataError(
                f"{what} contains characters not in the vocabulary: {', '.join(map(repr, unknown))}"
            ) from None

    def decode(self, ids) -> str:
        """ids (any int sequence/array) -> str; skips special tokens and IGNORE_INDEX."""
        ids = decodable_ids(ids, self.vocab_size)
        return "".join(self._itos[ids[ids >= self._num_special]])

    def token_texts(self, ids) -> list[str]:
        """Each id's own text, for labels: its character, or the boundary token's name."""
        ids = np.asarray(ids, dtype=np.int64).ravel()
        return [self.special if i < self._num_special else self._itos[i] for i in ids]

    def hf_form(self):
        """This tokenizer as a Hugging Face tokenizer.json holds it (a `BPETokenizer` wrapping a
        `tokenizers.Tokenizer`): each character one token with its id (a WordLevel model over the
        text split into characters, joined back by the Fuse decoder; a character outside the
        vocabulary is an error, as here) and, in the line format, the boundary token a special
        token put before every text, where `sample` starts an item."""
        import tokenizers

        from scratchformer.data.bpe import BPETokenizer, start_with

        vocab = dict(self._stoi)
        if self.special is not None:
            vocab[self.special] = 0
        unknown = (
            "<unk>" if "<unk>" not in vocab else "<unknown character>"
        )  # absent: an error, never a guess
        tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token=unknown))
        tok.pre_tokenizer = tokenizers.pre_tokenizers.Split(tokenizers.Regex(r"[\s\S]"), behavior="isolated")
        tok.decoder = tokenizers.decoders.Fuse()
        if self.special is not None:
            tok.add_special_tokens([self.special])
            start_with(tok, self.special)
        return BPETokenizer(tok, self.special)

    # -- serialisation (plain JSON, no pickle) -----------------------------------------------
    def to_json(self) -> dict:
        return {"type": "char", "version": 1, "special": self.special, "chars": self.chars}

    @classmethod
    def from_json(cls, d: dict) -> CharTokenizer:
        check_saved_json(d, cls, "char", "chars", list, "character")
        return cls(d["chars"], d.get("special"))

    def save(self, path: str | Path) -> None:
        write_atomic(path, json.dumps(self.to_json(), ensure_ascii=False).encode("utf-8"))

    @classmethod
    def load(cls, path: str | Path) -> CharTokenizer:
        path = Path(path)
        try:
            d = read_json_file(path, hint="re-save the tokenizer")
        except FileNotFoundError:
            raise DataError(f"tokenizer file not found: {path}: check the path") from None
        except RunFileError as e:  # not UTF-8, not JSON, not a regular file
            raise DataError(str(e)) from None
        return cls.from_json(d)

    def __eq__(self, other) -> bool:
        return isinstance(other, CharTokenizer) and self.to_json() == other.to_json()

    def __repr__(self) -> str:
        return f"CharTokenizer(vocab_size={self.vocab_size}, special={self.special!r})"
