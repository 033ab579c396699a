"""Positional information added to token embeddings: fixed sinusoids or a learned table.

Both layers map x (B, T, n_embd) -> x + P[offset : offset + T] and so share one API;
`offset` is the position of x's first token (non-zero when decoding with a KV cache).
"""

from __future__ import annotations

import numpy as np

from scratchformer.checks import check_float_array, check_int_in_range, check_positive_int
from scratchformer.errors import ShapeError
from scratchformer.nn import init
from scratchformer.nn.hooks import HookPoint
from scratchformer.nn.module import DEFAULT_DTYPE, Module, Parameter


def sinusoidal_table(max_len: int, n_embd: int) -> np.ndarray:
    """(max_len, n_embd): PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(same)."""
    check_positive_int("max_len", max_len)
    check_positive_int("n_embd", n_embd)
    pos = np.arange(max_len)[:, None]
    freq = np.exp(-np.log(10000.0) * np.arange(0, n_embd, 2) / n_embd)  # (ceil(d/2),)
    table = np.zeros((max_len, n_embd))
    table[:, 0::2] = np.sin(pos * freq)
    table[:, 1::2] = np.cos(pos * freq[: n_embd // 2])
    return table


class _Positional(Module):
    max_len: int

    def __init__(self) -> None:
        super().__init__()
        self.hook_pos_embed = HookPoint()  # the positions added, (T, n_embd) (scratchformer.lens)

    def check_input(self, x, offset: int = 0) -> None:
        check_int_in_range("offset", offset, 0, 2**63)
        check_float_array(x, "positional input", ndim=3, last_dim=self.n_embd)
        if offset + x.shape[1] > self.max_len:
            raise ShapeError(
                f"sequence of length {offset + x.shape[1]} is longer than max_len={self.max_len}: "
                "crop the input or build the model with a larger max_len/block_size"
            )


class SinusoidalPositionalEncoding(_Positional):
    """Fixed sinusoids (Vaswani et al. 2017, section 3.5); no parameters."""

    def __init__(self, max_len: int, n_embd: int, dtype=DEFAULT_DTYPE):
        super().__init__()
        self.max_len, self.n_embd = max_len, n_embd
        self.pe = sinusoidal_table(max_len, n_embd).astype(dtype)  # a buffer, not a Parameter

    def _convert_buffers(self, dtype) -> None:
        self.pe = sinusoidal_table(self.max_len, self.n_embd).astype(dtype)  # exact, not re-rounded

    def forward(self, x: np.ndarray, offset: int = 0) -> np.ndarray:
        T = x.shape[1]
        self._save()  # nothing to keep, but backward must follow a training-mode forward
        return x + self.hook_pos_embed(self.pe[offset : offset + T].astype(x.dtype, copy=False))

    def backward(self, dy: np.ndarray) -> np.ndarray:
        self._pop_cache()
        return dy  # d(x + P)/dx = I


class LearnedPositionalEmbedding(_Positional):
    """A learned (max_len, n_embd) table, as GPT-2's `wpe`, initialised N(0, 0.02^2)."""

    def __init__(self, max_len: int, n_embd: int, dtype=DEFAULT_DTYPE, rng=None):
        super().__init__()
        check_positive_int("max_len", max_len)
        check_positive_int("n_embd", n_embd)
        self.max_len, self.n_embd = max_len, n_embd
        self.weight = Parameter(init.normal((max_len, n_embd), 0.02, dtype, rng))

    def forward(self, x: np.ndarray, offset: int = 0) -> np.ndarray:
        T = x.shape[1]
        self._save(offset=offset, T=T)
        return x + self.hook_pos_embed(self.weight.data[offset : offset + T])

    def backward(self, dy: np.ndarray) -> np.ndarray:
        # y = x + W[offset:offset+T]  =>  dW[offset:offset+T] += sum over the batch of dy
        c = self._pop_cache()
        self.weight.grad[c["offset"] : c["offset"] + c["T"]] += dy.sum(axis=0)
        return dy
