"""The sentence-classifier job: a pretrained BERT-family encoder fine-tuned on a labelled CSV
(`scratchformer finetune`). It implements the `scratchformer.training.jobs.Job` protocol, so the
ordinary training loop gives it resume, Ctrl-C, the run lock and best/last checkpoints.

    CSV (text,label) -> WordPiece ids (N, max_length) -> BertClassifier -> logits (N, classes)

The run directory needs nothing of the pretrained directory once training starts:
model.safetensors holds the encoder and the head, config.json the encoder's BertConfig fields,
the label names and max_length (`SentenceClassifierConfig`), tokenizer.json the WordPiece
tokenizer (Hugging Face's format, under {"type": "wordpiece", "hf": ...}).

Splits: "train" and "val" are cut from the training CSV (a seeded `val_fraction`; val picks the
best checkpoint); "test" is the CSV that `eval --data FILE` names. Texts longer than max_length
tokens are truncated, with one note giving the count.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from scratchformer.checks import check_text
from scratchformer.data.labelled import read_labelled_csv
from scratchformer.errors import CheckpointError, ConfigError, DataError
from scratchformer.interop.bert import BertEncoder, load_hf_bert
from scratchformer.interop.bert_classifier import ENCODER_FIELDS, BertClassifier, SentenceClassifierConfig
from scratchformer.interop.wordpiece import WordPieceTokenizer
from scratchformer.limits.estimates import check_model_fits
from scratchformer.nn import eval_mode
from scratchformer.runfiles import read_optional_json
from scratchformer.training.evaluation import run_evaluation
from scratchformer.training.rundir import check_data_unchanged, fingerprint_file

__all__ = ["BASE_MODELS", "SentenceClassifierConfig", "SentenceClassifierJob"]

BASE_MODELS = ("minilm",)  # --from names; minilm = the installed all-MiniLM-L6-v2
# Below this many labelled rows, `freeze_encoder=None` (finetune's default) trains the head alone
# on the frozen encoder (the linear probe). Test accuracy, fine-tuned against probe
# (docs/results.md): 300 rows whose test words training never showed, 95.0% against 99.2%; the
# plays cut to 300 rows, 34.4% against 40.0%; to 1,000 rows, 44.2% against 45.4%; all 3,020
# rows, 54.2% against 48.1%. The crossing lies between 1,000 and 3,020 rows.
PROBE_BELOW_ROWS = 2000


def base_model_dir(name: str) -> Path:
    """--from minilm or --model DIR -> a Hugging Face BERT directory (checked to be BERT)."""
    if name in BASE_MODELS:
        from scratchformer.interop.sentence import default_model_dir

        return default_model_dir()
    path = Path(name)
    if not path.is_dir():
        raise CheckpointError(
            f"--model {path}: no such directory; give a Hugging Face BERT directory "
            "(config.json, model.safetensors, vocab.txt or tokenizer.json)"
        )
    config = read_optional_json(path / "config.json", error=CheckpointError)
    if config is None:
        raise CheckpointError(f"--model {path} has no config.json: not a Hugging Face model directory")
    model_type = config.get("model_type") if isinstance(config, dict) else None
    if model_type != "bert":
        raise CheckpointError(
            f"--model {path} holds a {model_type!r} model, not BERT: finetune reads BERT-family "
            "encoders (model_type 'bert', e.g. all-MiniLM-L6-v2)"
        )
    return path


def _encode(tokenizer: WordPieceTokenizer, texts: list[str], what: str) -> tuple[np.ndarray, np.ndarray]:
    """texts -> ids, mask (N, T) int64, T <= max_length; one note on stderr when texts were cut.
    A text that is not a str of valid Unicode (invalid UTF-8 in argv) is a one-line error."""
    for t in texts:
        check_text(what, t)
    enc = tokenizer.tokenizer.encode_batch(texts, add_special_tokens=True)
    cut = sum(1 for e in enc if e.overflowing)
    if cut:
        print(
            f"note: {cut:,} of {len(texts):,} texts of {what} are longer than {tokenizer.max_length} tokens "
            "and were truncated (--max-length sets the limit)",
            file=sys.stderr,
        )
    ids = np.array([e.ids for e in enc], dtype=np.int64)
    mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
    return ids, mask


class Examples:
    """Encoded examples: ids, mask (N, T), y (N,). A batch is trimmed to its longest text."""

    def __init__(self, ids: np.ndarray, mask: np.ndarray, y: np.ndarray, texts: list[str]):
        self.ids, self.mask, self.y, self.texts = ids, mask, y, texts

    def __len__(self) -> int:
        return len(self.y)

    def batch(self, index) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(ids, mask, labels) of the examples at `index`; ids, mask (B, T') with T' the longest."""
        ids, mask = self.ids[index], self.mask[index]
        width = max(int(mask.sum(axis=1).max()), 1)
        return ids[:, :width], mask[:, :width], self.y[index]


