"""Position-wise feed-forward network: fc2(dropout(act(fc1(x)))). (..., d_model) -> (..., d_model)."""

from __future__ import annotations

import numpy as np

from scratchformer.errors import ConfigError
from scratchformer.nn.layers import Dropout, Linear
from scratchformer.nn.module import DEFAULT_DTYPE, Module
from scratchformer.ops import ACTIVATIONS


class FeedForward(Module):
    """activation: "relu", "gelu" (exact, erf) or "gelu_tanh" (GPT-2's approximation)."""

    def __init__(self, d_model: int, d_ff: int, activation: str = "gelu", dropout: float = 0.0,
                 bias: bool = True, dtype=DEFAULT_DTYPE, rng=None):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ConfigError(f"unknown activation {activation!r}: choose one of {sorted(ACTIVATIONS)}")
        self.activation = activation
        self._act_keep, self._act_from_cache = ACTIVATIONS[activation]
        self.fc1 = Linear(d_model, d_ff, bias=bias, dtype=dtype, rng=rng)
        self.fc2 = Linear(d_ff, d_model, bias=bias, dtype=dtype, rng=rng)
        self.dropout = Dropout(dropout)

    def forward(self, x: np.ndarray) -> np.ndarray:
        a, act_cache = self._act_keep(self.fc1(x))  # (..., d_ff)
        self._save(act=act_cache)
        return self.fc2(self.dropout(a))

    def backward(self, dy: np.ndarray) -> np.ndarray:
        act_cache = self._pop_cache()["act"]
        da = self.dropout.backward(self.fc2.backward(dy))
        return self.fc1.backward(self._act_from_cache(da, act_cache))
