"""`TrainConfig`: the optimisation settings of a run, each declared once with its spec.

The declaration is read by everything that handles a setting: the config checks it when it is
built, trainer_state.json's schema is derived from it (training/schema.py), and the command
line builds its options from it (cli/main.py). So a value `train` accepts is always a value
its checkpoint can hold and `--resume` can read back.
"""

from __future__ import annotations

from dataclasses import dataclass

from scratchformer.data import DEFAULT_SEED
from scratchformer.errors import ConfigError
from scratchformer.settings import DictConfig, setting
from scratchformer.specs import NON_NEGATIVE, POSITIVE, SEED, Bool, Maybe, Num

__all__ = ["TrainConfig", "DIAG_RECORDS"]

BETA = Num(min=0.0, below=1.0)  # AdamW's moment decay rates
DIAG_RECORDS = (
    25  # the default diagnostics interval, max_steps // DIAG_RECORDS, gives 25-50 records, and step 0
)


@dataclass
class TrainConfig(DictConfig):
    """Optimisation settings. Defaults follow nanoGPT's small CPU configuration."""

    max_steps: int = setting(POSITIVE, 2000)
    batch_size: int = setting(POSITIVE, 32)
    grad_accum: int = setting(POSITIVE, 1)  # micro-batches per optimiser step
    lr: float = setting(Num(above=0.0), 1e-3)
    min_lr: float | None = setting(
        Maybe(Num(min=0.0)), None
    )  # end of the cosine, at most lr; default lr / 10
    # peak rate of a model's fresh head (its head_parameters(): a classifier's linear head),
    # following the same warmup and cosine at head_lr / lr of the others' rate; None: lr
    head_lr: float | None = setting(Maybe(Num(above=0.0)), None)
    warmup_steps: int = setting(NON_NEGATIVE, 100)
    decay_steps: int | None = setting(Maybe(POSITIVE), None)  # cosine length; default max_steps
    weight_decay: float = setting(Num(min=0.0), 0.1)
    decay_embeddings: bool = setting(Bool(), False)  # True: decay embedding tables too, as nanoGPT does
    beta1: float = setting(BETA, 0.9)
    beta2: float = setting(BETA, 0.99)
    grad_clip: float = setting(Num(min=0.0), 1.0)  # global-norm clipping; 0 disables it
    eval_interval: int = setting(POSITIVE, 250)
    eval_batches: int | None = setting(Maybe(POSITIVE), None)  # None: the whole split
    # evaluations in a row without a lower validation loss after which the run stops (early
    # stopping; best/ keeps the lowest); None: run to max_steps
    patience: int | None = setting(Maybe(POSITIVE), None)
    log_interval: int = setting(POSITIVE, 10)
    num_samples: int = setting(
        NON_NEGATIVE, 5
    )  # samples printed at each evaluation (when the job can sample)
    seed: int = setting(SEED, DEFAULT_SEED)  # initial weights, batches (seed) and dropout (seed + 1)
    time_limit: float | None = setting(
        Maybe(Num(above=0.0)), None
    )  # seconds of training before stopping cleanly
    workers: int = setting(POSITIVE, 2)  # processes training slices of each batch at once; 1: this one alone
    # steps between diagnostics records (training/diagnostics.py); None: max_steps // DIAG_RECORDS; 0: off
    diag_interval: int | None = setting(Maybe(NON_NEGATIVE), None)

    def check_together(self) -> None:
        """A floor above the peak would make the cosine climb: refused, whichever door built the config."""
        if self.min_lr is not None and self.min_lr > self.lr:
            raise ConfigError(
                f"min_lr {self.min_lr:g} is above lr {self.lr:g}: the learning rate would rise over the "
                f"run instead of decaying; give a min_lr (--min-lr) at most lr, e.g. {self.lr / 10:g}"
            )

    @property
    def final_lr(self) -> float:
        return self.lr / 10 if self.min_lr is None else self.min_lr

    @property
    def schedule_steps(self) -> int:
        return self.max_steps if self.decay_steps is None else self.decay_steps

    @property
    def diagnostics_every(self) -> int:
        """Steps between diagnostics records; 0: none. The default, max(1, max_steps // DIAG_RECORDS),
        gives every run length at least DIAG_RECORDS records over time, step 0 apart."""
        return max(1, self.max_steps // DIAG_RECORDS) if self.diag_interval is None else self.diag_interval

    @property
    def warmup(self) -> int:
        # a short run (--max-steps 10) keeps the default warmup from outlasting the schedule
        return min(self.warmup_steps, self.schedule_steps)
