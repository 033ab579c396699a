"""The exercises: for each, the class to write, the inputs it is graded on, and the known mistakes.

Each exercise is graded on several cases (`Case`): constructor arguments and forward inputs of
different shapes and seeds, so that a backward written for one shape only (a hard-coded
reshape, an `einsum` over exactly three axes, an axis counted from the front) fails on another.
Where the stub's docstring allows `...` leading axes, the cases include 2-D and 4-D inputs;
batch and head counts are odd in at least one case.

A known mistake is an edit of the reference solution (`solutions/NAME.py`): the grader runs
each edited solution on the case the learner's file failed, and when it fails the same way (the
same gradients, the same error), it names that mistake's cause. The sources of the common
mistakes: Karpathy's makemore part 4 (manual backprop: a bias gradient not summed over the
batch, Bessel's n - 1 in a variance, a missing 1/n of a mean), Stanford CS336's and ARENA's
from-scratch backward exercises (softmax's Jacobian, LayerNorm through its statistics, heads
split and merged, masks in attention).
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
class Case:
    """One input the exercise is graded on: the constructor's arguments, a function of a
    Generator giving the forward's arguments (float arrays get gradients), and the seed of
    that Generator (the parameters, the upstream gradient and the prefilled .grad use
    seed + 1, + 2, + 3)."""

    args: tuple
    inputs: Callable[[np.random.Generator], tuple]
    seed: int


@dataclass(frozen=True)
class Exercise:
    """kind "backward": a layer's backward, graded by finite differences on `cases`. Any other
    kind names the module of this package that grades the exercise: its `grade(answer,
    progress) -> Verdict` is given the object the learner's file defines under `class_name`."""

    name: str
    title: str  # one line, for the list
    class_name: str  # the class (or function, or value) the learner's file defines
    cases: tuple[Case, ...]  # graded in this order; the first is the one the stub's docstring shows
    mistakes: tuple[Mistake, ...]
    kind: str = "backward"
    todo: str = "write the backward"  # what the stub's NotImplementedError says
    # a case of random shapes (a backward exercise): the grader adds two to `cases` on every
    # check, drawn from a generator it seeds itself, of sizes no fixed case uses, so a file
    # fitted to the fixed shapes fails
    random_case: Callable[[np.random.Generator], Case] | None = None


@dataclass(frozen=True)
class Verdict:
    """What a grader module (an exercise of another kind than "backward") found: right or
    not, the one line that says so, and the likely cause where the grader itself sees it."""

    right: bool
    text: str
    cause: str | None = None


MISSING_BATCH_SUM = (
    "a missing sum over the batch: a parameter's gradient sums over every row (all batch and time positions)"
)
BPE_OVERLAP = (
    "a symbol is used in two merges: after merging a pair the scan goes on past both its symbols, so "
    'with (a, a) "aaaa" becomes (aa, aa), with no symbol counted twice'
)
BPE_ACROSS = (
    'a merge across symbols: a string replace of "a b" in the space-joined word also matches where one '
    "symbol ends in a and the next starts with b; compare the symbols as a tuple, pair by pair"
)
UNMASKED_SOFTMAX = (
    "np.exp(self.scores - self.scores.max(axis=-1, keepdims=True)) / "
    "np.exp(self.scores - self.scores.max(axis=-1, keepdims=True)).sum(axis=-1, keepdims=True)"
)
DIAGONAL_ONLY = (
    "only the softmax Jacobian's diagonal y_i (1 - y_i) is used: the off-diagonal terms -y_i y_k tie "
    "every output to every input, so dx = y * (dy - sum_j dy_j y_j)"
)


def _normal(*shape, scale=1.0):
    return lambda rng: (rng.standard_normal(shape) * scale,)


def _logits_targets(N, V):
    return lambda rng: (rng.standard_normal((N, V)) * 2, rng.integers(0, V, N))


def _token_ids(V, B, T):
    def ids_of(rng):
        ids = rng.integers(0, V, (B, T))
        ids.reshape(-1)[[0, -2, -1]] = ids.reshape(-1)[-1]  # an id occurring three times
        return (ids,)

    return ids_of


def _qkv_mask(B, H, Tq, Tk, d, k):
    # Tq != Tk, so a transposed product cannot pass; every query sees at least one key (np.tri's
    # diagonal k >= 0) and at least one query has a hidden key
    def qkv(rng):
        return (
            rng.standard_normal((B, H, Tq, d)),
            rng.standard_normal((B, H, Tk, d)),
            rng.standard_normal((B, H, Tk, d)),
            np.tri(Tq, Tk, k=k, dtype=bool),
        )

    return qkv


def _gqa(B, H, Hkv, T, d):
    # q (B, H, T, d); k, v (B, Hkv, T, d): H / Hkv query heads share each key/value head
    def qkv(rng):
        return (
            rng.standard_normal((B, H, T, d)),
            rng.standard_normal((B, Hkv, T, d)),
            rng.standard_normal((B, Hkv, T, d)),
        )

    return qkv


def _leading(rng: np.random.Generator, most: int = 3) -> tuple[int, ...]:
    """1 to `most` leading axes (batch, time, ...) of 1 to 4 entries each."""
    return tuple(int(n) for n in rng.integers(1, 5, size=int(rng.integers(1, most + 1))))


def _random(make: Callable[[np.random.Generator], tuple]) -> Callable[[np.random.Generator], Case]:
    """A random-case generator from `make(rng) -> (args, inputs)`; the case's own seed drawn too."""

    def case(rng: np.random.Generator) -> Case:
        args, inputs = make(rng)
        return Case(args, inputs, int(rng.integers(1000, 2**31)))

    return case


def _one(rng: np.random.Generator, *sizes: int) -> int:
    return int(rng.choice(sizes))


