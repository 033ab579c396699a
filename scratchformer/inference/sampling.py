"""Choosing the next token from logits: temperature, top-k, top-p (nucleus), greedy.

Pure functions on arrays, vectorised over the batch (no Python loop over rows):

    ids = sample_next(logits, rng, temperature=0.8, top_k=40, top_p=0.95)   # (B, V) -> (B,)

Order of operations (as in Hugging Face's logits warpers): divide by the temperature, keep
the top-k logits, softmax, keep the nucleus (top-p), renormalise, sample. Sampling uses one
uniform draw per row (inverse CDF), so a seeded Generator gives the same tokens for the
same logits. Greedy decoding (temperature 0 or top_k=1) draws nothing from the generator.
"""

from __future__ import annotations

import numpy as np

from scratchformer.checks import as_array
from scratchformer.errors import ConfigError, DataError, DTypeError, ShapeError
from scratchformer.ops.softmax import softmax_forward

__all__ = ["as_rng", "check_sampling_args", "sample_next", "top_k_mask", "top_p_mask", "filtered_probs"]


def as_rng(rng=None) -> np.random.Generator:
    """A Generator from a Generator (returned as is), an int seed, or None (fresh entropy)."""
    if isinstance(rng, np.random.Generator):
        return rng
    if rng is None or (isinstance(rng, (int, np.integer)) and not isinstance(rng, bool)):
        if rng is not None and rng < 0:
            raise ConfigError(f"rng as an int seed must be >= 0, got {rng}")
        return np.random.default_rng(rng)
    raise DTypeError(f"rng must be a numpy Generator, an int seed or None, got {type(rng).__name__}")


def check_sampling_args(temperature, top_k, top_p) -> None:
    """temperature: a finite number >= 0; top_k: None or an int >= 1; top_p: None or in (0, 1]."""
    if (
        isinstance(temperature, (bool, np.bool_))
        or not isinstance(temperature, (int, float, np.floating, np.integer))
        or not temperature >= 0
        or not np.isfinite(temperature)
    ):
        raise ConfigError(f"temperature must be a finite number >= 0, got {temperature!r}")
    if top_k is not None and (
        isinstance(top_k, (bool, np.bool_)) or not isinstance(top_k, (int, np.integer)) or top_k < 1
    ):
        raise ConfigError(f"top_k must be None or an integer >= 1, got {top_k!r}")
    if top_p is not None and (
        isinstance(top_p, (bool, np.bool_))
        or not isinstance(top_p, (int, float, np.floating, np.integer))
        or not 0 < top_p <= 1
    ):
        raise ConfigError(f"top_p must be None or a number in (0, 1], got {top_p!r}")


def _check_rows(name: str, x) -> None:
    """x must be a real (B, V) array with V >= 1."""
    if not isinstance(x, np.ndarray) or x.dtype.kind not in "fiu":
        raise DTypeError(
            f"{name} must be a real-valued numpy array, got "
            f"{type(x).__name__}{f' of dtype {x.dtype}' if isinstance(x, np.ndarray) else ''}"
        )
    if x.ndim != 2 or x.shape[-1] == 0:
        raise ShapeError(f"{name} must have shape (B, V), got {x.shape}")


def top_k_mask(logits: np.ndarray, k: int) -> np.ndarray:
    """(B, V) bool, True for the k largest logits of each row (ties at the k-th value kept)."""
    _check_rows("logits", logits)
    check_sampling_args(1.0, k, None)
    if k is None:
        raise ConfigError("top_k_mask needs k, an integer >= 1")
    V = logits.shape[-1]
    if k >= V:
        return np.ones(logits.shape, dtype=bool)
    kth = np.partition(logits, V - k, axis=-1)[:, V - k : V - k + 1]  # the k-th largest, (B, 1)
    return logits >= kth


def top_p_mask(probs: np.ndarray, p: float) -> np.ndarray:
    """(B, V) bool: the nucleus of each row -- the smallest set of most probable tokens whose
    total probability is >= p (at least one token; ties broken by index)."""
    _check_rows("probs", probs)
    check_sampling_args(1.0, None, p)
    if p is None:
        raise ConfigError("top_p_mask needs p, a number in (0, 1]")
    order = np.argsort(-probs, axis=-1, kind="stable")
    sorted_p = np.take_along_axis(probs, order, axis=-1)
    before = np.cumsum(sorted_p, axis=-1) - sorted_p  # mass of the more probable tokens
    keep_sorted = before < p * probs.sum(axis=-1, keepdims=True)
    keep_sorted[:, 0] = True
    keep = np.empty_like(keep_sorted)
    np.put_along_axis(keep, order, keep_sorted, axis=-1)
    return keep


def filtered_probs(
    logits: np.ndarray, temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None
) -> np.ndarray:
    """(B, V) float64 sampling distribution after temperature, top-k and top-p (temperature > 0).

    The row maximum is subtracted before dividing by the temperature, so even a temperature
    of 1e-320 gives finite scaled logits (0 at the maximum, -inf elsewhere: greedy)."""
    _check_rows("logits", logits)
    check_sampling_args(temperature, top_k, top_p)
    if temperature == 0:
        raise ConfigError("filtered_probs needs a temperature > 0 (0 is greedy: use sample_next)")
    x = np.asarray(logits, dtype=np.float64)
    with np.errstate(over="ignore"):  # a tiny temperature sends non-maximal logits to -inf
        x = (x - x.max(axis=-1, keepdims=True)) / temperature  # <= 0, never inf - inf
    if top_k is not None:
        x = np.where(top_k_mask(x, top_k), x, -np.inf)
    probs = softmax_forward(x)
    if top_p is not None and top_p < 1:
        probs = np.where(top_p_mask(probs, top_p), probs, 0.0)
        probs /= probs.sum(axis=-1, keepdims=True)
    return probs


def sample_next(
    logits: np.ndarray,
    rng: np.random.Generator | int | None = None,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
) -> np.ndarray:
    """Pick one token id per row. logits: (B, V) -> (B,) int64.

    temperature: 0 means greedy (argmax); otherwise logits are divided by it.
    top_k: keep only the k most likely tokens (top_k=1 is greedy).
    top_p: keep the smallest set of most likely tokens whose probability is >= top_p.
    rng: a numpy Generator (or int seed); exactly one uniform is drawn per row when sampling.
    """
    logits = as_array(logits, "logits")
    if logits.dtype.kind not in "fiu":
        raise DTypeError(f"sample_next expects real-valued logits, got dtype {logits.dtype}")
    if logits.ndim != 2 or logits.shape[-1] == 0:
        raise ShapeError(f"sample_next expects logits of shape (B, V), got {logits.shape}")
    check_sampling_args(temperature, top_k, top_p)
    row_max = logits.max(axis=-1)  # NaN if the row holds a NaN
    if not np.isfinite(row_max).all():
        raise DataError(
            "sample_next: every row of logits needs a finite maximum and no NaN "
            "(the model produced NaN or inf: check its weights and input)"
        )
    if temperature == 0 or top_k == 1:
        return np.argmax(logits, axis=-1).astype(np.int64)
    rng = as_rng(rng)
    probs = filtered_probs(logits, temperature, top_k, top_p)
    cdf = np.cumsum(probs, axis=-1)
    u = (1.0 - rng.random((logits.shape[0], 1))) * cdf[:, -1:]  # in (0, total]
    # first index whose cdf reaches u: a zero-probability token never qualifies first
    ids = (cdf < u).sum(axis=-1)
    return np.minimum(ids, logits.shape[-1] - 1).astype(np.int64)
