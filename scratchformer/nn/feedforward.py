"""Position-wise feed-forward network: fc2(dropout(act(fc1(x)))). (..., n_embd) -> (..., n_embd).

With a gated activation ("swiglu", Llama's) fc1 maps to 2 * n_inner channels, [gate | up], and
the activation halves them: fc2(dropout(silu(gate) * up)) (see scratchformer/ops/swiglu.py).
"""

from __future__ import annotations

import numpy as np

from scratchformer.checks import check_bool, check_choice, check_float_array
from scratchformer.nn.hooks import HookPoint
from scratchformer.nn.layers import Dropout, Linear
from scratchformer.nn.module import DEFAULT_DTYPE, Module
from scratchformer.ops import ACTIVATIONS, activation_backward, swiglu_backward, swiglu_forward

# name -> (forward, backward(dy, h)) of the activations that gate half of fc1's output by the other
GATED_ACTIVATIONS = {"swiglu": (swiglu_forward, swiglu_backward)}
# every activation a feed-forward (and so a model config) can use
FEEDFORWARD_ACTIVATIONS = (*ACTIVATIONS, *GATED_ACTIVATIONS)


class FeedForward(Module):
    """activation: "relu", "gelu" (exact, erf), "gelu_tanh" (GPT-2's approximation) or
    "swiglu" (gated: fc1 has 2 * n_inner outputs, [gate | up])."""

    def __init__(
        self,
        n_embd: int,
        n_inner: int,
        activation: str = "gelu",
        dropout: float = 0.0,
        bias: bool = True,
        dtype=DEFAULT_DTYPE,
        rng=None,
    ):
        super().__init__()
        check_bool("bias", bias)
        check_choice("activation", activation, FEEDFORWARD_ACTIVATIONS)
        self.activation = activation
        self.gated = activation in GATED_ACTIVATIONS
        if self.gated:
            self._act, self._gated_backward = GATED_ACTIVATIONS[activation]
        else:
            self._act, self._act_with_grad = ACTIVATIONS[activation]
        self.fc1 = Linear(n_embd, 2 * n_inner if self.gated else n_inner, bias=bias, dtype=dtype, rng=rng)
        self.fc2 = Linear(n_inner, n_embd, bias=bias, dtype=dtype, rng=rng)
        self.dropout = Dropout(dropout)
        # hook points (scratchformer.lens): the input (..., n_embd), fc1's output, the activation,
        # fc2's output
        self.hook_in = HookPoint()
        self.hook_pre, self.hook_post, self.hook_out = HookPoint(), HookPoint(), HookPoint()

    def check_input(self, x) -> None:
        check_float_array(x, "FeedForward input", last_dim=self.fc1.in_features)

    def activate(self, h: np.ndarray) -> np.ndarray:
        """The activation alone: fc1's output (..., fc1 width) -> (..., n_inner)."""
        return self._act(h)

    def forward(self, x: np.ndarray) -> np.ndarray:
        h = self.hook_pre(
            self.fc1(self.hook_in(x))
        )  # (..., n_inner), or (..., 2 n_inner) = [gate | up] when gated
        if not self.training:
            a = self._act(h)
        elif self.gated:  # the gated backward needs both halves of h
            a = self._act(h)
            self._save(h=h)
        else:  # the activation's derivative, computed alongside, is all backward needs
            a, dadh = self._act_with_grad(h)
            self._save(dadh=dadh)
        return self.hook_out(self.fc2(self.dropout(self.hook_post(a))))

    def backward(self, dy: np.ndarray) -> np.ndarray:
        c = self._pop_cache()
        # through hook_post's backward: a caller's grad hook sees d(loss)/d(activation) (training diagnostics)
        da = self.hook_post.backward(self.dropout.backward(self.fc2.backward(dy)))
        dh = self._gated_backward(da, c["h"]) if self.gated else activation_backward(da, c["dadh"])
        return self.fc1.backward(dh)