# The random cases' sizes: none that a fixed case of the exercise uses for the same axis (a
# last axis, a width, a head count), so a file that looks sizes up in a table of the graded
# ones fails on every random case, not by chance.
def _random_rows(rng):  # softmax (fixed N 5, 4, 6), gelu (fixed last axes 4, 5, 7)
    return (), _normal(*_leading(rng), _one(rng, 2, 3, 8))


def _random_norm(rng):  # layernorm (C 5, 6, 4), rmsnorm (C 5, 6, 3); C = 2 would make LayerNorm +-1
    C = _one(rng, 7, 8, 9)
    return (C,), _normal(*_leading(rng), C)


def _random_linear(rng):  # fixed (in, out): (4, 3), (5, 2), (3, 6)
    n_in, n_out = _one(rng, 1, 2, 6, 7), _one(rng, 1, 4, 5, 7)
    return (n_in, n_out), _normal(*_leading(rng), n_in)


def _random_embedding(rng):  # fixed (V, C): (7, 4), (9, 3), (5, 2); ids (2, 5), (3, 4), (1, 6)
    V, C = _one(rng, 3, 4, 6, 8), _one(rng, 1, 5)
    return (V, C), _token_ids(V, _one(rng, 1, 2, 3), _one(rng, 3, 7))


def _random_attention(rng):  # fixed d 3, 2, 4; Tq != Tk, as in every fixed case (a transposed product fails)
    B, H, Tq, Tk = _one(rng, 1, 2, 3), _one(rng, 1, 2, 3), _one(rng, 1, 2, 3, 4, 5), _one(rng, 2, 3, 4, 5, 6)
    Tk = Tk + 1 if Tk == Tq else Tk
    return (), _qkv_mask(B, H, Tq, Tk, _one(rng, 1, 5), _one(rng, 0, 1, 2))


def _random_heads(rng):  # mha, fixed (n_embd, n_head): (6, 2), (9, 3), (8, 4); small: finite differences
    H, d = ((1, 4), (5, 1), (1, 5))[int(rng.integers(3))]
    return (H * d, H), _normal(_one(rng, 1, 2, 3), _one(rng, 1, 2, 3, 4, 5), H * d)


def _random_block(rng):  # block, fixed (8, 2), (6, 3); n_embd 4 or 5 (a LayerNorm of 2 gives +-1 alone)
    H, d = ((4, 1), (1, 5))[int(rng.integers(2))]
    return (H * d, H), _normal(_one(rng, 1, 2, 3), _one(rng, 1, 2, 3, 4), H * d)


def _random_swiglu(rng):  # fixed 2n: 8, 6, 4
    return (), _normal(*_leading(rng), 2 * _one(rng, 1, 5), scale=1.5)


def _random_rope(rng):  # fixed (T, hs): (5, 4), (6, 8), (7, 6)
    theta = float(rng.choice([500.0, 1000.0]))
    return (theta,), _normal(*_leading(rng, 2), _one(rng, 1, 2, 3, 4), _one(rng, 2, 10, 12))


def _random_gqa(rng):  # fixed (H, Hkv, d): (4, 2, 3), (6, 3, 2), (3, 1, 4)
    Hkv, g = ((1, 1), (1, 2), (1, 5), (5, 1), (5, 2))[int(rng.integers(5))]
    B, T, d = _one(rng, 1, 2, 3), _one(rng, 1, 2, 3, 4, 5), _one(rng, 1, 5)
    return (), _gqa(B, Hkv * g, Hkv, T, d)


def _random_cross_entropy(rng):  # fixed (N, V): (6, 5), (7, 3), (3, 8)
    return (), _logits_targets(_one(rng, 2, 4, 5, 9), _one(rng, 2, 4, 6, 7))


def _cases(*cases) -> tuple[Case, ...]:
    """(args, inputs) pairs, seeded 11, 21, 31, ..."""
    return tuple(Case(args, inputs, 11 + 10 * i) for i, (args, inputs) in enumerate(cases))


