"""Optimizers against torch.optim, state round trips, clipping, schedule, param groups; each
test in both lanes (the per-parameter reference and the fast lane's flat buffer)."""

import math

import numpy as np
import pytest

from scratchformer.errors import CheckpointError, ConfigError
from scratchformer.nn import Embedding, LearnedPositionalEmbedding
from scratchformer.nn.module import Module, Parameter
from scratchformer.optim import (
    SGD,
    AdamW,
    clip_grad_norm,
    cosine_lr,
    param_groups,
)

pytestmark = pytest.mark.usefixtures("lane")

SHAPES = [(4, 3), (3,), (2, 3, 2)]
STEPS = 10


def make_problem(seed=0, dtype=np.float64):
    """Random initial params and a fixed sequence of gradients, (STEPS, len(SHAPES))."""
    rng = np.random.default_rng(seed)
    init = [rng.standard_normal(s).astype(dtype) for s in SHAPES]
    grads = [[rng.standard_normal(s).astype(dtype) for s in SHAPES] for _ in range(STEPS)]
    return init, grads


def run_ours(opt_factory, init, grads, lrs=None):
    params = [Parameter(a.copy()) for a in init]
    opt = opt_factory(params)
    for t, gs in enumerate(grads):
        if lrs is not None:
            opt.lr = lrs[t]
        opt.zero_grad()
        for p, g in zip(params, gs):
            p.grad += g
        opt.step()
    return [p.data for p in params], opt


def run_torch(opt_factory, init, grads, lrs=None):
    torch = pytest.importorskip("torch", reason="torch is needed to compare against torch.optim")
    params = [torch.nn.Parameter(torch.tensor(a.copy())) for a in init]
    opt = opt_factory(torch, params)
    for t, gs in enumerate(grads):
        if lrs is not None:
            for g in opt.param_groups:
                g["lr"] = lrs[t]
        opt.zero_grad()
        for p, g in zip(params, gs):
            p.grad = torch.tensor(g)
        opt.step()
    return [p.detach().numpy() for p in params]


def test_adamw_matches_torch_with_groups_and_changing_lr():
    init, grads = make_problem()
    lrs = [cosine_lr(t, 1e-2, 1e-3, 3, STEPS) for t in range(STEPS)]

    def ours(ps):
        return AdamW(
            [{"params": ps[:2], "weight_decay": 0.1}, {"params": ps[2:], "weight_decay": 0.0}],
            lr=1e-2,
            betas=(0.9, 0.95),
            eps=1e-8,
        )

    def theirs(torch, ps):
        return torch.optim.AdamW(
            [{"params": ps[:2], "weight_decay": 0.1}, {"params": ps[2:], "weight_decay": 0.0}],
            lr=1e-2,
            betas=(0.9, 0.95),
            eps=1e-8,
            foreach=False,
        )

    expected = run_torch(theirs, init, grads, lrs)
    got, _ = run_ours(ours, init, grads, lrs)
    for a, b in zip(got, expected):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-13)


def run_torch_scaled(opt_factory, init, grads, lrs):
    """run_torch with each group's rate set to lrs[t] times its "scale" (torch's per-group lr
    under one shared schedule, as LambdaLR sets it)."""
    torch = pytest.importorskip("torch", reason="torch is needed to compare against torch.optim")
    params = [torch.nn.Parameter(torch.tensor(a.copy())) for a in init]
    opt = opt_factory(torch, params)
    for t, gs in enumerate(grads):
        for g in opt.param_groups:
            g["lr"] = lrs[t] * g["scale"]
        opt.zero_grad()
        for p, g in zip(params, gs):
            p.grad = torch.tensor(g)
        opt.step()
    return [p.detach().numpy() for p in params]


