"""The language-model job: a GPT on a character dataset (names, or any text file).

It implements the `scratchformer.training.jobs.Job` protocol; its defaults are the "lines"
and "text" rows of `scratchformer.training.jobs.RUN_DEFAULTS`. The data file is read only
when a batch or an evaluation needs it, so a run whose data file has moved still samples.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from scratchformer.data import CharTokenizer, load_dataset
from scratchformer.errors import CheckpointError, ConfigError, DataError
from scratchformer.models import GPT, GPTConfig


class LMJob:
    kind, config_class = "gpt", GPTConfig
    eval_batch_size = 64  # sequences per forward when evaluating a whole split

    def __init__(self, model: GPT, dataset, data_spec: dict, tokenizer: CharTokenizer | None = None):
        """dataset: a `scratchformer.data.Dataset`, or None to read it from `data_spec` when
        first needed. data_spec: {"path", "format", "seed", "block_size"} as recorded in
        config.json (path None: the bundled names.txt)."""
        self.model, self._dataset, self.data_spec = model, dataset, data_spec
        self.tokenizer: CharTokenizer = tokenizer if tokenizer is not None else dataset.tokenizer

    # -- building ------------------------------------------------------------------------------
    @classmethod
    def create(cls, run_kind: str, model: dict, data: dict, seed: int) -> LMJob:
        """A fresh GPT on `data["path"]` read as `run_kind` ("lines" or "text"). `seed` fixes the
        initial weights; `data["split_seed"]` the train/val/test split, kept apart so that runs
        with different seeds are measured on the same held-out items."""
        path = data.get("path")
        data_spec = {"path": None if path is None else str(Path(path).resolve()),
                     "format": run_kind, "seed": data["split_seed"], "block_size": data.get("block_size")}
        ds = load_dataset(data_spec["path"], run_kind, block_size=data_spec["block_size"], seed=data_spec["seed"])
        data_spec.update(format=ds.format, block_size=ds.block_size)
        config = GPTConfig(vocab_size=ds.tokenizer.vocab_size, block_size=ds.block_size, **model)
        return cls(GPT(config, seed=seed), ds, data_spec)

    @classmethod
    def from_checkpoint(cls, ck, data: str | Path | None = None) -> LMJob:
        """The job of an already-read checkpoint; `data` replaces the recorded data file path."""
        model = GPT(GPTConfig.from_dict(ck.config["model"]))  # from_dict: unknown fields are a ConfigError
        model.load_state_dict(ck.model_state)
        spec = dict(ck.config["data"])
        if data is not None:
            spec["path"] = str(Path(data).resolve())
        return cls(model, None, spec, CharTokenizer.from_json(ck.tokenizer))

    @property
    def dataset(self):
        """The three splits, read from the data file on first use."""
        if self._dataset is None:
            spec = self.data_spec
            if spec["path"] is not None and not Path(spec["path"]).exists():
                raise DataError(f"this run was trained on {spec['path']}, which is not there any more: "
                                "point to the file with --data PATH")
            ds = load_dataset(spec["path"], spec["format"], block_size=spec["block_size"], seed=spec["seed"])
            if ds.tokenizer != self.tokenizer:
                raise DataError(f"the data file {spec['path'] or 'names.txt'} changed since training: "
                                "its characters no longer match the checkpoint's tokenizer")
            self._dataset = ds
        return self._dataset

    def config_dict(self) -> dict:
        return {"kind": self.kind, "model": self.model.config.to_dict(), "data": self.data_spec}

    def tokenizer_dict(self) -> dict:
        return self.tokenizer.to_json()

    def check_compatible(self, ck) -> None:
        if ck.config.get("model") != self.model.config.to_dict():
            raise CheckpointError(f"{ck.path}: the model config differs from the one requested; "
                              "resume with the same options (or none)")

    # -- training ------------------------------------------------------------------------------
    def train_batch(self, rng: np.random.Generator, batch_size: int):
        return self.dataset.train.batch(rng, batch_size)

    def forward_backward(self, batch) -> tuple[float, int]:
        x, y = batch
        _, loss = self.model(x, y)
        self.model.backward()
        return loss, int(x.size)

    def evaluate(self, split: str = "val", batches: int | None = None, **options) -> dict:
        """Token-weighted mean loss over the split (padding excluded); perplexity = exp(loss)."""
        if options:
            raise ConfigError(f"--{next(iter(options)).replace('_', '-')} applies to seq2seq models only")
        data = getattr(self.dataset, split)
        was_training = self.model.training
        self.model.eval()
        total, count = 0.0, 0
        try:
            for i, (x, y) in enumerate(data.all_batches(self.eval_batch_size)):
                if batches is not None and i >= batches:
                    break
                _, loss = self.model(x, y)
                n = int((y != -1).sum())
                total, count = total + loss * n, count + n
        finally:
            self.model.train(was_training)
        loss = total / max(count, 1)
        return {"loss": loss, "perplexity": float(np.exp(loss))}

    # -- sampling ------------------------------------------------------------------------------
    def samples(self, n: int, rng: np.random.Generator, prompt: str = "", max_new_tokens: int | None = None,
                temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None) -> list[str]:
        """n samples. Line datasets: one item each, from the start token until the end token.
        Text datasets: `max_new_tokens` characters (default 200) after the prompt (default a newline)."""
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
            text = prompt or ("\n" if "\n" in tok.chars else tok.chars[0])
            ids = tok.encode(text)
            max_new = max_new_tokens or 200
            eos = None
        idx = np.tile(ids, (n, 1))
        out = self.model.generate(idx, max_new, temperature=temperature, top_k=top_k, top_p=top_p,
                                  rng=rng, eos_id=eos)
        results = []
        for row in out:
            new = row[len(ids):]
            if eos is not None and (new == eos).any():
                new = new[: int(np.argmax(new == eos))]
            results.append(prompt + tok.decode(new) if eos is not None else tok.decode(row))
        return results

    def predict(self, text: str, **options) -> str:
        raise ConfigError("predict needs a classifier or seq2seq run; for a language model use 'scratchformer sample'")
