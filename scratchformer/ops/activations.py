"""Activations: ReLU, exact GELU (erf) and GPT-2's tanh approximation, with their backwards.

Each comes as a pair: `*_forward(x) -> y`, and `*_with_grad(x) -> (y, dydx)`, the forward
with its derivative at x computed alongside (GELU's Phi is the expensive part, shared by
both), for training. The backward of every activation is then one product,
`activation_backward(dy, dydx) = dy * dydx`, and a layer keeps one array (dydx) for its
backward instead of x and Phi. `*_backward(dy, x)` are the plain functional forms. The
numerics of erf and Phi live in `scratchformer.ops.numerics`.

Every op is dispatched by `@fast.lane` (where the lane is chosen and the record taken);
`gelu_forward` and `gelu_with_grad` are their formulas, whose faster forms run in the fast lane for
the dtypes those serve (`scratchformer/fast/activations.py`: float32 GELU with Phi from a table;
float64 runs the formula in both lanes). `activation_backward` is declared the derivative of the
`*_with_grad` forward whose dy/dx it is handed.
"""

from __future__ import annotations

import math

import numpy as np

from scratchformer import fast
from scratchformer.checks import DOOR, op_fits, op_float
from scratchformer.errors import DTypeError
from scratchformer.fast import activations as fast_activations
from scratchformer.ops.numerics import erf, normal_cdf

__all__ = [
    "ACTIVATIONS",
    "activation_backward",
    "erf",
    "normal_cdf",
    "relu_forward",
    "relu_backward",
    "gelu_forward",
    "gelu_backward",
    "gelu_tanh_forward",
    "gelu_tanh_backward",
]

INV_SQRT_2PI = 1 / math.sqrt(2 * math.pi)
GELU_TANH_C = math.sqrt(2 / math.pi)


# ReLU: y = max(x, 0)
@fast.lane()
def relu_forward(x: np.ndarray) -> np.ndarray:
    if not DOOR.inside:  # a direct call: check the arguments (a layer's call was checked at its door)
        op_float("relu_forward", "x", x)
    return np.maximum(x, 0)


@fast.lane()
def relu_with_grad(x: np.ndarray):
    # dy/dx = 1 where x > 0, else 0 (kept as bool: a quarter of the memory)
    return np.maximum(x, 0), x > 0


def _check_gelu(x):
    op_float("gelu_forward", "x", x)


# GELU, exact: y = x * Phi(x),  Phi(x) = (1 + erf(x / sqrt 2)) / 2
@fast.lane(fast_activations, check=_check_gelu, serves=fast_activations.serves)
def gelu_forward(x: np.ndarray) -> np.ndarray:
    return x * normal_cdf(x)


@fast.lane(fast_activations, serves=fast_activations.serves)
def gelu_with_grad(x: np.ndarray):
    # dy/dx = Phi(x) + x * phi(x),  phi(x) = exp(-x^2 / 2) / sqrt(2 pi)
    cdf = normal_cdf(x)
    return x * cdf, cdf + x * (np.exp(-0.5 * x * x) * INV_SQRT_2PI)


# GELU, tanh approximation (GPT-2): y = x/2 * (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
def _tanh_u(x: np.ndarray) -> np.ndarray:
    # x * x * x, not x**3: NumPy's float32 power is a slow scalar loop (~300x slower here)
    return np.tanh(GELU_TANH_C * (x + 0.044715 * (x * x * x)))


@fast.lane()
def gelu_tanh_forward(x: np.ndarray) -> np.ndarray:
    if not DOOR.inside:  # a direct call: check the arguments (a layer's call was checked at its door)
        op_float("gelu_tanh_forward", "x", x)
    return 0.5 * x * (1 + _tanh_u(x))


@fast.lane()
def gelu_tanh_with_grad(x: np.ndarray):
    # dy/dx = (1 + tanh u)/2 + x/2 * (1 - tanh^2 u) * du/dx,  du/dx = sqrt(2/pi) (1 + 3*0.044715 x^2)
    th = _tanh_u(x)
    du = GELU_TANH_C * (1 + 3 * 0.044715 * x * x)
    return 0.5 * x * (1 + th), 0.5 * (1 + th) + 0.5 * x * (1 - th * th) * du


# The backward of every activation: the derivative its forward computed, times the gradient.
@fast.lane(derivative_of=(relu_with_grad, gelu_with_grad, gelu_tanh_with_grad), grads=("x",))
def activation_backward(dy: np.ndarray, dydx: np.ndarray) -> np.ndarray:
    """dx = dy * dy/dx, elementwise: the backward of any activation above."""
    if not DOOR.inside:  # a direct call: check the arguments (a layer's call was checked at its door)
        op_float("activation_backward", "dy", dy)
        if not isinstance(dydx, np.ndarray) or dydx.dtype.kind not in "fb":  # a ReLU's slope is a bool mask
            raise DTypeError(
                f"activation_backward: dydx must be a float or bool array, got {type(dydx).__name__}"
            )
        op_fits("activation_backward", dy.shape == dydx.shape, dy=dy, dydx=dydx)
    return dy * dydx


# name -> (forward, forward with derivative)
ACTIVATIONS = {
    "relu": (relu_forward, relu_with_grad),
    "gelu": (gelu_forward, gelu_with_grad),
    "gelu_tanh": (gelu_tanh_forward, gelu_tanh_with_grad),
}


# The plain functional backwards (they recompute what the forward would have kept).
def _functional_backward(name: str, forward, with_grad):
    """`name(dy, x) = activation_backward(dy, with_grad(x)[1])`, the derivative of `forward`,
    checking a direct call's arguments."""

    def backward(dy, x):
        if not DOOR.inside:  # a direct call: check the arguments (a layer's call was checked at its door)
            op_float(name, "dy", dy)
            op_float(name, "x", x)
            op_fits(name, dy.shape == x.shape, dy=dy, x=x)
        return activation_backward(dy, with_grad(x)[1])

    backward.__name__ = backward.__qualname__ = name
    backward.__doc__ = (
        f"dx = dy * dy/dx at x: the backward of {name.removesuffix('_backward')} (dy, x: the same shape)."
    )
    return fast.lane(derivative_of=forward, grads=("x",))(backward)


relu_backward = _functional_backward("relu_backward", relu_forward, relu_with_grad)
gelu_backward = _functional_backward("gelu_backward", gelu_forward, gelu_with_grad)
gelu_tanh_backward = _functional_backward("gelu_tanh_backward", gelu_tanh_forward, gelu_tanh_with_grad)