@pytest.mark.parametrize("kind", ["adamw", "sgd"])
def test_group_lr_scale_matches_torchs_per_group_rates(kind):
    """A group's lr_scale: its rate is the optimizer's lr (set by the schedule each step) times
    the scale, as torch's per-group "lr" under one LambdaLR."""
    init, grads = make_problem(seed=3)
    lrs = [cosine_lr(t, 1e-3, 1e-4, 3, STEPS) for t in range(STEPS)]

    def groups(ps, torch_side):
        scale = "scale" if torch_side else "lr_scale"
        return [
            {"params": ps[:2], "weight_decay": 0.1, scale: 1.0},
            {"params": ps[2:], "weight_decay": 0.0, scale: 50.0},
        ]

    def ours(ps):
        if kind == "adamw":
            return AdamW(groups(ps, False), lr=1e-3, betas=(0.9, 0.95))
        return SGD(groups(ps, False), lr=1e-3, momentum=0.9)

    def theirs(torch, ps):
        if kind == "adamw":
            return torch.optim.AdamW(groups(ps, True), lr=1e-3, betas=(0.9, 0.95), foreach=False)
        return torch.optim.SGD(groups(ps, True), lr=1e-3, momentum=0.9, foreach=False)

    expected = run_torch_scaled(theirs, init, grads, lrs)
    got, _ = run_ours(ours, init, grads, lrs)
    for a, b in zip(got, expected):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("momentum,wd", [(0.0, 0.0), (0.9, 0.0), (0.9, 0.05)])
def test_sgd_matches_torch(momentum, wd):
    init, grads = make_problem(seed=1)
    expected = run_torch(
        lambda torch, ps: torch.optim.SGD(ps, lr=0.1, momentum=momentum, weight_decay=wd), init, grads
    )
    got, _ = run_ours(lambda ps: SGD(ps, lr=0.1, momentum=momentum, weight_decay=wd), init, grads)
    for a, b in zip(got, expected):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-13)


def test_float32_updates_stay_float32():
    init, grads = make_problem(dtype=np.float32)
    got, opt = run_ours(lambda ps: AdamW(ps, lr=1e-3), init, grads)
    assert all(a.dtype == np.float32 for a in got)
    assert all(m.dtype == np.float32 for m in opt.m)


@pytest.mark.parametrize(
    "factory",
    [lambda ps: AdamW(ps, lr=1e-2, weight_decay=0.1), lambda ps: SGD(ps, lr=0.1, momentum=0.9)],
    ids=["adamw", "sgd"],
)
def test_state_dict_round_trip_continues_identically(factory):
    init, grads = make_problem(seed=2)
    straight, _ = run_ours(factory, init, grads)

    # Run half, save (arrays and scalars apart, as a checkpoint does), rebuild, run the rest.
    half = STEPS // 2
    mid, opt = run_ours(factory, init, grads[:half])
    state = opt.state_dict()
    arrays = {k: v.copy() for k, v in state.items() if isinstance(v, np.ndarray)}
    scalars = {k: v for k, v in state.items() if not isinstance(v, np.ndarray)}
    assert all(isinstance(v, (int, float, str)) for v in scalars.values())
    assert scalars["step"] == half
    params = [Parameter(a.copy()) for a in mid]
    opt2 = factory(params)
    opt2.load_state_dict({**scalars, **arrays})
    for gs in grads[half:]:
        opt2.zero_grad()
        for p, g in zip(params, gs):
            p.grad += g
        opt2.step()
    for a, b in zip(straight, params):
        np.testing.assert_array_equal(a, b.data)  # bit for bit


def test_load_state_dict_mismatch_raises_checkpoint_error():
    ps = [Parameter(np.zeros(s)) for s in SHAPES]
    state = AdamW(ps).state_dict()
    with pytest.raises(CheckpointError, match="3 parameters, this optimizer has 2"):
        AdamW(ps[:2]).load_state_dict(state)
    wrong = [Parameter(np.zeros((5, 5))), *ps[1:]]
    with pytest.raises(CheckpointError, match=r"m\.0 has shape \(4, 3\)"):
        AdamW(wrong).load_state_dict(state)
    with pytest.raises(CheckpointError, match="not 'SGD'"):
        SGD(ps, lr=0.1).load_state_dict(state)


def test_bad_arguments_raise_config_error():
    p = Parameter(np.zeros(3))
    with pytest.raises(ConfigError, match="empty parameter list"):
        AdamW([])
    with pytest.raises(ConfigError, match="more than once"):
        AdamW([p, p])
    with pytest.raises(ConfigError, match="unknown keys"):
        AdamW([{"params": [p], "lr": 0.1}])
    for bad in (-1.0, math.inf, "2"):
        with pytest.raises(ConfigError, match="lr_scale must be a finite number"):
            AdamW([{"params": [p], "lr_scale": bad}])
    with pytest.raises(ConfigError, match="betas"):
        AdamW([p], betas=(1.0, 0.9))


