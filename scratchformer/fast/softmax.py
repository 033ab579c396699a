"""Fast lane of `ops/softmax.py`: the same formulas, the reductions from `fast/reductions.py`
(short rows: the cross-entropy's (B T, V) logits). Equal to the reference up to the sums' rounding."""

from __future__ import annotations

import numpy as np

from scratchformer.fast.reductions import max_last, sum_last


def softmax_forward(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - max_last(x))
    e /= sum_last(e)
    return e


def softmax_backward(dy: np.ndarray, y: np.ndarray) -> np.ndarray:
    return y * (dy - sum_last(dy * y))


def log_softmax_forward(x: np.ndarray) -> np.ndarray:
    shifted = x - max_last(x)
    return shifted - np.log(sum_last(np.exp(shifted)))


def log_softmax_backward(dy: np.ndarray, y: np.ndarray) -> np.ndarray:
    return dy - np.exp(y) * sum_last(dy)
