"""The speed measures keep results exact enough: the float32 normal-CDF table, the
allocator setting, the flat AdamW buffer and clip_grad_norm (docs/performance.md)."""

import math

import numpy as np

import pytest

from scratchformer.allocator import keep_freed_memory
from scratchformer.errors import ConfigError
from scratchformer.nn.module import Parameter
from scratchformer.optim import SGD, AdamW, clip_grad_norm, optimizers, param_groups
from scratchformer.ops.activations import (activation_backward, gelu_tanh_with_grad, gelu_with_grad,
                                           normal_cdf)


def test_normal_cdf_float32_table_is_accurate_and_float64_is_exact():
    x = np.linspace(-12, 12, 200_001)
    ref = np.array([0.5 * (1 + math.erf(v / math.sqrt(2))) for v in x])
    y32 = normal_cdf(x.astype(np.float32))
    assert y32.dtype == np.float32 and np.abs(y32 - ref).max() < 2e-7
    assert np.abs(normal_cdf(x) - ref).max() < 1e-14
    assert np.diff(y32).min() > -1e-7  # monotone up to float32 rounding


def test_gelu_with_grad_gives_the_forward_and_its_derivative():
    x = np.random.default_rng(0).standard_normal((3, 4, 5)).astype(np.float32)
    y, _ = gelu_with_grad(x)
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y, x * normal_cdf(x))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gelu_backward_in_place_is_bit_identical_to_the_plain_formula(dtype):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((64, 96)) * 3).astype(dtype)
    dy = rng.standard_normal(x.shape).astype(dtype)
    cdf = normal_cdf(x)
    plain = dy * (cdf + x * (np.exp(-0.5 * x * x) * (1 / math.sqrt(2 * math.pi))))
    np.testing.assert_array_equal(activation_backward(dy, gelu_with_grad(x)[1]), plain)
    c = math.sqrt(2 / math.pi)  # and the tanh form, as written before it moved into the forward
    th = np.tanh(c * (x + 0.044715 * (x * x * x)))
    plain = dy * (0.5 * (1 + th) + 0.5 * x * (1 - th * th) * (c * (1 + 3 * 0.044715 * x * x)))
    np.testing.assert_array_equal(activation_backward(dy, gelu_tanh_with_grad(x)[1]), plain)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_layernorm_in_place_is_bit_identical_to_the_plain_formula(dtype):
    from scratchformer.ops.layernorm import layernorm_backward, layernorm_forward
    from scratchformer.ops.reductions import sum_last, sum_leading

    rng = np.random.default_rng(2)
    x = (rng.standard_normal((5, 7, 48)) * 3 + 1).astype(dtype)
    w, b = rng.standard_normal(48).astype(dtype), rng.standard_normal(48).astype(dtype)
    dy = rng.standard_normal(x.shape).astype(dtype)
    mean = lambda a: sum_last(a) / 48  # noqa: E731 -- the sums as layernorm.py takes them (BLAS)
    xc = x - mean(x)
    rstd = 1.0 / np.sqrt(mean(xc * xc) + 1e-5)
    xhat = xc * rstd
    g = dy * w
    plain_dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
    y, xhat_got, rstd_got = layernorm_forward(x, w, b)
    for got, want in zip((y, xhat_got, rstd_got), (xhat * w + b, xhat, rstd)):
        np.testing.assert_array_equal(got, want)
    dx, dw, db = layernorm_backward(dy, xhat, rstd, w)
    np.testing.assert_array_equal(dx, plain_dx)
    np.testing.assert_array_equal(dw, sum_leading(dy * xhat))
    np.testing.assert_array_equal(db, sum_leading(dy))
    # and the BLAS sums are NumPy's sums up to rounding
    np.testing.assert_allclose(dw, (dy * xhat).reshape(-1, 48).sum(axis=0), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(3, 5, 7), (256, 64), (1, 1), (0, 4), (4, 0), (2100, 1000)],
                         ids=["3d", "2d", "one", "no-rows", "no-columns", "past-GEMV_MAX_SIZE"])
