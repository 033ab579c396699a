"""What a run is: the `Job` protocol, the registry of job classes, and one table of defaults.

A *job* is what `scratchformer.training.train` trains and what every command loads: it owns
the model and its data. The loop owns the rest (optimiser, schedule, checkpoints, logs).

    JOBS            model kind ("kind" in a checkpoint's config.json) -> job class
    RUN_DEFAULTS    run kind ("lines", "text", and each task of data.tasks.TASKS) -> the
                    settings a run starts from, keyed by dataclass field names (a language
                    model's "init_from": the training settings over them with --init-from;
                    finetune's "epochs": the rule that sizes its run from the training split)
    build_job       a fresh job + TrainConfig for a run kind, defaults overridden by the caller
    build_job_from_hf   the same, starting from a pretrained Hugging Face causal LM (--init-from)
    load_job        a run (or checkpoint) directory -> its job, the checkpoint read once
    job_class       an already-read checkpoint -> its job class
    resume_job      a run directory's last/ -> its job, the TrainConfig it continues with and
                    the checkpoint, read once (train and finetune --resume; the training loop
                    takes the same checkpoint)

A new command loads any run the same way: `job = load_job(path)` (optionally `data=` a moved
data file), then calls the protocol's methods (`job.model`, `job.evaluate(...)`, ...); it never
branches on the kind.
"""

from __future__ import annotations

import math
from collections.abc import Generator
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any, ClassVar, Protocol

import numpy as np

from scratchformer.data import DEFAULT_SEED
from scratchformer.data.tasks import TASKS, Task
from scratchformer.errors import CheckpointError, ConfigError
from scratchformer.limits.estimates import param_count_bound
from scratchformer.training.checkpoint import Checkpoint, checkpoint_exists, load_checkpoint
from scratchformer.training.config import TrainConfig
from scratchformer.training.induction import InductionJob
from scratchformer.training.lm import LMJob
from scratchformer.training.modadd import ModAddJob
from scratchformer.training.rundir import run_files
from scratchformer.training.sae import SAEJob
from scratchformer.training.sentence import SentenceClassifierJob
from scratchformer.training.tasks import ClassifierJob, Seq2SeqJob
from scratchformer.training.trainer import BEST, LAST, resume_config

__all__ = [
    "DEFAULT_SEED",
    "JOBS",
    "LM_TASKS",
    "RUN_DEFAULTS",
    "Job",
    "build_job",
    "build_job_from_hf",
    "checkpoint_dir",
    "epoch_settings",
    "epochs_text",
    "job_class",
    "load_job",
    "resume_job",
    "run_defaults",
]


