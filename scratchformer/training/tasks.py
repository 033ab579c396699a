"""Jobs for the toy tasks: an encoder classifier (majority) and an encoder-decoder (copy,
reverse, sort). Same interface as `scratchformer.training.lm.LMJob`, so the same training
loop, checkpoints and CLI serve them.

Splits: the held-out sequences are drawn first (unique, never in training, see
`scratchformer.data.tasks.make_split`) and cut in two: the first `n_test` are the test split
(the bars are measured there), the next `n_test` the validation split (used during
training to pick the best checkpoint).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from scratchformer.data.tasks import (
    BOS,
    CLASSIFICATION_TASKS,
    EOS,
    PAD,
    VOCAB_SIZE,
    encode_sources,
    exact_match,
    format_digits,
    make_split,
    parse_digits,
    task_defaults,
)
from scratchformer.errors import CheckpointError, DataError
from scratchformer.inference.beam import beam_search, greedy_decode
from scratchformer.models import ClassifierConfig, Seq2SeqConfig, Seq2SeqTransformer, TransformerClassifier
from scratchformer.training.checkpoint import load_checkpoint

KINDS = {"classifier": TransformerClassifier, "seq2seq": Seq2SeqTransformer}
_TRAIN_KEYS = {"steps": "max_steps", "batch_size": "batch_size", "lr": "lr", "min_lr": "min_lr",
               "warmup_steps": "warmup_steps", "weight_decay": "weight_decay", "grad_clip": "grad_clip",
               "beta2": "beta2"}
_DATA_KEYS = ("n_train", "n_test", "max_len")
# CLI names -> model config names
_MODEL_KEYS = {"n_layer": "n_layer", "n_head": "n_head", "n_embd": "n_embd", "dropout": "dropout",
               "activation": "activation", "positional": "positional", "norm_first": "norm_first"}


class TaskJob:
    def __init__(self, kind: str, task: str, model, data_spec: dict):
        self.kind, self.task, self.model, self.data_spec = kind, task, model, data_spec
        train, held_out = make_split(task, data_spec["n_train"], 2 * data_spec["n_test"],
                                     seed=data_spec["seed"], max_len=data_spec["max_len"])
        n = data_spec["n_test"]
        self.splits = {"train": train, "test": held_out.subset(slice(0, n)), "val": held_out.subset(slice(n, 2 * n))}

    # -- the job interface -----------------------------------------------------------------
    def config_dict(self) -> dict:
        return {"kind": self.kind, "task": self.task, "model": self.model.config.to_dict(), "data": self.data_spec}

    def tokenizer_dict(self) -> None:
        return None  # the digits vocabulary is fixed (scratchformer.data.tasks)

    def check_compatible(self, ck) -> None:
        saved = type(self.model.config).from_dict(ck.config.get("model") or {}).to_dict()
        if saved != self.model.config.to_dict() or ck.config.get("task") != self.task:
            raise CheckpointError(f"{ck.path}: a different task or model config; resume with the same options")

    def train_batch(self, rng: np.random.Generator, batch_size: int):
        train = self.splits["train"]
        return train.subset(rng.integers(0, len(train), size=batch_size))

    def forward_backward(self, batch) -> tuple[float, int]:
        _, loss = self.model(*batch)
        self.model.backward()
        return loss, int(batch[0].size)

    def evaluate(self, split: str = "val", max_batches: int | None = None, batch_size: int = 500,
                 beam: int = 1) -> dict:
        """Loss, and accuracy (classifier) or exact match and token accuracy of greedy decoding
        (seq2seq; beam search of width `beam` when beam > 1), on a whole split."""
        if beam > 1 and self.kind != "seq2seq":
            raise DataError("--beam applies to seq2seq models only")
        data = self.splits[split]
        n = len(data) if max_batches is None else min(len(data), max_batches * batch_size)
        was_training = self.model.training
        self.model.eval()
        total, count, hits, tok_hits, tok_count = 0.0, 0, 0, 0, 0
        for start in range(0, n, batch_size):
            batch = data.subset(slice(start, min(start + batch_size, n)))
            _, loss = self.model(*batch)
            weight = len(batch) if self.kind == "classifier" else int((batch.tgt_out != PAD).sum())
            total, count = total + loss * weight, count + weight
            if self.kind == "classifier":
                hits += int((self.model.predict(batch.x) == batch.y).sum())
            else:
                n_new = batch.tgt_out.shape[1]
                pred = (greedy_decode(self.model, batch.src, max_new_tokens=n_new) if beam == 1
                        else beam_search(self.model, batch.src, beam_width=beam, max_new_tokens=n_new))
                hits += int(exact_match(pred, batch.tgt_out).sum())
                h, c = _token_hits(pred, batch.tgt_out)
                tok_hits, tok_count = tok_hits + h, tok_count + c
        self.model.train(was_training)
        if self.kind == "classifier":
            return {"loss": total / max(count, 1), "accuracy": hits / max(n, 1)}
        return {"loss": total / max(count, 1), "exact_match": hits / max(n, 1),
                "token_accuracy": tok_hits / max(tok_count, 1)}

    def samples(self, n: int, rng: np.random.Generator) -> list[str]:
        data = self.splits["val"]
        picked = data.subset(rng.integers(0, len(data), size=n))
        if self.kind == "classifier":
            return [f"{format_digits(x)} -> {p} (true {y})"
                    for x, y, p in zip(picked.x, picked.y, self.model.predict(picked.x))]
        pred = greedy_decode(self.model, picked.src)
        return [f"{format_digits(s)} -> {format_digits(p)}" for s, p in zip(picked.src, pred)]


def _token_hits(pred: np.ndarray, tgt_out: np.ndarray) -> tuple[int, int]:
    """Target tokens (EOS included, padding excluded) predicted at their position."""
    L = tgt_out.shape[1]
    if pred.shape[1] < L:
        pred = np.concatenate([pred, np.full((len(pred), L - pred.shape[1]), PAD)], axis=1)
    real = tgt_out != PAD
    return int(((pred[:, :L] == tgt_out) & real).sum()), int(real.sum())


def _model_for(task: str, model_kwargs: dict, max_len: int):
    if task in CLASSIFICATION_TASKS:
        return "classifier", TransformerClassifier(
            ClassifierConfig(vocab_size=VOCAB_SIZE, n_classes=3, max_len=max_len, **model_kwargs))
    return "seq2seq", Seq2SeqTransformer(Seq2SeqConfig(
        src_vocab_size=VOCAB_SIZE, tgt_vocab_size=VOCAB_SIZE, max_len=max_len + 1,
        pad_id=PAD, bos_id=BOS, eos_id=EOS, **model_kwargs))


def task_job(task: str, model_overrides: dict, seed: int) -> tuple[TaskJob, dict]:
    """A fresh job for `task` with its tuned defaults; returns (job, TrainConfig kwargs)."""
    from scratchformer.nn import manual_seed

    defaults = task_defaults(task)
    model_kwargs = dict(defaults["model"])
    for cli_name, value in model_overrides.items():
        if cli_name not in _MODEL_KEYS:
            raise DataError(f"--{cli_name.replace('_', '-')} does not apply to the {task} task")
        model_kwargs[_MODEL_KEYS[cli_name]] = value
    if task not in CLASSIFICATION_TASKS:
        model_kwargs.pop("positional", None)  # the encoder-decoder always uses sinusoids
    data_spec = {k: defaults["train"][k] for k in _DATA_KEYS}
    data_spec["seed"] = seed
    manual_seed(seed)
    kind, model = _model_for(task, model_kwargs, data_spec["max_len"])
    train_kwargs = {_TRAIN_KEYS[k]: v for k, v in defaults["train"].items() if k in _TRAIN_KEYS}
    train_kwargs["eval_interval"] = max(train_kwargs["max_steps"] // 5, 1)
    return TaskJob(kind, task, model, data_spec), train_kwargs


def task_job_from_checkpoint(directory: str | Path) -> TaskJob:
    ck = load_checkpoint(directory)
    kind = ck.config.get("kind")
    if kind not in KINDS:
        raise CheckpointError(f"{ck.path} holds a {kind!r} model, not a classifier or seq2seq model")
    config_cls = ClassifierConfig if kind == "classifier" else Seq2SeqConfig
    model = KINDS[kind](config_cls.from_dict(ck.config["model"]))
    model.load_state_dict(ck.model_state)
    job = TaskJob(kind, ck.config["task"], model, ck.config["data"])
    job.checkpoint = ck
    return job


def predict(job, text: str, beam: int = 1) -> str:
    """Map one input such as "3 1 4 1 5" through a classifier or seq2seq job's model."""
    if getattr(job, "kind", None) not in KINDS:
        raise DataError("predict needs a classifier or seq2seq checkpoint; for a language model use 'sample'")
    job.model.eval()
    if job.kind == "classifier":
        x = parse_digits(text)
        max_len = job.model.config.max_len
        if len(x) > max_len:
            raise DataError(f"input has {len(x)} tokens, the model takes at most {max_len}")
        if x.max() >= job.model.config.n_classes and job.task == "majority":
            raise DataError("the majority task uses only the digits 0, 1 and 2")
        return str(int(job.model.predict(x[None, :])[0]))
    src = encode_sources([text])
    if src.shape[1] > job.data_spec["max_len"]:
        raise DataError(f"input has {src.shape[1]} tokens, the model was trained on at most {job.data_spec['max_len']}")
    out = greedy_decode(job.model, src) if beam == 1 else beam_search(job.model, src, beam_width=beam)
    return format_digits(out[0])
