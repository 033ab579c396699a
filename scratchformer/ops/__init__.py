"""Functional forward/backward pairs on plain NumPy arrays (the math of every layer).

Each op is its reference formula, decorated `@fast.lane(...)`: the one dispatch every op goes
through (`scratchformer/fast/__init__.py`), where the lane is chosen and, while one is taken, the
model's record (`scratchformer/record.py`). An op with a faster form names it there: while
`fast.enabled` (the default) it runs the function of the same name in `scratchformer.fast`.
The ops that have one: softmax.py, layernorm.py, linear.py (backwards), activations.py (GELU),
attention.py (`attend`, `attention_backward`), embedding.py; `fast.VARIANTS` lists them.
A backward op declares beside itself the forward it is the derivative of
(`fast.lane(derivative_of=forward, grads=...)`): the backward walk-through checks it against that
forward's finite differences. The helpers that build constants (masks, rotary tables, ALiBi's
slopes) and erf's numerics are not ops: they go through no dispatch."""

from scratchformer.ops.activations import (
    ACTIVATIONS,
    activation_backward,
    erf,
    gelu_backward,
    gelu_forward,
    gelu_tanh_backward,
    gelu_tanh_forward,
    relu_backward,
    relu_forward,
)
from scratchformer.ops.alibi import alibi_bias, alibi_slopes
from scratchformer.ops.attention import (
    attention_backward,
    attention_forward,
    attention_mask,
    attention_scores,
    causal_mask,
    weighted_sum,
)
from scratchformer.ops.detach import detach
from scratchformer.ops.dropout import dropout_backward, dropout_forward
from scratchformer.ops.embedding import embedding_backward_into, embedding_forward
from scratchformer.ops.layernorm import layernorm_backward, layernorm_forward
from scratchformer.ops.linear import linear_backward, linear_backward_into, linear_forward
from scratchformer.ops.loss import IGNORE_INDEX, cross_entropy_backward, cross_entropy_forward
from scratchformer.ops.rmsnorm import rmsnorm_backward, rmsnorm_forward
from scratchformer.ops.rope import rope_backward, rope_forward, rope_tables, rotate_half
from scratchformer.ops.softmax import (
    log_softmax_backward,
    log_softmax_forward,
    masked_softmax,
    softmax_backward,
    softmax_forward,
)
from scratchformer.ops.swiglu import silu_forward, swiglu_backward, swiglu_forward

__all__ = [
    "ACTIVATIONS",
    "IGNORE_INDEX",
    "activation_backward",
    "erf",
    "gelu_backward",
    "gelu_forward",
    "gelu_tanh_backward",
    "gelu_tanh_forward",
    "relu_backward",
    "relu_forward",
    "alibi_bias",
    "alibi_slopes",
    "attention_backward",
    "attention_forward",
    "attention_mask",
    "attention_scores",
    "causal_mask",
    "weighted_sum",
    "detach",
    "dropout_backward",
    "dropout_forward",
    "embedding_backward_into",
    "embedding_forward",
    "layernorm_backward",
    "layernorm_forward",
    "linear_backward",
    "linear_backward_into",
    "linear_forward",
    "cross_entropy_backward",
    "cross_entropy_forward",
    "log_softmax_backward",
    "log_softmax_forward",
    "masked_softmax",
    "softmax_backward",
    "softmax_forward",
    "rmsnorm_backward",
    "rmsnorm_forward",
    "rope_backward",
    "rope_forward",
    "rope_tables",
    "rotate_half",
    "silu_forward",
    "swiglu_backward",
    "swiglu_forward",
]
