"""Jobs for the toy tasks: an encoder classifier (majority) and an encoder-decoder (copy,
reverse, sort). Both implement the `scratchformer.training.jobs.Job` protocol, so the same
training loop, checkpoints and CLI serve them; their defaults are rows of
`scratchformer.training.jobs.RUN_DEFAULTS`.

Splits: the held-out sequences are drawn first (unique, never in training, see
`scratchformer.data.tasks.make_split`) and cut in two: the first `n_test` are the test split
(the bars are measured there), the next `n_test` the validation split (used during
training to pick the best checkpoint). The data are generated from the recorded seed, so a
task run needs no data file.
"""

from __future__ import annotations

from dataclasses import fields

import numpy as np

from scratchformer.data.tasks import (
    BOS,
    EOS,
    PAD,
    VOCAB_SIZE,
    check_task_fits,
    encode_sources,
    exact_match,
    format_digits,
    get_task,
    make_split,
    parse_digits,
)
from scratchformer.errors import ConfigError, DataError
from scratchformer.inference.beam import beam_search, greedy_decode
from scratchformer.limits.estimates import check_model_fits
from scratchformer.models import ClassifierConfig, Seq2SeqConfig, Seq2SeqTransformer, TransformerClassifier
from scratchformer.training.jobparts import GeneratedData, model_from_checkpoint, refuse_data_file


class TaskJob(GeneratedData):
    """What the classifier and the seq2seq jobs share: generated splits, batches, checkpoints."""

    kind: str  # "classifier" | "seq2seq": set by the subclasses, with their config and model classes
    config_class: type
    model_class: type
    eval_batch_size = 500  # examples per forward when evaluating a whole split

    def __init__(self, task: str, model, data_spec: dict):
        """data_spec: {"n_train", "n_test", "max_len", "seed"}: enough to regenerate the splits."""
        self.task, self.model, self.data_spec = task, model, data_spec
        train, held_out = make_split(
            task,
            data_spec["n_train"],
            2 * data_spec["n_test"],
            seed=data_spec["seed"],
            max_len=data_spec["max_len"],
        )
        n = data_spec["n_test"]
        self.splits = {
            "train": train,
            "test": held_out.subset(slice(0, n)),
            "val": held_out.subset(slice(n, 2 * n)),
        }

    # -- building ------------------------------------------------------------------------------
    @classmethod
    def create(cls, run_kind: str, model: dict, data: dict, seed: int) -> TaskJob:
        """A fresh model for task `run_kind`; `seed` fixes the initial weights and the data."""
        known = {f.name for f in fields(cls.config_class)}
        kwargs = {}
        for name, value in model.items():
            if name not in known:
                raise ConfigError(f"--{name.replace('_', '-')} does not apply to the {run_kind} task")
            kwargs[name] = value
        unknown = sorted(set(data) - {"n_train", "n_test", "max_len"})
        if unknown:  # a data file, a block size or a split seed: task data are generated
            flag = "--data" if unknown[0] == "path" else "--" + unknown[0].replace("_", "-")
            raise ConfigError(f"{flag} does not apply to the {run_kind} task")
        data_spec = {
            "n_train": data["n_train"],
            "n_test": data["n_test"],
            "max_len": data["max_len"],
            "seed": seed,
        }
        # the data's memory first: a --max-len that cannot fit sizes the model's positions too
        check_task_fits(run_kind, data_spec["n_train"] + 2 * data_spec["n_test"], data_spec["max_len"])
        config = cls.build_config(run_kind, kwargs, data_spec["max_len"])
        check_model_fits(config, cls.model_class, training=True, option="--n-embd or --n-layer")
        return cls(run_kind, cls.model_class(config, seed=seed), data_spec)

    @classmethod
    def from_checkpoint(cls, ck, data=None, allow_changed_data: bool = False) -> TaskJob:
        """The job of an already-read checkpoint. Task data are generated, never read: `data` is
        refused (and `allow_changed_data` has nothing to allow)."""
        refuse_data_file(data, ck)
        return cls(ck.config["task"], model_from_checkpoint(ck, cls), ck.config["data"])

    # -- training ------------------------------------------------------------------------------
    def train_batch(self, rng: np.random.Generator, batch_size: int):
        train = self.splits["train"]
        return train.subset(rng.integers(0, len(train), size=batch_size))

    def evaluation(self, split: str = "val", batches: int | None = None, **options):
        """Loss and the task's scores (see `_score`) on a whole split, or its first `batches`
        batches. A generator of batches, sent (logits, loss): training/evaluation.py."""
        data = self.splits[split]
        n = len(data) if batches is None else min(len(data), batches * self.eval_batch_size)
        total, count, scores = 0.0, 0, {}
        for start in range(0, n, self.eval_batch_size):
            batch = data.subset(slice(start, min(start + self.eval_batch_size, n)))
            _, loss = yield tuple(batch)
            weight = self._loss_weight(batch)
            total, count = total + loss * weight, count + weight
            for k, v in self._score(batch, **options).items():
                scores[k] = scores.get(k, 0) + v
        return {"loss": total / max(count, 1), **self._finish(scores, n)}

    def samples(self, n: int, rng: np.random.Generator, **options) -> list[str]:
        """A few held-out examples and the model's answers, shown while training."""
        if options:
            raise ConfigError(
                f"a {self.task} model does not generate text: use 'scratchformer predict DIR INPUT'"
            )
        data = self.splits["val"]
        return self._show(data.subset(rng.integers(0, len(data), size=n)))

    def viz_inputs(self, text: str | None) -> dict:
        """Digits as `predict` takes them (checked by predict), labelled by the task's vocabulary."""
        text = self.example_input if text is None else text
        answer = self.predict(text)
        ids = parse_digits(text)
        names = {PAD: "<pad>", BOS: "<bos>", EOS: "<eos>"}
        return {
            "ids": ids,
            "tokens": [str(i) for i in ids],
            "vocab_labels": [names.get(i, str(i)) for i in range(VOCAB_SIZE)],
            "title": f"scratchformer {self.task}: {text} -> {answer}",
            **self._viz_extra(ids),
        }

    def _viz_extra(self, ids) -> dict:
        return {}


