"""The language-model job: a GPT on a dataset of names or any text file, read as characters
or as byte-level BPE tokens (data.tokenizer; the tokenizer is kept in the run's tokenizer.json).

It implements the `scratchformer.training.jobs.Job` protocol; its defaults are the "lines"
and "text" rows of `scratchformer.training.jobs.RUN_DEFAULTS`. The data file is read only
when a batch or an evaluation needs it, so a run whose data file has moved still samples.

The data file is read once (data.read_data: its sha256, config.json's data.sha256, and its
tokens from the same bytes) and fingerprinted when training starts;
evaluating or resuming on a file that changed since stops with one line unless the caller
allows it (`allow_changed_data`, the CLI's --allow-changed-data).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from scratchformer.data import IGNORE_INDEX, BPETokenizer, CharTokenizer, DataFile, load_dataset, read_data
from scratchformer.data.datasets import DEFAULT, tokenizer_from_json
from scratchformer.errors import CheckpointError, ConfigError, DataError
from scratchformer.limits.estimates import check_model_fits, generation_bytes
from scratchformer.limits.memory import check_fits
from scratchformer.models import GPT, GPTConfig
from scratchformer.training.jobparts import TokenBatches, model_from_checkpoint
from scratchformer.training.rundir import check_data_unchanged


def _read_recorded(spec: dict) -> DataFile:
    """The file behind a recorded data spec, read: its path, or the bundled data set it names
    (names when neither is recorded, as in runs written before bundled names were recorded)."""
    if spec["path"] is not None:
        return read_data(Path(spec["path"]))
    return read_data(spec.get("name", DEFAULT))


def _read_data(run_kind: str, data: dict, tokenizer) -> tuple:
    """(Dataset, data spec) of `data` (a RUN_DEFAULTS "data" section with the user's settings;
    its "path": a bundled name, a path, or a DataFile already read) read as `run_kind`, by
    `tokenizer`: "char", "bpe" (trained on the training split) or a BPETokenizer used as it is.
    The file is read once: its sha256 and its tokens come from the same bytes."""
    file = data.get("path")
    if not isinstance(file, DataFile):  # a bundled name or a path, not read yet
        file = read_data(file)
    given = isinstance(tokenizer, BPETokenizer)
    data_spec = {
        "path": None if file.name else str(file.path.resolve()),
        "format": run_kind,
        "seed": data["split_seed"],
        "block_size": data.get("block_size"),
        "sha256": file.sha256,
        "tokenizer": "bpe" if given else tokenizer,
        "vocab_size": data.get("vocab_size"),
    }
    if given and data_spec["vocab_size"] is not None:
        raise ConfigError(
            "--vocab-size applies to a BPE trained here: a pretrained checkpoint brings its own tokenizer"
        )
    if file.name:
        data_spec["name"] = file.name
    ds = load_dataset(
        file,
        run_kind,
        block_size=data_spec["block_size"],
        seed=data_spec["seed"],
        tokenizer=tokenizer,
        vocab_size=data_spec["vocab_size"],
    )
    data_spec.update(format=ds.format, block_size=ds.block_size)
    if data_spec["tokenizer"] == "bpe":  # recorded: the size asked for, the default resolved
        data_spec["vocab_size"] = data_spec["vocab_size"] or ds.tokenizer.vocab_size
    return ds, data_spec


EXAMPLE_NAME = "emma"  # `viz`'s input for a names-like run when none is given: names.txt's first line


class LMJob(TokenBatches):
    kind, config_class, model_class = "gpt", GPTConfig, GPT
    eval_batch_size = 64  # sequences per forward when evaluating a whole split

    def __init__(
        self,
        model: GPT,
        dataset,
        data_spec: dict,
        tokenizer: CharTokenizer | BPETokenizer | None = None,
        allow_changed_data: bool = False,
    ):
        """dataset: a `scratchformer.data.Dataset`, or None to read it from `data_spec` when
        first needed. data_spec: {"path", "format", "seed", "block_size", "sha256", "name",
        "tokenizer", "vocab_size"} as recorded in config.json (path None: the bundled data set
        "name", default names; tokenizer absent: "char")."""
        self.model, self._dataset, self.data_spec = model, dataset, data_spec
        self.tokenizer: CharTokenizer | BPETokenizer = (
            tokenizer if tokenizer is not None else dataset.tokenizer
        )
        self.allow_changed_data = allow_changed_data
        self._file: DataFile | None = None  # a data file given to from_checkpoint, read (and checked) there

    # -- building ------------------------------------------------------------------------------
    @classmethod
    def create(cls, run_kind: str, model: dict, data: dict, seed: int) -> LMJob:
        """A fresh GPT on `data["path"]` read as `run_kind` ("lines" or "text"). `seed` fixes the
        initial weights; `data["split_seed"]` the train/val/test split, kept apart so that runs
        with different seeds are measured on the same held-out items."""
        ds, data_spec = _read_data(run_kind, data, data.get("tokenizer", "char"))
        config = GPTConfig(vocab_size=ds.tokenizer.vocab_size, block_size=ds.block_size, **model)
        check_model_fits(config, GPT, training=True)
        return cls(GPT(config, seed=seed), ds, data_spec)

    @classmethod
    def from_hf(cls, hf_dir: str | Path, run_kind: str, data: dict, notes: list[str] | None = None) -> LMJob:
        """A pretrained causal LM (a Hugging Face GPT-2 directory, or Llama where
        scratchformer.interop reads it) on `data["path"]` read as `run_kind`, with the
        checkpoint's own config and tokenizer: nanoGPT's init_from. data["block_size"] is the
        training context, at most the checkpoint's positions. `notes` (a list) gets what the
        reading changed (bf16 weights read as float32, padding rows dropped)."""
        from scratchformer.interop.hf_lm import load_hf_causal_lm

        model, tokenizer = load_hf_causal_lm(hf_dir, notes=notes, training=True)  # fit checked on its config
        if data.get("block_size") is not None and data["block_size"] > model.config.block_size:
            raise ConfigError(
                f"--block-size {data['block_size']} is longer than {hf_dir} reads "
                f"({model.config.block_size} positions): give at most {model.config.block_size}"
            )
        ds, data_spec = _read_data(run_kind, data, tokenizer)
        if ds.block_size > model.config.block_size:  # a lines file with an item longer than the positions
            raise DataError(
                f"the longest item of {ds.source} needs {ds.block_size} positions but {hf_dir} has "
                f"{model.config.block_size}: shorten it or read the file as --format text"
            )
        data_spec["init_from"] = str(Path(hf_dir).resolve())
        return cls(model, ds, data_spec)

    @classmethod
    def from_checkpoint(cls, ck, data: str | Path | None = None, allow_changed_data: bool = False) -> LMJob:
        """The job of an already-read checkpoint; `data` replaces the recorded data file path
        (checked: a file whose sha256 differs from the recorded one needs allow_changed_data)."""
        model = model_from_checkpoint(ck, cls)
        spec = dict(ck.config["data"])
        file = None
        if data is not None:  # checked now: a resume that finds nothing to do must still refuse it
            file = read_data(data)  # read once: checked here, tokenized when first needed
            spec["path"] = str(file.path.resolve())
            spec.pop("name", None)
            if not allow_changed_data:
                check_data_unchanged(spec["path"], spec.get("sha256"), sha256=file.sha256)
        if ck.tokenizer is None:
            raise CheckpointError(f"{ck.path} has no tokenizer.json: a language-model checkpoint needs one")
        job = cls(model, None, spec, tokenizer_from_json(ck.tokenizer), allow_changed_data)
        job._file = file
        return job

    @property
    def dataset(self):
        """The three splits, read from the data file on first use."""
        if self._dataset is None:
            spec = self.data_spec
            if spec["path"] is not None and not Path(spec["path"]).exists():
                raise DataError(
                    f"this run was trained on {spec['path']}, which is not there any more: "
                    "point to the file with --data PATH"
                )
            file, checked = (self._file, True) if self._file is not None else (_read_recorded(spec), False)
            self._file = None
            if not (self.allow_changed_data or checked):  # a file given to from_checkpoint was checked there
                check_data_unchanged(file.path, spec.get("sha256"), sha256=file.sha256)
            spec["sha256"] = file.sha256  # what later checkpoints of this run record
            # a character vocabulary is built again (a new character is a changed file); a BPE
            # encodes any text, so the run's own is used
            bpe = isinstance(self.tokenizer, BPETokenizer)
            ds = load_dataset(
                file,
                spec["format"],
                block_size=spec["block_size"],
                seed=spec["seed"],
                tokenizer=self.tokenizer if bpe else "char",
            )
            if ds.tokenizer != self.tokenizer:
                raise DataError(
                    f"the data file {spec['path'] or 'names.txt'} changed since training: "
                    "its characters no longer match the checkpoint's tokenizer"
                )
            self._dataset = ds
        return self._dataset

    def config_dict(self) -> dict:
        return {"kind": self.kind, "model": self.model.config.to_dict(), "data": self.data_spec}

    def tokenizer_dict(self) -> dict:
        return self.tokenizer.to_json()

    def check_compatible(self, ck) -> None:
        saved = ck.config.get("model")  # fields added since it was written take their defaults
        if saved is None or type(self.model.config).from_dict(saved) != self.model.config:
            raise CheckpointError(
                f"{ck.path}: the model config differs from the one requested; "
                "resume with the same options (or none)"
            )

    # -- training ------------------------------------------------------------------------------
    def train_batch(self, rng: np.random.Generator, batch_size: int):
        return self.dataset.train.batch(rng, batch_size)

    def evaluation(self, split: str = "val", batches: int | None = None, **options):
        """Token-weighted mean loss over the split (padding excluded, nats per token);
        perplexity = exp(loss); bits_per_char = loss * tokens / (chars * ln 2), with the split's
        target tokens and the characters they cover, so character and BPE runs compare (for a
        character run tokens = chars: loss / ln 2). With `batches`, the split's ratio is used.
        A generator of batches (x, y), sent (logits, loss): training/evaluation.py."""
        if options:
            raise ConfigError(f"--{next(iter(options)).replace('_', '-')} applies to seq2seq models only")
        if split == "test" and self.data_spec["format"] == "text":
            # nanoGPT's cut: the first 90% train, the last 10% val. A third split would move the
            # train/val boundary of every run trained so far, so text runs have none.
            raise DataError(
                "text data have only train and val splits (the last 10% of the file is val): use --split val"
            )
        data = getattr(self.dataset, split)
        total, count = 0.0, 0
        for i, (x, y) in enumerate(data.all_batches(self.eval_batch_size)):
            if batches is not None and i >= batches:
                break
            _, loss = yield x, y
            n = int((y != IGNORE_INDEX).sum())
            total, count = total + loss * n, count + n
        loss = total / max(count, 1)
        bits_per_char = loss * data.n_targets / (max(data.chars, 1) * math.log(2))
        return {"loss": loss, "perplexity": float(np.exp(loss)), "bits_per_char": float(bits_per_char)}

    @property
    def default_split(self) -> str:
        """The split `eval` reads when none is named: test, or val for text (it has no test split)."""
        return "val" if self.data_spec["format"] == "text" else "test"

    # -- sampling ------------------------------------------------------------------------------
    def samples(
        self,
        n: int,
        rng: np.random.Generator,
        prompt: str = "",
        max_new_tokens: int | None = None,
        temperature: float = 1.0,
        top_k: int | None = None,
        top_p: float | None = None,
    ) -> list[str]:
        """n samples. Line datasets: one item each, from the start token until the end token.
        Text datasets: `max_new_tokens` tokens (characters or BPE tokens; default 200) after the
        prompt (default a newline)."""
        if n <= 0:
            return []
        tok, block = self.tokenizer, self.model.config.block_size
        if top_k is not None and top_k > tok.vocab_size:
            raise ConfigError(f"--top-k {top_k} is larger than the vocabulary ({tok.vocab_size})")
        if tok.bos_id is not None:  # one item per sample
            ids = np.concatenate([[tok.bos_id], tok.encode(prompt)]).astype(np.int64)
            max_new = max_new_tokens or max(block - len(ids) + 1, 1)
            eos = tok.eos_id
        else:
            text = prompt or ("\n" if isinstance(tok, BPETokenizer) or "\n" in tok.chars else tok.chars[0])
            ids = tok.encode(text)
            max_new = max_new_tokens or 200
            eos = None
        check_fits(
            generation_bytes(
                n, len(ids), max_new, self.model.config.n_layer, self.model.config.n_embd, tok.vocab_size
            )
            + 8 * n * (len(ids) + max_new),
            f"{n:,} samples of up to {len(ids) + max_new:,} tokens",
            "-n or --max-new-tokens"
            if len(ids) <= max_new
            else f"the prompt ({len(ids):,} tokens), -n or --max-new-tokens",
        )
        idx = np.tile(ids, (n, 1))
        out = self.model.generate(
            idx, max_new, temperature=temperature, top_k=top_k, top_p=top_p, rng=rng, eos_id=eos
        )
        results = []
        for row in out:
            new = row[len(ids) :]
            if eos is not None and (new == eos).any():
                new = new[: int(np.argmax(new == eos))]
            results.append(prompt + tok.decode(new) if eos is not None else tok.decode(row))
        return results

    def in_training_data(self, texts: list[str]) -> list[bool] | None:
        """For each sample: is it an item of the training split (lines data sets, as makemore
        marks them)? None when that cannot be told: text data, or the data file is missing or
        changed (samples need only the checkpoint)."""
        if self.data_spec["format"] != "lines":
            return None
        try:
            train = set(self.dataset.train.lines)
        except DataError:
            return None
        return [t in train for t in texts]

    def viz_inputs(self, text: str | None) -> dict:
        """A prompt or name as the model reads it: a names-like run sees <eot> name."""
        tok, block = self.tokenizer, self.model.config.block_size
        lines = tok.bos_id is not None  # a names-like run: every item starts with the boundary token
        if text is None:
            if not lines:
                raise DataError("this text model needs an input: --text 'some text in its alphabet'")
            text = EXAMPLE_NAME
        ids = tok.encode(text, what="--text")
        if lines:
            ids = np.concatenate([[tok.bos_id], ids])
        tokens = tok.token_texts(ids)
        if len(ids) == 0:
            raise DataError("--text is empty: give some text in the model's alphabet")
        if len(ids) > block:
            raise DataError(
                f"--text gives {len(ids)} tokens{' (with the start token)' if lines else ''}; "
                f"this model reads 1 to {block}: give a shorter text"
            )
        labels = tok.token_texts(np.arange(tok.vocab_size))
        return {"ids": ids, "tokens": tokens, "vocab_labels": labels}

    def predict(self, text: str, **options) -> str:
        raise ConfigError(
            "predict needs a classifier or seq2seq run; for a language model use 'scratchformer sample'"
        )
