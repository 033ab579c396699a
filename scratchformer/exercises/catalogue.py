"""The exercises: for each, the class to write, the input it is graded on, and the known mistakes.

A known mistake is an edit of the reference solution (`solutions/NAME.py`): the grader runs
each edited solution on the same input, and when a learner's backward fails the same way (the
same gradients, the same error), it names that mistake's cause.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Mistake:
    """Replace `old` (once) by `new` in the reference solution; `cause` says what went wrong."""

    old: str
    new: str
    cause: str


@dataclass(frozen=True)
class Exercise:
    name: str
    title: str  # one line, for the list
    class_name: str  # the class the learner's file defines
    args: tuple  # its constructor's arguments
    inputs: Callable[[np.random.Generator], tuple]  # forward's arguments (float arrays get gradients)
    mistakes: tuple[Mistake, ...]


MISSING_BATCH_SUM = "a missing sum over the batch: a parameter's gradient sums over every row (all batch and time positions)"
UNMASKED_SOFTMAX = ("np.exp(self.scores - self.scores.max(axis=-1, keepdims=True)) / "
                    "np.exp(self.scores - self.scores.max(axis=-1, keepdims=True)).sum(axis=-1, keepdims=True)")


def _normal(*shape):
    return lambda rng: (rng.standard_normal(shape),)


def _logits_targets(rng):
    return rng.standard_normal((6, 5)) * 2, rng.integers(0, 5, 6)


def _token_ids(rng):
    ids = rng.integers(0, 7, (2, 5))
    ids[1, 3] = ids[0, 0] = ids[1, 4]  # an id occurring three times
    return (ids,)


def _qkv_mask(rng):
    # Tq = 4 queries, Tk = 5 keys (unequal, so a transposed product cannot pass); every query
    # sees at least one key, and the first three each have a hidden one
    mask = np.tri(4, 5, k=1, dtype=bool)
    return (rng.standard_normal((2, 2, 4, 3)), rng.standard_normal((2, 2, 5, 3)),
            rng.standard_normal((2, 2, 5, 3)), mask)


EXERCISES: dict[str, Exercise] = {e.name: e for e in [
    Exercise("softmax", "softmax over the last axis", "Softmax", (), _normal(2, 3, 5), (
        Mistake("(dy - (dy * y).sum(axis=-1, keepdims=True))", "dy",
                "dx = y * dy misses the softmax's normalisation term: dx = y * (dy - sum_j dy_j y_j)"),
        Mistake("(dy * y).sum(axis=-1, keepdims=True)", "(dy * y).sum(axis=0, keepdims=True)",
                "the sum runs over the wrong axis: it runs over the softmax's own axis, the last"),
        Mistake("y = self.y", "y = self.x",
                "the input x is used where the output y belongs: the Jacobian diag(y) - y y^T is written in y"),
        Mistake("(dy * y).sum(", "dy.sum(",
                "the subtracted sum is sum_j dy_j y_j (a dot product with y), not sum_j dy_j"),
    )),
    Exercise("cross_entropy", "mean cross-entropy of logits", "CrossEntropy", (), _logits_targets, (
        Mistake("        dlogits[np.arange(N), self.targets] -= 1  # minus the one-hot target\n", "",
                "the one-hot target is not subtracted: dlogits = (softmax(logits) - one_hot(targets)) / N"),
        Mistake("dlogits * (dloss / N)", "dlogits * dloss",
                "the 1/N of the mean is missing: the loss averages the N rows, so each row's gradient is divided by N"),
        Mistake("dlogits * (dloss / N)", "dlogits / N",
                "dloss, the gradient flowing into the loss, is not multiplied in (the chain rule)"),
        Mistake("dlogits[np.arange(N), self.targets]", "dlogits[:, self.targets]",
                "the one-hot is indexed [:, targets] (every row, every target) instead of [np.arange(N), targets]"),
        Mistake("dlogits = np.exp(self.logp)  # softmax(logits)\n        dlogits[np.arange(N), self.targets] -= 1",
                "dlogits = np.zeros_like(self.logp)\n"
                "        dlogits[np.arange(N), self.targets] = -np.exp(-self.logp[np.arange(N), self.targets])",
                "this is the derivative with respect to the probabilities (-1/p at the target), not to the logits: "
                "through the softmax it becomes softmax - one_hot"),
    )),
    Exercise("layernorm", "LayerNorm over the last axis", "LayerNorm", (5,), _normal(2, 3, 5), (
        Mistake("g - g.mean(axis=-1, keepdims=True) - xhat", "g - xhat",
                "dx misses the term from the mean: dx = rstd * (g - mean(g) - xhat * mean(g * xhat))"),
        Mistake(" - xhat * (g * xhat).mean(axis=-1, keepdims=True)", "",
                "dx misses the term from the variance: dx = rstd * (g - mean(g) - xhat * mean(g * xhat))"),
        Mistake("g = dy * self.weight.data", "g = dy",
                "the weight is left out of dL/dxhat: g = dy * weight"),
        Mistake("(dy * xhat).reshape(-1, C).sum(axis=0)  # summed over every row\n"
                "        self.bias.grad += dy.reshape(-1, C).sum(axis=0)",
                "dy.reshape(-1, C).sum(axis=0)\n        self.bias.grad += (dy * xhat).reshape(-1, C).sum(axis=0)",
                "dweight and dbias are swapped: dweight sums dy * xhat, dbias sums dy"),
        Mistake("(dy * xhat).reshape(-1, C).sum(axis=0)", "(dy * xhat).sum(axis=0)", MISSING_BATCH_SUM),
    )),
    Exercise("gelu", "exact GELU, x * Phi(x)", "GELU", (), lambda rng: (rng.standard_normal((2, 3, 4)) * 1.5,), (
        Mistake("dy * (cdf + x * pdf)", "dy * cdf",
                "the product rule's second term is missing: d(x Phi(x))/dx = Phi(x) + x phi(x)"),
        Mistake("return dy * (cdf + x * pdf)", "return cdf + x * pdf",
                "dy is not multiplied in: dx = dy * dy/dx (the chain rule)"),
        Mistake(" / math.sqrt(2 * math.pi)", "",
                "phi(x) lacks its normalisation 1/sqrt(2 pi): phi(x) = exp(-x^2/2) / sqrt(2 pi)"),
        Mistake("np.exp(-0.5 * x * x)", "np.exp(-x * x)",
                "phi(x) has lost the 1/2 in its exponent: phi(x) = exp(-x^2/2) / sqrt(2 pi)"),
    )),
    Exercise("linear", "affine map y = x W^T + b", "Linear", (4, 3), _normal(2, 3, 4), (
        Mistake("dy2.T @ x2", "x2.T @ dy2",
                "a transposed product: dW = dy^T x has W's shape (out, in); x^T dy is its transpose"),
        Mistake("(dy2 @ W)", "(dy2 @ W.T)", "a transposed factor: dx = dy W (W is (out, in)), not dy W^T"),
        Mistake("dy2.sum(axis=0)", "dy.sum(axis=0)", MISSING_BATCH_SUM),
        Mistake("dy2.sum(axis=0)", "dy2.mean(axis=0)",
                "a mean where a sum belongs: each row adds its own gradient to the bias"),
        Mistake("return (dy2 @ W).reshape(self.x.shape)", "return dy2 @ W",
                "dx is left flattened to (rows, in): reshape it back to x's shape"),
    )),
    Exercise("embedding", "lookup table y = W[ids]", "Embedding", (7, 4), _token_ids, (
        Mistake("np.add.at(self.weight.grad, self.ids.reshape(-1), dy.reshape(-1, C))",
                "self.weight.grad[self.ids.reshape(-1)] += dy.reshape(-1, C)",
                "a repeated id counts once: weight.grad[ids] += dy keeps only one of its rows; "
                "np.add.at(weight.grad, ids, dy) adds every occurrence"),
        Mistake("self.ids.reshape(-1), dy.reshape(-1, C)", "self.ids[0], dy[0]",
                "a missing sum over the batch: only the first batch row's gradient is added"),
        Mistake("        return None\n",
                "        counts = np.bincount(self.ids.reshape(-1), minlength=len(self.weight.grad))\n"
                "        self.weight.grad /= np.maximum(counts, 1)[:, None]\n        return None\n",
                "a repeated id's rows are averaged: its gradient is their sum"),
        Mistake("        return None\n", "        return dy\n",
                "backward returns a gradient for the token ids: ids are integers and have none, return None"),
    )),
    Exercise("attention", "scaled dot-product attention with a mask", "ScaledDotProductAttention", (), _qkv_mask, (
        Mistake("self.weights, self.scale\n", f"{UNMASKED_SOFTMAX}, self.scale\n",
                "the mask is not applied: the backward's softmax weights are recomputed from the unmasked "
                "scores, so masked keys get gradient"),
        Mistake("dq = dscores @ k * s  # (B, H, Tq, d)\n        dk = dscores.swapaxes(-1, -2) @ q * s",
                "dq = dscores @ k\n        dk = dscores.swapaxes(-1, -2) @ q",
                "the 1/sqrt(d) scale of the scores is missing from dq and dk"),
        Mistake("w * (dw - (dw * w).sum(axis=-1, keepdims=True))", "w * dw",
                "the softmax's backward misses its subtracted term: dS = W * (dW - sum_j dW_j W_j)"),
        Mistake("dv = w.swapaxes(-1, -2) @ dout", "dv = w @ dout",
                "a transposed product: dv = W^T dout (W is (Tq, Tk)), not W dout"),
        Mistake("dq = dscores @ k * s", "dq = dscores @ v * s",
                "dq uses v where k belongs: the scores are q k^T, so dq = dS k / sqrt(d)"),
    )),
    Exercise("mha", "causal multi-head self-attention", "MultiHeadAttention", (6, 2), _normal(2, 4, 6), (
        Mistake("dy.reshape(-1, C).T @ self.a.reshape(-1, C)", "self.a.reshape(-1, C).T @ dy.reshape(-1, C)",
                "a transposed product: out_proj_weight's gradient is dy^T a (out, in), not a^T dy"),
        Mistake("self.weights, self.scale\n", f"{UNMASKED_SOFTMAX}, self.scale\n",
                "the causal mask is not applied: the backward's softmax weights are recomputed from the "
                "unmasked scores, so future keys get gradient"),
        Mistake("da = self.split_heads(dy @ self.out_proj_weight.data)",
                "da = (dy @ self.out_proj_weight.data).reshape(q.shape)",
                "the heads are split with a reshape alone: (B, T, C) -> (B, H, T, d) needs "
                "reshape(B, T, H, d) then transpose(0, 2, 1, 3), as split_heads does"),
        Mistake("dqkv.reshape(-1, 3 * C).sum(axis=0)", "dqkv.sum(axis=0)", MISSING_BATCH_SUM),
        Mistake("dq = dscores @ k * s\n        dk = dscores.swapaxes(-1, -2) @ q * s",
                "dq = dscores @ k\n        dk = dscores.swapaxes(-1, -2) @ q",
                "the 1/sqrt(d) scale of the scores is missing from dq and dk"),
    )),
    Exercise("block", "a pre-norm Transformer block", "PreNormBlock", (8, 2), _normal(2, 3, 8), (
        Mistake("dh = dy + self.ln2.backward(", "dh = self.ln2.backward(",
                "the residual path around the feed-forward is missing: h feeds both ff(ln2(h)) and the sum, "
                "so dh = dy + ln2'(ff'(dy))"),
        Mistake("return dh + self.ln1.backward(dx_attn)", "return self.ln1.backward(dx_attn)",
                "the residual path around the attention is missing: dx = dh + ln1'(attn'(dh))"),
        Mistake("self.attn.backward(dh)", "self.attn.backward(dy)",
                "the attention's backward gets dy, the gradient at the block's output, instead of dh, the "
                "gradient at its own output h"),
        Mistake("self.ln2.backward(self.ff.backward(dy))", "self.ff.backward(dy)",
                "ln2's backward is skipped: the feed-forward's input gradient must go back through ln2"),
        Mistake("dx_attn, _ = self.attn.backward(dh)", "dx_attn = self.attn.backward(dh)",
                "MultiHeadAttention.backward returns the tuple (dx, dcontext): unpack it"),
    )),
]}