class Job(Protocol):
    """The interface every model family implements (LMJob, ClassifierJob, Seq2SeqJob).

    Options a job does not support (e.g. `beam` for a language model) raise a ConfigError
    naming the option, so callers pass what the user asked for and never branch on the kind.
    """

    kind: ClassVar[str]  # "gpt" | "classifier" | "seq2seq": written into config.json
    config_class: ClassVar[type]  # the model's config dataclass (GPTConfig, ...): RUN_DEFAULTS' "model" keys
    model_class: ClassVar[type]  # the model's class (GPT, ...): it counts a config's parameters
    model: Any  # a scratchformer.nn.Module: forward(*batch) -> (output, loss); backward()

    @classmethod
    def create(cls, run_kind: str, model: dict, data: dict, seed: int) -> Job:
        """A fresh job: `model` holds config fields, `data` a RUN_DEFAULTS "data" section
        (plus "path" for language models); `seed` fixes the initial weights."""

    default_split: str  # the split `eval` reads when none is named ("test"; "val" for text data)

    @classmethod
    def from_checkpoint(
        cls, ck: Checkpoint, data: str | Path | None = None, allow_changed_data: bool = False
    ) -> Job:
        """The job of an already-read checkpoint, weights loaded. `data` replaces the data file
        the run recorded (language models; jobs without a data file refuse it). A data file that
        changed since training (sha256) is refused when first read, unless allow_changed_data."""

    def train_batch(self, rng: np.random.Generator, batch_size: int) -> tuple:
        """A random training batch of `batch_size` examples: the positional arguments of
        `model(...)`, targets included, e.g. (x, y) each (B, T) int64. The training loop runs
        it (`_, loss = model(*batch); model.backward()`, or through its DataParallel)."""

    def batch_tokens(self, batch) -> int:
        """The input tokens of a training batch (the log's tokens per second)."""

    def evaluation(self, split: str, batches: int | None = None, **options) -> Generator[tuple, tuple, dict]:
        """The evaluation on split "val" or "test" (the whole split, or its first `batches`
        batches) as a generator: it yields the positional arguments of `model(...)` for each
        batch, is sent back what that call returned (output, loss) in eval mode, and returns
        {"loss": ..., and the kind's scores}; `training.evaluation.run_evaluation` drives it,
        through the model or the trainer's DataParallel. Options: `beam` (seq2seq only)."""

    def evaluate(self, split: str, batches: int | None = None, **options) -> dict[str, float]:
        """`evaluation(...)` run on the model alone: run_evaluation(evaluation(...), model)."""

    def samples(self, n: int, rng: np.random.Generator, **options) -> list[str]:
        """n strings to show: generated text (language models; options prompt, max_new_tokens,
        temperature, top_k, top_p) or held-out examples with the model's answers (tasks; no options)."""

    def predict(self, text: str, **options) -> str:
        """The model's answer for one input such as "3 1 4 1 5" (tasks; option `beam` for seq2seq)."""

    def viz_inputs(self, text: str | None) -> dict:
        """The input of `scratchformer viz`, as `scratchformer.viz.report` takes it: ids (T,),
        tokens (T labels), vocab_labels, and what the kind adds (a title, class names). `text` is
        checked against the model; None gives the kind's example input (an error where it has none)."""

    def config_dict(self) -> dict:
        """{"kind", "model": config fields, "data": what rebuilds the data, ...}: config.json."""

    def tokenizer_dict(self) -> dict | None:
        """tokenizer.json's content, or None when the vocabulary is fixed."""

    def check_compatible(self, ck: Checkpoint) -> None:
        """Raise CheckpointError unless `ck` can be resumed into this job's model."""


# Model kind -> job class: the one place a kind string meets its code.
JOBS: dict[str, type[Job]] = {
    "gpt": LMJob,
    "classifier": ClassifierJob,
    "seq2seq": Seq2SeqJob,
    "sentence_classifier": SentenceClassifierJob,
    "induction": InductionJob,
    "modadd": ModAddJob,
    "sae": SAEJob,
}

# The AdamW settings a family of rows shares (each row keeps its own rates and lengths).
NANOGPT_ADAMW = dict(weight_decay=0.1, beta2=0.99, grad_clip=1.0)  # nanoGPT's small-model AdamW
TOY_ADAMW = dict(weight_decay=0.01, beta2=0.98, grad_clip=1.0)  # light decay, the paper's beta2: short runs
BERT_ADAMW = dict(weight_decay=0.01, beta2=0.999, grad_clip=1.0)  # BERT's fine-tuning AdamW

