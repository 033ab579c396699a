"""Position-wise feed-forward network: fc2(dropout(act(fc1(x)))). (..., n_embd) -> (..., n_embd)."""

from __future__ import annotations

import numpy as np

from scratchformer.checks import check_choice, check_float_array
from scratchformer.nn.hooks import HookPoint
from scratchformer.nn.layers import Dropout, Linear
from scratchformer.nn.module import DEFAULT_DTYPE, Module
from scratchformer.ops import ACTIVATIONS, activation_backward


class FeedForward(Module):
    """activation: "relu", "gelu" (exact, erf) or "gelu_tanh" (GPT-2's approximation)."""

    def __init__(self, n_embd: int, n_inner: int, activation: str = "gelu", dropout: float = 0.0,
                 bias: bool = True, dtype=DEFAULT_DTYPE, rng=None):
        super().__init__()
        check_choice("activation", activation, ACTIVATIONS)
        self.activation = activation
        self._act, self._act_with_grad = ACTIVATIONS[activation]
        self.fc1 = Linear(n_embd, n_inner, bias=bias, dtype=dtype, rng=rng)
        self.fc2 = Linear(n_inner, n_embd, bias=bias, dtype=dtype, rng=rng)
        self.dropout = Dropout(dropout)
        # hook points (scratchformer.lens): fc1's output, the activation, fc2's output
        self.hook_pre, self.hook_post, self.hook_out = HookPoint(), HookPoint(), HookPoint()

    def check_input(self, x) -> None:
        check_float_array(x, "FeedForward input", last_dim=self.fc1.in_features)

    def forward(self, x: np.ndarray) -> np.ndarray:
        h = self.hook_pre(self.fc1(x))  # (..., n_inner)
        if self.training:  # the activation's derivative, computed alongside, is all backward needs
            a, dadh = self._act_with_grad(h)
            self._save(dadh=dadh)
        else:
            a = self._act(h)
        return self.hook_out(self.fc2(self.dropout(self.hook_post(a))))

    def backward(self, dy: np.ndarray) -> np.ndarray:
        dadh = self._pop_cache()["dadh"]
        da = self.dropout.backward(self.fc2.backward(dy))
        return self.fc1.backward(activation_backward(da, dadh))
