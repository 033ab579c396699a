"""The induction job: a GPT language model on generated repeated sequences (data/induction.py),
with the progress measures of Olsson et al. 2022 recorded while it trains, and their
in-context learning score of any language model (`icl_score`).

It implements the `scratchformer.training.jobs.Job` protocol (the "induction" row of RUN_DEFAULTS
holds its defaults); its model is an ordinary `GPT`, so `sample`, `eval`, `viz` and `lens` read
the run as any language-model run. The data are generated from the run's seed (a resume
generates the same); the tokenizer is `induction_tokenizer(vocab)`, kept in tokenizer.json.

`progress_measures()` is what the diagnostics recorder (training/diagnostics.py) adds to each
record of diagnostics.jsonl, on a fixed batch of PROBE_SEQUENCES held-out sequences:

    loss_first      mean loss on the targets of the prefix and first copy (random: about log(symbols))
    loss_repeat     mean loss on the repeated targets (`target_masks`)
    repeat_advantage mean loss on the last quarter of the target positions minus the mean loss on
                    the first quarter (negative: the context helps). Not Olsson et al.'s
                    in-context learning score (`icl_score`, below): these sequences are 32 tokens
    heads           labels "L0", "L1", ... (one per layer)
    prefix_matching (n_layer, n_head): attention from each query to the position just after an
                    earlier occurrence of its token (lens.head_scores "induction")
    previous_token  (n_layer, n_head): attention to the position before (lens.head_scores "previous")
    best_head       [layer, head] of the highest prefix-matching score; worst_head: the lowest
                    of the other heads (the best itself in a one-head model). In the default
                    model (one head per layer) that is layer 0's previous-token head, which the
                    induction head reads: low on prefix matching, but no bystander
    ablate_best     loss_repeat with the best head's output zeroed (lens.run_with_hooks on its
                    head_out) minus loss_repeat without; ablate_worst the same for worst_head
    induction_heads [layer, head] of every head prefix-matching above INDUCTION_HEAD (0.5)
    ablate_induction the same ablation with all of them zeroed together (0 when there are none):
                    several heads may share the work, so that one alone brings back little
"""

from __future__ import annotations

import numpy as np

from scratchformer import lens
from scratchformer.data.induction import (
    check_induction_sizes,
    check_split_fits,
    induction_tokenizer,
    inputs_targets,
    make_induction_split,
    segment_lengths,
    target_masks,
)
from scratchformer.errors import ConfigError, DataError
from scratchformer.limits.estimates import check_model_fits
from scratchformer.models import GPT, GPTConfig
from scratchformer.nn import eval_mode
from scratchformer.ops.loss import IGNORE_INDEX
from scratchformer.training.jobparts import model_from_checkpoint, refuse_data_file, task_config_dict
from scratchformer.training.lm import LMJob

# Olsson et al. 2022 ("In-context Learning and Induction Heads", Key Concepts): "the loss of the
# 500th token in the context minus the average loss of the 50th token in the context, averaged
# over dataset examples"; the 500th token is near the end of their 512-token context.
ICL_EARLY, ICL_LATE = 50, 500
PROBE_SEQUENCES = 64  # held-out sequences the progress measures are taken on
INDUCTION_HEAD = 0.5  # prefix-matching score above which a head counts as an induction head
DATA_KEYS = ("symbols", "block_size", "repeats", "n_train", "n_test")


