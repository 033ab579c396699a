"""ALiBi: attention with linear biases (Press, Smith and Lewis 2022, "Train Short, Test Long",
section 3). No position table and no parameters: each head h adds a fixed penalty, linear in the
distance between query and key, to its scores before the softmax:

    scores[b, h, i, j] = q_i . k_j / sqrt(d)  -  m_h * (i - j)        for keys j <= i (causal)

The slopes m_h are a geometric sequence. For H heads, H a power of 2 (section 3):

    m_h = 2^(-8 (h + 1) / H),  h = 0 .. H-1          H = 8: 1/2, 1/4, ..., 1/256

For other H, the paper's code and BLOOM interpolate: the slopes of H' = 2^floor(log2 H) heads,
then the first H - H' of every other slope of 2 H' heads, from its first (2^(-8k / 2H'), k odd):
H = 6 gives 1/4, 1/16, 1/64, 1/256 (H' = 4) followed by 1/2, 1/8 (of H = 8's 1/2, 1/8, 1/32, 1/128).

The bias is added after the 1/sqrt(d) scale (as BLOOM's `baddbmm(alibi, q, k^T, alpha=1/sqrt(d))`
and fairseq). It is a constant: its backward is the identity on the scores' gradient, so
`ops/attention.py`'s backward needs no change (dscores is the same with or without it).

Query i's position is aligned at the end of the keys, as `causal_mask`: with Tk = past + Tq keys
(a KV cache holding `past` tokens), query i sits at position past + i. Keys after the query
(j > past + i) get a positive bias here; the causal mask hides them. The part -m_h * i is the
same for every key of a query's row and cancels in the softmax (BLOOM adds only m_h * j): the
weights depend on the key positions and the slopes, so a test of the query positions must look
at the bias itself, not at the attention's output.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from scratchformer.errors import ConfigError, ShapeError

__all__ = ["alibi_bias", "alibi_slopes"]


def _power_of_2_slopes(n: int) -> list[float]:
    """2^(-8/n), 2^(-16/n), ..., 2^(-8): the paper's sequence for n heads, n a power of 2."""
    return [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]


@functools.lru_cache(maxsize=32)
def _slopes_tuple(n_head: int) -> tuple[float, ...]:
    closest = 2 ** int(math.floor(math.log2(n_head)))  # H': the largest power of 2 <= H
    slopes = _power_of_2_slopes(closest)
    if closest != n_head:  # interleave: the odd-numbered slopes of 2 H' fill the remaining heads
        slopes += _power_of_2_slopes(2 * closest)[0::2][: n_head - closest]
    return tuple(slopes)


def alibi_slopes(n_head: int) -> np.ndarray:
    """(n_head,) float64: each head's slope m_h (see the module docstring)."""
    if not (isinstance(n_head, (int, np.integer)) and n_head >= 1):
        raise ConfigError(f"ALiBi needs a positive number of heads, got {n_head!r}")
    return np.array(_slopes_tuple(int(n_head)), dtype=np.float64)


@functools.lru_cache(maxsize=64)
def _bias(n_head: int, Tq: int, Tk: int, dtype_name: str) -> np.ndarray:
    query_pos = np.arange(Tk - Tq, Tk, dtype=np.float64)  # (Tq,) aligned at the end of the keys
    distance = query_pos[:, None] - np.arange(Tk, dtype=np.float64)[None, :]  # (Tq, Tk): i - j
    bias = (-alibi_slopes(n_head)[:, None, None] * distance).astype(dtype_name)  # (H, Tq, Tk)
    bias.flags.writeable = False
    return bias


def alibi_bias(n_head: int, Tq: int, Tk: int, dtype=np.float64) -> np.ndarray:
    """(n_head, Tq, Tk) read-only: -m_h * (past + i - j) with past = Tk - Tq, to add to the
    scaled scores (B, n_head, Tq, Tk) of causal self-attention. Computed in float64 and then
    cast (a float32 model gets the correctly rounded bias); made once per shape and dtype, as
    every layer of every step asks for the same one."""
    if not 0 < Tq <= Tk:
        raise ShapeError(
            f"ALiBi needs 0 < Tq <= Tk (queries are the last Tq of the Tk positions), got {Tq}, {Tk}"
        )
    return _bias(int(n_head), int(Tq), int(Tk), np.dtype(dtype).name)