EXERCISES: dict[str, Exercise] = {
    e.name: e
    for e in [
        Exercise(
            "softmax",
            "softmax over the last axis",
            "Softmax",
            _cases(((), _normal(2, 3, 5)), ((), _normal(7, 4)), ((), _normal(3, 1, 2, 6))),
            (
                Mistake(
                    "(dy - (dy * y).sum(axis=-1, keepdims=True))",
                    "dy",
                    "dx = y * dy misses the softmax's normalisation term: dx = y * (dy - sum_j dy_j y_j)",
                ),
                Mistake(
                    "(dy * y).sum(axis=-1, keepdims=True)",
                    "(dy * y).sum(axis=0, keepdims=True)",
                    "the sum runs over the wrong axis: it runs over the softmax's own axis, the last",
                ),
                Mistake(
                    "y = self.y",
                    "y = self.x",
                    "the input x is used where the output y belongs: the Jacobian diag(y) - y y^T is written in y",
                ),
                Mistake(
                    "(dy * y).sum(",
                    "dy.sum(",
                    "the subtracted sum is sum_j dy_j y_j (a dot product with y), not sum_j dy_j",
                ),
                Mistake("y * (dy - (dy * y).sum(axis=-1, keepdims=True))", "y * (1 - y) * dy", DIAGONAL_ONLY),
                Mistake(
                    "return y * (",
                    "return (",
                    "the leading factor y is missing: dx_k = y_k (dy_k - sum_j dy_j y_j)",
                ),
                Mistake(
                    "y * (dy - (dy * y).sum(axis=-1, keepdims=True))",
                    "dy - y * dy.sum(axis=-1, keepdims=True)",
                    "this is log-softmax's backward (dx = dy - y sum_j dy_j); softmax's is dx = y * (dy - sum_j dy_j y_j)",  # noqa: E501
                ),
                Mistake(
                    "(dy * y).sum(axis=-1, keepdims=True)",
                    "(dy * y).sum(axis=-1)",
                    "the row sum lacks keepdims=True: the (..., 1) sums must broadcast against the (..., N) rows",
                ),
            ),
            random_case=_random(_random_rows),
        ),
        Exercise(
            "cross_entropy",
            "mean cross-entropy of logits",
            "CrossEntropy",
            _cases(((), _logits_targets(6, 5)), ((), _logits_targets(7, 3)), ((), _logits_targets(3, 8))),
            (
                Mistake(
                    "        dlogits[np.arange(N), self.targets] -= 1  # minus the one-hot target\n",
                    "",
                    "the one-hot target is not subtracted: dlogits = (softmax(logits) - one_hot(targets)) / N",
                ),
                Mistake(
                    "dlogits * (dloss / N)",
                    "dlogits * dloss",
                    "the 1/N of the mean is missing: the loss averages the N rows, so each row's gradient is divided by N",  # noqa: E501
                ),
                Mistake(
                    "dlogits * (dloss / N)",
                    "dlogits / N",
                    "dloss, the gradient flowing into the loss, is not multiplied in (the chain rule)",
                ),
                Mistake(
                    "dlogits[np.arange(N), self.targets]",
                    "dlogits[:, self.targets]",
                    "the one-hot is indexed [:, targets] (every row, every target) instead of [np.arange(N), targets]",
                ),
                Mistake(
                    "dlogits = np.exp(self.logp)  # softmax(logits)\n        dlogits[np.arange(N), self.targets] -= 1",
                    "dlogits = np.zeros_like(self.logp)\n"
                    "        dlogits[np.arange(N), self.targets] = -np.exp(-self.logp[np.arange(N), self.targets])",
                    "this is the derivative with respect to the probabilities (-1/p at the target), not to the logits: "
                    "through the softmax it becomes softmax - one_hot",
                ),
                Mistake(
                    "dlogits = np.exp(self.logp)",
                    "dlogits = self.logp.copy()",
                    "the log-probabilities are used where the probabilities belong: dlogits = (softmax(logits) - "
                    "one_hot) / N, and softmax = exp(log-softmax)",
                ),
                Mistake(
                    "dlogits * (dloss / N)",
                    "dlogits * (dloss / dlogits.shape[1])",
                    "divided by the number of classes V: the mean runs over the N rows, so divide by N",
                ),
                Mistake(
                    "dlogits[np.arange(N), self.targets] -= 1",
                    "dlogits[self.targets] -= 1",
                    "dlogits[targets] picks whole rows by class id: row n's target is the one entry "
                    "[n, targets[n]], dlogits[np.arange(N), targets]",
                ),
            ),
            random_case=_random(_random_cross_entropy),
        ),
        Exercise(
            "layernorm",
            "LayerNorm over the last axis",
            "LayerNorm",
            _cases(((5,), _normal(2, 3, 5)), ((6,), _normal(7, 6)), ((4,), _normal(3, 1, 2, 4))),
            (
                Mistake(
                    "g - g.mean(axis=-1, keepdims=True) - xhat",
                    "g - xhat",
                    "dx misses the term from the mean: dx = rstd * (g - mean(g) - xhat * mean(g * xhat))",
                ),
                Mistake(
                    " - xhat * (g * xhat).mean(axis=-1, keepdims=True)",
                    "",
                    "dx misses the term from the variance: dx = rstd * (g - mean(g) - xhat * mean(g * xhat))",
                ),
                Mistake(
                    "g = dy * self.weight.data",
                    "g = dy",
                    "the weight is left out of dL/dxhat: g = dy * weight",
                ),
                Mistake(
                    "(dy * xhat).reshape(-1, C).sum(axis=0)  # summed over every row\n"
                    "        self.bias.grad += dy.reshape(-1, C).sum(axis=0)",
                    "dy.reshape(-1, C).sum(axis=0)\n        self.bias.grad += (dy * xhat).reshape(-1, C).sum(axis=0)",
                    "dweight and dbias are swapped: dweight sums dy * xhat, dbias sums dy",
                ),
                Mistake(
                    "(dy * xhat).reshape(-1, C).sum(axis=0)", "(dy * xhat).sum(axis=0)", MISSING_BATCH_SUM
                ),
                Mistake(
                    "rstd * (g - g.mean(axis=-1, keepdims=True) - xhat * (g * xhat).mean(axis=-1, keepdims=True))",
                    "rstd * g",
                    "the mean and the variance are treated as constants (dx = rstd * g): both depend on every x_c, "
                    "which adds two terms, dx = rstd * (g - mean(g) - xhat * mean(g * xhat))",
                ),
                Mistake(
                    "xhat * (g * xhat).mean(axis=-1, keepdims=True)",
                    "xhat * (g * xhat).sum(axis=-1, keepdims=True) / (C - 1)",
                    "the variance's term divides by C - 1 (Bessel's correction), but the forward's variance divides "
                    "by C: use the mean",
                ),
                Mistake(
                    "g - g.mean(axis=-1, keepdims=True) - xhat * (g * xhat).mean(axis=-1, keepdims=True)",
                    "g - g.sum(axis=-1, keepdims=True) - xhat * (g * xhat).sum(axis=-1, keepdims=True)",
                    "sums where means belong: the 1/C of the mean and of the variance is missing",
                ),
                Mistake(
                    "return rstd * (",
                    "return (",
                    "the factor rstd = 1/sqrt(var + eps) is missing: xhat = (x - mean) * rstd, so dx = rstd * (...)",
                ),
                Mistake(
                    "- xhat * (g * xhat).mean(",
                    "- (g * xhat).mean(",
                    "the variance's term lacks its factor xhat: dx = rstd * (g - mean(g) - xhat * mean(g * xhat))",
                ),
                Mistake(
                    "g - g.mean(axis=-1, keepdims=True)",
                    "g - g.mean(axis=0, keepdims=True)",
                    "a mean over the wrong axis: LayerNorm normalises each row over its last axis (the features), "
                    "and the backward's means run over that axis too",
                ),
            ),
            random_case=_random(_random_norm),
        ),
        Exercise(
            "gelu",
            "exact GELU, x * Phi(x)",
            "GELU",
            _cases(
                ((), _normal(2, 3, 4, scale=1.5)), ((), _normal(5, scale=1.5)), ((), _normal(3, 7, scale=1.5))
            ),
            (
                Mistake(
                    "dy * (cdf + x * pdf)",
                    "dy * cdf",
                    "the product rule's second term is missing: d(x Phi(x))/dx = Phi(x) + x phi(x)",
                ),
                Mistake(
                    "return dy * (cdf + x * pdf)",
                    "return cdf + x * pdf",
                    "dy is not multiplied in: dx = dy * dy/dx (the chain rule)",
                ),
                Mistake(
                    " / math.sqrt(2 * math.pi)",
                    "",
                    "phi(x) lacks its normalisation 1/sqrt(2 pi): phi(x) = exp(-x^2/2) / sqrt(2 pi)",
                ),
                Mistake(
                    "np.exp(-0.5 * x * x)",
                    "np.exp(-x * x)",
                    "phi(x) has lost the 1/2 in its exponent: phi(x) = exp(-x^2/2) / sqrt(2 pi)",
                ),
                Mistake(
                    "dy * (cdf + x * pdf)",
                    "dy * x * pdf",
                    "the product rule's first term is missing: d(x Phi(x))/dx = Phi(x) + x phi(x)",
                ),
                Mistake(
                    "dy * (cdf + x * pdf)",
                    "dy * (cdf + pdf)",
                    "the product rule's second term lacks its x: d(x Phi(x))/dx = Phi(x) + x phi(x)",
                ),
                Mistake(
                    "return dy * (cdf + x * pdf)",
                    "c = math.sqrt(2 / math.pi)\n"
                    "        t = np.tanh(c * (x + 0.044715 * x ** 3))\n"
                    "        return dy * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * 0.044715 * x * x))",
                    "this is the derivative of GELU's tanh approximation; the forward here is the exact x * Phi(x), "
                    "whose derivative is Phi(x) + x phi(x)",
                ),
            ),
            random_case=_random(_random_rows),
        ),
        Exercise(
            "linear",
            "affine map y = x W^T + b",
            "Linear",
            _cases(((4, 3), _normal(2, 3, 4)), ((5, 2), _normal(7, 5)), ((3, 6), _normal(3, 1, 2, 3))),
            (
                Mistake(
                    "dy2.T @ x2",
                    "x2.T @ dy2",
                    "a transposed product: dW = dy^T x has W's shape (out, in); x^T dy is its transpose",
                ),
                Mistake(
                    "(dy2 @ W)", "(dy2 @ W.T)", "a transposed factor: dx = dy W (W is (out, in)), not dy W^T"
                ),
                Mistake("dy2.sum(axis=0)", "dy.sum(axis=0)", MISSING_BATCH_SUM),
                Mistake(
                    "dy2.sum(axis=0)",
                    "dy2.mean(axis=0)",
                    "a mean where a sum belongs: each row adds its own gradient to the bias",
                ),
                Mistake(
                    "return (dy2 @ W).reshape(self.x.shape)",
                    "return dy2 @ W",
                    "dx is left flattened to (rows, in): reshape it back to x's shape",
                ),
                Mistake(
                    "self.bias.grad += dy2.sum(axis=0)",
                    "self.bias.grad += dy2",
                    "the bias's gradient is not summed over the rows: the bias is broadcast to every row in the "
                    "forward, so its gradient is dy summed over every batch and time position",
                ),
                Mistake(
                    "self.weight.grad += dy2.T @ x2",
                    "self.weight.grad += dy2.T @ x2 / len(x2)",
                    "the weight's gradient is divided by the number of rows: each row adds its own share (a sum; "
                    "the loss's own 1/N is already in dy)",
                ),
            ),
            random_case=_random(_random_linear),
        ),
        Exercise(
            "embedding",
            "lookup table y = W[ids]",
            "Embedding",
            _cases(
                ((7, 4), _token_ids(7, 2, 5)), ((9, 3), _token_ids(9, 3, 4)), ((5, 2), _token_ids(5, 1, 6))
            ),
            (
                Mistake(
                    "np.add.at(self.weight.grad, self.ids.reshape(-1), dy.reshape(-1, C))",
                    "self.weight.grad[self.ids.reshape(-1)] += dy.reshape(-1, C)",
                    "a repeated id counts once: weight.grad[ids] += dy keeps only one of its rows; "
                    "np.add.at(weight.grad, ids, dy) adds every occurrence",
                ),
                Mistake(
                    "self.ids.reshape(-1), dy.reshape(-1, C)",
                    "self.ids[0], dy[0]",
                    "a missing sum over the batch: only the first batch row's gradient is added",
                ),
                Mistake(
                    "        return None\n",
                    "        counts = np.bincount(self.ids.reshape(-1), minlength=len(self.weight.grad))\n"
                    "        self.weight.grad /= np.maximum(counts, 1)[:, None]\n        return None\n",
                    "a repeated id's rows are averaged: its gradient is their sum",
                ),
                Mistake(
                    "        return None\n",
                    "        return dy\n",
                    "backward returns a gradient for the token ids: ids are integers and have none, return None",
                ),
                Mistake(
                    "np.add.at(self.weight.grad, self.ids.reshape(-1), dy.reshape(-1, C))",
                    "self.weight.grad[:dy.shape[1]] += dy.sum(axis=0)",
                    "the gradient goes to the rows of the positions 0..T-1, as a positional embedding's would: a "
                    "token embedding's goes to the rows of the token ids, np.add.at(weight.grad, ids, dy)",
                ),
            ),
            random_case=_random(_random_embedding),
        ),
        Exercise(
            "attention",
            "scaled dot-product attention with a mask",
            "ScaledDotProductAttention",
            _cases(
                ((), _qkv_mask(2, 2, 4, 5, 3, 1)),
                ((), _qkv_mask(1, 3, 3, 6, 2, 2)),
                ((), _qkv_mask(3, 1, 5, 2, 4, 0)),
            ),
            (
                Mistake(
                    "self.weights, self.scale\n",
                    f"{UNMASKED_SOFTMAX}, self.scale\n",
                    "the mask is not applied: the backward's softmax weights are recomputed from the unmasked "
                    "scores, so masked keys get gradient",
                ),
                Mistake(
                    "dq = dscores @ k * s  # (B, H, Tq, d)\n        dk = dscores.swapaxes(-1, -2) @ q * s",
                    "dq = dscores @ k\n        dk = dscores.swapaxes(-1, -2) @ q",
                    "the 1/sqrt(d) scale of the scores is missing from dq and dk",
                ),
                Mistake(
                    "w * (dw - (dw * w).sum(axis=-1, keepdims=True))",
                    "w * dw",
                    "the softmax's backward misses its subtracted term: dS = W * (dW - sum_j dW_j W_j)",
                ),
                Mistake(
                    "dv = w.swapaxes(-1, -2) @ dout",
                    "dv = w @ dout",
                    "a transposed product: dv = W^T dout (W is (Tq, Tk)), not W dout",
                ),
                Mistake(
                    "dq = dscores @ k * s",
                    "dq = dscores @ v * s",
                    "dq uses v where k belongs: the scores are q k^T, so dq = dS k / sqrt(d)",
                ),
                Mistake(
                    "        dq = dscores @ k * s  # (B, H, Tq, d)\n",
                    "        dscores = np.where(self.mask, dscores, -np.inf)\n        dq = dscores @ k * s\n",
                    "the mask's -inf is applied to the gradient: a masked score's weight is 0, so its gradient is 0, "
                    "never -inf (which turns the products into inf and nan)",
                ),
                Mistake("w * (dw - (dw * w).sum(axis=-1, keepdims=True))", "w * (1 - w) * dw", DIAGONAL_ONLY),
                Mistake(
                    "dk = dscores.swapaxes(-1, -2) @ q * s",
                    "dk = dscores @ q * s",
                    "dk = dS q lacks the transpose: the scores are q k^T, so dk = dS^T q / sqrt(d)",
                ),
                Mistake(
                    "dw = dout @ v.swapaxes(-1, -2)",
                    "dw = dout @ v",
                    "dW = dout v lacks the transpose: out = W v, so dW = dout v^T",
                ),
                Mistake(
                    "dk = dscores.swapaxes(-1, -2) @ q * s",
                    "dk = dscores.swapaxes(-1, -2) @ q",
                    "dk misses the 1/sqrt(d) scale that dq has: both come from the scaled scores q k^T / sqrt(d)",
                ),
            ),
            random_case=_random(_random_attention),
        ),
        Exercise(
            "mha",
            "causal multi-head self-attention",
            "MultiHeadAttention",
            _cases(((6, 2), _normal(2, 4, 6)), ((9, 3), _normal(3, 5, 9)), ((8, 4), _normal(1, 3, 8))),
            (
                Mistake(
                    "dy.reshape(-1, C).T @ self.a.reshape(-1, C)",
                    "self.a.reshape(-1, C).T @ dy.reshape(-1, C)",
                    "a transposed product: out_proj_weight's gradient is dy^T a (out, in), not a^T dy",
                ),
                Mistake(
                    "self.weights, self.scale\n",
                    f"{UNMASKED_SOFTMAX}, self.scale\n",
                    "the causal mask is not applied: the backward's softmax weights are recomputed from the "
                    "unmasked scores, so future keys get gradient",
                ),
                Mistake(
                    "da = self.split_heads(dy @ self.out_proj_weight.data)",
                    "da = (dy @ self.out_proj_weight.data).reshape(q.shape)",
                    "the heads are split with a reshape alone: (B, T, C) -> (B, H, T, d) needs "
                    "reshape(B, T, H, d) then transpose(0, 2, 1, 3), as split_heads does",
                ),
                Mistake("dqkv.reshape(-1, 3 * C).sum(axis=0)", "dqkv.sum(axis=0)", MISSING_BATCH_SUM),
                Mistake(
                    "dq = dscores @ k * s\n        dk = dscores.swapaxes(-1, -2) @ q * s",
                    "dq = dscores @ k\n        dk = dscores.swapaxes(-1, -2) @ q",
                    "the 1/sqrt(d) scale of the scores is missing from dq and dk",
                ),
                Mistake(
                    "[self.merge_heads(t) for t in (dq, dk, dv)]",
                    "[t.reshape(B, T, C) for t in (dq, dk, dv)]",
                    "the heads' gradients are merged with a reshape alone: (B, H, T, d) -> (B, T, C) needs "
                    "transpose(0, 2, 1, 3) before the reshape, as merge_heads does",
                ),
                Mistake("w * (dw - (dw * w).sum(axis=-1, keepdims=True))", "w * (1 - w) * dw", DIAGONAL_ONLY),
                Mistake(
                    "for t in (dq, dk, dv)",
                    "for t in (dk, dq, dv)",
                    "the q, k, v gradients are joined in another order than the forward split them: "
                    "[dq, dk, dv], as in_proj_weight = [W_q; W_k; W_v]",
                ),
                Mistake(
                    "self.split_heads(dy @ self.out_proj_weight.data)",
                    "self.split_heads(dy @ self.out_proj_weight.data.T)",
                    "a transposed factor: the gradient of the merged heads is dy W_out (W_out is (out, in)), "
                    "not dy W_out^T",
                ),
            ),
            random_case=_random(_random_heads),
        ),
        Exercise(
            "block",
            "a pre-norm Transformer block",
            "PreNormBlock",
            _cases(((8, 2), _normal(2, 3, 8)), ((6, 3), _normal(3, 2, 6))),
            (
                Mistake(
                    "dh = dy + self.ln2.backward(",
                    "dh = self.ln2.backward(",
                    "the residual path around the feed-forward is missing: h feeds both ff(ln2(h)) and the sum, "
                    "so dh = dy + ln2'(ff'(dy))",
                ),
                Mistake(
                    "return dh + self.ln1.backward(dx_attn)",
                    "return self.ln1.backward(dx_attn)",
                    "the residual path around the attention is missing: dx = dh + ln1'(attn'(dh))",
                ),
                Mistake(
                    "self.attn.backward(dh)",
                    "self.attn.backward(dy)",
                    "the attention's backward gets dy, the gradient at the block's output, instead of dh, the "
                    "gradient at its own output h",
                ),
                Mistake(
                    "self.ln2.backward(self.ff.backward(dy))",
                    "self.ff.backward(dy)",
                    "ln2's backward is skipped: the feed-forward's input gradient must go back through ln2",
                ),
                Mistake(
                    "dx_attn, _ = self.attn.backward(dh)",
                    "dx_attn = self.attn.backward(dh)",
                    "MultiHeadAttention.backward returns the tuple (dx, dcontext): unpack it",
                ),
                Mistake(
                    "return dh + self.ln1.backward(dx_attn)",
                    "return dh + dx_attn",
                    "ln1's backward is skipped: the attention's input gradient must go back through ln1",
                ),
                Mistake(
                    "return dh + self.ln1.backward(dx_attn)",
                    "return dy + self.ln1.backward(dx_attn)",
                    "the residual around the attention passes on dh, the gradient at h, not dy: dx = dh + ln1'(attn'(dh))",  # noqa: E501
                ),
            ),
            random_case=_random(_random_block),
        ),
        Exercise(
            "rmsnorm",
            "RMSNorm over the last axis",
            "RMSNorm",
            _cases(((5,), _normal(2, 3, 5)), ((6,), _normal(7, 6)), ((3,), _normal(3, 1, 2, 3))),
            (
                Mistake(
                    "rstd * (g - xhat * (g * xhat).mean(axis=-1, keepdims=True))",
                    "rstd * g",
                    "the rms is treated as a constant (dx = rstd * g): rstd depends on every x_c through mean(x^2), "
                    "which adds a term, dx = rstd * (g - xhat * mean(g * xhat))",
                ),
                Mistake(
                    "g = dy * self.weight.data",
                    "g = dy",
                    "the weight is left out of dL/dxhat: g = dy * weight",
                ),
                Mistake(
                    "g - xhat * (g * xhat).mean(",
                    "g - g.mean(axis=-1, keepdims=True) - xhat * (g * xhat).mean(",
                    "LayerNorm's mean term (- mean(g)) is subtracted: RMSNorm does not centre x, so dx = rstd * (g - "
                    "xhat * mean(g * xhat))",
                ),
                Mistake(
                    "(dy * xhat).reshape(-1, C).sum(axis=0)", "(dy * xhat).sum(axis=0)", MISSING_BATCH_SUM
                ),
                Mistake(
                    "xhat * (g * xhat).mean(axis=-1, keepdims=True)",
                    "xhat * (g * xhat).sum(axis=-1, keepdims=True)",
                    "a sum where the mean belongs: rstd's derivative carries the 1/C of mean(x^2), "
                    "dx = rstd * (g - xhat * mean(g * xhat))",
                ),
                Mistake(
                    "g - xhat * (g * xhat).mean(",
                    "g - (g * xhat).mean(",
                    "the subtracted term lacks its factor xhat: dx = rstd * (g - xhat * mean(g * xhat))",
                ),
                Mistake(
                    "return rstd * (",
                    "return (",
                    "the factor rstd = 1/sqrt(mean(x^2) + eps) is missing: xhat = x * rstd, so dx = rstd * (...)",
                ),
            ),
            random_case=_random(_random_norm),
        ),
        Exercise(
            "swiglu",
            "SwiGLU, silu(gate) * up",
            "SwiGLU",
            _cases(
                ((), _normal(2, 3, 8, scale=1.5)),
                ((), _normal(5, 6, scale=1.5)),
                ((), _normal(3, 1, 2, 4, scale=1.5)),
            ),
            (
                Mistake(
                    "s * (1 + gate * (1 - s))",
                    "s",
                    "SiLU's derivative is taken as sigmoid(g) alone: silu(g) = g * sigmoid(g), so by the product rule "
                    "silu'(g) = sigmoid(g) * (1 + g * (1 - sigmoid(g)))",
                ),
                Mistake(
                    "s * (1 + gate * (1 - s))",
                    "s * (1 - s)",
                    "this is the sigmoid's derivative; SiLU's is silu'(g) = sigmoid(g) * (1 + g * (1 - sigmoid(g)))",
                ),
                Mistake(
                    "dup = dy * gate * s",
                    "dup = dy * s",
                    "up's gradient uses sigmoid(gate) where silu(gate) = gate * sigmoid(gate) belongs: "
                    "dup = dy * silu(gate)",
                ),
                Mistake(
                    "dgate = dy * up * s",
                    "dgate = dy * s",
                    "the gate's gradient lacks the factor up: y = silu(gate) * up, so dgate = dy * up * silu'(gate)",
                ),
                Mistake(
                    "np.concatenate([dgate, dup]",
                    "np.concatenate([dup, dgate]",
                    "the halves are joined in another order than the forward split them: h = [gate | up], "
                    "so dh = [dgate | dup]",
                ),
                Mistake(
                    "np.concatenate([dgate, dup], axis=-1)",
                    "np.concatenate([dgate, dup], axis=0)",
                    "the halves are joined along the first axis: they are the two halves of the last axis, "
                    "np.concatenate([dgate, dup], axis=-1)",
                ),
            ),
            random_case=_random(_random_swiglu),
        ),
        Exercise(
            "rope",
            "rotary position embeddings (RoPE)",
            "RoPE",
            _cases(
                ((10000.0,), _normal(2, 3, 5, 4)), ((100.0,), _normal(6, 8)), ((10000.0,), _normal(3, 7, 6))
            ),
            (
                Mistake(
                    "dy * cos - rotate_half(dy) * sin",
                    "dy * cos + rotate_half(dy) * sin",
                    "the gradient is rotated forward, by +angle, as the forward rotates x: a rotation's backward is "
                    "its transpose, the inverse rotation by -angle, dx = dy * cos - rotate_half(dy) * sin",
                ),
                Mistake(
                    "dy * cos - rotate_half(dy) * sin",
                    "dy * cos",
                    "only the cos term: each output mixes the two channels of its plane, so the rotate_half(dy) * sin "
                    "term comes back too, dx = dy * cos - rotate_half(dy) * sin",
                ),
                Mistake(
                    "dy * cos - rotate_half(dy) * sin",
                    "dy * sin - rotate_half(dy) * cos",
                    "cos and sin are swapped: dx = dy * cos - rotate_half(dy) * sin",
                ),
                Mistake(
                    "rotate_half(dy) * sin",
                    "np.roll(dy, dy.shape[-1] // 2, axis=-1) * sin",
                    "the halves are swapped without rotate_half's minus sign: rotate_half([d1 | d2]) = [-d2 | d1]",
                ),
                Mistake(
                    "dy * cos - rotate_half(dy) * sin",
                    "dy * cos - rotate_half(dy * sin).sum(axis=-2, keepdims=True)",
                    "the positions are summed: each position has its own rotation, and dx keeps x's shape (..., T, hs)",
                ),
            ),
            random_case=_random(_random_rope),
        ),
        Exercise(
            "gqa",
            "causal grouped-query attention",
            "GroupedQueryAttention",
            _cases(((), _gqa(2, 4, 2, 5, 3)), ((), _gqa(1, 6, 3, 4, 2)), ((), _gqa(3, 3, 1, 3, 4))),
            (
                Mistake(
                    "        dk, dv = (t.reshape(B, H // g, g, T, d).sum(axis=2) for t in (dk, dv))  # (B, Hkv, T, d)\n",  # noqa: E501
                    "",
                    "the gradients of the query heads that share a key/value head are not summed: k and v are repeated "
                    "for each of their H / Hkv query heads, so dk and dv sum over each group, "
                    "(B, H, T, d) -> reshape(B, Hkv, H / Hkv, T, d).sum(axis=2)",
                ),
                Mistake(
                    "t.reshape(B, H // g, g, T, d).sum(axis=2)",
                    "t[:, ::g]",
                    "only the first query head of each group is counted: a key/value head serves H / Hkv query heads, "
                    "and its gradient is the sum of theirs",
                ),
                Mistake(
                    "t.reshape(B, H // g, g, T, d).sum(axis=2)",
                    "t.reshape(B, g, H // g, T, d).sum(axis=1)",
                    "the query heads are grouped as if interleaved (head h to kv head h % Hkv): np.repeat gives kv head "  # noqa: E501
                    "j the consecutive query heads j * H/Hkv .. (j + 1) * H/Hkv - 1, so reshape(B, Hkv, H / Hkv, T, d)"
                    ".sum(axis=2)",
                ),
                Mistake(
                    "t.reshape(B, H // g, g, T, d).sum(axis=2)",
                    "t.reshape(B, H // g, g, T, d).mean(axis=2)",
                    "a mean over the group where a sum belongs: each query head that reads a key/value head adds its "
                    "own gradient to it",
                ),
                Mistake(
                    "dk = dscores.swapaxes(-1, -2) @ q * s",
                    "dk = dscores.swapaxes(-1, -2) @ q",
                    "dk misses the 1/sqrt(d) scale that dq has: both come from the scaled scores q k^T / sqrt(d)",
                ),
                Mistake(
                    "self.weights, self.scale\n",
                    f"{UNMASKED_SOFTMAX}, self.scale\n",
                    "the causal mask is not applied: the backward's softmax weights are recomputed from the "
                    "unmasked scores, so future keys get gradient",
                ),
                Mistake("w * (dw - (dw * w).sum(axis=-1, keepdims=True))", "w * (1 - w) * dw", DIAGONAL_ONLY),
            ),
            random_case=_random(_random_gqa),
        ),
        Exercise(
            "topk_sae",
            "a TopK sparse autoencoder, the decoder's norms folded in",
            "TopKSAE",
            _cases(((4, 10, 3), _normal(6, 4)), ((3, 8, 1), _normal(5, 3)), ((5, 12, 5), _normal(2, 5))),
            (
                Mistake(
                    "dnorms = -(ddecoded * decoded).sum(axis=0) / norms",
                    "dnorms = np.zeros_like(norms)",
                    "the norms' gradient from the decoder is missing: x_hat reads acts / norms, whose derivative "
                    "in norms is -acts / norms^2 (for a kept feature it cancels the encoder's, hidden = pre * norms: "
                    "keep both terms or neither)",
                ),
                Mistake(
                    "        dnorms += (dhidden * self.pre).sum(axis=0)\n",
                    "",
                    "the norms' gradient from the encoder is missing: hidden = pre * norms, so norms get "
                    "dhidden * pre summed over the rows (for a kept feature it cancels the decoder's, acts / norms: "
                    "keep both terms or neither)",
                ),
                Mistake(
                    "dhidden = np.where(self.keep, dacts, 0.0)",
                    "dhidden = dacts",
                    "the gradient passes through features the TopK did not keep (or the relu zeroed): only the "
                    "kept, positive features carry one",
                ),
                Mistake(
                    "        self.b_dec.grad -= du.sum(axis=0)\n",
                    "",
                    "b_dec is subtracted at the input too: that use adds minus the sum of dx's rows to its gradient",
                ),
                Mistake(
                    "dpre = dhidden * norms",
                    "dpre = dhidden",
                    "hidden = pre * norms: pre's gradient is dhidden times the norms",
                ),
                Mistake(
                    "dacts = ddecoded / norms",
                    "dacts = ddecoded",
                    "x_hat reads acts / norms: acts' gradient is divided by the norms",
                ),
                Mistake(
                    "self.b_enc.grad += dpre.sum(axis=0)", "self.b_enc.grad += dpre[0]", MISSING_BATCH_SUM
                ),
            ),
        ),
        Exercise(
            "bpe_merge",
            "one BPE merge step: count the pairs, merge the most frequent",
            "merge_step",
            (),
            (
                Mistake(
                    "counts[pair] = counts.get(pair, 0) + n",
                    "counts[pair] = counts.get(pair, 0) + 1",
                    "each word is counted once: a word that occurs n times in the text adds n to each of its pairs",
                ),
                Mistake(
                    "for pair in zip(word, word[1:]):",
                    "for pair in set(zip(word, word[1:])):",
                    'a pair is counted once per word: a pair that occurs twice in a word ("aaaa", "tattoo") '
                    "counts twice",
                ),
                Mistake(
                    "pair = max(counts, key=counts.get)",
                    "pair = min(counts, key=counts.get)",
                    "the least frequent pair is merged: BPE merges the most frequent",
                ),
                Mistake(
                    "                i += 2  # the pair is used up",
                    "                i += 1  # the pair is used up",
                    BPE_OVERLAP,
                ),
                Mistake(
                    "new_words[tuple(out)] = new_words.get(tuple(out), 0) + n",
                    "new_words[tuple(out)] = 1",
                    "the words' counts are lost: each new word keeps the count of the word it came from",
                ),
                Mistake(
                    "pair = max(counts, key=counts.get)",
                    "pair = max(counts)",
                    "max(counts) picks the largest pair in alphabetical order: pick by count, "
                    "max(counts, key=counts.get)",
                ),
            ),
            kind="bpe",
            todo="write merge_step",
        ),
        Exercise(
            "induction_head",
            "find the induction head of a trained 2-layer model",
            "find_induction_head",
            (),
            (
                Mistake(
                    "(cache[name] * target[:, None])",
                    "(cache[name].swapaxes(-1, -2) * target[:, None])",
                    "the pattern is read as [key, query]: lens's pattern is (B, H, T_query, T_key), row i the "
                    "attention of query i over the keys, and a causal head's row i is zero past column i",
                ),
            ),
            kind="induction",
            todo="write find_induction_head",
        ),
        Exercise(
            "diagnose_runs",
            "diagnose four recorded runs, each with one planted fault",
            "diagnose",
            (),
            (
                Mistake(
                    '"b": "lr_too_high", "c": "init_too_large"',
                    '"b": "init_too_large", "c": "lr_too_high"',
                    "init_too_large shows as the first loss, far above -log(1/vocab), with every gradient large from "
                    "step 0; run b's records do not: look at the other readings",
                ),
            ),
            kind="diagnose",
            todo="write diagnose",
        ),
    ]
}