def test_blas_sums_match_numpy_sums(dtype, shape):
    from scratchformer.ops import reductions
    from scratchformer.ops.reductions import sum_last, sum_leading

    x = np.random.default_rng(4).standard_normal(shape).astype(dtype)
    assert (x.size > reductions.GEMV_MAX_SIZE) == (shape == (2100, 1000))
    tol = 1e-5 if dtype == np.float32 else 1e-12
    for got, want in ((sum_last(x), x.sum(axis=-1, keepdims=True)),
                      (sum_leading(x), x.sum(axis=tuple(range(x.ndim - 1))))):
        assert got.shape == want.shape and got.dtype == dtype
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.sqrt(max(x.size, 1)))
    np.testing.assert_array_equal(sum_last(x), sum_last(x.copy()))  # deterministic


def test_blas_sums_propagate_nan_and_inf_and_leave_integers_to_numpy():
    from scratchformer.ops.reductions import sum_last, sum_leading

    x = np.ones((3, 4), dtype=np.float32)
    x[0, 1], x[1, 2], x[2, :2] = np.nan, np.inf, (np.inf, -np.inf)
    with np.errstate(invalid="ignore"):  # inf - inf warns "invalid value", as x.sum does
        assert np.isnan(sum_last(x)[0, 0]) and sum_last(x)[1, 0] == np.inf and np.isnan(sum_last(x)[2, 0])
        assert np.isnan(sum_leading(x)[1]) and sum_leading(x)[0] == sum_leading(x)[2] == np.inf and sum_leading(x)[3] == 3
    ints = np.arange(12).reshape(3, 4)
    assert sum_last(ints).dtype == ints.dtype and sum_last(ints)[2, 0] == 8 + 9 + 10 + 11


@pytest.mark.parametrize("shape", [(2, 3, 16, 16), (5, 32), (5, 33), (7, 1), (0, 16)],
                         ids=["scores", "longest-transposed", "plain", "one-column", "empty"])
def test_max_last_is_the_exact_max_with_nan_propagating(shape):
    from scratchformer.ops.reductions import max_last

    x = np.random.default_rng(5).standard_normal(shape).astype(np.float32)
    np.testing.assert_array_equal(max_last(x), x.max(axis=-1, keepdims=True))
    if x.size:
        x.reshape(-1, shape[-1])[0, -1] = np.nan
        x.reshape(-1, shape[-1])[-1, 0] = -np.inf
        got = max_last(x).reshape(-1)
        assert np.isnan(got[0]) and not np.isnan(got[1:]).any()


def test_embedding_backward_sums_repeated_ids_like_add_at():
    from scratchformer.nn import Embedding

    rng = np.random.default_rng(3)
    emb = Embedding(10, 4, dtype=np.float64)
    idx = rng.integers(0, 10, (3, 9))
    idx[0, :4] = 7  # a run of one id
    dy = rng.standard_normal((3, 9, 4))
    emb.weight.grad[...] = 0.5  # backward adds into what is there
    emb(idx)
    emb.backward(dy)
    want = np.full((10, 4), 0.5)
    np.add.at(want, idx.reshape(-1), dy.reshape(-1, 4))
    np.testing.assert_allclose(emb.weight.grad, want, rtol=0, atol=1e-14)
    emb(np.zeros((0, 5), dtype=np.int64))
    emb.backward(np.zeros((0, 5, 4)))  # no ids: nothing to add
    np.testing.assert_allclose(emb.weight.grad, want, rtol=0, atol=1e-14)


def test_keep_freed_memory_is_idempotent():
    first = keep_freed_memory()
    assert keep_freed_memory() == first
    assert isinstance(first, bool)


def _fill_with_ones(arrays):
    for a in arrays:
        a[...] = 1


