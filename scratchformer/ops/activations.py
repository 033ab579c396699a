"""Activations: ReLU, exact GELU (erf) and GPT-2's tanh approximation, with their backwards.

Each comes as a pair for layers: `*_keep(x) -> (y, cache)` and `*_from_cache(dy, cache) -> dx`,
so a backward reuses what its forward computed (GELU's Phi is the expensive part);
`*_forward(x)` / `*_backward(dy, x)` are the plain functional forms. The numerics of
erf and Phi live in `scratchformer.ops.numerics`.
"""

from __future__ import annotations

import math

import numpy as np

from scratchformer.ops.numerics import erf, normal_cdf

__all__ = ["ACTIVATIONS", "erf", "normal_cdf", "relu_forward", "relu_backward", "gelu_forward",
           "gelu_backward", "gelu_tanh_forward", "gelu_tanh_backward"]

INV_SQRT_2PI = 1 / math.sqrt(2 * math.pi)
GELU_TANH_C = math.sqrt(2 / math.pi)


# ReLU: y = max(x, 0)
def relu_keep(x: np.ndarray):
    return np.maximum(x, 0), x


def relu_from_cache(dy: np.ndarray, x: np.ndarray) -> np.ndarray:
    # dy/dx = 1 where x > 0, else 0
    return dy * (x > 0)


# GELU, exact: y = x * Phi(x),  Phi(x) = (1 + erf(x / sqrt 2)) / 2
def gelu_keep(x: np.ndarray):
    cdf = normal_cdf(x)
    return x * cdf, (x, cdf)


def gelu_from_cache(dy: np.ndarray, cache) -> np.ndarray:
    # dy/dx = Phi(x) + x * phi(x),  phi(x) = exp(-x^2 / 2) / sqrt(2 pi)
    # dx = dy * (cdf + x * pdf), in place in one array (same arithmetic, same order)
    x, cdf = cache
    grad = np.multiply(x, x)
    grad *= -0.5
    np.exp(grad, out=grad)  # exp(-x^2 / 2)
    grad *= INV_SQRT_2PI  # phi(x)
    grad *= x
    grad += cdf
    grad *= dy
    return grad


# GELU, tanh approximation (GPT-2): y = x/2 * (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
def gelu_tanh_keep(x: np.ndarray):
    # x * x * x, not x**3: NumPy's float32 power is a slow scalar loop (~300x slower here)
    th = np.tanh(GELU_TANH_C * (x + 0.044715 * (x * x * x)))
    return 0.5 * x * (1 + th), (x, th)


def gelu_tanh_from_cache(dy: np.ndarray, cache) -> np.ndarray:
    # dy/dx = (1 + tanh u)/2 + x/2 * (1 - tanh^2 u) * du/dx,  du/dx = sqrt(2/pi) (1 + 3*0.044715 x^2)
    x, th = cache
    du = GELU_TANH_C * (1 + 3 * 0.044715 * x * x)
    return dy * (0.5 * (1 + th) + 0.5 * x * (1 - th * th) * du)


ACTIVATIONS = {
    "relu": (relu_keep, relu_from_cache),
    "gelu": (gelu_keep, gelu_from_cache),
    "gelu_tanh": (gelu_tanh_keep, gelu_tanh_from_cache),
}


# The plain functional forms (the backward recomputes what the forward would have kept).
def relu_forward(x):
    return relu_keep(x)[0]


def relu_backward(dy, x):
    return relu_from_cache(dy, x)


def gelu_forward(x):
    return gelu_keep(x)[0]


def gelu_backward(dy, x):
    return gelu_from_cache(dy, gelu_keep(x)[1])


def gelu_tanh_forward(x):
    return gelu_tanh_keep(x)[0]


def gelu_tanh_backward(dy, x):
    return gelu_tanh_from_cache(dy, gelu_tanh_keep(x)[1])
