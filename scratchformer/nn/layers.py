"""The basic layers: Linear, Embedding, LayerNorm, RMSNorm, NoNorm, Dropout -- each a forward/backward pair."""

from __future__ import annotations

import math
from contextlib import contextmanager

import numpy as np

from scratchformer.checks import (
    check_bool,
    check_choice,
    check_float_array,
    check_generator,
    check_grad,
    check_module,
    check_positive_int,
    check_positive_number,
    check_probability,
    check_token_ids,
)
from scratchformer.nn import init
from scratchformer.nn.hooks import HookPoint
from scratchformer.nn.module import DEFAULT_DTYPE, Module, Parameter
from scratchformer.ops import (
    dropout_backward,
    dropout_forward,
    embedding_backward_into,
    layernorm_backward,
    layernorm_forward,
    linear_backward_into,
    linear_forward,
    rmsnorm_backward,
    rmsnorm_forward,
)


class Linear(Module):
    """y = x W^T + b.  x: (..., in_features) -> (..., out_features).

    weight: (out_features, in_features), bias: (out_features,) -- PyTorch's layout, initialised
    as PyTorch does: U(-1/sqrt(in), 1/sqrt(in)).
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, dtype=DEFAULT_DTYPE, rng=None):
        super().__init__()
        check_bool("bias", bias)
        check_positive_int("in_features", in_features)
        check_positive_int("out_features", out_features)
        self.in_features, self.out_features = in_features, out_features
        bound = 1 / math.sqrt(in_features)
        self.weight = Parameter(init.uniform((out_features, in_features), bound, dtype, rng))
        self.bias = Parameter(init.uniform((out_features,), bound, dtype, rng)) if bias else None

    def check_input(self, x) -> None:
        check_float_array(x, "Linear input", last_dim=self.in_features)

    def forward(self, x: np.ndarray) -> np.ndarray:
        self._save(x=x)
        return linear_forward(x, self.weight.data, None if self.bias is None else self.bias.data)

    def backward(self, dy: np.ndarray) -> np.ndarray:
        x = self._pop_cache()["x"]
        check_grad(dy, "Linear.backward dy", (*x.shape[:-1], self.out_features))
        return linear_backward_into(
            dy, x, self.weight.data, self.weight.grad, None if self.bias is None else self.bias.grad
        )


class Embedding(Module):
    """Lookup table: idx (...) integer ids -> (..., embedding_dim). weight ~ N(0, 1) as PyTorch."""

    def __init__(self, num_embeddings: int, embedding_dim: int, dtype=DEFAULT_DTYPE, rng=None):
        super().__init__()
        check_positive_int("num_embeddings", num_embeddings)
        check_positive_int("embedding_dim", embedding_dim)
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.weight = Parameter(init.normal((num_embeddings, embedding_dim), 1.0, dtype, rng))

    def check_input(self, idx) -> None:
        check_token_ids(idx, "Embedding input", self.num_embeddings, batched=False)

    def forward(self, idx: np.ndarray) -> np.ndarray:
        idx = np.asarray(idx)
        self._save(idx=idx)
        return self.weight.data[idx]

    def backward(self, dy: np.ndarray) -> None:
        # y = W[idx]  =>  dW[i] += sum of dy over the positions where idx == i (np.add.at)
        embedding_backward_into(dy, self._pop_cache()["idx"], self.weight.grad)
        return None


class LayerNorm(Module):
    """Normalise over the last axis (size normalized_shape), then scale and shift. (..., C) -> (..., C).

    bias=False drops the shift (`self.bias` is None), as PyTorch's `LayerNorm(bias=False)`.
    Hook points (scratchformer.lens): what it takes (`hook_in`) and gives (`hook_out`), (..., C).
    """

    def __init__(self, normalized_shape: int, eps: float = 1e-5, bias: bool = True, dtype=DEFAULT_DTYPE):
        super().__init__()
        check_positive_int("normalized_shape", normalized_shape)
        check_positive_number("eps", eps)
        self.eps = eps
        self.weight = Parameter(np.ones(normalized_shape, dtype=dtype))
        self.bias = Parameter(np.zeros(normalized_shape, dtype=dtype)) if bias else None
        self.hook_in, self.hook_out = HookPoint(), HookPoint()

    def check_input(self, x) -> None:
        check_float_array(x, "LayerNorm input", last_dim=self.weight.shape[0])

    def forward(self, x: np.ndarray) -> np.ndarray:
        y, xhat, rstd = layernorm_forward(
            self.hook_in(x), self.weight.data, None if self.bias is None else self.bias.data, self.eps
        )
        self._save(xhat=xhat, rstd=rstd)
        return self.hook_out(y)

    def backward(self, dy: np.ndarray) -> np.ndarray:
        c = self._pop_cache()
        check_grad(dy, "LayerNorm.backward dy", c["xhat"].shape)
        dx, dw, db = layernorm_backward(dy, c["xhat"], c["rstd"], self.weight.data)
        self.weight.grad += dw
        if self.bias is not None:
            self.bias.grad += db
        return dx


class RMSNorm(Module):
    """Rescale by the root mean square over the last axis, then scale: (..., C) -> (..., C).

    y = x / sqrt(mean(x^2) + eps) * weight; no centring and no bias (as Llama's RMSNorm and
    `torch.nn.RMSNorm`). weight starts at 1. Hook points: `hook_in`, `hook_out`, as LayerNorm's.
    """

    def __init__(self, normalized_shape: int, eps: float = 1e-6, dtype=DEFAULT_DTYPE):
        super().__init__()
        check_positive_int("normalized_shape", normalized_shape)
        check_positive_number("eps", eps)
        self.eps = eps
        self.weight = Parameter(np.ones(normalized_shape, dtype=dtype))
        self.hook_in, self.hook_out = HookPoint(), HookPoint()

    def check_input(self, x) -> None:
        check_float_array(x, "RMSNorm input", last_dim=self.weight.shape[0])

    def forward(self, x: np.ndarray) -> np.ndarray:
        y, xhat, rstd = rmsnorm_forward(self.hook_in(x), self.weight.data, self.eps)
        self._save(xhat=xhat, rstd=rstd)
        return self.hook_out(y)

    def backward(self, dy: np.ndarray) -> np.ndarray:
        c = self._pop_cache()
        dx, dw = rmsnorm_backward(dy, c["xhat"], c["rstd"], self.weight.data)
        self.weight.grad += dw
        return dx


class NoNorm(Module):
    """normalization="none": the identity in place of a norm, y = x, no parameters; its
    backward passes dy through. (..., C) -> (..., C). The models' contract reports no norm
    where a NoNorm stands (`models.base.norm_kind` gives None), so the lens needs no norm
    to undo (Nanda et al.'s grokking model has no LayerNorm). Hook points: `hook_in`, `hook_out`,
    as every norm's (the same activation twice)."""

    def __init__(self, normalized_shape: int):
        super().__init__()
        check_positive_int("normalized_shape", normalized_shape)
        self.normalized_shape = normalized_shape
        self.hook_in, self.hook_out = HookPoint(), HookPoint()

    def check_input(self, x) -> None:
        check_float_array(x, "NoNorm input", last_dim=self.normalized_shape)

    def forward(self, x: np.ndarray) -> np.ndarray:
        return self.hook_out(self.hook_in(x))

    def backward(self, dy: np.ndarray) -> np.ndarray:
        return dy


# The normalisation layers a block can use: name -> how to build one over `n_embd` channels.
# RMSNorm has no bias whatever `bias` says (it has no shift to learn); "none" builds a NoNorm.
NORMALIZATIONS = {
    "layernorm": lambda n_embd, eps, bias, dtype: LayerNorm(n_embd, eps=eps, bias=bias, dtype=dtype),
    "rmsnorm": lambda n_embd, eps, bias, dtype: RMSNorm(n_embd, eps=eps, dtype=dtype),
    "none": lambda n_embd, eps, bias, dtype: NoNorm(n_embd),
}


def make_norm(normalization: str, n_embd: int, eps: float = 1e-5, bias: bool = True, dtype=DEFAULT_DTYPE):
    """A LayerNorm, RMSNorm or NoNorm over n_embd channels, by name (see NORMALIZATIONS)."""
    check_positive_int("n_embd", n_embd)
    check_bool("bias", bias)
    check_choice("normalization", normalization, NORMALIZATIONS)
    return NORMALIZATIONS[normalization](n_embd, eps, bias, dtype)


class DrawsDropout:
    """Declared by every module that draws dropout masks (Dropout; MultiHeadAttention, on its
    weights): `rng`, the numpy Generator it draws from, and `dropout_rate`, the probability it
    drops with (settable). What seeds, replays or switches off dropout (`set_dropout_rng`,
    `dropout_off`, training/parallel.py's workers) finds these modules by this declaration."""

    rng: np.random.Generator
    dropout_rate: float  # each module's property over its own attribute


class Dropout(Module, DrawsDropout):
    """Inverted dropout with probability p; the identity in eval mode.

    Draws from `self.rng` (a numpy Generator). `set_dropout_rng(model, rng)` gives all the
    Dropout layers of a model one shared generator, so a seed fixes every mask.
    """

    def __init__(self, p: float = 0.0, rng: np.random.Generator | None = None):
        super().__init__()
        check_probability("dropout p", p)
        self.p = p
        self.rng = rng if rng is not None else np.random.default_rng(init.get_rng().integers(2**63))

    @property
    def dropout_rate(self) -> float:
        return self.p

    @dropout_rate.setter
    def dropout_rate(self, p: float) -> None:
        self.p = p

    def check_input(self, x) -> None:
        check_float_array(x, "Dropout input")

    def forward(self, x: np.ndarray) -> np.ndarray:
        y, mask = dropout_forward(x, self.p, self.rng, self.training)
        self._save(mask=mask)
        return y

    def backward(self, dy: np.ndarray) -> np.ndarray:
        return dropout_backward(dy, self._pop_cache()["mask"])


def dropout_modules(module: Module) -> list:
    """The modules of `module` that draw dropout masks (`DrawsDropout`), in module order."""
    return [m for m in module.modules() if isinstance(m, DrawsDropout)]


def set_dropout_rng(module: Module, rng: np.random.Generator) -> np.random.Generator:
    """Make every Dropout (and attention dropout) in `module` draw from `rng`; returns rng."""
    check_module("module", module)
    check_generator("rng", rng)
    for m in dropout_modules(module):
        m.rng = rng
    return rng


@contextmanager
def dropout_off(module: Module):
    """Every dropout rate of `module` at 0 inside the block (a training-mode forward is then the
    eval-mode function and draws nothing), restored on the way out, also on an error."""
    saved = [(m, m.dropout_rate) for m in dropout_modules(module)]
    try:
        for m, _ in saved:
            m.dropout_rate = 0.0
        yield module
    finally:
        for m, rate in saved:
            m.dropout_rate = rate
