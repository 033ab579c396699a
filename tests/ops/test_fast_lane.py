"""The fast lane (scratchformer/fast/) against the reference: each fast variant gives the
reference's result, bit for bit where the arithmetic is the same, within a stated float32
tolerance where it is not; the switch runs the reference everywhere (docs/performance.md).

Tolerances: the fast lane's sums are BLAS dot products and its attention scales q instead of
the scores, so results differ from the reference by float rounding only: float64 within 1e-12
relative, float32 within 1e-5 relative (a few units of float32's 6e-8 resolution, times the
terms of a sum). float32 GELU's Phi comes from a table exact to 2e-7.
"""

import contextlib
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from scratchformer import fast, ops
from scratchformer.allocator import keep_freed_memory
from scratchformer.errors import ConfigError
from scratchformer.fast import activations as fast_activations
from scratchformer.fast import attention as fast_attention
from scratchformer.fast import embedding as fast_embedding
from scratchformer.fast import optim as fast_optim
from scratchformer.fast import reductions as fast_reductions
from scratchformer.fast.reductions import max_last, sum_last, sum_leading
from scratchformer.nn.module import Parameter
from scratchformer.optim import AdamW, FlatAdamW, clip_grad_norm, make_adamw, param_groups

TOL = {np.float32: dict(rtol=1e-5, atol=1e-6), np.float64: dict(rtol=1e-12, atol=1e-13)}


@pytest.fixture(autouse=True)
def fast_lane():
    """Each test starts in the fast lane, whatever SCRATCHFORMER_REFERENCE says."""
    with fast.reference(False):
        yield


def both_lanes(f, *args, **kwargs):
    """(fast result, reference result) of f(*args, **kwargs)."""
    with fast.reference(False):
        got = f(*args, **kwargs)
    with fast.reference(True):
        want = f(*args, **kwargs)
    return got, want


def assert_close(got, want, dtype, exact=False):
    for a, b in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
        if a is None:
            assert b is None
            continue
        assert a.shape == b.shape and a.dtype == b.dtype == dtype
        if exact:
            np.testing.assert_array_equal(a, b)
        else:
            np.testing.assert_allclose(a, b, **TOL[dtype])


