"""Finite-difference checks of every functional op (scratchformer.ops), in float64, each through
both lanes: the reference and the fast lane (scratchformer/fast/).

Error measure (scratchformer.gradcheck.relative_error): max|analytic - numeric| divided by
max(max|analytic|, max|numeric|), i.e. the worst absolute difference relative to the
gradient's own scale. It stays meaningful when some entries are (near) zero, unlike an
elementwise relative error. Every check below requires <= 5e-8 (TOL).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from scratchformer.errors import DataError, ShapeError
from scratchformer.gradcheck import numerical_gradient, relative_error
from scratchformer.ops import (
    ACTIVATIONS,
    activation_backward,
    attention_backward,
    attention_forward,
    causal_mask,
    cross_entropy_backward,
    cross_entropy_forward,
    dropout_backward,
    dropout_forward,
    erf,
    gelu_backward,
    gelu_forward,
    gelu_tanh_backward,
    gelu_tanh_forward,
    layernorm_backward,
    layernorm_forward,
    linear_backward,
    linear_forward,
    log_softmax_backward,
    log_softmax_forward,
    relu_backward,
    relu_forward,
    softmax_backward,
    softmax_forward,
)

pytestmark = pytest.mark.usefixtures("lane")

TOL = 5e-8  # reached: 1e-10 to 5e-9; a backward off by a factor 1 + 3e-7 fails


def rng(seed=0):
    return np.random.default_rng(seed)


def check(analytic, f, x, name=""):
    """Assert analytic == d f / d x (finite differences) to TOL; returns the error."""
    numeric = numerical_gradient(f, x)
    assert analytic.shape == x.shape, f"{name}: gradient shape {analytic.shape} != input shape {x.shape}"
    err = relative_error(analytic, numeric)
    assert err <= TOL, f"{name}: relative error {err:.2e} > {TOL}"
    # the check must be able to fail: a gradient that is all zeros would not pass
    assert np.abs(numeric).max() > 0 or np.abs(analytic).max() == 0
    return err


# ---------------------------------------------------------------------------------------------
# the error measure itself
def test_relative_error_is_scale_relative_and_robust_to_zeros():
    a = np.array([1.0, 0.0, -2.0])
    assert relative_error(a, a) == 0.0
    assert relative_error(a, a + np.array([0.0, 1e-9, 0.0])) == pytest.approx(0.5e-9)
    assert relative_error(np.zeros(3), np.zeros(3)) == 0.0
    assert relative_error(np.array([1.0, 0.0]), np.array([0.0, 0.0])) == 1.0


def test_numerical_gradient_of_known_function():
    x = rng().standard_normal((3, 4))
    g = numerical_gradient(lambda: float(np.sum(x**3)), x)
    assert relative_error(3 * x**2, g) < 1e-9


# ---------------------------------------------------------------------------------------------
# softmax / log-softmax
@pytest.mark.parametrize("shape", [(5,), (3, 7), (2, 3, 4)])
def test_softmax_grad(shape):
    x = rng(1).standard_normal(shape) * 3
    R = rng(2).standard_normal(shape)
    y = softmax_forward(x)
    check(softmax_backward(R, y), lambda: float(np.sum(softmax_forward(x) * R)), x, "softmax")


@pytest.mark.parametrize("shape", [(5,), (3, 7), (2, 3, 4)])
def test_log_softmax_grad(shape):
    x = rng(3).standard_normal(shape) * 3
    R = rng(4).standard_normal(shape)
    y = log_softmax_forward(x)
    check(log_softmax_backward(R, y), lambda: float(np.sum(log_softmax_forward(x) * R)), x, "log_softmax")


def test_softmax_is_stable_for_huge_logits():
    x = np.array([[1000.0, 1000.0, -1000.0], [-1e4, 0.0, 1e4]])
    y = softmax_forward(x)
    assert np.all(np.isfinite(y))
    np.testing.assert_allclose(y, [[0.5, 0.5, 0.0], [0.0, 0.0, 1.0]], atol=1e-15)
    ls = log_softmax_forward(x)
    assert np.all(np.isfinite(ls))
    np.testing.assert_allclose(ls[0, :2], [-math.log(2)] * 2, rtol=1e-14)


# ---------------------------------------------------------------------------------------------
# cross-entropy
def _ce_targets(shape, V, ignore_index, seed, n_ignored=2):
    t = rng(seed).integers(0, V, size=shape)
    flat = t.reshape(-1)
    flat[rng(seed + 1).choice(flat.size, n_ignored, replace=False)] = ignore_index
    return t


@pytest.mark.parametrize("shape", [(6,), (2, 4)], ids=["N,V", "B,T,V"])
@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
@pytest.mark.parametrize("ignore_index", [-100, 3])
def test_cross_entropy_grad(shape, label_smoothing, ignore_index):
    V = 5
    logits = rng(5).standard_normal((*shape, V)) * 2
    targets = _ce_targets(shape, V, ignore_index, seed=6)
    loss, cache = cross_entropy_forward(logits, targets, ignore_index, label_smoothing)
    dlogits = cross_entropy_backward(cache, dloss=1.7)
    check(
        dlogits,
        lambda: 1.7 * cross_entropy_forward(logits, targets, ignore_index, label_smoothing)[0],
        logits,
        "cross_entropy",
    )
    # ignored positions get exactly zero gradient
    assert np.all(dlogits[targets == ignore_index] == 0)
    assert np.any(dlogits[targets != ignore_index] != 0)


def test_cross_entropy_value_matches_definition():
    V = 4
    logits = rng(7).standard_normal((5, V))
    targets = np.array([0, 3, -100, 1, 2])
    eps = 0.2
    loss, _ = cross_entropy_forward(logits, targets, label_smoothing=eps)
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    valid = targets != -100
    q = np.full((5, V), eps / V)
    q[np.arange(5), np.where(valid, targets, 0)] += 1 - eps
    expected = -(q * logp).sum(-1)[valid].mean()
    assert loss == pytest.approx(expected, rel=1e-13)


def test_cross_entropy_all_ignored_is_zero_with_zero_grad():
    logits = rng(8).standard_normal((2, 3, 4))
    targets = np.full((2, 3), -100)
    loss, cache = cross_entropy_forward(logits, targets)
    assert loss == 0.0
    d = cross_entropy_backward(cache)
    assert d.shape == logits.shape and np.all(d == 0)


def test_cross_entropy_rejects_bad_inputs():
    logits = np.zeros((3, 4))
    with pytest.raises(ShapeError, match="targets"):
        cross_entropy_forward(logits, np.zeros(2, dtype=int))
    with pytest.raises(DataError, match="integers"):
        cross_entropy_forward(logits, np.zeros(3))
    with pytest.raises(DataError, match=r"outside \[0, 4\)"):
        cross_entropy_forward(logits, np.array([0, 4, 1]))
    with pytest.raises(DataError, match="label_smoothing"):
        cross_entropy_forward(logits, np.zeros(3, dtype=int), label_smoothing=1.0)


# ---------------------------------------------------------------------------------------------
# layernorm
@pytest.mark.parametrize("shape", [(4, 6), (2, 3, 5)])
def test_layernorm_grad(shape):
    C = shape[-1]
    x = rng(9).standard_normal(shape) * 2 + 1
    w = rng(10).standard_normal(C)
    b = rng(11).standard_normal(C)
    R = rng(12).standard_normal(shape)
    y, xhat, rstd = layernorm_forward(x, w, b)
    dx, dw, db = layernorm_backward(R, xhat, rstd, w)

    def f():
        return float(np.sum(layernorm_forward(x, w, b)[0] * R))

    check(dx, f, x, "layernorm dx")
    check(dw, f, w, "layernorm dweight")
    check(db, f, b, "layernorm dbias")


def test_layernorm_normalises():
    x = rng(13).standard_normal((3, 16)) * 5 + 2
    y, _, _ = layernorm_forward(x, np.ones(16), np.zeros(16), eps=0.0)
    np.testing.assert_allclose(y.mean(-1), 0, atol=1e-13)
    np.testing.assert_allclose(y.var(-1), 1, rtol=1e-12)


# ---------------------------------------------------------------------------------------------
# activations
@pytest.mark.parametrize(
    "fwd,bwd",
    [(gelu_forward, gelu_backward), (gelu_tanh_forward, gelu_tanh_backward), (relu_forward, relu_backward)],
    ids=["gelu", "gelu_tanh", "relu"],
)
def test_activation_grad(fwd, bwd):
    x = rng(14).uniform(-4, 4, size=(4, 7))
    x[np.abs(x) < 1e-2] = 0.5  # relu is not differentiable at 0: keep finite differences off the kink
    R = rng(15).standard_normal(x.shape)
    check(bwd(R, x), lambda: float(np.sum(fwd(x) * R)), x, fwd.__name__)


def test_activation_values():
    x = np.linspace(-6, 6, 101)
    np.testing.assert_array_equal(relu_forward(x), np.maximum(x, 0))
    exact = np.array([v * 0.5 * (1 + math.erf(v / math.sqrt(2))) for v in x])
    np.testing.assert_allclose(gelu_forward(x), exact, rtol=0, atol=1e-14)
    c = math.sqrt(2 / math.pi)
    tanh_ref = np.array([0.5 * v * (1 + math.tanh(c * (v + 0.044715 * v**3))) for v in x])
    np.testing.assert_allclose(gelu_tanh_forward(x), tanh_ref, rtol=0, atol=1e-14)


def test_erf_matches_math_erf():
    x = np.concatenate([np.linspace(-8, 8, 20001), [0.0, -0.0, 6.0, -6.0, 5.999999, 0.5, 1e-300]])
    ours = erf(x)
    ref = np.array([math.erf(v) for v in x])
    err = np.max(np.abs(ours - ref))
    assert err <= 1e-14, f"erf max abs error {err:.2e}"
    assert erf(np.float32(0.3)).dtype == np.float32
    assert abs(float(erf(np.array([0.3], dtype=np.float32))[0]) - math.erf(0.3)) < 1e-6


# ---------------------------------------------------------------------------------------------
# dropout
def test_dropout_grad_with_fixed_mask():
    x = rng(16).standard_normal((3, 5))
    R = rng(17).standard_normal(x.shape)
    gen = np.random.default_rng(123)
    state = gen.bit_generator.state

    def f():
        gen.bit_generator.state = state  # same mask for every evaluation
        return float(np.sum(dropout_forward(x, 0.4, gen, True)[0] * R))

    gen.bit_generator.state = state
    y, mask = dropout_forward(x, 0.4, gen, True)
    assert mask is not None and set(np.unique(mask)) <= {0.0, 1 / 0.6}
    assert np.any(mask == 0) and np.any(mask != 0)
    check(dropout_backward(R, mask), f, x, "dropout")


def test_dropout_eval_and_p0_are_identity():
    x = rng(18).standard_normal((4, 4))
    for p, training in [(0.5, False), (0.0, True)]:
        y, mask = dropout_forward(x, p, np.random.default_rng(0), training)
        assert y is x and mask is None
        assert dropout_backward(x, mask) is x


def test_dropout_keeps_expectation():
    x = np.ones((200, 200))
    y, _ = dropout_forward(x, 0.3, np.random.default_rng(0), True)
    assert abs(y.mean() - 1) < 0.02
    assert abs((y == 0).mean() - 0.3) < 0.02


# ---------------------------------------------------------------------------------------------
# linear
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(5, 3), (2, 4, 3)])
def test_linear_grad(bias, shape):
    x = rng(19).standard_normal(shape)
    W = rng(20).standard_normal((4, 3))
    b = rng(21).standard_normal(4) if bias else None
    R = rng(22).standard_normal((*shape[:-1], 4))
    y = linear_forward(x, W, b)
    np.testing.assert_allclose(y, x @ W.T + (0 if b is None else b), rtol=1e-13)
    dx, dW, db = linear_backward(R, x, W, need_bias=bias)

    def f():
        return float(np.sum(linear_forward(x, W, b) * R))

    check(dx, f, x, "linear dx")
    check(dW, f, W, "linear dweight")
    if bias:
        check(db, f, b, "linear dbias")
    else:
        assert db is None


# ---------------------------------------------------------------------------------------------
# scaled dot-product attention
def _attn_case(B, H, Tq, Tk, d, seed):
    g = rng(seed)
    return (
        g.standard_normal((B, H, Tq, d)),
        g.standard_normal((B, H, Tk, d)),
        g.standard_normal((B, H, Tk, d)),
        g.standard_normal((B, H, Tq, d)),
    )


def _padding_mask(B, Tk, lengths):
    return (np.arange(Tk)[None, :] < np.asarray(lengths)[:, None])[:, None, None, :]  # (B, 1, 1, Tk)


ATTN_CASES = {
    "plain": dict(Tq=4, Tk=4, mask=None, causal=False),
    "padding": dict(Tq=4, Tk=4, mask=_padding_mask(2, 4, [4, 2]), causal=False),
    "causal": dict(Tq=4, Tk=4, mask=None, causal=True),
    "causal+padding": dict(Tq=4, Tk=4, mask=_padding_mask(2, 4, [3, 4]), causal=True),
    "cross Tq<Tk": dict(Tq=3, Tk=5, mask=_padding_mask(2, 5, [5, 3]), causal=False),
    "cross Tq>Tk": dict(Tq=5, Tk=2, mask=None, causal=False),
    "causal Tq<Tk (kv cache)": dict(Tq=2, Tk=5, mask=None, causal=True),
    # query row 1 of batch 0 sees nothing; rows of batch 1 with the causal mask see only key 0
    "all-masked rows": dict(
        Tq=3,
        Tk=4,
        mask=np.array([[[True, False, True, True], [False] * 4, [True] * 4]], dtype=bool)[None].repeat(
            2, axis=0
        ),
        causal=False,
    ),
    "causal all-masked (Tq>Tk)": dict(Tq=5, Tk=3, mask=None, causal=True),
}


@pytest.mark.parametrize("case", list(ATTN_CASES), ids=list(ATTN_CASES))
def test_attention_grad(case):
    c = ATTN_CASES[case]
    q, k, v, R = _attn_case(2, 2, c["Tq"], c["Tk"], 3, seed=23)
    out, cache = attention_forward(q, k, v, mask=c["mask"], causal=c["causal"])
    w = cache["weights"]
    dq, dk, dv = attention_backward(R, cache)

    def f():
        return float(np.sum(attention_forward(q, k, v, mask=c["mask"], causal=c["causal"])[0] * R))

    assert np.all(np.isfinite(out)) and np.all(np.isfinite(w))
    for name, a, x in [("dq", dq, q), ("dk", dk, k), ("dv", dv, v)]:
        assert np.all(np.isfinite(a)), name
        check(a, f, x, f"attention {case} {name}")


def test_attention_grad_with_dropout_fixed_mask():
    q, k, v, R = _attn_case(2, 2, 3, 4, 3, seed=24)
    gen = np.random.default_rng(5)
    state = gen.bit_generator.state

    def run():
        gen.bit_generator.state = state
        return attention_forward(
            q, k, v, mask=_padding_mask(2, 4, [4, 3]), dropout_p=0.3, rng=gen, training=True
        )

    out, cache = run()
    assert cache["drop_mask"] is not None and np.any(cache["drop_mask"] == 0)
    dq, dk, dv = attention_backward(R, cache)
    f = lambda: float(np.sum(run()[0] * R))  # noqa: E731
    for name, a, x in [("dq", dq, q), ("dk", dk, k), ("dv", dv, v)]:
        check(a, f, x, f"attention dropout {name}")


def test_attention_masked_weights_are_exactly_zero_and_rows_sum_to_one():
    q, k, v, _ = _attn_case(2, 2, 3, 4, 3, seed=25)
    mask = ATTN_CASES["all-masked rows"]["mask"]
    out, cache = attention_forward(q, k, v, mask=mask)
    w = cache["weights"]
    full = np.broadcast_to(mask, w.shape)
    assert np.all(w[~full] == 0.0)
    sums = w.sum(-1)
    row_any = full.any(-1)
    np.testing.assert_allclose(sums[row_any], 1.0, rtol=1e-14)
    assert np.all(sums[~row_any] == 0.0)
    assert np.all(out[:, :, 1] == 0.0)  # the all-masked query row gives a zero output


def test_attention_matches_direct_formula():
    q, k, v, _ = _attn_case(1, 2, 3, 5, 4, seed=26)
    out, cache = attention_forward(q, k, v, causal=True)
    w = cache["weights"]
    s = q @ k.swapaxes(-1, -2) / 2.0
    s = np.where(causal_mask(3, 5), s, -np.inf)
    ref_w = np.exp(s - s.max(-1, keepdims=True))
    ref_w /= ref_w.sum(-1, keepdims=True)
    np.testing.assert_allclose(w, ref_w, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(out, ref_w @ v, rtol=1e-12, atol=1e-14)


def test_causal_mask_is_end_aligned():
    np.testing.assert_array_equal(causal_mask(3, 3), np.tril(np.ones((3, 3), bool)))
    m = causal_mask(2, 4)  # 2 new queries after 2 cached keys
    np.testing.assert_array_equal(m, [[1, 1, 1, 0], [1, 1, 1, 1]])


def test_attention_rejects_bad_masks():
    q, k, v, _ = _attn_case(1, 1, 2, 3, 2, seed=27)
    with pytest.raises(TypeError, match="boolean"):
        attention_forward(q, k, v, mask=np.ones((2, 3)))
    with pytest.raises(ShapeError, match="does not broadcast"):
        attention_forward(q, k, v, mask=np.ones((3, 2), dtype=bool))
    with pytest.raises(ShapeError, match="incompatible"):
        attention_forward(q, k[..., :1], v)


# -- NaN in, NaN out (issue 9): no op crashes or hides a NaN --------------------------------------
def _with_nan(dtype, shape=(2, 3, 8)):
    x = np.random.default_rng(0).standard_normal(shape).astype(dtype)
    x[0, 1, 2] = np.nan
    return x


@pytest.mark.filterwarnings("ignore:invalid value")  # -inf * Phi(-inf) = -inf * 0
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activations_propagate_nan_and_handle_inf(name, dtype):
    forward, with_grad = ACTIVATIONS[name]
    x = _with_nan(dtype)
    x[1, 0, 0], x[1, 0, 1] = np.inf, -np.inf
    y, dydx = with_grad(x)  # the float32 GELU table lookup used to index garbage here
    np.testing.assert_array_equal(forward(x), y)
    assert np.isnan(y[0, 1, 2]) and np.isfinite(np.delete(y.ravel(), [10, 24, 25])).all()
    assert y[1, 0, 0] == np.inf
    dx = activation_backward(np.ones_like(x), dydx)
    assert np.isnan(dx[0, 1, 2]) or name == "relu"  # relu's slope at NaN is 0 (x > 0 is False)
    assert np.isnan(activation_backward(np.full_like(x, np.nan), dydx)).all()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_erf_and_normal_cdf_of_nan_are_nan(dtype):
    from scratchformer.ops.numerics import normal_cdf

    x = np.array([np.nan, -np.inf, np.inf, 0.0], dtype=dtype)
    e, p = erf(x), normal_cdf(x)
    assert np.isnan(e[0]) and e[1] == -1 and e[2] == 1 and e[3] == 0
    assert np.isnan(p[0]) and p[1] < 1e-15 and p[2] == pytest.approx(1) and p[3] == pytest.approx(0.5)


def test_softmax_layernorm_loss_attention_dropout_propagate_nan():
    x = _with_nan(np.float64)
    assert np.isnan(softmax_forward(x)[0, 1]).all() and np.isfinite(softmax_forward(x)[1]).all()
    assert np.isnan(log_softmax_forward(x)[0, 1]).all()
    y, xhat, rstd = layernorm_forward(x, np.ones(8), np.zeros(8))
    assert np.isnan(y[0, 1]).all() and np.isfinite(y[1]).all()
    loss, _ = cross_entropy_forward(x, np.zeros((2, 3), dtype=np.int64))
    assert np.isnan(loss)
    q = _with_nan(np.float64, (1, 2, 3, 4))
    for kwargs in ({}, {"causal": True}, {"mask": np.ones((1, 1, 3, 3), dtype=bool)}):
        out, _ = attention_forward(q, q + 0, q + 0, **kwargs)
        assert np.isnan(out).any(), kwargs
    y, _ = dropout_forward(x, 0.5, np.random.default_rng(0), training=True)
    assert np.isnan(y[0, 1, 2])  # kept, or dropped: NaN * 0 is still NaN
    assert np.isnan(relu_forward(x)[0, 1, 2])
    assert np.isnan(linear_forward(x, np.ones((4, 8)), None)[0, 1]).all()