@pytest.mark.parametrize("kind", ["AdamW", "SGD", "SGD-resumed"])
def test_optimiser_state_is_memory_a_forked_worker_shares_rather_than_copies(kind):
    import multiprocessing

    from scratchformer.nn.parallel import can_fork_workers

    if not can_fork_workers():
        pytest.skip("fork is Linux-only here")
    p = Parameter(np.zeros((3, 4), dtype=np.float32))
    if kind == "AdamW":
        opt = AdamW([p], lr=0.1)
        arrays = [opt._flat_data, opt._flat_grad, opt._m, opt._v]
    else:
        opt = SGD([p], lr=0.1, momentum=0.9)
        opt.step()  # the momentum buffers exist from the first step on
        if kind == "SGD-resumed":
            opt.load_state_dict(opt.state_dict())
        arrays = opt.momentum_buffer + [p.data]
        p.data[...] = 0  # the parameter itself is the model's: the child's write is not ours
    child = multiprocessing.get_context("fork").Process(target=_fill_with_ones, args=(arrays,))
    child.start()
    child.join(10)
    assert child.exitcode == 0
    # the child's writes are ours: shared pages, not copy-on-write copies (which a worker would
    # otherwise keep, stale, once this process writes the state at each step)
    state = arrays if kind == "AdamW" else arrays[:-1]
    assert all((a == 1).all() for a in state)
    assert (p.data == 1).all() == (kind == "AdamW")  # AdamW's flat buffer holds the weights too


# -- optim/: the flat AdamW buffer and clip_grad_norm (scratchformer/optim/optimizers.py) --------
class ReferenceAdamW:
    """AdamW as a per-parameter loop, as optimizers.py was before the flat buffer (the plain
    formula, same order of operations): the optimised update must reproduce it bit for bit."""

    def __init__(self, arrays, weight_decays, lr=1e-2, betas=(0.9, 0.95), eps=1e-8):
        self.arrays, self.wds, self.lr, self.betas, self.eps = arrays, weight_decays, lr, betas, eps
        self.m = [np.zeros_like(a) for a in arrays]
        self.v = [np.zeros_like(a) for a in arrays]
        self.t = 0

    def step(self, grads):
        self.t += 1
        (b1, b2), lr = self.betas, self.lr
        step_size, bc2_sqrt = lr / (1.0 - b1**self.t), math.sqrt(1.0 - b2**self.t)
        for p, g, m, v, wd in zip(self.arrays, grads, self.m, self.v, self.wds):
            if wd != 0.0:
                p *= 1.0 - lr * wd
            m *= b1
            m += (1.0 - b1) * g
            v *= b2
            v += (1.0 - b2) * (g * g)
            denom = np.sqrt(v)
            denom /= bc2_sqrt
            denom += self.eps
            p -= step_size * (m / denom)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_flat_adamw_is_bit_identical_to_the_per_parameter_loop(dtype, monkeypatch):
    monkeypatch.setattr(optimizers, "_UPDATE_CHUNK", 4096)  # (300, 70) spans several pieces
    rng = np.random.default_rng(0)
    shapes = [(5, 3), (300, 70), (7,), (2, 3, 4)]
    init = [rng.standard_normal(s).astype(dtype) for s in shapes]
    steps = [[rng.standard_normal(s).astype(dtype) for s in shapes] for _ in range(6)]

    def run():
        params = [Parameter(a.copy()) for a in init]
        opt = AdamW([{"params": params[:2], "weight_decay": 0.1}, {"params": params[2:], "weight_decay": 0.0}],
                    lr=1e-2, betas=(0.9, 0.95), eps=1e-8)
        for grads in steps:
            opt.zero_grad()
            for p, g in zip(params, grads):
                p.grad += g
            opt.step()
        return [p.data for p in params]

    got, again = run(), run()
    ref = ReferenceAdamW([a.copy() for a in init], [0.1, 0.1, 0.0, 0.0])
    for grads in steps:
        ref.step(grads)
    for a, b, c in zip(got, again, ref.arrays):
        assert a.dtype == dtype
        np.testing.assert_array_equal(a, b)  # run to run
        np.testing.assert_array_equal(a, c)  # against the plain loop