# -- the switch ------------------------------------------------------------------------------
@pytest.mark.parametrize("value,enabled", [(None, True), ("0", True), ("1", False)])
def test_the_environment_variable_chooses_the_lane_at_import(value, enabled):
    env = {k: v for k, v in os.environ.items() if k != "SCRATCHFORMER_REFERENCE"}
    if value is not None:
        env["SCRATCHFORMER_REFERENCE"] = value
    out = subprocess.run(
        [sys.executable, "-c", "import scratchformer.fast as f; print(f.enabled)"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.stdout.strip() == str(enabled), out.stderr


def test_use_reference_and_the_context_manager_flip_one_flag():
    import scratchformer

    assert fast.enabled
    scratchformer.use_reference()
    try:
        assert not fast.enabled
        with fast.reference(False):
            assert fast.enabled
        assert not fast.enabled
    finally:
        scratchformer.use_reference(False)
    with pytest.raises(KeyError), fast.reference():
        assert not fast.enabled
        raise KeyError("an error inside the block")
    assert fast.enabled  # restored even on an error


FAST_MODULES = [
    "activations",
    "attention",
    "embedding",
    "layernorm",
    "linear",
    "optim",
    "reductions",
    "softmax",
]


def _trap_fast_lane(monkeypatch, calls):
    """Replace every function and class of the fast lane with one that records its name."""
    import importlib
    import inspect

    for name in FAST_MODULES:
        module = importlib.import_module(f"scratchformer.fast.{name}")
        for attr, value in vars(module).items():
            if (inspect.isfunction(value) or inspect.isclass(value)) and value.__module__ == module.__name__:

                def trap(*args, _real=value, _name=f"{name}.{attr}", **kwargs):
                    calls.append(_name)
                    return _real(*args, **kwargs)

                monkeypatch.setattr(module, attr, trap)


def _train_two_steps(activation):
    from scratchformer.models import GPT, GPTConfig

    cfg = GPTConfig(
        vocab_size=11, block_size=8, n_layer=1, n_head=2, n_embd=16, dropout=0.1, activation=activation
    )
    model = GPT(cfg, seed=0)
    opt = make_adamw(param_groups(model, 0.1), lr=1e-2)  # the lane's AdamW, as the trainer builds it
    x = np.random.default_rng(1).integers(0, 11, size=(3, 8))
    losses = []
    for _ in range(2):
        opt.zero_grad()
        _, loss = model(x, x)
        model.backward()
        clip_grad_norm(model.parameters(), 0.5)
        opt.step()
        losses.append(loss)
    return losses


@pytest.mark.parametrize("activation", ["gelu", "relu"])
def test_the_switch_runs_the_reference_everywhere_and_the_fast_lane_by_default(activation, monkeypatch):
    calls = []
    _trap_fast_lane(monkeypatch, calls)
    with fast.reference():
        reference_losses = _train_two_steps(activation)
    assert calls == []  # a GPT's forward, backward, clip and AdamW step: no fast-lane code ran
    fast_losses = _train_two_steps(activation)
    entry_points = {
        "attention.attention_forward",
        "attention.attention_backward",
        "layernorm.layernorm_forward",
        "layernorm.layernorm_backward",
        "linear.linear_backward_into",
        "softmax.log_softmax_forward",
        "embedding.embedding_backward_into",
        "optim.adamw_update",
        "optim.clip_grad_norm",
    }
    assert entry_points <= set(calls)  # each op the GPT's step uses handed over to its fast form
    assert ("activations.gelu_with_grad" in calls) == (activation == "gelu")
    np.testing.assert_allclose(fast_losses, reference_losses, rtol=1e-5)


# -- the one dispatch point (fast.lane) ----------------------------------------------------------
FAST_OPS = {
    "softmax_forward",
    "softmax_backward",
    "log_softmax_forward",
    "log_softmax_backward",
    "layernorm_forward",
    "layernorm_backward",
    "linear_backward",
    "linear_backward_into",
    "gelu_forward",
    "gelu_with_grad",
    "attend",
    "attention_backward",
    "embedding_backward_into",
    "_clip_grad_norm",
}


def test_each_op_with_a_fast_form_is_registered_with_the_same_parameters():
    import inspect

    assert {key.rsplit(".", 1)[1] for key in fast.VARIANTS} == FAST_OPS
    for key, variant in fast.VARIANTS.items():
        fast_form = getattr(variant.module, variant.name)
        assert variant.module.__name__.startswith("scratchformer.fast."), key
        assert list(inspect.signature(variant.formula).parameters) == list(
            inspect.signature(fast_form).parameters
        ), key


def test_nothing_but_the_dispatch_reads_the_lane():
    """`fast.enabled` and the attention cache's lane tag are read in fast/__init__.py alone (`lane`,
    `chosen`): ops/, nn/, models/, optim/ (its AdamW by `fast.chosen`, its clip by `fast.lane`),
    viz/ (the walk-through reads the lane from the record) and the rest hold formulas and call ops."""
    import ast
    from pathlib import Path

    def reads_the_lane(node) -> bool:
        return (
            (isinstance(node, ast.Attribute) and node.attr in ("enabled", "current_lane", "lane_of"))
            or (
                isinstance(node, ast.ImportFrom)
                and any(a.name in ("enabled", "current_lane", "lane_of") for a in node.names)
            )
            or (  # cache.get("lane"), cache["lane"]
                isinstance(node, ast.Call)
                and getattr(node.func, "attr", "") == "get"
                and any(getattr(a, "value", None) == "lane" for a in node.args)
            )
            or (isinstance(node, ast.Subscript) and getattr(node.slice, "value", None) == "lane")
        )

    def reads(source: str) -> bool:
        return any(map(reads_the_lane, ast.walk(ast.parse(source))))

    package = Path(fast.__file__).resolve().parents[1]
    readers = sorted(
        str(path.relative_to(package))
        for path in package.rglob("*.py")
        if path != Path(fast.__file__).resolve() and reads(path.read_text(encoding="utf-8"))
    )
    assert readers == []
    # what it looks for: the forms the lane was chosen or read in before
    for planted in (
        "if fast.enabled:\n    pass",
        "from scratchformer.fast import enabled",
        'if cache.get("lane") == "fast":\n    pass',
        'x = cache["lane"]',
        "lane = fast.current_lane()",
        "if fast.lane_of(cache) == 'fast':\n    pass",
    ):
        assert reads(planted), planted


@pytest.mark.parametrize("reference", [False, True], ids=["fast", "reference"])
def test_a_direct_call_is_checked_in_either_lane_and_a_layers_call_is_not(reference):
    from scratchformer.checks import DOOR
    from scratchformer.errors import DTypeError, ShapeError

    ints, x = np.arange(6).reshape(2, 3), np.ones((2, 3))
    calls = [
        lambda: ops.softmax_forward(ints),
        lambda: ops.log_softmax_backward(x, x[:1]),
        lambda: ops.layernorm_forward(x, np.ones(4), None),
        lambda: ops.linear_backward(x, x, np.ones((3, 4))),
        lambda: ops.gelu_forward(ints),
    ]
    with fast.reference(reference):
        for call in calls:
            with pytest.raises((DTypeError, ShapeError)):
                call()
        outer, DOOR.inside = DOOR.inside, True  # as inside a model's forward: the model checked its input
        try:
            assert ops.softmax_forward(ints).shape == ints.shape  # the formula ran, unchecked
        finally:
            DOOR.inside = outer


def test_an_attention_backward_runs_in_the_lane_its_forward_ran_in():
    """A cache made in the fast lane (the weights not kept) is differentiated by the fast
    backward even in the reference lane, and a reference cache by the reference backward."""
    q, k, v, dout = _attn_inputs(2, 4, 4, np.float64)
    _, fast_cache = ops.attention_forward(q, k, v, causal=True, keep_weights=False)
    with fast.reference():
        _, ref_cache = ops.attention_forward(q, k, v, causal=True)
        from_fast = ops.attention_backward(dout, fast_cache)
    from_ref = ops.attention_backward(dout, ref_cache)
    assert fast_cache["lane"] == "fast" and fast_cache["weights"] is None and "lane" not in ref_cache
    assert_close(from_fast, from_ref, np.float64)


def test_the_fast_lane_keeps_the_weights_unless_training_and_over_the_limit(monkeypatch):
    q, k, v, _ = _attn_inputs(2, 4, 4, np.float32)
    monkeypatch.setattr(fast_attention, "KEEP_WEIGHTS_BYTES", fast_attention.weights_nbytes(q, k) - 1)
    kept = {}
    for reference in (False, True):
        with fast.reference(reference):
            for training in (False, True):
                cache = ops.attention_forward(q, k, v, causal=True, training=training)[1]
                kept[reference, training] = cache["weights"] is not None
    assert kept == {(False, False): True, (False, True): False, (True, False): True, (True, True): True}
    assert ops.attention_forward(q, k, v, training=True, keep_weights=True)[1]["weights"] is not None


# -- the embedding's gradient (fast/embedding.py) ----------------------------------------------
def _embedding_grad(dy, ids, start):
    grad = start.copy()
    assert ops.embedding_backward_into(dy, ids, grad) is None
    return grad


@pytest.mark.parametrize("form", ["one-hot", "one-hot in blocks", "sorted runs"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("ids_shape", [(3, 40), (1, 1), (2, 0)], ids=["repeats", "one", "none"])
def test_embedding_backward_by_sorted_runs_equals_np_add_at(dtype, ids_shape, form, monkeypatch):
    """The reference is np.add.at (every occurrence of an id adds its row); the fast lane sums each
    id's rows first (a one-hot product for a small vocabulary, whole or in blocks of positions;
    sorted runs for a large one): equal within float rounding, onto a gradient that already
    holds values."""
    if form == "sorted runs":
        monkeypatch.setattr(fast_embedding, "ONE_HOT_MAX_VOCAB", 6)  # the 7 ids are a large vocabulary
    elif form == "one-hot in blocks":
        monkeypatch.setattr(fast_embedding, "ONE_HOT_BYTES", 7 * 9 * np.dtype(dtype).itemsize)  # 9 positions
    rng = np.random.default_rng(12)
    ids = rng.integers(0, 7, size=ids_shape)
    dy = rng.standard_normal(ids_shape + (5,)).astype(dtype)
    start = rng.standard_normal((7, 5)).astype(dtype)
    got, want = both_lanes(_embedding_grad, dy, ids, start)
    plain = start.copy()
    np.add.at(plain, ids.reshape(-1), dy.reshape(-1, 5))
    np.testing.assert_array_equal(want, plain)  # the reference lane is np.add.at itself
    assert_close(got, want, dtype)
    if ids.size > 7:  # ids repeat: a buffered `grad[ids] += dy` (each id's last row only) fails here
        buffered = start.copy()
        buffered[ids.reshape(-1)] += dy.reshape(-1, 5)
        assert not np.allclose(buffered, want, **TOL[dtype])


# -- reductions (fast/reductions.py) ---------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "shape",
    [(3, 5, 7), (256, 64), (1, 1), (0, 4), (4, 0), (2100, 1000)],
    ids=["3d", "2d", "one", "no-rows", "no-columns", "past-GEMV_MAX_SIZE"],
)
@pytest.mark.parametrize("vendor", ["AuthenticAMD", "GenuineIntel"])
def test_blas_sums_match_numpy_sums(dtype, shape, vendor, monkeypatch):
    monkeypatch.setattr(fast_reductions, "GEMV_MAX_SIZE", fast_reductions.gemv_max_size(vendor))
    x = np.random.default_rng(4).standard_normal(shape).astype(dtype)
    # past the limit (AMD) NumPy sums; on Intel the GEMV takes every size
    assert (x.size > fast_reductions.GEMV_MAX_SIZE) == (shape == (2100, 1000) and vendor == "AuthenticAMD")
    tol = 1e-5 if dtype == np.float32 else 1e-12
    for got, want in (
        (sum_last(x), x.sum(axis=-1, keepdims=True)),
        (sum_leading(x), x.sum(axis=tuple(range(x.ndim - 1)))),
    ):
        assert got.shape == want.shape and got.dtype == dtype
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.sqrt(max(x.size, 1)))
    np.testing.assert_array_equal(sum_last(x), sum_last(x.copy()))  # deterministic


def test_the_gemv_limit_is_read_from_the_cpu_vendor(tmp_path):
    intel, amd = tmp_path / "intel", tmp_path / "amd"
    intel.write_text("processor\t: 0\nvendor_id\t: GenuineIntel\nflags\t\t: avx512f\n")
    amd.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\n")
    assert fast_reductions.cpu_vendor(str(intel)) == "GenuineIntel"
    assert fast_reductions.cpu_vendor(str(tmp_path / "none")) == ""  # not Linux: unknown
    assert fast_reductions.gemv_max_size(fast_reductions.cpu_vendor(str(intel))) == float("inf")
    for vendor in (fast_reductions.cpu_vendor(str(amd)), ""):
        assert fast_reductions.gemv_max_size(vendor) == fast_reductions.GEMV_LIMIT
    assert fast_reductions.GEMV_MAX_SIZE == fast_reductions.gemv_max_size(fast_reductions.cpu_vendor())


def test_blas_sums_propagate_nan_and_inf_and_leave_integers_to_numpy():
    x = np.ones((3, 4), dtype=np.float32)
    x[0, 1], x[1, 2], x[2, :2] = np.nan, np.inf, (np.inf, -np.inf)
    with np.errstate(invalid="ignore"):  # inf - inf warns "invalid value", as x.sum does
        assert np.isnan(sum_last(x)[0, 0]) and sum_last(x)[1, 0] == np.inf and np.isnan(sum_last(x)[2, 0])
        assert (
            np.isnan(sum_leading(x)[1])
            and sum_leading(x)[0] == sum_leading(x)[2] == np.inf
            and sum_leading(x)[3] == 3
        )
    ints = np.arange(12).reshape(3, 4)
    assert sum_last(ints).dtype == ints.dtype and sum_last(ints)[2, 0] == 8 + 9 + 10 + 11


@pytest.mark.parametrize(
    "shape",
    [(2, 3, 16, 16), (5, 32), (5, 33), (7, 1), (0, 16)],
    ids=["scores", "longest-transposed", "plain", "one-column", "empty"],
)
def test_max_last_is_the_exact_max_with_nan_propagating(shape):
    x = np.random.default_rng(5).standard_normal(shape).astype(np.float32)
    np.testing.assert_array_equal(max_last(x), x.max(axis=-1, keepdims=True))
    if x.size:
        x.reshape(-1, shape[-1])[0, -1] = np.nan
        x.reshape(-1, shape[-1])[-1, 0] = -np.inf
        got = max_last(x).reshape(-1)
        assert np.isnan(got[0]) and not np.isnan(got[1:]).any()


# -- softmax, layer norm, linear (fast/softmax.py, fast/layernorm.py, fast/linear.py) ---------
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(6, 27), (2, 5, 80)], ids=["short-rows", "long-rows"])
def test_softmax_and_log_softmax_equal_the_reference(dtype, shape):
    rng = np.random.default_rng(6)
    x, dy = (rng.standard_normal(shape) * 3).astype(dtype), rng.standard_normal(shape).astype(dtype)
    y, logy = ops.softmax_forward(x), ops.log_softmax_forward(x)
    for f, args in (
        (ops.softmax_forward, (x,)),
        (ops.softmax_backward, (dy, y)),
        (ops.log_softmax_forward, (x,)),
        (ops.log_softmax_backward, (dy, logy)),
    ):
        assert_close(*both_lanes(f, *args), dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("bias", [True, False])
def test_layernorm_and_linear_equal_the_reference(dtype, bias):
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((5, 7, 48)) * 3 + 1).astype(dtype)
    w, b = rng.standard_normal(48).astype(dtype), rng.standard_normal(48).astype(dtype) if bias else None
    dy = rng.standard_normal(x.shape).astype(dtype)
    _, xhat, rstd = ops.layernorm_forward(x, w, b)
    assert_close(*both_lanes(ops.layernorm_forward, x, w, b), dtype)
    assert_close(*both_lanes(ops.layernorm_backward, dy, xhat, rstd, w), dtype)
    W = rng.standard_normal((48, 48)).astype(dtype)
    (dx, dW, db), (ref_dx, ref_dW, ref_db) = both_lanes(ops.linear_backward, dy, x, W, bias)
    assert_close((dx, dW), (ref_dx, ref_dW), dtype, exact=True)  # the same GEMMs
    assert_close(db, ref_db, dtype) if bias else (db, ref_db) == (None, None)


