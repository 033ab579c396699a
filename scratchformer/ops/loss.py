"""Cross-entropy from logits, fused with log-softmax (forward and backward)."""

from __future__ import annotations

import numpy as np

from scratchformer import fast
from scratchformer.checks import DOOR, as_array, check_int_in_range, op_float
from scratchformer.errors import DataError, ShapeError
from scratchformer.ops.softmax import log_softmax_forward

IGNORE_INDEX = -100  # the target id every loss skips (padding), as PyTorch's default


@fast.lane()
def cross_entropy_forward(
    logits: np.ndarray,
    targets: np.ndarray,
    ignore_index: int = IGNORE_INDEX,
    label_smoothing: float = 0.0,
) -> tuple[float, dict]:
    """Mean cross-entropy over the targets that are not `ignore_index`.

    Args:
        logits: (N, V) or (B, T, V) float.
        targets: (N,) or (B, T) integer class ids in [0, V), or `ignore_index`.
        label_smoothing: eps in [0, 1): the target distribution is
            (1 - eps) * one_hot + eps / V, as in torch.nn.functional.cross_entropy.
    Returns:
        (loss, cache) -- loss is a Python float (0.0 when every target is ignored);
        cache is what `cross_entropy_backward` needs.
    """
    if not DOOR.inside:  # a direct call: check the arguments (a layer's call was checked at its door)
        op_float("cross_entropy_forward", "logits", logits)
        targets = as_array(targets, "targets")
        check_int_in_range("ignore_index", ignore_index, -(2**62), 2**62)
        if isinstance(label_smoothing, (bool, np.bool_)) or not isinstance(
            label_smoothing, (int, float, np.number)
        ):
            raise DataError(f"label_smoothing must be a number in [0, 1), got {label_smoothing!r}")
    if logits.ndim not in (2, 3) or targets.shape != logits.shape[:-1]:
        raise ShapeError(
            f"cross_entropy: logits (N, V) or (B, T, V) and targets of shape logits.shape[:-1] "
            f"expected, got logits {logits.shape} and targets {targets.shape}"
        )
    if not np.issubdtype(targets.dtype, np.integer):
        raise DataError(f"cross_entropy: targets must be integers, got dtype {targets.dtype}")
    if not 0.0 <= label_smoothing < 1.0:
        raise DataError(f"cross_entropy: label_smoothing must be in [0, 1), got {label_smoothing}")
    V = logits.shape[-1]
    logp = log_softmax_forward(logits.reshape(-1, V))  # (N, V)
    t = targets.reshape(-1)
    valid = t != ignore_index
    if np.any((t[valid] < 0) | (t[valid] >= V)):
        bad = np.unique(t[valid][(t[valid] < 0) | (t[valid] >= V)])
        raise DataError(f"cross_entropy: target ids {bad[:5].tolist()} outside [0, {V})")
    n_valid = int(valid.sum())
    safe_t = np.where(valid, t, 0)
    nll = -logp[np.arange(t.size), safe_t]  # (N,)
    if label_smoothing:
        # loss = (1 - eps) * nll + eps * mean_v(-logp_v)
        nll = (1 - label_smoothing) * nll - label_smoothing * logp.mean(axis=-1)
    loss = float((nll * valid).sum() / max(n_valid, 1))
    cache = dict(logp=logp, t=safe_t, valid=valid, n_valid=n_valid, eps=label_smoothing, shape=logits.shape)
    return loss, cache


@fast.lane(derivative_of=cross_entropy_forward, grads=("logits",), received="dloss")
def cross_entropy_backward(cache: dict, dloss: float = 1.0) -> np.ndarray:
    # d loss / d logits = (softmax(logits) - target_distribution) / n_valid, zero on ignored rows
    logp, t, valid, eps = cache["logp"], cache["t"], cache["valid"], cache["eps"]
    V = logp.shape[-1]
    dlogits = np.exp(logp)
    if eps:
        dlogits -= eps / V
    dlogits[np.arange(t.size), t] -= 1 - eps
    dlogits *= (valid * (dloss / max(cache["n_valid"], 1)))[:, None].astype(dlogits.dtype)
    return dlogits.reshape(cache["shape"])
