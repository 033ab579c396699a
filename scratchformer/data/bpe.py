"""Byte-level BPE tokenizer (GPT-2's scheme), trained and run by the `tokenizers` library.

Byte-level BPE starts from the 256 byte values, so every text has an encoding (no unknown
characters), and repeatedly merges the most frequent adjacent pair into a new token until the
vocabulary has `vocab_size` entries. Text is first cut by GPT-2's regex (words, numbers,
punctuation, spaces kept with the word that follows), and no merge crosses a cut.

`BPETokenizer` has the interface of `CharTokenizer` (`encode`, `decode`, `vocab_size`,
`bos_id` / `eos_id` / `pad_id`, `to_json` / `from_json`), so a run, `sample`, `eval` and `viz`
use either. It is kept in a run directory in the Hugging Face format (the `tokenizer.json`
that `tokenizers.Tokenizer.from_file` and `transformers.PreTrainedTokenizerFast` read), wrapped
as {"type": "bpe", "version": 1, "special": ..., "hf": <that JSON>}.

A Hugging Face model directory's own tokenizer is read by `BPETokenizer.from_hf_dir`:
`tokenizer.json`, or GPT-2's `vocab.json` + `merges.txt`. Such a tokenizer need not be a byte-level
BPE (Llama-2's is SentencePiece's, a character run's export a WordLevel): `BPETokenizer` wraps any
`tokenizers.Tokenizer`, and `hf_form()` of either tokenizer class is the one an export writes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from scratchformer.data.tokenizer import check_saved_json, decodable_ids
from scratchformer.errors import ConfigError, DataError, DTypeError
from scratchformer.limits.estimates import check_bpe_fits
from scratchformer.runfiles import read_optional_jsons, write_atomic

END_OF_TEXT = "<|endoftext|>"  # GPT-2's one special token
# the JSON files of a Hugging Face model directory a tokenizer reads (its special tokens, where generate stops)
HF_CONFIGS = ("tokenizer_config.json", "config.json", "generation_config.json")
MIN_VOCAB = 256 + 1  # the byte alphabet and the end-of-text token
MAX_VOCAB = 1 << 20
CHECKED_CHARS = 1 << 16  # texts longer than this are checked against the memory before they are encoded


def start_with(tok, token: str) -> None:
    """Give a `tokenizers.Tokenizer` a post-processor that puts `token` (a special token of its
    vocabulary) before every text, as a line-format run starts each item: transformers'
    tokenizer(prompt) then begins the prompt where `sample` does."""
    tok.post_processor = _hf().processors.TemplateProcessing(
        single=f"{token} $A", pair=f"{token} $A {token} $B", special_tokens=[(token, tok.token_to_id(token))]
    )


def _hf():
    """The `tokenizers` package, imported on first use (it is a run-time dependency, but
    `import scratchformer` stays fast without it)."""
    import tokenizers

    return tokenizers


class BPETokenizer:
    """Maps text <-> int ids with a byte-level BPE.

    Attributes:
        special: the end-of-text token's text ("<|endoftext|>") or None.
        bos_id, eos_id, pad_id: the end-of-text id for a line-format run (it marks both the start
            and the end of an item, as the character tokenizer's boundary token does), None for
            text runs and Hugging Face tokenizers (whose end token is `end_id`).
        end_id: the id of `special`, or None.
        stop_ids: the ids a generated text ends at (end_id, and for a Hugging Face directory the
            eos_token_id of its configs).
        vocab_size: number of ids (special tokens included).
    """

    def __init__(self, tokenizer, special: str | None = END_OF_TEXT, boundary: bool = False):
        self._tok = tokenizer
        # the largest id + 1: a tokenizer whose added tokens leave a gap has more ids than entries
        self._size = max(tokenizer.get_vocab(with_added_tokens=True).values(), default=-1) + 1
        self.special = special if special is not None and tokenizer.token_to_id(special) is not None else None
        self.end_id = None if self.special is None else tokenizer.token_to_id(self.special)
        if boundary and self.end_id is None:
            raise DataError("a line-format BPE tokenizer needs the end-of-text token in its vocabulary")
        self.boundary = boundary
        self.bos_id = self.eos_id = self.pad_id = self.end_id if boundary else None
        self.stop_ids: tuple[int, ...] = () if self.end_id is None else (self.end_id,)

    # -- building ------------------------------------------------------------------------------
    @classmethod
    def train(cls, texts: Iterable[str], vocab_size: int, boundary: bool = False) -> BPETokenizer:
        """Learn merges from `texts` (an iterable of str: lines, or one whole text) until the
        vocabulary holds `vocab_size` ids: the 256 bytes, "<|endoftext|>" and the merges.
        Deterministic: the same texts give the same tokenizer."""
        if (
            not isinstance(vocab_size, int)
            or isinstance(vocab_size, bool)
            or not MIN_VOCAB <= vocab_size <= MAX_VOCAB
        ):
            raise ConfigError(
                f"--vocab-size must be an integer from {MIN_VOCAB} (the 256 bytes and "
                f"{END_OF_TEXT}) to {MAX_VOCAB:,}, got {vocab_size!r}"
            )
        if isinstance(texts, str) or not isinstance(texts, Iterable):
            raise DTypeError(
                f"texts must be a list of str (lines, or [one whole text]), got {type(texts).__name__}"
            )
        listed = isinstance(texts, (list, tuple))
        if isinstance(texts, np.ndarray) or (listed and not all(isinstance(t, str) for t in texts)):
            raise DTypeError("texts must be a list of str (lines, or [one whole text])")
        if isinstance(texts, (list, tuple)):  # the library aborts the process when memory runs out
            size = sum(len(t.encode("utf-8", "surrogatepass")) for t in texts if isinstance(t, str))
            check_bpe_fits(
                size,
                "the training text",
                "give --data a smaller file (or train without --tokenizer bpe)",
                training=True,
            )
        hf = _hf()
        tok = hf.Tokenizer(hf.models.BPE())
        tok.pre_tokenizer = hf.pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = hf.decoders.ByteLevel()
        trainer = hf.trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=[END_OF_TEXT],
            initial_alphabet=hf.pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
        tok.train_from_iterator(texts, trainer=trainer)
        return cls(tok, END_OF_TEXT, boundary)

    @classmethod
    def from_hf_dir(cls, path: str | Path) -> BPETokenizer:
        """A Hugging Face model directory's tokenizer, its files and HF_CONFIGS read here: `from_hf_files`."""
        return cls.from_hf_files(path, read_optional_jsons(path, dict.fromkeys(HF_CONFIGS, DataError)))

    @classmethod
    def from_hf_files(cls, path: str | Path, files: dict) -> BPETokenizer:
        """A Hugging Face model directory's tokenizer: `tokenizer.json` if there is one, else
        GPT-2's `vocab.json` + `merges.txt` (read as `GPT2Tokenizer` reads them: the start token
        too where tokenizer_config.json's add_bos_token says so). The end token is the one
        tokenizer_config.json names (eos_token), else "<|endoftext|>", else a Llama-style end
        token among the special tokens; `stop_ids` also holds the eos_token_id of config.json and
        generation_config.json, where transformers' generate stops. `files`: {name: JSON object or
        None} of HF_CONFIGS, which the caller has read (the directory's JSON is read once)."""
        path = Path(path)
        hf = _hf()
        configs = {name: files.get(name) or {} for name in HF_CONFIGS}
        if (path / "tokenizer.json").is_file():
            try:
                tok = hf.Tokenizer.from_file(str(path / "tokenizer.json"))
            except Exception as e:  # the library's own parse error, one line
                raise DataError(
                    f"{path / 'tokenizer.json'} is not a tokenizer the `tokenizers` library reads: "
                    f"{str(e).splitlines()[0]}"
                ) from None
        elif (path / "vocab.json").is_file() and (path / "merges.txt").is_file():
            try:
                model = hf.models.BPE.from_file(str(path / "vocab.json"), str(path / "merges.txt"))
            except Exception as e:
                raise DataError(
                    f"cannot read {path}/vocab.json and merges.txt as a BPE: {str(e).splitlines()[0]}"
                ) from None
            tok = hf.Tokenizer(model)
            tok.pre_tokenizer = hf.pre_tokenizers.ByteLevel(add_prefix_space=False)
            tok.decoder = hf.decoders.ByteLevel()
            if tok.token_to_id(END_OF_TEXT) is not None:
                tok.add_special_tokens([END_OF_TEXT])
            bos = configs["tokenizer_config.json"].get("bos_token")
            bos = bos.get("content") if isinstance(bos, dict) else bos
            if (
                configs["tokenizer_config.json"].get("add_bos_token") is True
                and isinstance(bos, str)
                and tok.token_to_id(bos) is not None
            ):  # as GPT2Tokenizer adds it (with a tokenizer.json, its post-processor says)
                start_with(tok, bos)
        else:
            raise DataError(
                f"{path} holds no tokenizer: it needs tokenizer.json, or vocab.json and merges.txt "
                "(as save_pretrained writes them)"
            )
        return cls.from_hf_tokenizer(tok, configs)

    @classmethod
    def from_hf_tokenizer(cls, tok, configs: dict) -> BPETokenizer:
        """A `tokenizers.Tokenizer` (a Hugging Face directory's, or a transformers tokenizer's
        backend_tokenizer) with its end token and stop ids from `configs` ({name: JSON object} of
        HF_CONFIGS, as `from_hf_files` says)."""
        configs = {name: configs.get(name) or {} for name in HF_CONFIGS}
        named = configs["tokenizer_config.json"].get("eos_token")  # a string, or {"content": ...}
        named = named.get("content") if isinstance(named, dict) else named
        named = named if isinstance(named, str) else None
        added = [t.content for t in tok.get_added_tokens_decoder().values() if t.special]
        candidates = [
            named,
            END_OF_TEXT,
            *(t for t in added if t in ("</s>", "<|end_of_text|>", "<|eot_id|>")),
        ]
        special = next((t for t in candidates if t is not None and tok.token_to_id(t) is not None), None)
        out = cls(tok, special)
        stops = {out.end_id} if out.end_id is not None else set()
        for name in ("config.json", "generation_config.json"):
            eos = configs[name].get("eos_token_id")
            for i in eos if isinstance(eos, list) else [eos]:
                if isinstance(i, int) and not isinstance(i, bool) and 0 <= i < out.vocab_size:
                    stops.add(i)
        out.stop_ids = tuple(sorted(stops))
        return out

    # -- encoding ------------------------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        """Number of ids: the largest id + 1 (the rows a model's embedding needs)."""
        return self._size

    def encode(self, text: str, what: str = "prompt", specials_as_text: bool = True) -> np.ndarray:
        """str -> (n,) int64 ids (no special tokens added). `what` names the text in errors.
        specials_as_text: a special token's text inside `text` ("<|endoftext|>") is encoded as
        text (the data's default); False reads it as that token, as transformers' tokenizer(text)
        does (`encode_prompt`, for a Hugging Face model's prompt)."""
        if not isinstance(text, str):
            raise DataError(f"{what} must be a str, got {type(text).__name__}")
        if len(text) > CHECKED_CHARS:  # the library aborts the process when memory runs out
            check_bpe_fits(len(text.encode("utf-8", "surrogatepass")), what, f"give a shorter {what}")
        # A literal "<|endoftext|>" in a text is text: encoded byte by byte like any other word,
        # so it stays in the decoded text (the end token is only ever put in by id, never read
        # out of the data). `encode_prompt` reads a prompt as transformers' tokenizer(prompt) does.
        before = self._tok.encode_special_tokens
        self._tok.encode_special_tokens = specials_as_text
        try:
            ids = self._tok.encode(text, add_special_tokens=False).ids
        except Exception as e:  # e.g. a lone surrogate, which has no UTF-8 bytes
            raise DataError(f"{what} cannot be encoded: {str(e).splitlines()[0]}") from None
        finally:
            self._tok.encode_special_tokens = before
        return np.asarray(ids, dtype=np.int64)

    def decode(self, ids) -> str:
        """ids (any int sequence/array) -> str; skips special tokens and IGNORE_INDEX (-100)."""
        ids = decodable_ids(ids, self.vocab_size)
        return self._tok.decode(ids.tolist(), skip_special_tokens=True)

    def encode_prompt(self, text: str, what: str = "prompt") -> np.ndarray:
        """str -> (n,) int64 ids of a text to continue: the start tokens the tokenizer's own
        post-processor puts before a text (Llama's <s> or <|begin_of_text|>; none for GPT-2),
        as transformers' tokenizer(text) adds them, then the text's ids. A text that already
        starts with those tokens (written out, such as "<s>Hello") does not get them twice.
        Tokens a post-processor appends (an end token) are left off: the text goes on."""
        ids = self.encode(text, what=what, specials_as_text=False).tolist()
        with_special = self._tok.encode(text, add_special_tokens=True)
        start = []
        for i, seq in zip(with_special.ids, with_special.sequence_ids):
            if seq is not None:  # the first token of the text itself
                break
            start.append(i)
        if start and ids[: len(start)] == start:
            start = []
        return np.asarray(start + ids, dtype=np.int64)

    def decode_continuation(self, prompt_ids, new_ids) -> str:
        """The text of `new_ids` as it reads after `prompt_ids`: the decoded whole minus the
        decoded prompt, as transformers' decode of the whole sequence shows it. Decoding the new
        ids alone loses the space a SentencePiece (Metaspace) decoder strips from a first token
        ("my lord" + "brOL", not "my lord" + " brOL")."""
        prompt_ids = np.asarray(prompt_ids, dtype=np.int64).ravel()
        head = self.decode(prompt_ids)
        whole = self.decode(np.concatenate([prompt_ids, np.asarray(new_ids, dtype=np.int64).ravel()]))
        if whole.startswith(head):
            return whole[len(head) :]
        return self.decode(new_ids)  # a decoder that rewrites the prompt's end: the new ids alone

    def token_texts(self, ids) -> list[str]:
        """Each id's own text, for labels (bytes that are not whole characters show as U+FFFD)."""
        return [self._tok.decode([int(i)], skip_special_tokens=False) for i in np.asarray(ids).ravel()]

    def chars_per_token(self, text: str) -> float:
        """len(text) / number of tokens: converts a loss per token to bits per character."""
        n = len(self.encode(text, what="text"))
        return len(text) / max(n, 1)

    # -- serialisation (plain JSON, no pickle) -----------------------------------------------
    def to_json(self) -> dict:
        return {
            "type": "bpe",
            "version": 1,
            "special": self.special,
            "boundary": self.boundary,
            "hf": json.loads(self._tok.to_str()),
        }

    @classmethod
    def from_json(cls, d: dict) -> BPETokenizer:
        check_saved_json(d, cls, "bpe", "hf", dict, "BPE")
        try:
            tok = _hf().Tokenizer.from_str(json.dumps(d["hf"]))
        except Exception as e:
            raise DataError(f"the BPE tokenizer JSON is damaged: {str(e).splitlines()[0]}") from None
        return cls(tok, d.get("special"), bool(d.get("boundary", False)))

    def hf_form(self) -> BPETokenizer:
        """This tokenizer as a Hugging Face tokenizer.json holds it: the same ids and text and, in
        the line format, a post-processor that puts the end-of-text token before every text, where
        `sample` starts an item (transformers' tokenizer(prompt) then begins where `sample` does)."""
        tok = _hf().Tokenizer.from_str(self._tok.to_str())
        if self.boundary and tok.post_processor is None:
            start_with(tok, self.special)
        form = BPETokenizer(tok, self.special)
        form.stop_ids = self.stop_ids
        return form

    def save_hf(self, path: str | Path) -> None:
        """Write the Hugging Face `tokenizer.json` (what `from_hf_dir` and transformers read)."""
        write_atomic(path, self._tok.to_str().encode("utf-8"))

    def __eq__(self, other) -> bool:
        return isinstance(other, BPETokenizer) and self.to_json() == other.to_json()

    def __repr__(self) -> str:
        return f"BPETokenizer(vocab_size={self.vocab_size}, special={self.special!r})"