@pytest.mark.parametrize("shape", [(7, 40), (3, 5, 40), (40,)], ids=["rows", "3d", "one-row"])
def test_log_softmax_in_blocks_of_rows_equals_the_reference(shape, monkeypatch):
    from scratchformer.fast import softmax as fast_softmax

    # blocks of 2 rows: 7 rows are 3 blocks and a partial last one of a single row
    monkeypatch.setattr(fast_softmax, "EXP_BLOCK_BYTES", 2 * 40 * 8)
    x = (np.random.default_rng(7).standard_normal(shape) * 4).astype(np.float64)
    got, want = both_lanes(ops.log_softmax_forward, x)
    assert_close(got, want, np.float64)
    np.testing.assert_allclose(np.exp(got).sum(axis=-1), 1.0, rtol=1e-12)  # every row normalised


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("bias", [True, False])
def test_linear_backward_into_adds_what_linear_backward_returns_block_by_block(dtype, bias, monkeypatch):
    from scratchformer.fast import linear as fast_linear

    rng = np.random.default_rng(3)
    x, dy = rng.standard_normal((4, 6, 24)).astype(dtype), rng.standard_normal((4, 6, 37)).astype(dtype)
    W = rng.standard_normal((37, 24)).astype(dtype)
    start_W, start_b = rng.standard_normal(W.shape).astype(dtype), rng.standard_normal(37).astype(dtype)
    dx_ref, dW_ref, db_ref = ops.linear_backward(dy, x, W, bias)
    # blocks of 5 rows: 37 = 7 blocks of 5 and a last, partial block of 2 rows
    monkeypatch.setattr(fast_linear, "BLOCK_BYTES", 5 * W[:1].nbytes)
    for lane in (fast.reference, contextlib.nullcontext):  # the reference, then the fast lane in blocks
        gW, gb = start_W.copy(), start_b.copy() if bias else None
        with lane():
            dx = ops.linear_backward_into(dy, x, W, gW, gb)
        assert_close(dx, dx_ref, dtype, exact=True)
        assert_close(gW, start_W + dW_ref, dtype)  # every row, the partial block's included, added once
        if bias:
            assert_close(gb, start_b + db_ref, dtype)
    views = np.zeros((2, 37, 24), dtype=dtype)  # a view of a bigger gradient (cross-attention's halves)
    ops.linear_backward_into(dy, x, W, views[1])
    assert not views[0].any() and np.allclose(views[1], dW_ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_layernorm_in_place_is_bit_identical_to_the_plain_formula_with_the_same_sums(dtype):
    from scratchformer.fast.layernorm import layernorm_backward, layernorm_forward

    rng = np.random.default_rng(2)
    x = (rng.standard_normal((5, 7, 48)) * 3 + 1).astype(dtype)
    w, b = rng.standard_normal(48).astype(dtype), rng.standard_normal(48).astype(dtype)
    dy = rng.standard_normal(x.shape).astype(dtype)
    mean = lambda a: sum_last(a) / 48  # noqa: E731 -- the reference's formula with the fast lane's sums
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


# -- GELU (fast/activations.py) --------------------------------------------------------------
def test_normal_cdf_and_pdf_float32_tables_are_accurate_and_monotone():
    x = np.linspace(-12, 12, 200_001)  # 1/8,333 apart: every offset from the 1/1024 grid
    exact = np.array([0.5 * (1 + math.erf(v / math.sqrt(2))) for v in x])
    y32 = fast_activations.normal_cdf(x.astype(np.float32))
    assert y32.dtype == np.float32 and np.abs(y32 - exact).max() < 2e-7
    assert np.abs(ops.numerics.normal_cdf(x) - exact).max() < 1e-14  # the reference, float64
    assert np.diff(y32).min() > -1e-7  # monotone up to float32 rounding
    pdf32 = fast_activations.normal_pdf(x.astype(np.float32))
    assert pdf32.dtype == np.float32
    assert np.abs(pdf32 - np.exp(-x * x / 2) / math.sqrt(2 * math.pi)).max() < 2e-7


def test_float32_gelu_far_tails_and_non_finite_input_as_the_reference():
    # beyond the tables' +-9: Phi is 0 or 1, phi 0, so x * Phi(x) and x * phi(x) vanish on the left
    x = np.array([-1e30, -50, -9.5, 9.5, 50, 1e30, np.inf, -np.inf, np.nan], dtype=np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        (y, dydx), (ref_y, ref_dydx) = both_lanes(ops.activations.gelu_with_grad, x)
        forward = both_lanes(ops.gelu_forward, x)
        cdf = fast_activations.normal_cdf(x)
    np.testing.assert_allclose(y, ref_y, rtol=0, atol=1e-18)  # the reference: about 1e-19 at -9.5
    np.testing.assert_allclose(dydx, ref_dydx, rtol=0, atol=1e-18)
    np.testing.assert_allclose(*forward, rtol=0, atol=1e-18)
    np.testing.assert_array_equal(cdf, [0, 0, 0, 1, 1, 1, 1, 0, np.nan])


def test_float32_gelu_equals_the_reference_within_the_tables_error():
    x = np.linspace(-12, 12, 20_001).astype(np.float32)
    (y, dydx), (ref_y, ref_dydx) = both_lanes(ops.activations.gelu_with_grad, x)
    assert y.dtype == ref_y.dtype == np.float32
    # the table's Phi is within 2e-7, the float32 erf polynomial's within 1e-7, plus rounding
    assert np.all(np.abs(y - ref_y) <= 4e-7 * np.maximum(np.abs(x), 1))
    assert np.all(np.abs(dydx - ref_dydx) <= 4e-7 * np.maximum(np.abs(x), 1))
    np.testing.assert_array_equal(both_lanes(ops.gelu_forward, x)[0], y)
    x64 = x.astype(np.float64)  # float64 has no fast variant: both lanes run the erf polynomial
    assert_close(*both_lanes(ops.activations.gelu_with_grad, x64), np.float64, exact=True)


@pytest.mark.parametrize("block", [fast_activations.BLOCK, 1000], ids=["one-block", "blocks"])
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_blocked_gelu_and_its_derivative_are_bit_identical_to_the_formula_with_the_same_tables(
    block, layout, monkeypatch
):
    monkeypatch.setattr(fast_activations, "BLOCK", block)  # 1000: 6 blocks and a partial 7th of 144
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((64, 96)) * 3).astype(np.float32)
    x = x if layout == "contiguous" else x.T
    cdf = fast_activations.normal_cdf(x)
    y, dydx = fast_activations.gelu_with_grad(x)
    assert y.shape == dydx.shape == x.shape
    np.testing.assert_array_equal(y, x * cdf)
    np.testing.assert_array_equal(fast_activations.gelu_forward(x), x * cdf)  # blocked the same way
    np.testing.assert_array_equal(dydx, cdf + x * fast_activations.normal_pdf(x))


# -- attention (fast/attention.py) -----------------------------------------------------------
def _padding_mask(lengths, Tk):
    return (np.arange(Tk)[None, :] < np.asarray(lengths)[:, None])[:, None, None, :]  # (B, 1, 1, Tk)


ATTN_CASES = {
    "plain": dict(Tq=4, Tk=4, mask=None, causal=False),
    "causal+padding": dict(Tq=4, Tk=4, mask=_padding_mask([3, 4], 4), causal=True),
    "cross Tq<Tk": dict(Tq=3, Tk=5, mask=_padding_mask([5, 3], 5), causal=False),
    "causal Tq<Tk (kv cache)": dict(Tq=2, Tk=5, mask=None, causal=True),
    "all-masked rows": dict(
        Tq=3, Tk=4, mask=np.array([[True, False, True, True], [False] * 4, [True] * 4]), causal=False
    ),
    "causal all-masked (Tq>Tk)": dict(Tq=5, Tk=3, mask=None, causal=True),
}


def _attn_inputs(B, Tq, Tk, dtype, seed=28, H=2, d=3):
    g = np.random.default_rng(seed)
    return tuple(
        g.standard_normal(s).astype(dtype)
        for s in ((B, H, Tq, d), (B, H, Tk, d), (B, H, Tk, d), (B, H, Tq, d))
    )


def _attention(q, k, v, dout, case, dropout=0.0, keep=True):
    """(out, weights, dq, dk, dv), the dropout drawn from the same seed every call."""
    c = ATTN_CASES[case]
    out, cache = ops.attention_forward(
        q,
        k,
        v,
        mask=c["mask"],
        causal=c["causal"],
        dropout_p=dropout,
        rng=np.random.default_rng(9),
        training=True,
        keep_weights=keep,
    )
    return (out, cache["weights"], *ops.attention_backward(dout, cache))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("dropout", [0.0, 0.3])
@pytest.mark.parametrize("case", list(ATTN_CASES))
def test_attention_equals_the_reference(case, dropout, dtype):
    """One piece (small sizes): the fast lane draws the same dropout mask as the reference."""
    c = ATTN_CASES[case]
    q, k, v, dout = _attn_inputs(2, c["Tq"], c["Tk"], dtype)
    got, want = both_lanes(_attention, q, k, v, dout, case, dropout)
    assert_close(got, want, dtype)
    assert np.isfinite(got[0]).all() and np.isfinite(got[2]).all()


@pytest.mark.parametrize("case", list(ATTN_CASES))
@pytest.mark.parametrize("B", [2, 3, 5], ids=["B=2", "B=3", "B=5"])
def test_attention_in_pieces_covers_every_row_and_equals_one_piece(case, B, monkeypatch):
    """Two batch rows a piece: B=3 and B=5 end with a partial piece, which must be computed too.
    Pieces equal the one-piece result up to rounding, and so does the backward that recomputes
    the weights (exp(scores - lse): float64 rounding)."""
    c = ATTN_CASES[case]
    q, k, v, dout = _attn_inputs(B, c["Tq"], c["Tk"], np.float64)
    if c["mask"] is not None and c["mask"].ndim == 4:  # a per-row padding mask, for B rows
        c = dict(c, mask=np.resize(c["mask"], (B,) + c["mask"].shape[1:]))
        monkeypatch.setitem(ATTN_CASES, case, c)
    whole = _attention(q, k, v, dout, case)
    monkeypatch.setattr(fast_attention, "CHUNK_BYTES", 2 * fast_attention.weights_nbytes(q[:1], k[:1]))
    _, cache = ops.attention_forward(q, k, v, mask=c["mask"], causal=c["causal"])
    spans = [range(B)[p.rows] for p in cache["pieces"]]
    assert all(p.queries == slice(None) and p.keys == c["Tk"] for p in cache["pieces"])  # whole rows
    assert [len(s) for s in spans] == [2] * (B // 2) + [1] * (B % 2)
    assert [i for s in spans for i in s] == list(range(B))  # every row, once, in order
    pieces = _attention(q, k, v, dout, case)
    for a, b in zip(pieces, whole):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
    recomputed = _attention(q, k, v, dout, case, keep=False)
    assert recomputed[1] is None
    for a, b in zip(recomputed[:1] + recomputed[2:], pieces[:1] + pieces[2:]):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("case", list(ATTN_CASES))
def test_attention_in_pieces_with_dropout_matches_finite_differences(case, monkeypatch):
    """With dropout the pieces draw their masks in another order than one piece, so their
    gradients are checked against finite differences instead."""
    from scratchformer.gradcheck import numerical_gradient, relative_error

    c = ATTN_CASES[case]
    q, k, v, dout = _attn_inputs(3, c["Tq"], c["Tk"], np.float64)
    if c["mask"] is not None and c["mask"].ndim == 4:
        monkeypatch.setitem(ATTN_CASES, case, dict(c, mask=np.resize(c["mask"], (3,) + c["mask"].shape[1:])))
    monkeypatch.setattr(fast_attention, "CHUNK_BYTES", 1)  # one batch row a piece
    got = _attention(q, k, v, dout, case, dropout=0.3, keep=False)
    for x, grad in zip((q, k, v), got[2:]):
        numeric = numerical_gradient(lambda: float(np.sum(_attention(q, k, v, dout, case, 0.3)[0] * dout)), x)
        assert relative_error(grad, numeric) <= 5e-8


def _query_blocks(monkeypatch, q, k, block):
    """Set CHUNK_BYTES so that each batch row is split into blocks of `block` queries."""
    row = q.itemsize * q.shape[1] * k.shape[-2]  # one query row of every head
    monkeypatch.setattr(fast_attention, "CHUNK_BYTES", block * row)


def _score_bias(kind, B, H, Tq, Tk, dtype):
    g = np.random.default_rng(31)
    shape = {"none": None, "heads": (H, Tq, Tk), "full": (B, H, Tq, Tk)}[kind]  # ALiBi's is (H, Tq, Tk)
    return None if shape is None else g.standard_normal(shape).astype(dtype)


def _attention_biased(q, k, v, dout, case, bias, dropout=0.0, keep=True):
    """(out, weights, dq, dk, dv) with a score bias, the dropout drawn from the same seed every call."""
    c = ATTN_CASES[case]
    out, cache = ops.attention_forward(
        q,
        k,
        v,
        mask=c["mask"],
        causal=c["causal"],
        dropout_p=dropout,
        rng=np.random.default_rng(9),
        training=True,
        keep_weights=keep,
        bias=bias,
    )
    return (out, cache["weights"], *ops.attention_backward(dout, cache))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("bias_kind", ["none", "heads", "full"])
@pytest.mark.parametrize("case", list(ATTN_CASES) + ["long causal", "long"])
def test_attention_in_query_blocks_equals_the_reference(case, bias_kind, dtype, monkeypatch):
    """Blocks of 2 queries (a partial last block when Tq is odd), each batch row apart; causal
    blocks stop at their last visible key. Equal to the reference lane within TOL (float64:
    1e-12 relative; float32: 1e-5), with the weights kept or recomputed in the backward."""
    monkeypatch.setitem(ATTN_CASES, "long causal", dict(Tq=7, Tk=7, mask=None, causal=True))
    monkeypatch.setitem(ATTN_CASES, "long", dict(Tq=7, Tk=7, mask=_padding_mask([7, 5], 7), causal=False))
    c = ATTN_CASES[case]
    q, k, v, dout = _attn_inputs(2, c["Tq"], c["Tk"], dtype, H=3, d=4)
    bias = _score_bias(bias_kind, 2, 3, c["Tq"], c["Tk"], dtype)
    want = both_lanes(_attention_biased, q, k, v, dout, case, bias)[1]
    _query_blocks(monkeypatch, q, k, block=2)
    _, cache = ops.attention_forward(q, k, v, mask=c["mask"], causal=c["causal"], bias=bias)
    pieces = cache["pieces"]
    covered = [(b, i) for p in pieces for b in range(2)[p.rows] for i in range(c["Tq"])[p.queries]]
    assert covered == [(b, i) for b in range(2) for i in range(c["Tq"])]  # every query of every row, once
    assert [len(range(c["Tq"])[p.queries]) for p in pieces[: len(pieces) // 2]] == [2] * (c["Tq"] // 2) + [
        1
    ] * (c["Tq"] % 2)
    if case == "long causal":  # blocks 0-1, 2-3, 4-5, 6 see keys up to 1, 3, 5, 6 only
        assert [p.keys for p in pieces] == [2, 4, 6, 7] * 2
    got = _attention_biased(q, k, v, dout, case, bias)
    assert_close(got, want, dtype)
    recomputed = _attention_biased(q, k, v, dout, case, bias, keep=False)
    assert recomputed[1] is None  # the same weights, bit for bit; the products of a block's kept
    # weights (a strided view of the whole array) may take another BLAS path than a fresh array's
    assert_close(recomputed[:1] + recomputed[2:], got[:1] + got[2:], dtype)
    assert np.isfinite(got[0]).all() and all(np.isfinite(g).all() for g in got[2:])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", list(ATTN_CASES))
def test_attention_with_a_score_bias_takes_the_fast_lane_and_equals_the_reference(case, dtype, monkeypatch):
    c = ATTN_CASES[case]
    q, k, v, dout = _attn_inputs(2, c["Tq"], c["Tk"], dtype)
    bias = _score_bias("heads", 2, 2, c["Tq"], c["Tk"], dtype)
    calls = []
    monkeypatch.setattr(
        fast_attention,
        "_softmax_weights",
        lambda *a, _real=fast_attention._softmax_weights, **kw: calls.append(a[3]) or _real(*a, **kw),
    )
    got, want = both_lanes(_attention_biased, q, k, v, dout, case, bias)
    assert calls and calls[0] is not None  # the fast form ran, with the bias
    assert_close(got, want, dtype)
    unbiased = _attention(q, k, v, dout, case)
    assert not np.allclose(got[0], unbiased[0])  # the bias changed the output: it was added, not dropped


def test_a_wider_bias_widens_the_fast_lanes_scores_as_the_reference():
    q, k, v, dout = _attn_inputs(2, 4, 4, np.float32)
    bias = _score_bias("heads", 2, 2, 4, 4, np.float64)
    for keep in (True, False):
        got, want = both_lanes(
            lambda: ops.attention_forward(q, k, v, causal=True, bias=bias, keep_weights=keep)[0]
        )
        assert got.dtype == want.dtype == np.float64
        np.testing.assert_allclose(got, want, **TOL[np.float32])  # scores of float32 q, k: float32 rounding


def test_query_blocks_with_dropout_match_finite_differences(monkeypatch):
    """With dropout the blocks draw their masks in another order than one piece, so their
    gradients are checked against finite differences instead."""
    from scratchformer.gradcheck import numerical_gradient, relative_error

    case = "causal+padding"
    q, k, v, dout = _attn_inputs(2, 4, 4, np.float64)
    bias = _score_bias("heads", 2, 2, 4, 4, np.float64)
    _query_blocks(monkeypatch, q, k, block=3)  # blocks of 3 and 1 queries
    got = _attention_biased(q, k, v, dout, case, bias, dropout=0.3, keep=False)
    for x, grad in zip((q, k, v), got[2:]):
        numeric = numerical_gradient(
            lambda: float(np.sum(_attention_biased(q, k, v, dout, case, bias, 0.3)[0] * dout)), x
        )
        assert relative_error(grad, numeric) <= 5e-8


@pytest.mark.parametrize("n_kv_head", [1, 2, 4], ids=["MQA", "GQA", "MHA"])
def test_grouped_query_attention_with_alibi_in_query_blocks_equals_the_reference(n_kv_head, monkeypatch):
    """The layer's own path (expand_kv'd keys and values, ALiBi's bias, causal) in blocks of 3
    of its 9 queries, against the reference lane: output, dx and every parameter's gradient."""
    from scratchformer.nn.attention import MultiHeadAttention

    rng = np.random.default_rng(5)
    x, dy = rng.standard_normal((2, 9, 16)), rng.standard_normal((2, 9, 16))
    results = []
    for reference in (True, False):
        if not reference:
            monkeypatch.setattr(fast_attention, "CHUNK_BYTES", 3 * 4 * 9 * 8)  # 3 queries x 4 heads x 9 keys
        attn = MultiHeadAttention(
            16, 4, n_kv_head=n_kv_head, alibi=True, dtype=np.float64, rng=np.random.default_rng(0)
        )
        with fast.reference(reference):
            y = attn(x, causal=True)
            dx, _ = attn.backward(dy)
        results.append((y, dx, *(p.grad.copy() for p in attn.parameters())))
    for a, b in zip(*results):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("positional", ["learned", "alibi"])
def test_a_gpt_trains_in_query_blocks_as_in_the_reference_lane(positional, monkeypatch):
    """Three AdamW steps of a GPT (block 16, attention in blocks of 5 queries, the weights
    recomputed in the backward) give the reference lane's losses and weights."""
    from scratchformer.models import GPT, GPTConfig

    monkeypatch.setattr(
        fast_attention, "CHUNK_BYTES", 5 * 2 * 16 * 8
    )  # 5 queries x 2 heads x 16 keys, float64
    monkeypatch.setattr(fast_attention, "KEEP_WEIGHTS_BYTES", 0)  # recompute, as long context does
    cfg = GPTConfig(
        vocab_size=11, block_size=16, n_layer=2, n_head=2, n_embd=16, positional=positional, dtype="float64"
    )
    x = np.random.default_rng(1).integers(0, 11, size=(2, 16))

    def train():
        model = GPT(cfg, seed=0)
        opt = AdamW(param_groups(model, 0.1), lr=1e-2)
        losses = []
        for _ in range(3):
            opt.zero_grad()
            losses.append(model(x, x)[1])
            model.backward()
            opt.step()
        return losses, [p.data for p in model.parameters()]

    blocks = []
    monkeypatch.setattr(
        fast_attention,
        "_pieces",
        lambda *a, _real=fast_attention._pieces: blocks.append(_real(*a)) or blocks[-1],
    )
    (losses, params), (ref_losses, ref_params) = both_lanes(train)
    assert blocks and all(
        [p.queries for p in b] == [slice(0, 5), slice(5, 10), slice(10, 15), slice(15, 16)] * 2
        for b in blocks
    )  # each of the 2 rows in 4 blocks, the last partial
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-12)
    for a, b in zip(params, ref_params):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)


def test_query_blocks_hold_a_block_of_weights_not_the_whole(monkeypatch):
    """Peak memory of a forward and backward that recompute the weights: in blocks of 16 of
    512 queries, well below one (H, T, T) array; the reference lane holds several of them."""
    import tracemalloc

    B, H, T, d = 1, 2, 512, 8
    q, k, v, dout = _attn_inputs(B, T, T, np.float64, H=H, d=d)
    whole = fast_attention.weights_nbytes(q, k)  # 4 MiB

    def peak():
        tracemalloc.start()
        try:
            out, cache = ops.attention_forward(q, k, v, causal=True, keep_weights=False)
            ops.attention_backward(dout, cache)
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    _query_blocks(monkeypatch, q, k, block=16)
    blocks = peak()
    with fast.reference():
        reference = peak()
    assert (
        blocks < whole / 3 and reference > 2 * whole
    )  # in blocks: (H, 16, T) scores a piece, the mask, the outputs


# -- AdamW and clip_grad_norm (fast/optim.py, optim/flat.py) ----------------------------------
def _adamw_run(init, steps, dtype, head_scale=None):
    """The weights and moments after `steps` of make_adamw's optimiser (the lane's); with
    `head_scale`, the last parameter in a group of its own at that lr_scale and the rate
    changing every step (as the schedule sets it)."""
    params = [Parameter(a.copy()) for a in init]
    groups = [{"params": params[:2], "weight_decay": 0.1}, {"params": params[2:], "weight_decay": 0.0}]
    if head_scale is not None:
        groups = [
            {"params": params[:2], "weight_decay": 0.1},
            {"params": params[2:-1], "weight_decay": 0.0},
            {"params": params[-1:], "weight_decay": 0.1, "lr_scale": head_scale},
        ]
    opt = make_adamw(groups, lr=1e-2, betas=(0.9, 0.95), eps=1e-8)
    for t, grads in enumerate(steps):
        if head_scale is not None:
            opt.lr = 1e-3 * (t + 1)
        opt.zero_grad()
        for p, g in zip(params, grads):
            p.grad += g
        opt.step()
    return tuple(p.data for p in params) + tuple(opt.m) + tuple(opt.v)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_flat_adamw_is_bit_identical_to_the_per_parameter_reference(dtype, monkeypatch):
    monkeypatch.setattr(fast_optim, "UPDATE_CHUNK", 4096)  # (300, 70) spans several pieces
    rng = np.random.default_rng(0)
    shapes = [(5, 3), (300, 70), (7,), (2, 3, 4)]
    init = [rng.standard_normal(s).astype(dtype) for s in shapes]
    steps = [[rng.standard_normal(s).astype(dtype) for s in shapes] for _ in range(6)]
    got, want = both_lanes(_adamw_run, init, steps, dtype)
    assert_close(got, want, dtype, exact=True)
    assert_close(got, _adamw_run(init, steps, dtype), dtype, exact=True)  # run to run


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_flat_adamw_gives_each_group_its_own_rate_bit_identical_to_the_reference(dtype, monkeypatch):
    """A group's lr_scale (finetune's fresh head at its own rate) in both lanes, bit for bit,
    while the optimizer's lr changes each step; the scaled group moves differently."""
    monkeypatch.setattr(fast_optim, "UPDATE_CHUNK", 4096)
    rng = np.random.default_rng(1)
    shapes = [(5, 3), (300, 70), (7,), (2, 3, 4)]
    init = [rng.standard_normal(s).astype(dtype) for s in shapes]
    steps = [[rng.standard_normal(s).astype(dtype) for s in shapes] for _ in range(6)]
    got, want = both_lanes(_adamw_run, init, steps, dtype, 200.0)
    assert_close(got, want, dtype, exact=True)
    unscaled, scale_one = both_lanes(_adamw_run, init, steps, dtype, 1.0)
    assert_close(unscaled, scale_one, dtype, exact=True)
    np.testing.assert_array_equal(got[0], unscaled[0])  # the other groups are untouched by it
    assert np.abs(got[3] - init[3]).max() > 10 * np.abs(unscaled[3] - init[3]).max()


def test_make_adamw_chooses_the_lane_and_only_binding_moves_the_parameters():
    params = [Parameter(np.ones((2, 3), dtype=np.float32)), Parameter(np.zeros(4, dtype=np.float32))]
    arrays = [(p.data, p.grad) for p in params]
    with fast.reference():
        assert type(make_adamw(params)) is AdamW
    AdamW(params)  # the reference never touches the parameters' arrays
    flat = FlatAdamW(params)  # nor does building the flat one: binding is a step of its own
    assert all(p.data is d and p.grad is g for p, (d, g) in zip(params, arrays))
    with pytest.raises(ConfigError, match="call opt.bind"):
        flat.step()
    assert flat.bind() is flat and all(p.data.base is flat.data and p.grad.base is flat.grad for p in params)
    np.testing.assert_array_equal(params[0].data, 1.0)  # values unchanged
    assert isinstance(make_adamw(params), FlatAdamW)  # the fast lane: bound at once
    with pytest.raises(ConfigError, match="replaced after bind"):
        flat.step()  # the second optimiser took the parameters over


def test_a_gpt_trains_through_the_flat_views_exactly_as_with_its_own_arrays():
    from scratchformer.models import GPT, GPTConfig

    cfg = GPTConfig(vocab_size=11, block_size=8, n_layer=2, n_head=2, n_embd=16)
    x = np.random.default_rng(1).integers(0, 11, size=(3, 8))
    flat_model, ref_model = GPT(cfg, seed=0), GPT(cfg, seed=0)
    opt = FlatAdamW(param_groups(flat_model, 0.1), lr=1e-2, betas=(0.9, 0.95)).bind()
    with fast.reference():
        ref_opt = AdamW(param_groups(ref_model, 0.1), lr=1e-2, betas=(0.9, 0.95))
    for k, v in ref_model.state_dict().items():  # binding the optimizer changed no value
        np.testing.assert_array_equal(flat_model.state_dict()[k], v)
    assert all(p.grad.base is opt.grad and p.data.base is opt.data for p in flat_model.parameters())
    for _ in range(3):
        losses = []
        for model, optimizer in ((flat_model, opt), (ref_model, ref_opt)):
            optimizer.zero_grad()
            losses.append(model(x, x)[1])
            model.backward()
            clip_grad_norm(model.parameters(), 0.05)  # one flat pass, or per parameter
            optimizer.step()
        assert losses[0] == losses[1]  # the model reads the weights the optimizer wrote
    for (k, a), b in zip(flat_model.state_dict().items(), ref_model.state_dict().values()):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-6, err_msg=k)  # clip's norm sums differently