class ClassifierJob(TaskJob):
    """The majority task: an encoder classifier. Scores: accuracy."""

    kind, config_class, model_class = "classifier", ClassifierConfig, TransformerClassifier
    example_input = "2 0 2 1 2 0 2 1"  # `viz`'s input when none is given

    @staticmethod
    def build_config(task: str, kwargs: dict, max_len: int) -> ClassifierConfig:
        return ClassifierConfig(
            vocab_size=VOCAB_SIZE, n_classes=get_task(task).n_classes, max_len=max_len, **kwargs
        )

    def _loss_weight(self, batch) -> int:
        return len(batch)  # the loss is a mean over examples

    def _score(self, batch, **options) -> dict:
        if options:
            raise ConfigError(f"--{next(iter(options))} applies to seq2seq models only")
        return {"hits": int((self.model.predict(batch.x) == batch.y).sum())}

    def _finish(self, scores: dict, n: int) -> dict:
        return {"accuracy": scores.get("hits", 0) / max(n, 1)}

    def _viz_extra(self, ids) -> dict:
        # the figure shows the true class and the test accuracy beside the prediction; the PCA
        # shows only the tokens the task uses (the shared 13-token vocabulary has 10 unused here)
        return {
            "class_names": [f"{self.task} {c}" for c in range(self.model.config.n_classes)],
            "true_class": int(get_task(self.task).rule(list(ids))),
            "accuracy": self.evaluate("test")["accuracy"],
            "token_ids": list(range(get_task(self.task).symbols)),
        }

    def _show(self, picked) -> list[str]:
        predicted = self.model.predict(picked.x)
        return [f"{format_digits(x)} -> {p} (true {y})" for x, y, p in zip(picked.x, picked.y, predicted)]

    def predict(self, text: str, **options) -> str:
        """The class of one input such as "0 1 2 2"."""
        if options:
            raise ConfigError(f"--{next(iter(options))} applies to seq2seq models only")
        x = parse_digits(text)
        max_len = self.model.config.max_len
        if len(x) > max_len:
            raise DataError(f"input has {len(x)} tokens, the model takes at most {max_len}")
        symbols = get_task(self.task).symbols
        if x.max() >= symbols:
            digits = ", ".join(map(str, range(symbols - 1))) + f" and {symbols - 1}"
            raise DataError(f"the {self.task} task uses only the digits {digits}")
        return str(int(self.model.predict(x[None, :])[0]))


class Seq2SeqJob(TaskJob):
    """copy, reverse, sort: an encoder-decoder. Scores: exact match and token accuracy of greedy
    decoding, or of beam search with the option `beam` (a width > 1)."""

    kind, config_class, model_class = "seq2seq", Seq2SeqConfig, Seq2SeqTransformer
    example_input = "3 1 4 1 5"  # `viz`'s input when none is given

    @staticmethod
    def build_config(task: str, kwargs: dict, max_len: int) -> Seq2SeqConfig:
        return Seq2SeqConfig(
            src_vocab_size=VOCAB_SIZE,
            tgt_vocab_size=VOCAB_SIZE,
            max_len=max_len + 1,
            pad_id=PAD,
            bos_id=BOS,
            eos_id=EOS,
            **kwargs,
        )

    def _loss_weight(self, batch) -> int:
        return int((batch.tgt_out != PAD).sum())  # the loss is a mean over real target tokens

    def _decode(self, src: np.ndarray, max_new_tokens: int | None = None, beam: int = 1) -> np.ndarray:
        if beam == 1:
            return greedy_decode(self.model, src, max_new_tokens=max_new_tokens)
        return beam_search(self.model, src, beam_width=beam, max_new_tokens=max_new_tokens)

    def _score(self, batch, beam: int = 1) -> dict:
        pred = self._decode(batch.src, batch.tgt_out.shape[1], beam)
        h, c = _token_hits(pred, batch.tgt_out)
        return {"hits": int(exact_match(pred, batch.tgt_out).sum()), "tok_hits": h, "tok_count": c}

    def _finish(self, scores: dict, n: int) -> dict:
        return {
            "exact_match": scores.get("hits", 0) / max(n, 1),
            "token_accuracy": scores.get("tok_hits", 0) / max(scores.get("tok_count", 0), 1),
        }

    def _show(self, picked) -> list[str]:
        return [
            f"{format_digits(s)} -> {format_digits(p)}" for s, p in zip(picked.src, self._decode(picked.src))
        ]

    def predict(self, text: str, beam: int = 1) -> str:
        """The decoded output for one input such as "3 1 4 1 5"."""
        src = encode_sources([text])
        if src.shape[1] > self.data_spec["max_len"]:
            raise DataError(
                f"input has {src.shape[1]} tokens, the model was trained on at most "
                f"{self.data_spec['max_len']}"
            )
        return format_digits(self._decode(src, beam=beam)[0])


def _token_hits(pred: np.ndarray, tgt_out: np.ndarray) -> tuple[int, int]:
    """Target tokens (EOS included, padding excluded) predicted at their position."""
    L = tgt_out.shape[1]
    if pred.shape[1] < L:
        pred = np.concatenate([pred, np.full((len(pred), L - pred.shape[1]), PAD)], axis=1)
    real = tgt_out != PAD
    return int(((pred[:, :L] == tgt_out) & real).sum()), int(real.sum())
