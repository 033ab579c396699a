"""Fast lane of `ops/softmax.py`: the same formulas, the reductions from `fast/reductions.py`
(short rows: the cross-entropy's (B T, V) logits), and log-softmax in one array the size of its
input. Equal to the reference up to the sums' rounding."""

from __future__ import annotations

import numpy as np

from scratchformer.fast.reductions import max_last, sum_last

EXP_BLOCK_BYTES = 1 << 20  # log-softmax exponentiates this much of x at a time


def softmax_forward(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - max_last(x))
    e /= sum_last(e)
    return e


def softmax_backward(dy: np.ndarray, y: np.ndarray) -> np.ndarray:
    return y * (dy - sum_last(dy * y))


def log_softmax_forward(x: np.ndarray) -> np.ndarray:
    # the reference's formula with one array the size of x: exp(shifted) is summed a block of
    # rows at a time (a GPT-2's (B T, 50257) logits would need two more such arrays otherwise)
    out = x - max_last(x)  # shifted, turned into the result in place
    rows = out.reshape(-1, out.shape[-1])
    sums = np.empty((rows.shape[0], 1), dtype=out.dtype)
    step = max(1, EXP_BLOCK_BYTES // max(rows[:1].nbytes, 1))  # rows a block
    for start in range(0, rows.shape[0], step):
        sums[start : start + step] = sum_last(np.exp(rows[start : start + step]))
    out -= np.log(sums).reshape(*out.shape[:-1], 1)
    return out


def log_softmax_backward(dy: np.ndarray, y: np.ndarray) -> np.ndarray:
    return dy - np.exp(y) * sum_last(dy)