# Run kind -> where its settings go. "model": fields of the kind's config class; "train": fields
# of TrainConfig; "data": how much data and how it is cut. Settings not named here take the
# dataclass defaults (e.g. TrainConfig.seed = DEFAULT_SEED, GPTConfig.activation = "gelu").
# The toy tasks start from their model kind's row (TASK_DEFAULTS), with the task's own
# max_len and the few settings one task needs on top (TASK_OVERRIDES).
TASK_DEFAULTS: dict[str, dict] = {
    # The smallest settings that reach >= 99% held-out accuracy (docs/results.md,
    # scripts/quality_bars.sh). The data are generated from the training seed.
    # classifier: counting is an average over positions (mean pooling); order does not matter
    # (sinusoidal positions, no table to learn); n_inner 2 * n_embd is enough to count three
    # symbols; >= 99% accuracy within 600 steps (5 evaluations). 3^8 = 6561 majority sequences
    # exist: 400 are held out twice.
    "classifier": {
        "model": dict(n_layer=2, n_head=4, n_embd=64, n_inner=128, dropout=0.0, norm_first=True)
        | dict(activation="gelu", positional="sinusoidal", pooling="mean"),
        "train": dict(max_steps=600, eval_interval=120, batch_size=64, lr=3e-3, min_lr=3e-4, warmup_steps=50)
        | TOY_ADAMW,
        "data": dict(n_train=6000, n_test=400),
    },
    # seq2seq: a small encoder-decoder learns copy/reverse to >= 99% exact match within 1500 steps
    # (5 evaluations); 50,000 fresh examples do not overfit (no dropout); pre-norm trains at lr
    # 2e-3 without a long warmup; source and target share the digit vocabulary; exact match
    # rewards confident answers (no label smoothing). 1000 held out for val and for test.
    "seq2seq": {
        "model": dict(n_layer=2, n_head=4, n_embd=64, dropout=0.0, norm_first=True, activation="gelu")
        | dict(share_embeddings=True, label_smoothing=0.0),
        "train": dict(
            max_steps=1500, eval_interval=300, batch_size=64, lr=2e-3, min_lr=2e-4, warmup_steps=100
        )
        | TOY_ADAMW,
        "data": dict(n_train=50000, n_test=1000),
    },
    # Nanda et al. 2023 (the TransformerLens Grokking demo): p = 113, 30% of the pairs, 1 layer,
    # 4 heads, width 128, ReLU MLP 512, no LayerNorm, learned positions, untied; full-batch AdamW
    # (a batch of 113 * 113 holds every training pair) lr 1e-3 (10 warmup steps, then constant),
    # weight decay 1.0 on every weight, betas (0.9, 0.98), no clipping. The paper's log ends its
    # grokking near step 14,400.
    "modadd": {
        "model": dict(n_layer=1, n_head=4, n_embd=128, n_inner=512, activation="relu", normalization="none")
        | dict(positional="learned", tie_weights=False, bias=True, dropout=0.0, init="grokking")
        | dict(loss_dtype="float64"),
        "train": dict(max_steps=16000, batch_size=113 * 113, lr=1e-3, min_lr=1e-3, warmup_steps=10)
        | dict(weight_decay=1.0, decay_embeddings=True, beta1=0.9, beta2=0.98, grad_clip=0.0)
        | dict(eval_interval=500, diag_interval=100, num_samples=0),
        "data": dict(modulus=113, train_fraction=0.3),
    },
}
TASK_OVERRIDES: dict[str, dict] = {
    "sort": {"train": {"max_steps": 2500, "eval_interval": 500}},  # sorting needs more steps
}


def _task_row(task: Task) -> dict:
    base, extra = TASK_DEFAULTS[task.kind], TASK_OVERRIDES.get(task.name, {})
    return {
        "kind": task.kind,
        **{section: {**base[section], **extra.get(section, {})} for section in ("model", "train")},
        "data": {**base["data"], "max_len": task.max_len, **extra.get("data", {})},
    }


# What `--init-from` (a pretrained language model) puts over a language-model row's "train":
# fine-tuning rates. 5e-5 is transformers' Trainer default, the rate its causal-LM examples
# continue GPT-2 with (nanoGPT continues GPT-2 XL at 3e-5). A from-scratch rate of 1e-3 moves every
# weight by about 1e-3 a step (AdamW's steps are about lr in size), as far as GPT-2's initial
# spread of 0.02 in twenty steps, so it overwrites what pretraining learned; at 5e-5 a 2,000-step
# run moves a weight by at most 0.1 and usually far less. The floor is a tenth of the peak, as
# in every row; 100 warmup steps let AdamW's moment estimates settle before the full rate.
INIT_FROM_TRAIN = dict(lr=5e-5, min_lr=5e-6, warmup_steps=100)