def test_flat_adamw_binds_again_after_the_parameters_are_replaced_keeping_its_moments():
    params = [Parameter(np.ones((2, 3), dtype=np.float32)), Parameter(np.ones(4, dtype=np.float32))]
    opt = FlatAdamW(params, lr=0.1, weight_decay=0.0).bind()
    opt.grad[...] = 1.0
    opt.step()
    for p in params:  # as model.to(np.float64) does
        p.data, p.grad = p.data.astype(np.float64), np.full(p.data.shape, 1.0)
    opt.bind()
    assert all(p.data.dtype == np.float64 and p.data.base is opt.data for p in params)
    assert opt.flat_m.dtype == np.float64 and (opt.flat_m == np.float32(0.1)).all()  # m after one step
    opt.step()
    np.testing.assert_allclose(params[0].data, 0.8, rtol=1e-6)  # two Adam steps of lr on a constant gradient
    with pytest.raises(ConfigError, match="one dtype"):
        FlatAdamW([Parameter(np.ones(2, dtype=np.float32)), Parameter(np.ones(2))]).bind()


def test_a_flat_and_a_reference_state_dict_load_into_each_other():
    """The same "AdamW" state: a run saved in one lane resumes in the other."""
    rng = np.random.default_rng(0)
    init = [rng.standard_normal(s).astype(np.float32) for s in [(3, 4), (5,)]]
    opts = []
    for kind in (AdamW, FlatAdamW):
        params = [Parameter(a.copy()) for a in init]
        opt = kind(params, lr=1e-2)
        opts.append(opt.bind() if isinstance(opt, FlatAdamW) else opt)
        for p in params:
            p.grad += 0.5
        opt.step()
    state = opts[0].state_dict()
    assert state.keys() == opts[1].state_dict().keys()
    opts[1].load_state_dict(state)
    for name, a in opts[1].state_dict().items():
        np.testing.assert_array_equal(a, state[name])


