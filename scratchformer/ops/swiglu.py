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

__all__ = ["sigmoid", "silu_forward", "swiglu_forward", "swiglu_backward"]


def sigmoid(x: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(-x)), written with exp(-|x|) so no exp overflows for large |x|."""
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0, e) / (1.0 + e)


def silu_forward(x: np.ndarray) -> np.ndarray:
    """silu(x) = x * sigmoid(x) (also called swish)."""
    return x * sigmoid(x)


def swiglu_forward(h: np.ndarray) -> np.ndarray:
    """h (..., 2n) = [gate | up] -> silu(gate) * up, (..., n)."""
    gate, up = np.split(h, 2, axis=-1)
    return silu_forward(gate) * up


def swiglu_backward(dy: np.ndarray, h: np.ndarray) -> np.ndarray:
    """dh (..., 2n) for dy (..., n), from the forward's input h.

    y = silu(gate) * up  =>  dup = dy * silu(gate),  dgate = dy * up * silu'(gate),
    silu'(g) = sigmoid(g) + g * sigmoid(g) * (1 - sigmoid(g)).
    """
    gate, up = np.split(h, 2, axis=-1)
    s = sigmoid(gate)
    dgate = dy * up * (s + gate * s * (1 - s))
    dup = dy * (gate * s)
    return np.concatenate([dgate, dup], axis=-1)
