"""Modular addition (`train --task modadd`): a GPT learns (a + b) mod p from `a b =` and groks
(Nanda et al. 2023, "Progress measures for grokking via mechanistic interpretability").

The job trains full-batch on a seeded fraction of the p^2 pairs (`data.tasks.modadd_split`);
the loss is read at the last position only: the targets are IGNORE_INDEX (-100) at `a` and `b`
and the answer at '=', so the model's loss (a mean over valid targets) is the mean over pairs.
The held-out pairs are the test split; the paper has no validation split, so "val" (what the
trainer evaluates to pick best/) is the same held-out pairs.

Progress measures (`progress_measures`, a `"modadd"` entry in each diagnostics.jsonl record), all
read from the logits at '=' of all p^2 pairs with the '=' class dropped (the paper's code reads
the p answers only):

    train_loss, train_accuracy, test_loss, test_accuracy   on the two splits
    freq_norms      ((p-1)/2,) the norm of the token embedding's Fourier component at each
                    frequency k = 1..(p-1)/2: the DFT over the p input tokens, taken with the
                    orthonormal real basis (`fourier_basis`), sqrt(|cos_k|^2 + |sin_k|^2)
    key_freqs       the key frequencies at this record: each k whose share of the embedding's
                    squared Fourier norm is at least KEY_SHARE times a flat spectrum's share
                    (KEY_SHARE / K of it, K = (p-1)/2), so their number follows the run: none at
                    initialisation (a random embedding is flat), the few the circuit uses at the end
    key_share       the share of the embedding's squared Fourier norm the key frequencies hold
    gini            the Gini coefficient (Hurley & Rickard 2009) of freq_norms: 0 for a flat
                    spectrum, 1 - 1/K when one frequency holds it all
    restricted_loss loss on all p^2 pairs of the logits kept only on the key frequencies:
                    the constant term plus the components along cos(w_k (a + b)) and
                    sin(w_k (a + b)) of each key k (w_k = 2 pi k / p)
    excluded_loss   loss on the training pairs of the logits with those components removed
                    (all key frequencies at once: the paper's "full excluded loss")
    weight_norm     the l2 norm of the weights: sqrt of the sum of every parameter's squares
    fourier_check   max |logits - the 2-D Fourier decomposition of the logits summed back|
                    (float64; the decomposition is exact: ~1e-12)

The paper chose its key frequencies once, from the final model (its Appendix C.2: "we perform a
DFT on the neuron-logit map W_L, then take the frequencies with nontrivial coefficients"), and
used them at every checkpoint; a record here cannot see the end of its run, so it takes them
from the embedding as it stands (docs/results.md says where this differs).
"""

from __future__ import annotations

import numpy as np

from scratchformer.checks import ascii_digits
from scratchformer.data.tasks import ClassificationData, modadd_split
from scratchformer.errors import ConfigError, DataError
from scratchformer.limits.estimates import check_model_fits
from scratchformer.limits.memory import check_fits
from scratchformer.models import GPT, GPTConfig
from scratchformer.nn import eval_mode
from scratchformer.ops.loss import IGNORE_INDEX
from scratchformer.training.jobparts import GeneratedData, model_from_checkpoint, refuse_data_file

# A key frequency holds at least KEY_SHARE times the share of the embedding's squared Fourier norm a
# flat spectrum gives each of the K frequencies. A random embedding is flat to within ~10% per
# frequency at width 128 (a chi-square of 256 degrees of freedom), so none is key at
# initialisation; the paper's grokked model (p = 113) holds its norm in 5 of 56 frequencies, ~20%
# each against a flat 1.8%.
KEY_SHARE = 2.0
EVAL_ROWS = 4096  # pairs per forward when evaluating
INPUT_LEN = 3  # tokens of an input: 'a b ='
# float64 (p, p, p) arrays the progress measures hold at once, at most: the logits, their 2-D
# Fourier coefficients and sum back, the key components, the restricted and excluded logits, and
# the temporaries of the differences
PROGRESS_COPIES = 8


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


def key_frequencies(norms: np.ndarray) -> list[int]:
    """norms (K,) per frequency k = 1..K -> the key frequencies (see the module docstring), ascending."""
    power = np.asarray(norms, dtype=np.float64) ** 2
    if not power.sum() > 0:
        return []
    return (np.flatnonzero(power / power.sum() >= KEY_SHARE / len(power)) + 1).tolist()