def test_a_gpt_trains_through_the_flat_views_exactly_as_with_its_own_arrays():
    from scratchformer.models import GPT, GPTConfig

    cfg = GPTConfig(vocab_size=11, block_size=8, n_layer=2, n_head=2, n_embd=16)
    x = np.random.default_rng(1).integers(0, 11, size=(3, 8))
    flat_model, ref_model = GPT(cfg, seed=0), GPT(cfg, seed=0)
    opt = AdamW(param_groups(flat_model, 0.1), lr=1e-2, betas=(0.9, 0.95))
    flat_params, ref_params = flat_model.parameters(), ref_model.parameters()
    for k, v in ref_model.state_dict().items():  # building the optimizer changed no value
        np.testing.assert_array_equal(flat_model.state_dict()[k], v)
    assert all(p.grad.base is opt._flat_grad and p.data.base is opt._flat_data for p in flat_params)
    decayed = {id(p) for p in param_groups(ref_model, 0.1)[0]["params"]}
    ref = ReferenceAdamW([p.data for p in ref_params], [0.1 if id(p) in decayed else 0.0 for p in ref_params])
    for _ in range(3):
        opt.zero_grad()
        _, loss = flat_model(x, x)
        flat_model.backward()
        clip_grad_norm(flat_params, 0.05)
        opt.step()
        ref_model.zero_grad()
        _, ref_loss = ref_model(x, x)
        ref_model.backward()
        norm = math.sqrt(sum(float(np.sum(p.grad.astype(np.float64) ** 2)) for p in ref_params))
        ref.step([p.grad * (0.05 / (norm + 1e-6)) for p in ref_params])
        assert loss == ref_loss  # the model reads the weights the optimizer wrote
    for (k, a), b in zip(flat_model.state_dict().items(), ref_model.state_dict().values()):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-6, err_msg=k)  # clip's norm sums differently


def test_adamw_rebuilds_its_flat_buffer_when_parameters_are_replaced():
    params = [Parameter(np.ones((2, 3), dtype=np.float32)), Parameter(np.ones(4, dtype=np.float32))]
    opt = AdamW(params, lr=0.1, weight_decay=0.0)
    params[0].data = params[0].data.astype(np.float64)  # as model.to(np.float64) does
    params[0].grad = np.full((2, 3), 1.0)
    params[1].data, params[1].grad = params[1].data.astype(np.float64), np.full(4, 1.0)
    opt.step()
    assert all(p.data.dtype == np.float64 and p.data.base is opt._flat_data for p in params)
    np.testing.assert_allclose(params[0].data, 0.9, rtol=1e-6)  # first Adam step moves by lr
    with pytest.raises(ConfigError, match="one dtype"):
        AdamW([Parameter(np.ones(2, dtype=np.float32)), Parameter(np.ones(2))])


def test_clip_grad_norm_on_the_flat_buffer_matches_the_per_parameter_path(monkeypatch):
    monkeypatch.setattr(optimizers, "_CLIP_CHUNK", 64)  # several pieces per gradient
    rng = np.random.default_rng(0)
    shapes = [(30, 7), (5,), (9, 4)]
    grads = [rng.standard_normal(s).astype(np.float32) * 10 for s in shapes]
    flat = [Parameter(np.zeros(s, dtype=np.float32)) for s in shapes]
    AdamW(flat)  # grads become views of one flat array
    loose = [Parameter(np.zeros(s, dtype=np.float32)) for s in shapes]
    for ps in (flat, loose):
        for p, g in zip(ps, grads):
            p.grad += g
    expected = math.sqrt(sum(float(np.sum(g.astype(np.float64) ** 2)) for g in grads))
    n_flat, n_loose = clip_grad_norm(flat, 1.0), clip_grad_norm(loose, 1.0)
    assert n_flat == pytest.approx(expected, rel=1e-12) and n_loose == pytest.approx(expected, rel=1e-12)
    for a, b in zip(flat, loose):
        np.testing.assert_allclose(a.grad, b.grad, rtol=1e-6)
    total = math.sqrt(sum(float(np.sum(p.grad.astype(np.float64) ** 2)) for p in flat))
    assert total == pytest.approx(1.0, rel=1e-5)
    assert clip_grad_norm(flat[:2], 1.0) == pytest.approx(
        math.sqrt(sum(float(np.sum(p.grad.astype(np.float64) ** 2)) for p in flat[:2])))  # a subset: per parameter


def test_optimizers_apply_the_allocator_tuning(monkeypatch):
    calls = []
    monkeypatch.setattr(optimizers, "keep_freed_memory", lambda: calls.append(1) or True)
    AdamW([Parameter(np.ones(3))])
    SGD([Parameter(np.ones(3))], lr=0.1)
    assert len(calls) == 2