RUN_DEFAULTS: dict[str, dict] = {
    # The bundled names (one item per line): makemore's transformer (4 layers, width 64) with its
    # PyTorch-default init and untied head (makemore's characters); dropout against the
    # overfitting a 200K-parameter model shows on 29K names; enough steps to pass makemore's
    # published 1.92 test loss in under 10 minutes on 2 cores (docs/results.md), 16 evaluations
    # over the run. The block size None is the longest name + 1; the same held-out names for
    # every --seed (split_seed).
    "lines": {
        "kind": "gpt",
        "model": dict(n_layer=4, n_head=4, n_embd=64, dropout=0.1, tie_weights=False, init="pytorch"),
        "train": dict(max_steps=16000, batch_size=64, lr=2e-3, min_lr=1e-4, warmup_steps=200)
        | NANOGPT_ADAMW
        | dict(eval_interval=1000),
        "init_from": INIT_FROM_TRAIN,  # over "train" with --init-from
        "data": dict(block_size=None, split_seed=DEFAULT_SEED, tokenizer="char", vocab_size=None),
    },
    # Continuous text (tinyshakespeare): nanoGPT's CPU configuration (its context of 64, no
    # dropout, 100 warmup steps; shakespeare_char's characters), its GPT-2 init, tied head and
    # bias-free layers (bias=False) included; 8 evaluations over the run. Text splits are not
    # shuffled: split_seed is only recorded.
    "text": {
        "kind": "gpt",
        "model": dict(n_layer=4, n_head=4, n_embd=128, dropout=0.0, bias=False),
        "train": dict(max_steps=2000, batch_size=12, lr=1e-3, min_lr=1e-4, warmup_steps=100)
        | NANOGPT_ADAMW
        | dict(eval_interval=250),
        "init_from": INIT_FROM_TRAIN,  # over "train" with --init-from
        "data": dict(block_size=64, split_seed=DEFAULT_SEED, tokenizer="char", vocab_size=None),
    },
    **{name: _task_row(task) for name, task in TASKS.items()},  # the toy tasks, from the task registry
    # Induction heads (Olsson et al. 2022): a 2-layer attention-only GPT (the papers' toy) on
    # random segments repeated once (16 random tokens of 32 symbols, then the same 16 again);
    # the measured run is in docs/results.md. Diagnostics every 50 steps give ~30 points of the
    # progress measures (training/induction.py) across the phase change. One head per layer:
    # with 2, both heads of layer 1 become induction heads sharing the work (zeroing either alone
    # brings back ~15-20% of the repeat's advantage; 4 share it the same way, and weight decay
    # 0.3 did not break the tie in 1,000 steps); with one, zeroing it brings back all. The
    # PyTorch init's N(0, 1) positions form a previous-token head at once (GPT-2's 0.02 init: no
    # head in 2,000 steps).
    "induction": {
        "kind": "induction",
        "model": dict(n_layer=2, n_head=1, n_embd=64, attn_only=True, dropout=0.0, init="pytorch")
        | dict(tie_weights=False),
        "train": dict(max_steps=1000, batch_size=32, lr=3e-3, min_lr=3e-4, warmup_steps=100)
        | TOY_ADAMW
        | dict(eval_interval=250, diag_interval=50, num_samples=2),
        "data": dict(symbols=32, block_size=32, repeats=2, n_train=20000, n_test=256),
    },
    # `scratchformer finetune`: a pretrained BERT encoder as a sentence classifier. Two rates on one
    # schedule: the fresh head at the probe's 1e-2 (head_lr) and the encoder at BERT's 2e-5 (lr).
    # With one rate, the head learns at the encoder's (on the plays, 100 steps of 16: val accuracy
    # 31% at 5e-5, 46% at 2e-4), and at 2e-4 every encoder weight moves while the head is still
    # random, which cost words training never showed (91.7% against 95.0% now; docs/results.md).
    # Its length comes from the data ("epochs", below): BERT's 2-4 passes over the training split,
    # not a fixed step count (190 steps were 2 passes over the plays' 2,718 texts but 22 over 270
    # rows), and the run stops early once the validation loss has not fallen for 2 evaluations
    # (best/ keeps the lowest).
    # freeze_encoder None: the data size decides (sentence.PROBE_BELOW_ROWS): a smaller CSV trains
    # the head alone, with the "probe" row's settings ("frozen").
    "finetune": {
        "kind": "sentence_classifier",
        "model": dict(max_length=64, freeze_encoder=None),
        "frozen": "probe",
        "train": dict(batch_size=32, lr=2e-5, min_lr=2e-6, head_lr=1e-2, patience=2, num_samples=0)
        | BERT_ADAMW,
        # max_steps: max_epochs passes over the training split; an evaluation every
        # 1 / evals_per_epoch of a pass; warmup: warmup_fraction of max_steps (BERT's 10%)
        "epochs": dict(max_epochs=3, evals_per_epoch=2, warmup_fraction=0.1),
        "data": dict(base="minilm", val_fraction=0.1, split_seed=DEFAULT_SEED),
    },
    # --freeze-encoder: the head alone on frozen mean embeddings, a convex problem that does not
    # overfit the way the encoder does, so it keeps a fixed length; it takes a larger rate (25% at
    # 1e-3, 39% at 1e-2 on the plays; docs/results.md).
    "probe": {
        "kind": "sentence_classifier",
        "model": dict(max_length=64, freeze_encoder=True),
        "train": dict(max_steps=190, batch_size=32, lr=1e-2, min_lr=1e-3, warmup_steps=20)
        | BERT_ADAMW
        | dict(eval_interval=50, num_samples=0),
        "data": dict(base="minilm", val_fraction=0.1, split_seed=DEFAULT_SEED),
    },
}
LM_TASKS = ("induction",)  # generated-data tasks a GPT learns (`train --task`), each with its own job
FINETUNE_RUN_KINDS = (
    "finetune",
    "probe",
)  # the rows `scratchformer finetune` starts from (probe: --freeze-encoder)


