"""WordPiece tokenisation for BERT checkpoints, on the `tokenizers` package.

`WordPieceTokenizer.from_dir(path)` loads ``tokenizer.json`` when the directory has one;
otherwise it builds the equivalent of Hugging Face's ``BertTokenizer`` from ``vocab.txt`` with
``do_lower_case`` / ``strip_accents`` / ``tokenize_chinese_chars`` from
``tokenizer_config.json`` (``strip_accents: null`` follows lower-casing, as in BERT).

Batches are truncated to ``max_length`` (``max_seq_length`` of ``sentence_bert_config.json``
when present, else the smaller of ``max_position_embeddings`` and the tokenizer's
``model_max_length``), padded on the right to the longest sequence in the batch, and a second
text of a pair gets token type 1. Arrays are int64.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from scratchformer.errors import CheckpointError, ConfigError, DataError
from scratchformer.runfiles import read_optional_json

__all__ = ["WordPieceTokenizer", "default_max_length"]


def default_max_length(path: str | Path) -> int:
    """max_seq_length from sentence_bert_config.json, else min(max_position_embeddings,
    tokenizer model_max_length), else 512."""
    path = Path(path)
    st = read_optional_json(path / "sentence_bert_config.json") or {}
    if st.get("max_seq_length") is not None:
        return int(st["max_seq_length"])
    candidates = []
    cfg = read_optional_json(path / "config.json") or {}
    if isinstance(cfg.get("max_position_embeddings"), int):
        candidates.append(cfg["max_position_embeddings"])
    tc = read_optional_json(path / "tokenizer_config.json") or {}
    mml = tc.get("model_max_length")
    if isinstance(mml, int) and 0 < mml < 10**9:
        candidates.append(mml)
    return min(candidates) if candidates else 512


def _token(value, default: str) -> str:
    if isinstance(value, dict):  # {"content": "[CLS]", ...} (AddedToken serialisation)
        value = value.get("content")
    return value if isinstance(value, str) else default


class WordPieceTokenizer:
    """BERT WordPiece: texts (or text pairs) -> input_ids, attention_mask, token_type_ids.

    Args:
        tokenizer: a ``tokenizers.Tokenizer`` with BERT's normaliser and post-processor.
        max_length: truncate every encoded sequence (special tokens included) to this length.
    """

    def __init__(self, tokenizer, max_length: int = 512, pad_token: str = "[PAD]"):
        if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 3:
            raise ConfigError(f"max_length={max_length!r} must be an integer >= 3")
        self.tokenizer = tokenizer
        self.max_length = max_length
        pad_id = tokenizer.token_to_id(pad_token)
        if pad_id is None:
            raise ConfigError(f"pad token {pad_token!r} is not in the vocabulary")
        self.pad_token = pad_token
        self.pad_id = pad_id
        tokenizer.no_padding()
        tokenizer.no_truncation()
        tokenizer.enable_truncation(max_length=max_length, strategy="longest_first")
        tokenizer.enable_padding(direction="right", pad_id=pad_id, pad_type_id=0, pad_token=pad_token)

    @classmethod
    def from_dir(cls, path: str | Path, max_length: int | None = None) -> WordPieceTokenizer:
        """Load from a checkpoint directory (``tokenizer.json``, or ``vocab.txt`` +
        ``tokenizer_config.json``)."""
        from tokenizers import Tokenizer

        path = Path(path)
        if not path.is_dir():
            raise CheckpointError(f"tokenizer directory not found: {path}")
        if max_length is None:
            max_length = default_max_length(path)
        tc = read_optional_json(path / "tokenizer_config.json") or {}
        special = read_optional_json(path / "special_tokens_map.json") or {}

        def tok(name: str, default: str) -> str:
            return _token(tc.get(name, special.get(name)), default)

        tj = path / "tokenizer.json"
        if tj.is_file():
            try:
                tokenizer = Tokenizer.from_file(str(tj))
            except Exception as e:
                raise CheckpointError(f"cannot read {tj}: {e}") from None
            return cls(tokenizer, max_length=max_length, pad_token=tok("pad_token", "[PAD]"))
        vocab = path / "vocab.txt"
        if not vocab.is_file():
            raise CheckpointError(f"tokenizer files not found: {tj} or {vocab}")
        from tokenizers.implementations import BertWordPieceTokenizer

        _check_vocab_lines(vocab)
        lowercase = tc.get("do_lower_case", True)
        strip_accents = tc.get("strip_accents")  # None: follow lowercase
        chinese = tc.get("tokenize_chinese_chars", True)
        if not isinstance(lowercase, bool):
            raise ConfigError(f"do_lower_case={lowercase!r} in tokenizer_config.json must be true/false")
        if strip_accents is not None and not isinstance(strip_accents, bool):
            raise ConfigError(
                f"strip_accents={strip_accents!r} in tokenizer_config.json must be true/false/null"
            )
        try:
            wp = BertWordPieceTokenizer(
                str(vocab),
                unk_token=tok("unk_token", "[UNK]"),
                sep_token=tok("sep_token", "[SEP]"),
                cls_token=tok("cls_token", "[CLS]"),
                pad_token=tok("pad_token", "[PAD]"),
                mask_token=tok("mask_token", "[MASK]"),
                clean_text=True,
                handle_chinese_chars=bool(chinese),
                strip_accents=strip_accents,
                lowercase=lowercase,
                wordpieces_prefix="##",
            )
        except Exception as e:
            raise CheckpointError(f"cannot build a WordPiece tokenizer from {vocab}: {e}") from None
        # the implementation wrapper keeps the real Tokenizer in ._tokenizer
        return cls(wp._tokenizer, max_length=max_length, pad_token=tok("pad_token", "[PAD]"))

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size(with_added_tokens=True)

    def tokenize(self, text: str) -> list[str]:
        """The WordPiece tokens of one text, with [CLS]/[SEP] (for inspection)."""
        enc = self.tokenizer.encode(self._check_text(text, "text"))
        return enc.tokens

    def count_tokens(self, text: str) -> int:
        """How many tokens (with [CLS]/[SEP]) the text has before truncation to max_length."""
        self.tokenizer.no_truncation()
        try:
            return len(self.tokenizer.encode(self._check_text(text, "text")).ids)
        finally:
            self.tokenizer.enable_truncation(max_length=self.max_length, strategy="longest_first")

    @staticmethod
    def _check_text(t, what: str) -> str:
        if not isinstance(t, str):
            raise DataError(f"{what} must be a string, got {type(t).__name__}")
        try:
            t.encode("utf-8")
        except UnicodeEncodeError as e:  # a lone surrogate: what Python makes of invalid UTF-8 bytes in argv
            raise DataError(
                f"{what} is not valid Unicode text (a lone surrogate {t[e.start]!r} at character "
                f"{e.start}: was it invalid UTF-8?)"
            ) from None
        return t

    def encode(
        self, texts: str | Sequence[str], text_pairs: Sequence[str] | None = None
    ) -> dict[str, np.ndarray]:
        """Encode a batch; returns ``input_ids``, ``attention_mask``, ``token_type_ids``,
        each (n, T) int64, T = the longest encoded sequence (<= max_length)."""
        if isinstance(texts, str):
            texts = [texts]
            if isinstance(text_pairs, str):
                text_pairs = [text_pairs]
        texts = [self._check_text(t, f"texts[{i}]") for i, t in enumerate(texts)]
        if text_pairs is not None:
            if isinstance(text_pairs, str) or len(text_pairs) != len(texts):
                raise DataError(
                    f"text_pairs must be a list as long as texts ({len(texts)}), got "
                    f"{'a string' if isinstance(text_pairs, str) else len(text_pairs)}"
                )
            pairs = [self._check_text(t, f"text_pairs[{i}]") for i, t in enumerate(text_pairs)]
            inputs = list(zip(texts, pairs))
        else:
            inputs = texts
        if not inputs:
            empty = np.zeros((0, 0), dtype=np.int64)
            return {"input_ids": empty, "attention_mask": empty.copy(), "token_type_ids": empty.copy()}
        encs = self.tokenizer.encode_batch(inputs, add_special_tokens=True)
        return {
            "input_ids": np.array([e.ids for e in encs], dtype=np.int64),
            "attention_mask": np.array([e.attention_mask for e in encs], dtype=np.int64),
            "token_type_ids": np.array([e.type_ids for e in encs], dtype=np.int64),
        }

    __call__ = encode

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        return self.tokenizer.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)


MAX_VOCAB_BYTES = 64 * 2**20  # bert-base's vocab.txt is 232 KB


def _check_vocab_lines(vocab: Path) -> None:
    """vocab.txt lists each token once, one a line (its line number is its id): a repeated
    token would give the later line's id to both, ids past the model's vocabulary. One
    CheckpointError line naming both lines."""
    from scratchformer.runfiles import read_regular_file

    data = read_regular_file(vocab, MAX_VOCAB_BYTES, hint="restore the model's vocab.txt")
    try:
        lines = data.decode("utf-8").split("\n")
    except UnicodeDecodeError as e:
        raise CheckpointError(
            f"{vocab}: not UTF-8 text (byte {e.start}); restore the model's vocab.txt"
        ) from None
    if lines and lines[-1] == "":
        lines.pop()
    first: dict[str, int] = {}
    for number, line in enumerate(lines, start=1):
        token = line.rstrip()  # as the tokenizers library reads it
        if token in first:
            raise CheckpointError(
                f"{vocab} line {number} repeats the token {token!r} of line {first[token]}: each "
                "token must be listed once (its line is its id); delete the repeated line"
            )
        first[token] = number