class SentenceClassifierJob:
    """Fine-tune (or probe, with freeze_encoder) a BERT encoder as a sentence classifier. Scores: accuracy."""

    kind, config_class, model_class = "sentence_classifier", SentenceClassifierConfig, BertClassifier
    eval_batch_size = 64  # texts per forward when evaluating a split

    def __init__(
        self,
        model: BertClassifier,
        tokenizer: WordPieceTokenizer,
        data_spec: dict,
        test_path: str | Path | None = None,
        allow_changed_data: bool = False,
    ):
        """data_spec: {"path", "sha256", "base", "val_fraction", "seed"}; the training CSV is read
        on first use. test_path: the CSV of the "test" split (eval --data)."""
        self.model, self.tokenizer, self.data_spec = model, tokenizer, data_spec
        self.test_path, self.allow_changed_data = test_path, allow_changed_data
        self._splits: dict[str, Examples] = {}
        self.choice_note: str | None = None  # why create() froze the encoder, when the data size chose it

    @property
    def config(self) -> SentenceClassifierConfig:
        return self.model.config

    # -- building ------------------------------------------------------------------------------
    @classmethod
    def create(cls, run_kind: str, model: dict, data: dict, seed: int) -> SentenceClassifierJob:
        """A fresh classifier on the encoder of data["base"] ("minilm" or a directory), its
        labels read from the CSV data["path"]; `seed` fixes the head's initial weights.
        model["freeze_encoder"] None (or absent): decided by the CSV's size, frozen below
        PROBE_BELOW_ROWS rows (`choice_note` then says so)."""
        known = {"max_length", "freeze_encoder"}
        unknown = sorted(set(model) - known)
        if unknown:
            raise ConfigError(f"--{unknown[0].replace('_', '-')} does not apply to finetune")
        if data.get("path") is None:
            raise ConfigError("finetune needs --data FILE.csv (columns text,label)")
        path = Path(data["path"]).resolve()
        _, labels = read_labelled_csv(path)
        note = None
        if model.get("freeze_encoder") is None:
            frozen = len(labels) < PROBE_BELOW_ROWS
            model = {**model, "freeze_encoder": frozen}
            if frozen:
                note = (
                    f"note: {path.name} has {len(labels):,} rows, fewer than {PROBE_BELOW_ROWS:,}: training the "
                    "head alone on the frozen encoder (a linear probe), which beat fine-tuning the whole "
                    "model on every set this small measured (docs/results.md); --no-freeze-encoder "
                    "fine-tunes it anyway"
                )
        base = base_model_dir(data["base"])
        hf = read_optional_json(base / "config.json", error=CheckpointError)
        encoder_fields = {k: hf[k] for k in ENCODER_FIELDS if k in hf}
        config = SentenceClassifierConfig(**encoder_fields, labels=sorted(set(labels)), **model)
        check_model_fits(config, BertClassifier, training=True, option="a smaller --model")
        encoder = load_hf_bert(base, dtype=np.float32)
        tokenizer = WordPieceTokenizer.from_dir(base, max_length=config.max_length)
        if (
            tokenizer.vocab_size > config.vocab_size
        ):  # an id past the embeddings: refused now, not on some input
            raise CheckpointError(
                f"{base}: the tokenizer has {tokenizer.vocab_size:,} tokens but config.json's "
                f"vocab_size is {config.vocab_size:,}: the vocabulary file belongs to another model"
            )
        spec = {
            "path": str(path),
            "sha256": fingerprint_file(path),
            "base": str(base),
            "val_fraction": data["val_fraction"],
            "seed": data["split_seed"],
        }
        job = cls(_classifier(encoder, config, seed), tokenizer, spec)
        job.choice_note = note
        return job

    @classmethod
    def from_checkpoint(
        cls,
        ck,
        data: str | Path | None = None,
        allow_changed_data: bool = False,
        train_data: str | Path | None = None,
    ) -> SentenceClassifierJob:
        """The job of an already-read checkpoint. `data`: the CSV of the "test" split (eval --data);
        `train_data`: where the training CSV has moved (finetune --resume --data)."""
        config = SentenceClassifierConfig.from_dict(ck.config["model"])
        check_model_fits(config, BertClassifier, training=False)
        model = _classifier(BertEncoder(config.bert_config(), dtype=np.float32), config, seed=None)
        model.load_state_dict(ck.model_state)
        if ck.tokenizer is None or ck.tokenizer.get("type") != "wordpiece":
            raise CheckpointError(
                f"{ck.path} has no WordPiece tokenizer.json: restore the file or fine-tune again"
            )
        from tokenizers import Tokenizer

        try:
            hf_tokenizer = Tokenizer.from_str(json.dumps(ck.tokenizer["hf"]))
        except Exception as e:  # noqa: BLE001 -- the tokenizers library raises plain Exceptions
            raise CheckpointError(
                f"{ck.path / 'tokenizer.json'}: not a tokenizer the tokenizers library reads "
                f"({str(e)[:80]}); restore the file or fine-tune again"
            ) from None
        spec = dict(ck.config["data"])
        if train_data is not None:
            spec["path"] = str(Path(train_data).resolve())
            if not allow_changed_data:
                check_data_unchanged(spec["path"], spec["sha256"])
        return cls(
            model,
            WordPieceTokenizer(hf_tokenizer, max_length=config.max_length),
            spec,
            test_path=data,
            allow_changed_data=allow_changed_data,
        )

    @property
    def default_split(self) -> str:
        """The split `eval` reads when none is named: test when --data names a CSV, else val."""
        return "val" if self.test_path is None else "test"

    def config_dict(self) -> dict:
        return {"kind": self.kind, "model": self.config.to_dict(), "data": self.data_spec}

    def tokenizer_dict(self) -> dict:
        return {"type": "wordpiece", "hf": json.loads(self.tokenizer.tokenizer.to_str())}

    def check_compatible(self, ck) -> None:
        if ck.config.get("model") != self.config.to_dict():
            raise CheckpointError(f"{ck.path}: a different model or label set; resume with the same options")

    # -- data ------------------------------------------------------------------------------------
    def split(self, name: str) -> Examples:
        """ "train", "val" (cut from the training CSV) or "test" (the CSV given to eval --data)."""
        if name not in self._splits:
            if name == "test":
                if self.test_path is None:
                    raise DataError(
                        "a fine-tuned classifier's test split is a CSV: eval RUN --data test.csv "
                        "(or --split val for the held-out part of the training CSV)"
                    )
                self._splits["test"] = self._examples(*read_labelled_csv(self.test_path), str(self.test_path))
            else:  # each split is tokenised when first used (eval reads val alone)
                texts, labels = self._read_training_csv()[name]
                self._splits[name] = self._examples(texts, labels, f"{self.data_spec['path']} ({name})")
        return self._splits[name]

    def _read_training_csv(self) -> dict[str, tuple[list[str], list[str]]]:
        """{"train", "val": (texts, labels)}: the training CSV cut by the recorded seed."""
        spec = self.data_spec
        if not Path(spec["path"]).exists():
            raise DataError(
                f"this run was trained on {spec['path']}, which is not there any more: "
                "point to it with --data PATH"
            )
        if not self.allow_changed_data:
            check_data_unchanged(spec["path"], spec["sha256"])
        texts, labels = read_labelled_csv(spec["path"])
        order = np.random.default_rng(spec["seed"]).permutation(len(texts))
        n_val = max(1, round(spec["val_fraction"] * len(texts)))
        if n_val >= len(texts):
            raise DataError(
                f"{spec['path']} has {len(texts)} examples: too few to hold {n_val} out for "
                "validation; add examples"
            )
        return {
            name: ([texts[i] for i in index], [labels[i] for i in index])
            for name, index in (("val", order[:n_val]), ("train", order[n_val:]))
        }

    def _examples(self, texts: list[str], labels: list[str], what: str) -> Examples:
        names = self.config.labels
        ids_of = {name: i for i, name in enumerate(names)}
        unseen = sorted(set(labels) - set(ids_of))
        if unseen:
            raise DataError(
                f"{what}: label {unseen[0]!r} was never seen in training (this model knows "
                f"{', '.join(map(repr, names[:10]))}{', ...' if len(names) > 10 else ''}); "
                "remove those rows or fine-tune on data that has it"
            )
        ids, mask = _encode(self.tokenizer, texts, what)
        return Examples(ids, mask, np.array([ids_of[y] for y in labels], dtype=np.int64), texts)

    # -- training ------------------------------------------------------------------------------
    def train_size(self) -> int:
        """Examples in the training split (what the finetune row's length is sized by)."""
        return len(self.split("train"))

    def train_batch(self, rng: np.random.Generator, batch_size: int):
        train = self.split("train")
        return train.batch(rng.integers(0, len(train), size=batch_size))

    @staticmethod
    def real_tokens(batch) -> np.ndarray:
        """(B, T) bool: the positions of a batch that hold a token, not [PAD] (the attention
        mask); the diagnostics leave the others out of their statistics."""
        return np.asarray(batch[1]).astype(bool)

    @staticmethod
    def batch_tokens(batch) -> int:
        """The texts' tokens: the attention mask's ones (the rows are padded to the longest)."""
        return int(batch[1].sum())

    def evaluate(self, split: str = "val", batches: int | None = None, **options) -> dict:
        return run_evaluation(self.evaluation(split, batches, **options), self.model)

    def evaluation(self, split: str = "val", batches: int | None = None, **options):
        """Mean loss and accuracy over a split (or its first `batches` batches). A generator of
        batches (ids, mask, y), sent (logits, loss): training/evaluation.py."""
        if options:
            raise ConfigError(f"--{next(iter(options))} applies to seq2seq models only")
        data = self.split(split)
        n = len(data) if batches is None else min(len(data), batches * self.eval_batch_size)
        total, hits = 0.0, 0
        for start in range(0, n, self.eval_batch_size):
            ids, mask, y = data.batch(slice(start, min(start + self.eval_batch_size, n)))
            logits, loss = yield ids, mask, y
            total += loss * len(y)
            hits += int((logits.argmax(axis=1) == y).sum())
        return {"loss": total / max(n, 1), "accuracy": hits / max(n, 1)}

    def _classify(self, texts: list[str]) -> list[str]:
        ids, mask = _encode(self.tokenizer, texts, "the input")
        with eval_mode(self.model):
            logits, _ = self.model(ids, mask)
        return [self.config.labels[i] for i in logits.argmax(axis=1)]

    def samples(self, n: int, rng: np.random.Generator, **options) -> list[str]:
        """A few validation texts with the model's labels, shown while training."""
        if options:
            raise ConfigError(
                "a sentence classifier does not generate text: use 'scratchformer predict RUN TEXT'"
            )
        if n <= 0:
            return []
        val = self.split("val")
        picked = rng.integers(0, len(val), size=n)
        predicted = self._classify([val.texts[i] for i in picked])
        return [
            f"{val.texts[i][:60]!r} -> {p} (true {self.config.labels[val.y[i]]})"
            for i, p in zip(picked, predicted)
        ]

    def predict(self, text: str, **options) -> str:
        """The label of one text."""
        if options:
            raise ConfigError(f"--{next(iter(options))} applies to seq2seq models only")
        if not text.strip():
            raise DataError("the input text is empty: give a sentence to classify")
        return self._classify([text.strip()])[0]

    def viz_inputs(self, text: str | None) -> dict:
        """The encoder's attention on one text (as `viz --bert` draws it), titled with the label."""
        if not text or not text.strip():
            raise DataError('a sentence classifier needs an input: --text "A sentence."')
        ids, _ = _encode(self.tokenizer, [text.strip()], "--text")
        vocab = self.tokenizer.tokenizer.get_vocab()
        labels = [""] * self.config.vocab_size
        for word, i in vocab.items():
            if i < len(labels):
                labels[i] = word
        return {
            "model": self.model.encoder,
            "ids": ids[0],
            "tokens": [labels[i] for i in ids[0]],
            "vocab_labels": labels,
            "title": f"{text.strip()[:60]!r} -> {self.predict(text)}",
        }


def _classifier(encoder: BertEncoder, config: SentenceClassifierConfig, seed: int | None) -> BertClassifier:
    model = BertClassifier(encoder, config.num_classes, freeze_encoder=config.freeze_encoder, seed=seed)
    model.config = config  # what the trainer's size checks and config.json read
    return model