# A first hint per exercise, before the likely cause (`scratchformer exercise NAME --hint`): where
# to look, not the answer.
HINTS: dict[str, str] = {
    "softmax": "every output y_k depends on every input x_i through the normaliser: write the Jacobian "
    "dy_k/dx_i = y_k (delta_ki - y_i), then multiply it by dy",
    "cross_entropy": "differentiate through log-softmax: each row's loss is -logits[target] + log sum exp(logits); "
    "the mean over the N rows and the incoming dloss are factors too",
    "layernorm": "write xhat = (x - mean) * rstd and follow dL/dxhat back through both statistics: the mean and "
    "the variance each depend on every x_c; the parameters' gradients sum over every row",
    "gelu": "y = x * Phi(x) is a product: use the product rule, with Phi' = phi, the normal density",
    "linear": "write the shapes down: x (..., in), W (out, in), dy (..., out); flatten the leading axes to rows, "
    "and each gradient is the one product whose shape fits",
    "embedding": "the forward copies rows of W: the gradient goes back to the rows it copied, and a row "
    "copied twice gets both gradients",
    "attention": "go backwards one line at a time: out = W v, then the softmax over the keys, then "
    "S = q k^T / sqrt(d); a masked key has weight 0 and so gets no gradient",
    "mha": "reuse attention's backward for the heads; what is new is undoing each reshape and transpose of "
    "split_heads and merge_heads in reverse, and the two projections around them",
    "block": "the block is a chain of layers with two residual sums: a value used twice (x in x + attn(ln1(x))) "
    "gets the sum of the gradients of both uses",
    "rmsnorm": "it is LayerNorm without the mean: follow dL/dxhat back through xhat = x * rstd, and remember "
    "that rstd depends on every x_c through mean(x^2)",
    "swiglu": "split dy's way back into the two halves: y = silu(gate) * up is a product, and silu(g) = "
    "g * sigmoid(g) is a product too",
    "rope": "each plane (x1[i], x2[i]) is rotated by a 2 x 2 matrix R; the backward of y = R x is dx = R^T dy",
    "bpe_merge": "two loops over the words: one adds each word's count to every adjacent pair it holds; "
    "the other rebuilds each word left to right, taking two symbols at a time where the pair "
    "starts and one elsewhere",
    "induction_head": "on the second copy, an induction head at a token attends to the position just after that "
    "token's first occurrence: score each head's pattern by the attention it puts there",
    "diagnose_runs": "compare the runs with each other at step 0 and over the run: the first loss (log.jsonl) "
    "against -log(1/27), the dead fraction and the gradient reaching each layer's hidden units "
    "(figures diag_activation_gradients and diag_saturation), the update:data ratios "
    "(diag_update_ratio)",
    "topk_sae": "go back one line at a time from x_hat = (acts / norms) W_dec + b_dec: the norms of W_dec's rows "
    "appear twice (hidden = pre * norms, decoded = acts / norms); write each use's term, then see what they add "
    "up to for a kept feature. Only the features the TopK kept and the relu passed carry a gradient",
    "gqa": "do attention's backward with the repeated keys and values first; then undo np.repeat: each "
    "key/value head was used by several query heads",
}