def _train_settings(row: dict, given: dict | None, init_from: bool = False) -> dict:
    """A row's training settings (with its "init_from" ones on top when starting from a
    pretrained model), the `given` ones over them. A peak `lr` given without `min_lr` takes the
    row's floor at the row's ratio (lines: lr / 20), so the default floor never ends above a
    peak the caller lowered (--lr 3e-5 on text: min_lr 3e-6, not the 1e-4 that would make the
    cosine climb); TrainConfig refuses a floor above its peak in any other case."""
    base = {**row["train"], **(row.get("init_from", {}) if init_from else {})}
    given = dict(given or {})
    if "lr" in given and "min_lr" not in given and base.get("min_lr") is not None:
        given["min_lr"] = float(f"{base['min_lr'] * given['lr'] / base['lr']:.6g}")
    return {**base, **given}


def epoch_settings(epochs: dict, n_train: int, train: dict) -> dict:
    """A row's "epochs" rule -> {"max_steps", "eval_interval", "warmup_steps"} for `n_train`
    training examples and the settings `train` (batch_size, grad_accum; a max_steps given by
    the caller is kept and sets the warmup)."""
    per_step = train["batch_size"] * train.get("grad_accum", 1)
    per_epoch = max(1, math.ceil(n_train / per_step))  # steps in one pass over the training split
    max_steps = train.get("max_steps") or max(1, round(epochs["max_epochs"] * per_epoch))
    return {
        "max_steps": max_steps,
        "eval_interval": max(1, per_epoch // epochs["evals_per_epoch"]),
        "warmup_steps": round(epochs["warmup_fraction"] * max_steps),
    }


def epochs_text(epochs: dict) -> dict[str, str]:
    """The "epochs" rule in words, per setting it decides (for --help)."""
    return {
        "max_steps": f"{epochs['max_epochs']} passes over the training split",
        "eval_interval": f"1/{epochs['evals_per_epoch']} of a pass",
        "warmup_steps": f"{epochs['warmup_fraction']:g} x max steps",
    }


def _row(run_kind: str) -> dict:
    if run_kind not in RUN_DEFAULTS:
        raise ConfigError(f"unknown run kind {run_kind!r}: choose one of {list(RUN_DEFAULTS)}")
    return RUN_DEFAULTS[run_kind]


def run_defaults(run_kind: str) -> dict:
    """Every setting of a run kind, resolved: {"kind", "model", "train", "data", "init_from",
    "epochs"}, where "model" and "train" hold every field of the config class and TrainConfig
    (the dataclass default where RUN_DEFAULTS names none), "init_from" the training settings
    --init-from changes (empty where the kind has no pretrained form) and "epochs" the rule
    that sizes the run from its data (empty where the length is fixed; `epoch_settings`).
    Fields without a default (vocab sizes) are left out."""
    row = _row(run_kind)

    def resolved(cls, table: dict) -> dict:
        return {**{f.name: f.default for f in fields(cls) if f.default is not MISSING}, **table}

    return {
        "kind": row["kind"],
        "model": resolved(JOBS[row["kind"]].config_class, row["model"]),
        "train": resolved(TrainConfig, row["train"]),
        "data": dict(row["data"]),
        "init_from": dict(row.get("init_from", {})),
        "epochs": dict(row.get("epochs", {})),
    }


def build_job(
    run_kind: str, model: dict | None = None, train: dict | None = None, data: dict | None = None
) -> tuple[Job, TrainConfig]:
    """A fresh job and its TrainConfig: RUN_DEFAULTS[run_kind] with the given settings on top
    (only the ones given: the others keep the table's values). A row with a "frozen" row
    (finetune) takes that row's training settings when the job froze its encoder (the data size
    decides where the caller did not: sentence.PROBE_BELOW_ROWS). A row with an "epochs" rule
    (finetune) takes max_steps, eval_interval and warmup_steps from the size of the job's
    training split (`epoch_settings`), where the caller did not give them."""
    row = _row(run_kind)
    settings = _train_settings(row, train)
    cfg = TrainConfig.from_dict(settings)
    job = JOBS[row["kind"]].create(
        run_kind, {**row["model"], **(model or {})}, {**row["data"], **(data or {})}, seed=cfg.seed
    )
    if "frozen" in row and job.config.freeze_encoder:  # the data size chose the probe: its settings
        row = _row(row["frozen"])
        settings = _train_settings(row, train)
        cfg = TrainConfig.from_dict(settings)
    if "epochs" in row:  # a length from the data: the training split is read now
        sized = epoch_settings(row["epochs"], job.train_size(), settings)
        cfg = TrainConfig.from_dict({**settings, **sized, **(train or {})})
    return job, cfg


def build_job_from_hf(
    hf_dir: str | Path,
    run_kind: str,
    train: dict | None = None,
    data: dict | None = None,
    notes: list[str] | None = None,
) -> tuple[Job, TrainConfig]:
    """A job that continues training a pretrained Hugging Face causal LM (its config and
    tokenizer) on a data file read as `run_kind` ("lines" or "text"), and its TrainConfig: the
    row's training settings with its fine-tuning rates ("init_from") on top. `notes` (a list)
    gets what the reading changed (bf16 weights read as float32, padding rows dropped)."""
    row = _row(run_kind)
    if "init_from" not in row:  # the rows that continue a language model say at what rates
        raise ConfigError(
            f"--init-from continues a language model: the {run_kind} task has no pretrained form"
        )
    cfg = TrainConfig.from_dict(_train_settings(row, train, init_from=True))
    job = LMJob.from_hf(hf_dir, run_kind, {**row["data"], **(data or {})}, notes=notes)
    return job, cfg


def resume_job(
    out: str | Path,
    train: dict | None = None,
    fixed: dict | None = None,
    command: str = "train",
    task: str | None = None,
    kind: str | None = None,
    overwrite: bool = False,
    **job_options,
) -> tuple[Job, TrainConfig, Checkpoint, str | None]:
    """The run in `out` continued, for `train --resume` and `finetune --resume` alike: out/last
    read once; its job (`job_options` go to its from_checkpoint: where its data file has moved,
    allow_changed_data); the TrainConfig it continues with (the saved one, the `train` settings
    on top); that checkpoint, for the training loop; and the note saying how the schedule
    changes (`resume_config`; None when it does not). Refused: model or data settings (`fixed`,
    the saved run's own), `overwrite`, a run of another `task` or `kind` than the command
    continues (None: any); `command` words the refusals. Whether a run has steps left is
    train()'s to decide (trainer.nothing_to_do)."""
    if fixed:
        raise ConfigError(
            "--resume continues the saved run: model and data options cannot change (training options "
            "such as --max-steps can; --data only says where its file moved)"
        )
    if overwrite:
        raise ConfigError("--resume continues the run in --out and --overwrite deletes it: pass one of them")
    out = Path(out)
    if not checkpoint_exists(out / LAST):
        found = run_files(out)
        raise ConfigError(
            f"nothing to resume: {out} holds no {LAST}/ checkpoint, only {', '.join(found)}: {command} with "
            "--overwrite (instead of --resume) to start a new run there, or choose another --out"
            if found
            else f"nothing to resume: {out} holds no run; {command} without --resume to start one"
        )
    ck = load_checkpoint(out / LAST)
    saved_task = ck.config.get("task", "lm")
    if task is not None and task != saved_task:
        raise ConfigError(
            f"--resume continues the saved {saved_task!r} run in {out}: drop --task {task}, or train it "
            "into another --out"
        )
    if kind is not None and ck.config.get("kind") != kind:
        raise ConfigError(
            f"{out} holds a {ck.config.get('kind')!r} run: resume it with 'scratchformer train'"
        )
    job = job_class(ck).from_checkpoint(ck, **job_options)
    saved = ck.extra.get("train_config")
    if saved is None:
        raise CheckpointError(
            f"{ck.path / 'trainer_state.json'} has no extra.train_config: cannot resume from it; restore the "
            f"file or {command} again"
        )
    cfg, note = resume_config(saved, train or {}, ck.step)
    return job, cfg, ck, note


def checkpoint_dir(path: str | Path) -> Path:
    """A checkpoint directory holds model.safetensors; a run directory holds best/ and last/
    (best is preferred)."""
    d = Path(path)
    if checkpoint_exists(d):  # also a checkpoint whose save was interrupted (its backup)
        return d
    for name in (BEST, LAST):
        if checkpoint_exists(d / name):
            return d / name
    first = (
        f"'scratchformer train --task {d.name} --out {d}'"
        if d.name in TASKS
        else f"'scratchformer train --out {d}' for a names GPT, 'scratchformer train --task majority --out {d}' "
        f"for a task model, 'scratchformer finetune --data CSV --out {d}' for a classifier"
    )
    raise CheckpointError(f"checkpoint not found in {d}: train one first ({first}) or pass a run directory")


def job_class(ck: Checkpoint) -> type[Job]:
    """The job class of a checkpoint's model kind; config.json's sizes are compared with the
    weights in model.safetensors first (`_check_sizes`), so nothing is built from a config
    that does not belong to them."""
    kind = ck.config.get("kind") if isinstance(ck.config, dict) else None
    if kind not in JOBS:
        raise CheckpointError(f"{ck.path} holds a model of kind {kind!r}; this version reads {list(JOBS)}")
    _check_sizes(ck, JOBS[kind].model_class)
    return JOBS[kind]


def _check_sizes(ck: Checkpoint, model_class) -> None:
    """The parameters config.json describes (counted by the model class from the shapes its
    constructor builds) against the ones model.safetensors holds: a hand-edited size (n_embd
    2**20) is refused here, before its model is allocated; smaller differences are named tensor
    by tensor by load_state_dict."""
    held = sum(int(v.size) for v in ck.model_state.values())
    described = param_count_bound(ck.config["model"], model_class)
    if held > 1.05 * described + 64 or described > 8 * held + 10_000:
        raise CheckpointError(
            f"{ck.path / 'config.json'} describes a model of about {described:,} parameters but "
            f"model.safetensors holds {held:,}: the files do not belong together; restore "
            "config.json or train again"
        )


def load_job(path: str | Path, data: str | Path | None = None, allow_changed_data: bool = False) -> Job:
    """The job of a run directory or a checkpoint directory, its checkpoint read once. `data`
    replaces the data file the run recorded (see `Job.from_checkpoint`)."""
    ck = load_checkpoint(checkpoint_dir(path))
    return job_class(ck).from_checkpoint(ck, data=data, allow_changed_data=allow_changed_data)
