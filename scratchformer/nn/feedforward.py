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
        self._act_forward, self._act_backward = ACTIVATIONS[activation]
        self.fc1 = Linear(d_model, d_ff, bias=bias, dtype=dtype, rng=rng)
        self.fc2 = Linear(d_ff, d_model, bias=bias, dtype=dtype, rng=rng)
        self.dropout = Dropout(dropout)

    def forward(self, x: np.ndarray) -> np.ndarray:
        h = self.fc1(x)  # (..., d_ff)
        self._save(h=h)
        return self.fc2(self.dropout(self._act_forward(h)))

    def backward(self, dy: np.ndarray) -> np.ndarray:
        h = self._pop_cache()["h"]
        da = self.dropout.backward(self.fc2.backward(dy))
        return self.fc1.backward(self._act_backward(da, h))
