"""Input checks, written once and used at every door (nanoGPT checks its input once, at the
model's entry; so do we).

A *door* is a public entry point: a model's `forward` / `generate` / `encode` / `decode`, a
layer called directly by a user, a config's constructor. Doors call these helpers and raise
the typed errors of `scratchformer.errors`, naming the argument and the allowed values.
Calls made from inside a model trust their caller and check nothing (see
`scratchformer.nn.module.Module.__call__`).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from scratchformer.errors import ConfigError, DataError, DTypeError, ShapeError


# -- arrays --------------------------------------------------------------------------------------
def check_token_ids(ids, name: str, vocab_size: int, max_len: int | None = None,
                    batched: bool = True) -> np.ndarray:
    """ids as an integer array with every id in [0, vocab_size). batched: a non-empty (B, T)
    array with T <= max_len (when given); otherwise any shape (an Embedding's input)."""
    ids = np.asarray(ids)
    if not np.issubdtype(ids.dtype, np.integer):
        raise DataError(f"{name} must hold integer token ids, got dtype {ids.dtype}")
    if batched and (ids.ndim != 2 or ids.size == 0):
        raise ShapeError(f"{name} must be a non-empty 2-D (batch, time) array, got shape {ids.shape}")
    if max_len is not None and ids.shape[-1] > max_len:
        raise ShapeError(f"{name} has {ids.shape[-1]} tokens but the model takes at most {max_len}: "
                         "crop the sequence (or build the model with a larger block_size/max_len)")
    if ids.size:
        lo, hi = ids.min(), ids.max()
        if lo < 0 or hi >= vocab_size:
            raise DataError(f"{name}: token ids must be in [0, {vocab_size}), got min {lo} max {hi}")
    return ids


def check_float_array(x, name: str, ndim: int | None = None, last_dim: int | None = None) -> None:
    """x must be a float ndarray (of rank ndim, with last axis last_dim, when given)."""
    if not isinstance(x, np.ndarray):
        raise DTypeError(f"{name} must be a numpy array, got {type(x).__name__}")
    if not np.issubdtype(x.dtype, np.floating):
        raise DTypeError(f"{name} must be a float array, got dtype {x.dtype}")
    if ndim is not None and x.ndim != ndim:
        raise ShapeError(f"{name} must have {ndim} dims, got shape {x.shape}")
    if last_dim is not None and (x.ndim == 0 or x.shape[-1] != last_dim):
        raise ShapeError(f"{name} must have last dim {last_dim}, got shape {x.shape}")


# -- scalars (config fields and arguments) ---------------------------------------------------------
def _is_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _is_number(value) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))


def check_positive_int(name: str, value) -> None:
    if not _is_int(value) or value <= 0:
        raise ConfigError(f"{name} must be a positive integer, got {value!r}")


def check_int_in_range(name: str, value, low: int, high: int) -> None:
    """value must be an integer in [low, high)."""
    if not _is_int(value) or not low <= value < high:
        raise ConfigError(f"{name} must be an integer in [{low}, {high}), got {value!r}")


def check_probability(name: str, value) -> None:
    """A dropout rate or a label-smoothing weight: a number in [0, 1)."""
    if not _is_number(value) or not 0.0 <= value < 1.0:
        raise ConfigError(f"{name} must be a number in [0, 1), got {value!r}")


def check_positive_number(name: str, value) -> None:
    """A finite number > 0 (LayerNorm's eps)."""
    if not _is_number(value) or not (value > 0 and math.isfinite(value)):
        raise ConfigError(f"{name} must be a finite number > 0, got {value!r}")


def check_choice(name: str, value, choices) -> None:
    if value not in choices:
        raise ConfigError(f"{name} must be one of {sorted(choices)}, got {value!r}")


def check_bool(name: str, value) -> None:
    if not isinstance(value, (bool, np.bool_)):
        raise ConfigError(f"{name} must be a bool, got {value!r}")


def check_config_type(model: str, config, config_class: type) -> None:
    """A model's constructor takes its own config dataclass (a dict or another config would fail
    later, far from the cause)."""
    if not isinstance(config, config_class):
        raise ConfigError(f"{model} needs a {config_class.__name__}, got {type(config).__name__}")


def check_heads(n_embd, n_head) -> None:
    """Attention splits n_embd into n_head heads of n_embd // n_head channels each."""
    check_positive_int("n_embd", n_embd)
    check_positive_int("n_head", n_head)
    if n_embd % n_head:
        raise ConfigError(f"n_embd ({n_embd}) must be divisible by n_head ({n_head})")


# -- config dataclasses ----------------------------------------------------------------------------
class DictConfig:
    """Mixin for the model config dataclasses: `to_dict()` and `from_dict(d)` (checkpoints).

    `LEGACY_KEYS` maps names used by older checkpoints to today's fields, so those still load.
    """

    LEGACY_KEYS: dict[str, str] = {}

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict):
        """Build from a dict (e.g. a checkpoint's config); unknown keys are a ConfigError."""
        if not isinstance(d, dict):
            raise ConfigError(f"{cls.__name__}.from_dict needs a dict, got {type(d).__name__}")
        d = {cls.LEGACY_KEYS.get(k, k): v for k, v in d.items()}
        unknown = sorted(set(d) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise ConfigError(f"unknown {cls.__name__} fields {unknown}")
        missing = [f.name for f in dataclasses.fields(cls)
                   if f.name not in d and f.default is dataclasses.MISSING]
        if missing:
            raise ConfigError(f"{cls.__name__} needs the fields {missing}")
        return cls(**d)
