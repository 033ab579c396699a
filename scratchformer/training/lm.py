"""The language-model job: a GPT on a character dataset (names, or any text file).

A *job* is what `scratchformer.training.train` trains. It provides
    model                      a Module whose forward returns (logits, loss)
    train_batch(rng, B)        a training batch
    forward_backward(batch)    -> (loss, tokens): forward with targets, then backward
    evaluate(split, batches)   -> {"loss": ..., ...} on a whole split (or its first batches)
    samples(n, rng)            -> a few strings to show while training
    config_dict(), tokenizer_dict(), check_compatible(checkpoint)
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import numpy as np

from scratchformer.data import CharTokenizer, load_dataset
from scratchformer.errors import CheckpointError, DataError
from scratchformer.models import GPT, GPTConfig
from scratchformer.training.checkpoint import load_checkpoint

KIND = "gpt"


class LMJob:
    def __init__(self, model: GPT, dataset, data_spec: dict):
        self.model, self.dataset, self.data_spec = model, dataset, data_spec
        self.tokenizer: CharTokenizer = dataset.tokenizer

    # -- building ------------------------------------------------------------------------------
    @classmethod
    def create(cls, data_path: str | None, data_format: str | None, seed: int, model_overrides: dict,
               block_size: int | None = None, split_seed: int = 1337) -> LMJob:
        """`seed` fixes the initial weights; `split_seed` the train/val/test split, kept apart so
        that runs with different seeds are measured on the same held-out items."""
        data_spec = {"path": None if data_path is None else str(Path(data_path).resolve()),
                     "format": data_format, "seed": split_seed, "block_size": block_size}
        ds = load_dataset(data_spec["path"], data_spec["format"], block_size=block_size, seed=split_seed)
        data_spec.update(format=ds.format, block_size=ds.block_size)
        config = GPTConfig(vocab_size=ds.tokenizer.vocab_size, block_size=ds.block_size, **model_overrides)
        return cls(GPT(config, seed=seed), ds, data_spec)

    @classmethod
    def from_checkpoint(cls, directory: str | Path, load_data: bool = True) -> LMJob:
        ck = load_checkpoint(directory)
        if ck.config.get("kind") != KIND:
            raise CheckpointError(f"{ck.path} holds a {ck.config.get('kind')!r} model, not a language model")
        model = GPT(GPTConfig(**ck.config["model"]))
        model.load_state_dict(ck.model_state)
        tokenizer = CharTokenizer.from_json(ck.tokenizer)
        spec = ck.config["data"]
        ds = None
        if load_data:
            ds = load_dataset(spec["path"], spec["format"], block_size=spec["block_size"], seed=spec["seed"])
            if ds.tokenizer != tokenizer:
                raise DataError(f"the data file {spec['path'] or 'names.txt'} changed since training: "
                                "its characters no longer match the checkpoint's tokenizer")
        job = cls.__new__(cls)
        job.model, job.dataset, job.data_spec, job.tokenizer = model, ds, spec, tokenizer
        job.checkpoint = ck
        return job

    def config_dict(self) -> dict:
        return {"kind": KIND, "model": asdict(self.model.config), "data": self.data_spec}

    def tokenizer_dict(self) -> dict:
        return self.tokenizer.to_json()

    def check_compatible(self, ck) -> None:
        if ck.config.get("model") != asdict(self.model.config):
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

    def evaluate(self, split: str = "val", max_batches: int | None = None, batch_size: int = 64) -> dict:
        """Token-weighted mean loss over the split (padding excluded); perplexity = exp(loss)."""
        data = getattr(self.dataset, split)
        was_training = self.model.training
        self.model.eval()
        total, count = 0.0, 0
        for i, (x, y) in enumerate(data.all_batches(batch_size)):
            if max_batches is not None and i >= max_batches:
                break
            _, loss = self.model(x, y)
            n = int((y != -1).sum())
            total, count = total + loss * n, count + n
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