def gini(values: np.ndarray) -> float:
    """Hurley & Rickard's Gini coefficient of non-negative values (n,): with c sorted ascending,
    1 - 2 sum_k (c_k / |c|_1) (n - k + 1/2) / n; 0 when all are equal (or all 0)."""
    c = np.sort(np.asarray(values, dtype=np.float64))
    if not c.sum() > 0:
        return 0.0
    n = len(c)
    return float(1 - 2 * np.sum(c / c.sum() * (n - np.arange(1, n + 1) + 0.5) / n))


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
        if data.get("max_len", INPUT_LEN) not in (None, INPUT_LEN):  # the inputs are 'a b =', always
            raise ConfigError(
                f"--max-len does not apply to the {run_kind} task: its inputs are 'a b =', 3 tokens"
            )
        spec = {
            "modulus": data["modulus"],
            "train_fraction": data["train_fraction"],
            "max_len": INPUT_LEN,
            "seed": seed,
        }
        modadd_split(spec["modulus"], spec["train_fraction"], seed)  # bad values: one line, before the model
        config = GPTConfig(vocab_size=spec["modulus"] + 1, block_size=INPUT_LEN, **model)
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
    check_fits(
        PROGRESS_COPIES * 8 * p**3, f"the progress measures' logits of the {p * p:,} pairs", "--modulus"
    )
    with eval_mode(model):
        x = all_pairs(p)
        logits = np.concatenate(
            [model(x[i : i + EVAL_ROWS])[0][:, -1].astype(np.float64) for i in range(0, len(x), EVAL_ROWS)]
        )[:, :p].reshape(p, p, p)  # the '=' class dropped: the answers are 0..p-1
    weights = np.sqrt(sum(float((q.data.astype(np.float64) ** 2).sum()) for q in model.parameters()))
    return {**logit_measures(logits, model.token_table()[:p], splits), "weight_norm": float(weights)}


def logit_measures(logits: np.ndarray, table: np.ndarray, splits: dict) -> dict:
    """The measures of the module docstring but the weight norm, from the logits (p, p, p) of every
    pair (a, b) over the answers and the token embedding's rows for 0..p-1, table (p, C)."""
    p = logits.shape[0]
    answers = np.add.outer(np.arange(p), np.arange(p)) % p
    out = {}
    for name in ("train", "test"):
        d = splits[name]
        out[f"{name}_loss"], out[f"{name}_accuracy"] = _loss_acc(logits[d.x[:, 0], d.x[:, 1]], d.y)
    norms = frequency_norms(table)
    key = key_frequencies(norms)
    keep = key_components(logits, key)
    restricted = logits.mean(axis=(0, 1), keepdims=True) + keep
    tr = splits["train"]
    excluded = (logits - keep)[tr.x[:, 0], tr.x[:, 1]]
    out.update(
        {
            "freq_norms": norms.tolist(),
            "key_freqs": key,
            "key_share": float((norms[[k - 1 for k in key]] ** 2).sum() / max((norms**2).sum(), 1e-300)),
            "gini": gini(norms),
            "restricted_loss": _loss_acc(restricted.reshape(p * p, -1), answers.reshape(-1))[0],
            "excluded_loss": _loss_acc(excluded, tr.y)[0],
            "fourier_check": float(np.abs(fourier_recompose(fourier_decompose(logits)) - logits).max()),
        }
    )
    return out


# The fast preset (`train --task modadd --preset fast`; measured in docs/results.md, where the
# search that found it is): what it takes on top of the paper's settings (RUN_DEFAULTS["modadd"])
# to grok in minutes on 2 cores with generalisation delayed as the paper's is. The knobs: a
# smaller modulus (p = 31: 961 pairs, 13x fewer than 113^2, so a full-batch step is that much
# cheaper); 45% of the pairs (50% left 42-47% of the test pairs right when the training set was
# memorised, generalisation barely delayed; 40% and 45% at weight decay 1 stalled at 89-96% test
# accuracy in some seeds); lr 3e-3 and weight decay 3 (the decay shrinks the weights 9x faster per
# step than the paper's 1e-3 x 1, and the cleanup finishes: 5 of 5 seeds grokked).
FAST_PRESET = {
    "model": {},
    "train": {
        "lr": 3e-3,
        "min_lr": 3e-3,
        "weight_decay": 3.0,
        "max_steps": 3000,
        "eval_interval": 500,
        "diag_interval": 25,
    },
    "data": {"modulus": 31, "train_fraction": 0.45},
}
PRESETS = {"paper": {"model": {}, "train": {}, "data": {}}, "fast": FAST_PRESET}


def preset_flags(name: str) -> str:
    """A preset as the command-line options it stands for ("--modulus 31 --lr 0.003 ...")."""
    preset = PRESETS[name]
    return " ".join(
        f"--{key.replace('_', '-')} {value:g}"
        for section in preset.values()
        for key, value in section.items()
    )
