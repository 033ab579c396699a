"""SwiGLU, the gated activation of Llama's feed-forward (Shazeer 2020, "GLU Variants Improve
Transformer"): half of the hidden layer gates the other half through SiLU.

    h = [gate | up]          (..., 2n): the first linear layer's output, gate first
    y = silu(gate) * up      (..., n)
    silu(g) = g * sigmoid(g)

So the feed-forward is fc2(silu(x W_gate^T) * (x W_up^T)) = Llama's
down_proj(silu(gate_proj(x)) * up_proj(x)), with W_gate and W_up stacked in one fc1.
"""

from __future__ import annotations

import numpy as np

from scratchformer import fast
from scratchformer.checks import DOOR, op_fits, op_float

__all__ = ["sigmoid", "silu_forward", "swiglu_forward", "swiglu_backward"]


def sigmoid(x: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(-x)), written with exp(-|x|) so no exp overflows for large |x|."""
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0, e) / (1.0 + e)


@fast.lane()
def silu_forward(x: np.ndarray) -> np.ndarray:
    """silu(x) = x * sigmoid(x) (also called swish)."""
    if not DOOR.inside:  # a direct call: check the arguments (a layer's call was checked at its door)
        op_float("silu_forward", "x", x)
    return x * sigmoid(x)


@fast.lane()
def swiglu_forward(h: np.ndarray) -> np.ndarray:
    """h (..., 2n) = [gate | up] -> silu(gate) * up, (..., n)."""
    if not DOOR.inside:  # a direct call: check the arguments (a layer's call was checked at its door)
        op_float("swiglu_forward", "h", h)
        op_fits("swiglu_forward", h.shape[-1] % 2 == 0, h=h)
    gate, up = np.split(h, 2, axis=-1)
    return silu_forward(gate) * up


@fast.lane(derivative_of=swiglu_forward, grads=("h",))
def swiglu_backward(dy: np.ndarray, h: np.ndarray) -> np.ndarray:
    """dh (..., 2n) for dy (..., n), from the forward's input h.

    y = silu(gate) * up  =>  dup = dy * silu(gate),  dgate = dy * up * silu'(gate),
    silu'(g) = sigmoid(g) + g * sigmoid(g) * (1 - sigmoid(g)).
    """
    if not DOOR.inside:  # a direct call: check the arguments (a layer's call was checked at its door)
        op_float("swiglu_backward", "dy", dy)
        op_float("swiglu_backward", "h", h)
        op_fits(
            "swiglu_backward",
            h.shape[-1] % 2 == 0 and dy.shape == (*h.shape[:-1], h.shape[-1] // 2),
            dy=dy,
            h=h,
        )
    gate, up = np.split(h, 2, axis=-1)
    s = sigmoid(gate)
    dgate = dy * up * (s + gate * s * (1 - s))
    dup = dy * (gate * s)
    return np.concatenate([dgate, dup], axis=-1)
