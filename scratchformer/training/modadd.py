"""Modular addition (`train --task modadd`): a GPT learns (a + b) mod p from `a b =` and groks
(Nanda et al. 2023, "Progress measures for grokking via mechanistic interpretability").

The job trains full-batch on a seeded fraction of the p^2 pairs (`data.tasks.modadd_split`);
the loss is read at the last position only: the targets are IGNORE_INDEX (-100) at `a` and `b`
and the answer at '=', so the model's loss (a mean over valid targets) is the mean over pairs.
The held-out pairs are the test split; the paper has no validation split, so "val" (what the
trainer evaluates to pick best/) is the same held-out pairs.

Progress measures (`progress_measures`, a `"modadd"` entry in each diagnostics.jsonl record):

    train_loss, train_accuracy, test_loss, test_accuracy   on the two splits
    freq_norms      ((p-1)/2,) the norm of the token embedding's Fourier component at each
                    frequency k = 1..(p-1)/2: the DFT over the p input tokens, taken with the
                    orthonormal real basis (`fourier_basis`), sqrt(|cos_k|^2 + |sin_k|^2)
    key_freqs       the N_KEY frequencies of largest norm
    restricted_loss loss on all p^2 pairs of the logits kept only on the key frequencies:
                    the constant term plus the components along cos(w_k (a + b)) and
                    sin(w_k (a + b)) of each key k (w_k = 2 pi k / p)
    excluded_loss   loss on the training pairs of the logits with those components removed
    weight_norm     sqrt of the sum of every parameter's squares
    fourier_check   max |logits - the 2-D Fourier decomposition of the logits summed back|
                    (float64; the decomposition is exact: ~1e-12)
"""

from __future__ import annotations

import numpy as np

from scratchformer.checks import ascii_digits
from scratchformer.data.tasks import ClassificationData, modadd_split
from scratchformer.errors import ConfigError, DataError
from scratchformer.limits.estimates import check_model_fits
from scratchformer.models import GPT, GPTConfig
from scratchformer.nn import eval_mode
from scratchformer.ops.loss import IGNORE_INDEX
from scratchformer.training.jobparts import GeneratedData, model_from_checkpoint, refuse_data_file

N_KEY = 5  # key frequencies: the paper finds 5 for p = 113 (k = 14, 35, 41, 42, 52 in its run)
EVAL_ROWS = 4096  # pairs per forward when evaluating


def targets_of(data: ClassificationData) -> np.ndarray:
    """(n, 3) targets: IGNORE_INDEX at `a` and `b`, the answer at '=' (the only position the loss reads)."""
    t = np.full(data.x.shape, IGNORE_INDEX, dtype=np.int64)
    t[:, -1] = data.y
    return t