def test_clip_grad_norm_flat_and_per_parameter_equal_the_reference(monkeypatch):
    monkeypatch.setattr(fast_optim, "CLIP_CHUNK", 64)  # several pieces per gradient
    rng = np.random.default_rng(0)
    shapes = [(30, 7), (5,), (9, 4)]
    grads = [rng.standard_normal(s).astype(np.float32) * 10 for s in shapes]

    def clipped(params, flat):
        if flat:
            FlatAdamW(params).bind()  # grads become views of one flat array
        for p, g in zip(params, grads):
            p.grad += g
        return clip_grad_norm(params, 1.0), tuple(p.grad for p in params)

    new = lambda: [Parameter(np.zeros(s, dtype=np.float32)) for s in shapes]  # noqa: E731
    with fast.reference():
        ref_norm, ref_grads = clipped(new(), flat=False)
    expected = math.sqrt(sum(float(np.sum(g.astype(np.float64) ** 2)) for g in grads))
    assert ref_norm == pytest.approx(expected, rel=1e-12)
    for flat in (True, False):
        norm, got = clipped(new(), flat)
        assert norm == pytest.approx(ref_norm, rel=1e-12)
        assert_close(got, ref_grads, np.float32)
    params = new()
    FlatAdamW(params).bind()
    for p, g in zip(params, grads):
        p.grad += g
    subset = math.sqrt(sum(float(np.sum(p.grad.astype(np.float64) ** 2)) for p in params[:2]))
    assert clip_grad_norm(params[:2], 1.0) == pytest.approx(subset, rel=1e-12)  # not the whole buffer


@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan])
def test_embedding_backward_keeps_a_non_finite_gradient_in_its_own_row(bad):
    """In the one-hot product 0 x inf = NaN would reach every id's row; the fast lane redoes such
    a block by sorted runs, so inf or NaN lands in its own id's row only, as np.add.at puts it."""
    rng = np.random.default_rng(5)
    ids = rng.integers(0, 6, size=(2, 10))
    dy = rng.standard_normal((2, 10, 3)).astype(np.float32)
    dy[1, 4, 2] = bad
    got, want = both_lanes(_embedding_grad, dy, ids, np.zeros((6, 3), np.float32))
    bad_row = ids[1, 4]
    assert np.isfinite(np.delete(got, bad_row, axis=0)).all()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], **TOL[np.float32])


# -- not fast-lane pieces, but speed measures of their own -----------------------------------
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