def test_clip_grad_norm_matches_torch():
    torch = pytest.importorskip("torch", reason="torch is needed to compare clip_grad_norm_")
    rng = np.random.default_rng(3)
    grads = [rng.standard_normal(s) for s in SHAPES]
    for max_norm in (0.5, 100.0):
        ours = [Parameter(np.zeros(s)) for s in SHAPES]
        for p, g in zip(ours, grads):
            p.grad[...] = g
        theirs = [torch.nn.Parameter(torch.zeros(s, dtype=torch.float64)) for s in SHAPES]
        for p, g in zip(theirs, grads):
            p.grad = torch.tensor(g)
        n_ours = clip_grad_norm(ours, max_norm)
        n_theirs = torch.nn.utils.clip_grad_norm_(theirs, max_norm).item()
        assert n_ours == pytest.approx(n_theirs, rel=1e-12)
        for a, b in zip(ours, theirs):
            np.testing.assert_allclose(a.grad, b.grad.numpy(), rtol=1e-12)


def test_clip_grad_norm_float32_and_nonfinite():
    p = Parameter(np.zeros(4, dtype=np.float32))
    p.grad[...] = [3.0, 4.0, 0.0, 0.0]
    assert clip_grad_norm([p], 1.0) == pytest.approx(5.0)
    assert p.grad.dtype == np.float32
    assert np.linalg.norm(p.grad) == pytest.approx(1.0, rel=1e-5)
    p.grad[0] = np.inf
    assert math.isinf(clip_grad_norm([p], 1.0))


def test_cosine_lr_key_points():
    kw = dict(max_lr=1.0, min_lr=0.1, warmup_steps=10, decay_steps=110)
    assert cosine_lr(0, **kw) == pytest.approx(1 / 11)
    assert cosine_lr(9, **kw) == pytest.approx(10 / 11)
    assert cosine_lr(10, **kw) == pytest.approx(1.0)
    assert cosine_lr(60, **kw) == pytest.approx(0.55)  # halfway through the cosine
    assert cosine_lr(110, **kw) == pytest.approx(0.1)
    assert cosine_lr(10_000, **kw) == 0.1
    assert cosine_lr(0, 1.0, 0.1, 0, 0) == 0.1  # no warmup, no decay: the floor
    lrs = [cosine_lr(t, **kw) for t in range(10, 111)]
    assert all(a >= b for a, b in zip(lrs, lrs[1:]))
    with pytest.raises(ConfigError):
        cosine_lr(0, 1.0, 0.1, 20, 10)


class Lin(Module):
    def __init__(self):
        super().__init__()
        self.weight = Parameter(np.zeros((4, 4)))
        self.bias = Parameter(np.zeros(4))


class Stub(Module):
    def __init__(self):
        super().__init__()
        self.tok = Embedding(10, 4, dtype=np.float64)  # the library's own embedding classes
        self.pos = LearnedPositionalEmbedding(8, 4, dtype=np.float64)
        self.blocks = [Lin(), Lin()]
        self.norm_weight = Parameter(np.ones(4))
        self.head = Lin()
        self.head.weight = self.tok.weight  # tied to the embedding: not decayed


def test_param_groups_with_stub_model():
    model = Stub()
    decay, no_decay = param_groups(model, 0.1)
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert {id(p) for p in decay["params"]} == {id(b.weight) for b in model.blocks}
    assert len(decay["params"]) + len(no_decay["params"]) == len(model.parameters())
    assert any(p is model.tok.weight for p in no_decay["params"])
    assert any(p is model.pos.weight for p in no_decay["params"])
    AdamW([decay, no_decay])  # accepted as groups


def test_param_groups_decay_embeddings_like_nanogpt():
    """nanoGPT decays every tensor with ndim >= 2, embedding tables (and a tied head) included."""
    model = Stub()
    decay, no_decay = param_groups(model, 0.1, decay_embeddings=True)
    decayed = {id(p) for p in decay["params"]}
    assert decayed == {id(b.weight) for b in model.blocks} | {id(model.tok.weight), id(model.pos.weight)}
    assert all(p.data.ndim == 1 for p in no_decay["params"])
    assert len(decay["params"]) + len(no_decay["params"]) == len(model.parameters())