def fourier_basis(p: int) -> np.ndarray:
    """(p, p) orthonormal real Fourier basis over 0..p-1 (p odd): row 0 the constant 1/sqrt(p),
    rows 2k-1 and 2k cos(w_k a) and sin(w_k a) scaled to unit norm, w_k = 2 pi k / p."""
    a = np.arange(p)
    rows = [np.ones(p)]
    for k in range(1, (p - 1) // 2 + 1):
        rows += [np.cos(2 * np.pi * k * a / p), np.sin(2 * np.pi * k * a / p)]
    F = np.array(rows, dtype=np.float64)
    return F / np.linalg.norm(F, axis=1, keepdims=True)


def frequency_norms(table: np.ndarray) -> np.ndarray:
    """table (p, C): one row per input token -> ((p-1)/2,) norm of frequency k = 1..(p-1)/2."""
    p = table.shape[0]
    coef = fourier_basis(p) @ np.asarray(table, dtype=np.float64)  # (p, C)
    return np.sqrt((coef[1::2] ** 2).sum(1) + (coef[2::2] ** 2).sum(1))


def fourier_decompose(logits: np.ndarray) -> np.ndarray:
    """logits (p, p, V) over (a, b) -> coefficients (p, p, V) in the 2-D basis F(a) F(b)."""
    F = fourier_basis(logits.shape[0])
    over_a = np.tensordot(F, logits, axes=(1, 0))  # (i, b, V)
    return np.tensordot(F, over_a, axes=(1, 1)).transpose(1, 0, 2)  # (i, j, V)


def fourier_recompose(coef: np.ndarray) -> np.ndarray:
    """The inverse of `fourier_decompose`: the sum of every 2-D component, (p, p, V)."""
    F = fourier_basis(coef.shape[0])
    over_i = np.tensordot(F, coef, axes=(0, 0))  # (a, j, V)
    return np.tensordot(F, over_i, axes=(0, 1)).transpose(1, 0, 2)  # (a, b, V)


def key_components(logits: np.ndarray, freqs) -> np.ndarray:
    """The part of logits (p, p, V) along cos(w_k (a + b)) and sin(w_k (a + b)) for each k of freqs."""
    p = logits.shape[0]
    s = np.add.outer(np.arange(p), np.arange(p))
    out = np.zeros_like(logits)
    for k in freqs:
        for d in (np.cos(2 * np.pi * k * s / p), np.sin(2 * np.pi * k * s / p)):
            d = d / np.linalg.norm(d)  # unit direction over the p^2 pairs
            out += d[:, :, None] * np.tensordot(d, logits, axes=([0, 1], [0, 1]))[None, None, :]
    return out


def _loss_acc(logits: np.ndarray, answers: np.ndarray) -> tuple[float, float]:
    """Mean cross-entropy (float64) and accuracy of rows of logits (n, V) against answers (n,)."""
    z = logits - logits.max(1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(1, keepdims=True))
    return float(-logp[np.arange(len(answers)), answers].mean()), float((logits.argmax(1) == answers).mean())


class ModAddJob(GeneratedData):
    """`train --task modadd`: a GPT over p + 1 tokens (0..p-1 and '='), full-batch, loss at '='."""

    kind, config_class, model_class = "modadd", GPTConfig, GPT

    def __init__(self, task: str, model, data_spec: dict):
        """data_spec: {"modulus", "train_fraction", "max_len", "seed"}: what regenerates the split."""
        self.task, self.model, self.data_spec = task, model, data_spec
        self.p = int(data_spec["modulus"])
        train, test = modadd_split(self.p, data_spec["train_fraction"], data_spec["seed"])
        self.splits = {"train": train, "test": test, "val": test}

    @classmethod
    def create(cls, run_kind: str, model: dict, data: dict, seed: int) -> ModAddJob:
        known = {f for f in GPTConfig.__dataclass_fields__}
        for name in model:
            if name not in known or name in ("vocab_size", "block_size"):
                raise ConfigError(f"--{name.replace('_', '-')} does not apply to the {run_kind} task")
        unknown = sorted(set(data) - {"modulus", "train_fraction", "max_len"})
        if unknown:
            flag = "--data" if unknown[0] == "path" else "--" + unknown[0].replace("_", "-")
            raise ConfigError(f"{flag} does not apply to the {run_kind} task")
        spec = {
            "modulus": data["modulus"],
            "train_fraction": data["train_fraction"],
            "max_len": 3,
            "seed": seed,
        }
        modadd_split(spec["modulus"], spec["train_fraction"], seed)  # bad values: one line, before the model
        config = GPTConfig(vocab_size=spec["modulus"] + 1, block_size=3, **model)
        check_model_fits(config, GPT, training=True, option="--n-embd or --n-layer")
        return cls(run_kind, GPT(config, seed=seed), spec)

    @classmethod
    def from_checkpoint(cls, ck, data=None, allow_changed_data: bool = False) -> ModAddJob:
        refuse_data_file(data, ck)  # the pairs are generated from the recorded seed
        return cls(ck.config["task"], model_from_checkpoint(ck, cls), ck.config["data"])

    # -- training ------------------------------------------------------------------------------
    def train_batch(self, rng: np.random.Generator, batch_size: int):
        """(x (n, 3), targets (n, 3)): the whole training split when batch_size covers it (the
        paper's full batch; rng is then not drawn from), else batch_size pairs drawn from it."""
        train = self.splits["train"]
        picked = (
            train if batch_size >= len(train) else train.subset(rng.integers(0, len(train), size=batch_size))
        )
        return picked.x, targets_of(picked)

    def _last_logits(self, x: np.ndarray) -> np.ndarray:
        """x (n, 3) -> (n, V) float64 logits at '=', eval mode."""
        if len(x) == 0:
            return np.zeros((0, self.p + 1))
        with eval_mode(self.model):
            return np.concatenate(
                [
                    self.model(x[i : i + EVAL_ROWS])[0][:, -1].astype(np.float64)
                    for i in range(0, len(x), EVAL_ROWS)
                ]
            )

    def evaluation(self, split: str = "val", batches: int | None = None, **options):
        """{"loss", "accuracy"} at '=' on a whole split (batches: its first batches * EVAL_ROWS pairs).
        A generator of inputs (x,), sent (logits, None): training/evaluation.py."""
        if options:
            raise ConfigError(f"--{next(iter(options))} applies to seq2seq models only")
        data = self.splits[split]
        n = len(data) if batches is None else min(len(data), batches * EVAL_ROWS)
        last = [np.zeros((0, self.p + 1))]  # the logits at '=', (n, V) float64 once joined
        for i in range(0, n, EVAL_ROWS):
            logits, _ = yield (data.x[i : min(i + EVAL_ROWS, n)],)
            last.append(logits[:, -1].astype(np.float64))
        loss, acc = _loss_acc(np.concatenate(last), data.y[:n])
        return {"loss": loss, "accuracy": acc}

    def samples(self, n: int, rng: np.random.Generator, **options) -> list[str]:
        if options:
            raise ConfigError(
                "a modadd model does not generate text: use 'scratchformer predict DIR \"a b\"'"
            )
        test = self.splits["test"]
        picked = test.subset(rng.integers(0, len(test), size=n))
        pred = self._last_logits(picked.x).argmax(1)
        return [
            f"{a} + {b} = {c} (mod {self.p}; true {y})" for (a, b, _), y, c in zip(picked.x, picked.y, pred)
        ]

    def _parse(self, text: str) -> np.ndarray:
        parts = str(text).replace("=", " ").split()
        if len(parts) != 2 or not all(ascii_digits(t) and int(t) < self.p for t in parts):
            raise DataError(f"expected two numbers 0..{self.p - 1} such as '5 7', got {text!r}")
        return np.array([int(parts[0]), int(parts[1]), self.p], dtype=np.int64)

    def predict(self, text: str, **options) -> str:
        """(a + b) mod p as the model answers it, for an input such as "5 7"."""
        if options:
            raise ConfigError(f"--{next(iter(options))} applies to seq2seq models only")
        return str(int(self._last_logits(self._parse(text)[None])[0].argmax()))

    @property
    def example_input(self) -> str:
        """`viz`'s input when none is given: 5 + 7 (1 + 2 for p <= 7)."""
        return "5 7" if self.p > 7 else "1 2"

    def viz_inputs(self, text: str | None) -> dict:
        text = self.example_input if text is None else text
        ids = self._parse(text)
        answer = self.predict(text)
        return {
            "ids": ids,
            "tokens": [str(ids[0]), str(ids[1]), "="],
            "vocab_labels": [str(i) for i in range(self.p)] + ["="],
            "title": f"scratchformer modadd: {ids[0]} + {ids[1]} = {answer} (mod {self.p})",
        }

    # -- progress measures ---------------------------------------------------------------------
    def progress_measures(self) -> dict:
        """The measures of the module docstring, for the model as it stands now."""
        return {"modadd": progress_measures(self.model, self.p, self.splits)}  # one key of the record


def all_pairs(p: int) -> np.ndarray:
    """(p^2, 3) rows `a b =`, a-major: row a * p + b."""
    a, b = np.divmod(np.arange(p * p), p)
    return np.stack([a, b, np.full(p * p, p)], axis=1).astype(np.int64)


def progress_measures(model, p: int, splits: dict) -> dict:
    """The grokking progress measures of `model` (see the module docstring); splits: "train" and
    "test" ClassificationData of `modadd_split`."""
    with eval_mode(model):
        x = all_pairs(p)
        logits = np.concatenate(
            [model(x[i : i + EVAL_ROWS])[0][:, -1].astype(np.float64) for i in range(0, len(x), EVAL_ROWS)]
        ).reshape(p, p, -1)
    answers = np.add.outer(np.arange(p), np.arange(p)) % p
    out = {}
    for name in ("train", "test"):
        d = splits[name]
        out[f"{name}_loss"], out[f"{name}_accuracy"] = _loss_acc(logits[d.x[:, 0], d.x[:, 1]], d.y)
    norms = frequency_norms(model.token_table()[:p])
    key = sorted((np.argsort(-norms, kind="stable")[:N_KEY] + 1).tolist())
    coef = fourier_decompose(logits)
    check = float(np.abs(fourier_recompose(coef) - logits).max())
    keep = key_components(logits, key)
    restricted = logits.mean(axis=(0, 1), keepdims=True) + keep
    tr = splits["train"]
    excluded = (logits - keep)[tr.x[:, 0], tr.x[:, 1]]
    out.update(
        {
            "freq_norms": norms.tolist(),
            "key_freqs": key,
            "restricted_loss": _loss_acc(restricted.reshape(p * p, -1), answers.reshape(-1))[0],
            "excluded_loss": _loss_acc(excluded, tr.y)[0],
            "weight_norm": float(
                np.sqrt(sum(float((q.data.astype(np.float64) ** 2).sum()) for q in model.parameters()))
            ),
            "fourier_check": check,
        }
    )
    return out


# The fast preset (docs/results.md): what `train --task modadd` takes on top of its defaults to
# grok in minutes on 2 cores. The knobs: a smaller modulus (p = 31: 961 pairs, 13x fewer than
# 113^2, so a full-batch step is that much cheaper), 70% of the pairs for training instead of
# 30% (with 50% at p = 31 two seeds had not grokked by step 2,000: docs/results.md), and lr 3e-3
# (the weight decay shrinks the weights 3x faster). The CLI form:
#   scratchformer train --task modadd --modulus 31 --train-fraction 0.7 --lr 3e-3 --min-lr 3e-3 \
#       --max-steps 3000 --diag-interval 25
# (all 5 seeds measured grok by step 2,175, 3 of them by 1,400; about 2 minutes of CPU)
FAST_PRESET = {
    "model": {},
    "train": {"lr": 3e-3, "min_lr": 3e-3, "max_steps": 3000, "eval_interval": 100, "diag_interval": 25},
    "data": {"modulus": 31, "train_fraction": 0.7},
}