def token_losses(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """logits (B, T, V), targets (B, T) -> (B, T) float64 cross-entropy per position (NaN where
    the target is IGNORE_INDEX)."""
    z = np.asarray(logits, np.float64)
    z = z - z.max(-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
    valid = targets != IGNORE_INDEX
    picked = np.take_along_axis(logp, np.where(valid, targets, 0)[..., None], -1)[..., 0]
    return np.where(valid, -picked, np.nan)


def icl_score(model, windows: np.ndarray, early: int = ICL_EARLY, late: int = ICL_LATE) -> dict:
    """Olsson et al. 2022's in-context learning score of a language model on `windows` (B, T) of
    token ids, T > late: the mean over windows of the loss on their late-th token minus the loss
    on their early-th (tokens counted from 1; the i-th is predicted at position i - 2 from the
    i - 1 tokens before it), in eval mode. Negative: later tokens are predicted better, the
    context helps. Returns {"icl_score", "loss_early", "loss_late", "windows"}."""
    windows = np.asarray(windows)
    if windows.ndim != 2 or windows.shape[1] <= late or not 1 < early < late:
        raise DataError(
            f"the in-context learning score reads token {late} of each window: windows of more than "
            f"{late} tokens are needed, got shape {windows.shape}"
        )
    x, y = windows[:, :-1], windows[:, 1:]
    with eval_mode(model):
        per_token = np.concatenate(
            [token_losses(model(x[i : i + 8])[0], y[i : i + 8]) for i in range(0, len(x), 8)]
        )
    early_loss, late_loss = per_token[:, early - 2], per_token[:, late - 2]
    return {
        "icl_score": float((late_loss - early_loss).mean()),
        "loss_early": float(early_loss.mean()),
        "loss_late": float(late_loss.mean()),
        "windows": len(windows),
    }


class InductionJob(LMJob):
    """A GPT on the induction task. data_spec: {"symbols", "block_size", "repeats", "n_train",
    "n_test", "seed"}: enough to generate the splits again."""

    kind = "induction"
    task = "induction"
    eval_batch_size = 256

    def __init__(self, model: GPT, data_spec: dict):
        super().__init__(model, None, data_spec, induction_tokenizer(data_spec["symbols"]))
        s = data_spec
        check_split_fits(s["n_train"], 2 * s["n_test"], s["block_size"])  # before any command goes on
        self._splits: dict | None = None

    @classmethod
    def create(cls, run_kind: str, model: dict, data: dict, seed: int) -> InductionJob:
        unknown = sorted(set(k for k, v in data.items() if v is not None) - set(DATA_KEYS))
        if unknown:  # a data file or a tokenizer: the task generates its data
            flag = "--data" if unknown[0] == "path" else "--" + unknown[0].replace("_", "-")
            raise ConfigError(f"{flag} does not apply to the induction task (it generates its data)")
        spec = {k: data[k] for k in DATA_KEYS}
        spec["seed"] = seed
        check_induction_sizes(spec["symbols"], spec["block_size"], spec["repeats"])
        config = GPTConfig(vocab_size=spec["symbols"], block_size=spec["block_size"], **model)
        check_model_fits(config, GPT, training=True)
        return cls(GPT(config, seed=seed), spec)

    @classmethod
    def from_checkpoint(cls, ck, data=None, allow_changed_data: bool = False) -> InductionJob:
        refuse_data_file(data, ck)
        return cls(model_from_checkpoint(ck, cls), dict(ck.config["data"]))

    @property
    def splits(self) -> dict[str, np.ndarray]:
        """ "train", "val", "test": (n, block_size) sequences, generated on first use."""
        if self._splits is None:
            s = self.data_spec
            train, held = make_induction_split(
                s["n_train"], 2 * s["n_test"], s["symbols"], s["block_size"], s["repeats"], s["seed"]
            )
            n = len(held) // 2
            self._splits = {"train": train, "test": held[:n], "val": held[n:]}
        return self._splits

    @property
    def dataset(self):
        raise DataError("the induction task has no data file: its sequences are generated (job.splits)")

    def config_dict(self) -> dict:
        return task_config_dict(self)

    default_split = "test"

    # -- training ------------------------------------------------------------------------------
    def train_batch(self, rng: np.random.Generator, batch_size: int):
        train = self.splits["train"]
        return inputs_targets(train[rng.integers(0, len(train), size=batch_size)])

    def masks(self, seqs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(first, repeated) bool (B, T): data/induction.py `target_masks`."""
        return target_masks(seqs, self.data_spec["repeats"])

    def evaluation(self, split: str = "val", batches: int | None = None, **options):
        """loss (every target), loss_first and loss_repeat (see `target_masks`) and
        repeat_accuracy (argmax on the repeated targets) over a split, or its first `batches`
        batches. A generator of inputs (x,), sent (logits, None): training/evaluation.py."""
        if options:
            raise ConfigError(f"--{next(iter(options)).replace('_', '-')} applies to seq2seq models only")
        seqs = self.splits[split]
        n = len(seqs) if batches is None else min(len(seqs), batches * self.eval_batch_size)
        first, rep = self.masks(seqs[:n])
        losses, correct = [], []
        for start in range(0, n, self.eval_batch_size):
            x, y = inputs_targets(seqs[start : start + self.eval_batch_size])
            logits, _ = yield (x,)
            losses.append(token_losses(logits, y))
            correct.append(logits.argmax(-1) == y)
        tl, ok = np.concatenate(losses), np.concatenate(correct)
        return {
            "loss": float(np.nanmean(tl)),
            "loss_first": float(tl[first].mean()),
            "loss_repeat": float(tl[rep].mean()),
            "repeat_accuracy": float(ok[rep].mean()),
        }

    def in_training_data(self, texts: list[str]) -> list[bool] | None:
        return None

    def samples(
        self, n: int, rng: np.random.Generator, prompt: str = "", max_new_tokens: int | None = None, **options
    ) -> list[str]:
        """Without a prompt: n held-out sequences up to the end of their first copy, continued
        greedily to the sequence's length (a model with induction heads repeats the segment)."""
        if prompt:
            return super().samples(n, rng, prompt=prompt, max_new_tokens=max_new_tokens, **options)
        T, repeats = self.data_spec["block_size"], self.data_spec["repeats"]
        out = []
        for row in self.splits["val"][rng.integers(0, len(self.splits["val"]), size=n)]:
            start = T - (repeats - 1) * int(segment_lengths(row[None], repeats)[0])  # the second copy's start
            new = max_new_tokens or T - start
            out.append(self.tokenizer.decode(self.model.generate(row[None, :start], new, temperature=0.0)[0]))
        return out

    def viz_inputs(self, text: str | None) -> dict:
        """--text in the task's symbols; by default the first held-out sequence."""
        if text is None:
            text = self.tokenizer.decode(self.splits["test"][0])
        ids = self.tokenizer.encode(text, what="--text")
        if not 0 < len(ids) <= self.model.config.block_size:
            raise DataError(
                f"--text gives {len(ids)} tokens; this model reads 1 to {self.model.config.block_size}"
            )
        return {
            "ids": ids,
            "tokens": self.tokenizer.token_texts(ids),
            "vocab_labels": self.tokenizer.token_texts(np.arange(self.tokenizer.vocab_size)),
        }

    # -- progress measures (training/diagnostics.py records them) ---------------------------------
    def progress_measures(self) -> dict:
        """The induction measures of the module docstring, on the first PROBE_SEQUENCES test
        sequences, in eval mode."""
        x, y = inputs_targets(self.splits["test"][:PROBE_SEQUENCES])
        first, rep = self.masks(x)
        T = x.shape[1]
        quarter = max(1, (T - 1) // 4)
        model = self.model

        def repeat_loss(out) -> float:
            return float(token_losses(out[0] if isinstance(out, tuple) else out, y)[rep].mean())

        with eval_mode(model):
            tl = token_losses(model(x)[0], y)
            hs = lens.head_scores(model, (x,))
            prefix, previous = hs.scores["induction"], hs.scores["previous"]
            best = np.unravel_index(int(np.nanargmax(prefix)), prefix.shape)
            others = prefix.astype(np.float64).copy()
            if others.size > 1:
                others[best] = np.inf  # the weakest of the other heads
            worst = np.unravel_index(int(np.nanargmin(others)), others.shape)
            names = [name for name, _, _ in lens.parts.attentions(model)]
            base = repeat_loss(model(x))

            def ablated(*heads: tuple[int, int]) -> float:
                """loss_repeat with these (layer, head)s zeroed together, minus without."""
                by_layer: dict[int, list[int]] = {}
                for layer, head in heads:
                    by_layer.setdefault(int(layer), []).append(int(head))

                def zero(out, name):
                    out = out.copy()
                    out[:, by_layer[names.index(name.removesuffix(".head_out"))]] = 0.0
                    return out

                return (
                    repeat_loss(
                        lens.run_with_hooks(
                            model, x, hooks={names[layer] + ".head_out": zero for layer in by_layer}
                        )
                    )
                    - base
                )

            induction = [tuple(int(i) for i in lh) for lh in np.argwhere(prefix > INDUCTION_HEAD)]

            by_position = tl[:, :-1].mean(axis=0)  # (T - 1,): the last position has no target
            return {
                "loss_first": float(tl[first].mean()),
                "loss_repeat": float(tl[rep].mean()),
                "repeat_advantage": float(by_position[-quarter:].mean() - by_position[:quarter].mean()),
                "heads": list(hs.labels),
                "prefix_matching": prefix.tolist(),
                "previous_token": previous.tolist(),
                "best_head": [int(best[0]), int(best[1])],
                "worst_head": [int(worst[0]), int(worst[1])],
                "ablate_best": ablated(best),
                "ablate_worst": ablated(worst),
                "induction_heads": [list(h) for h in induction],
                "ablate_induction": ablated(*induction) if induction else 0.0,
            }
