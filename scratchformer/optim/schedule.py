"""Learning-rate schedule: linear warmup, then cosine decay to a floor (nanoGPT's get_lr)."""

from __future__ import annotations

import math

import numpy as np

from scratchformer.errors import ConfigError


def cosine_lr(step: int, max_lr: float, min_lr: float, warmup_steps: int, decay_steps: int) -> float:
    """Learning rate for optimizer step `step` (0-based). Pure function.

        step <  warmup_steps:  max_lr * (step + 1) / (warmup_steps + 1)       (linear warmup)
        step >= decay_steps:   min_lr                                          (floor)
        otherwise:             min_lr + 0.5 * (1 + cos(pi * r)) * (max_lr - min_lr),
                               r = (step - warmup_steps) / (decay_steps - warmup_steps)

    So the cosine starts at max_lr at step == warmup_steps and reaches min_lr at decay_steps.
    """
    for name, value in (("step", step), ("warmup_steps", warmup_steps), ("decay_steps", decay_steps)):
        if not isinstance(value, (int, np.integer)) or isinstance(value, (bool, np.bool_)):
            raise ConfigError(f"cosine_lr {name} must be an integer, got {value!r}")
    for name, value in (("max_lr", max_lr), ("min_lr", min_lr)):
        if (
            isinstance(value, (bool, np.bool_))
            or not isinstance(value, (int, float, np.integer, np.floating))
            or not (value >= 0 and math.isfinite(value))
        ):
            raise ConfigError(f"cosine_lr {name} must be a finite number >= 0, got {value!r}")
    if step < 0:
        raise ConfigError(f"cosine_lr step must be >= 0, got {step}")
    if warmup_steps < 0 or decay_steps < warmup_steps:
        raise ConfigError(
            f"cosine_lr needs 0 <= warmup_steps <= decay_steps, got warmup_steps={warmup_steps}, "
            f"decay_steps={decay_steps}"
        )
    if step < warmup_steps:
        return max_lr * (step + 1) / (warmup_steps + 1)
    if step >= decay_steps:
        return min_lr
    ratio = (step - warmup_steps) / (decay_steps - warmup_steps)
    coeff = 0.5 * (1.0 + math.cos(math.pi * ratio))
    return min_lr + coeff * (max_lr - min_lr)
