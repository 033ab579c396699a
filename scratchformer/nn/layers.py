"""The basic layers: Linear, Embedding, LayerNorm, Dropout -- each a forward/backward pair."""

from __future__ import annotations

import math

import numpy as np

from scratchformer.errors import DataError, ShapeError
from scratchformer.nn import init
from scratchformer.nn.module import DEFAULT_DTYPE, Module, Parameter, check_float_input
from scratchformer.ops import (
    dropout_backward,
    dropout_forward,
    layernorm_backward,
    layernorm_forward,
    linear_backward,
    linear_forward,
)


class Linear(Module):
    """y = x W^T + b.  x: (..., in_features) -> (..., out_features).

    weight: (out_features, in_features), bias: (out_features,) -- PyTorch's layout, initialised
    as PyTorch does: U(-1/sqrt(in), 1/sqrt(in)).
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, dtype=DEFAULT_DTYPE, rng=None):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        bound = 1 / math.sqrt(in_features)
        self.weight = Parameter(init.uniform((out_features, in_features), bound, dtype, rng))
        self.bias = Parameter(init.uniform((out_features,), bound, dtype, rng)) if bias else None

    def forward(self, x: np.ndarray) -> np.ndarray:
        check_float_input(x, "Linear input")
        if x.shape[-1] != self.in_features:
            raise ShapeError(f"Linear expects last dim {self.in_features}, got input of shape {x.shape}")
        self._save(x=x)
        return linear_forward(x, self.weight.data, None if self.bias is None else self.bias.data)

    def backward(self, dy: np.ndarray) -> np.ndarray:
        x = self._pop_cache()["x"]
        dx, dw, db = linear_backward(dy, x, self.weight.data, self.bias is not None)
        self.weight.grad += dw
        if self.bias is not None:
            self.bias.grad += db
        return dx


class Embedding(Module):
    """Lookup table: idx (...) integer ids -> (..., embedding_dim). weight ~ N(0, 1) as PyTorch."""

    def __init__(self, num_embeddings: int, embedding_dim: int, dtype=DEFAULT_DTYPE, rng=None):
        super().__init__()
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.weight = Parameter(init.normal((num_embeddings, embedding_dim), 1.0, dtype, rng))

    def forward(self, idx: np.ndarray) -> np.ndarray:
        idx = np.asarray(idx)
        if not np.issubdtype(idx.dtype, np.integer):
            raise TypeError(f"Embedding expects integer ids, got dtype {idx.dtype}")
        if idx.size and (idx.min() < 0 or idx.max() >= self.num_embeddings):
            raise DataError(
                f"Embedding: token ids must be in [0, {self.num_embeddings}), got min {idx.min()} max {idx.max()}"
            )
        self._save(idx=idx)
        return self.weight.data[idx]

    def backward(self, dy: np.ndarray) -> None:
        # y = W[idx]  =>  dW[i] += sum of dy over the positions where idx == i
        idx = self._pop_cache()["idx"]
        np.add.at(self.weight.grad, idx.reshape(-1), dy.reshape(-1, self.embedding_dim))
        return None


class LayerNorm(Module):
    """Normalise over the last axis (size normalized_shape), then scale and shift. (..., C) -> (..., C).

    bias=False drops the shift (`self.bias` is None), as PyTorch's `LayerNorm(bias=False)`.
    """

    def __init__(self, normalized_shape: int, eps: float = 1e-5, bias: bool = True, dtype=DEFAULT_DTYPE):
        super().__init__()
        self.eps = eps
        self.weight = Parameter(np.ones(normalized_shape, dtype=dtype))
        self.bias = Parameter(np.zeros(normalized_shape, dtype=dtype)) if bias else None

    def forward(self, x: np.ndarray) -> np.ndarray:
        check_float_input(x, "LayerNorm input")
        if x.shape[-1] != self.weight.shape[0]:
            raise ShapeError(f"LayerNorm expects last dim {self.weight.shape[0]}, got input of shape {x.shape}")
        y, xhat, rstd = layernorm_forward(x, self.weight.data, None if self.bias is None else self.bias.data,
                                          self.eps)
        self._save(xhat=xhat, rstd=rstd)
        return y

    def backward(self, dy: np.ndarray) -> np.ndarray:
        c = self._pop_cache()
        dx, dw, db = layernorm_backward(dy, c["xhat"], c["rstd"], self.weight.data)
        self.weight.grad += dw
        if self.bias is not None:
            self.bias.grad += db
        return dx


class Dropout(Module):
    """Inverted dropout with probability p; the identity in eval mode.

    Draws from `self.rng` (a numpy Generator). `set_dropout_rng(model, rng)` gives all the
    Dropout layers of a model one shared generator, so a seed fixes every mask.
    """

    def __init__(self, p: float = 0.0, rng: np.random.Generator | None = None):
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"Dropout probability must be in [0, 1), got {p}")
        self.p = p
        self.rng = rng if rng is not None else np.random.default_rng(init.get_rng().integers(2**63))

    def forward(self, x: np.ndarray) -> np.ndarray:
        y, mask = dropout_forward(x, self.p, self.rng, self.training)
        self._save(mask=mask)
        return y

    def backward(self, dy: np.ndarray) -> np.ndarray:
        return dropout_backward(dy, self._pop_cache()["mask"])


def set_dropout_rng(module: Module, rng: np.random.Generator) -> np.random.Generator:
    """Make every Dropout (and attention dropout) in `module` draw from `rng`; returns rng."""
    for m in module.modules():
        if hasattr(m, "rng") and isinstance(m.rng, np.random.Generator):
            m.rng = rng
    return rng
