"""The model's own record (scratchformer/record.py, nn.recording): every op of ops/ goes through the
one dispatch and is recorded with the module and hook point it ran in; every backward op declares
the forward it differentiates, and the record finds that forward's call; off, nothing is recorded."""

import inspect

import numpy as np
import pytest

from scratchformer import fast, nn, ops, record
from scratchformer.models import GPT, GPTConfig
from scratchformer.ops import pooling, sae

IDS = np.random.default_rng(0).integers(0, 11, (2, 6))
# ops/ helpers that build constants or numerics, not forward/backward math: they go through no dispatch
NOT_OPS = {
    "ACTIVATIONS",
    "IGNORE_INDEX",
    "erf",
    "alibi_bias",
    "alibi_slopes",
    "attention_forward",  # checks its arguments, then hands them to `attend`, the op
    "attention_mask",
    "causal_mask",
    "rope_tables",
    "rotate_half",
    "SAE_KINDS",
}


def _gpt(**kw):
    config = {"vocab_size": 11, "block_size": 8, "n_layer": 1, "n_head": 2, "n_embd": 16, "dropout": 0.0}
    return GPT(GPTConfig(**{**config, **kw}), seed=0).to(np.float64)


def _every_op():
    for module in (ops, pooling, sae):
        for name in module.__all__:
            if name not in NOT_OPS:
                yield name, getattr(module, name)


def test_every_op_of_ops_goes_through_the_dispatch_and_each_backward_declares_its_forward():
    names = []
    for name, op in _every_op():
        assert hasattr(op, "derivative") and inspect.unwrap(op) is not op, name  # dispatched by fast.lane
        if "backward" in name:
            d = op.derivative
            assert d is not None and d.of, name
            for forward in d.of:  # what it says it gives is the gradient of that forward's parameters
                params = inspect.signature(forward.__wrapped__).parameters
                assert set(d.grads) | set(d.into) <= set(params), (name, forward.__name__)
                assert set(d.into.values()) <= set(inspect.signature(op.__wrapped__).parameters), name
        names.append(name)
    assert {
        "attention_scores",
        "weighted_sum",
        "masked_softmax",
        "embedding_forward",
        "pool_backward",
    } <= set(names)


def test_the_record_holds_every_call_with_its_module_and_hook_point():
    model = _gpt(tie_weights=False)
    with fast.reference(), nn.recording(model) as taken:
        model(IDS, IDS)
        model.backward()
    assert record.ACTIVE is None
    calls = taken.calls
    first = calls[0]
    assert (first.kind, first.phase, first.fn, first.path) == ("module", "forward", model, "")
    by = {(c.name, c.path, c.phase): c for c in calls}
    fc1 = by[("linear_forward", "h.0.ff.fc1", "forward")]
    hook_points = {name for name, m in model.named_modules() if isinstance(m, nn.hooks.HookPoint)}
    assert fc1.hook in hook_points and fc1.hook.startswith("h.0.")  # the block's, after attention's
    assert fc1.hook not in (c.hook for c in calls[: calls.index(by[("attend", "h.0.self_attn", "forward")])])
    assert fc1.lane == "reference" and fc1.depth == 4
    assert fc1.values["x"].dtype == np.float64 and fc1.values["x"] is not fc1.arguments["x"]  # a copy
    attend = by[("attend", "h.0.self_attn", "forward")]
    assert attend.hook == "h.0.self_attn.hook_v"  # after q, k and v were read out
    assert [c.name for c in taken.inside(attend)] == [
        "attention_scores",
        "masked_softmax",
        "dropout_forward",
        "weighted_sum",
    ]
    layer = by[("LayerNorm", "ln_f", "backward")]  # what a module's backward added to each parameter
    assert set(layer.added) == {"weight", "bias"}
    np.testing.assert_array_equal(layer.added["weight"], model.ln_f.weight.grad)
    into = by[("linear_backward_into", "lm_head", "backward")]  # an op's `into`: what it added
    np.testing.assert_array_equal(into.added["weight"], model.lm_head.weight.grad)


def test_each_backward_finds_the_forward_call_it_differentiates():
    """By the arrays it was handed: a Linear's saved input and weight, a norm's xhat, attention's
    cache; the rotary backward of each of q and k by the tables (made once) and its gradient's shape."""
    model = _gpt(positional="rope", n_head=4, n_kv_head=2)
    with fast.reference(), nn.recording(model) as taken:
        model(IDS, IDS)
        model.backward()
    for call in (c for c in taken.calls if c.phase == "backward"):
        forward = taken.forward_of(call)
        if isinstance(call.fn, nn.hooks.HookPoint):  # the identity, forward and backward: no forward call
            assert forward is None and call.result is call.arguments["grad"]
        elif call.kind == "module":
            assert forward.fn is call.fn
        elif call.name == "dropout_backward":  # p = 0: handed no mask, the identity
            assert forward is None and call.result is call.arguments["dy"]
        else:
            assert forward is not None and forward.fn in call.fn.derivative.of, call.name
            assert forward.path == call.path, call.name  # in the same module
    rope = [c for c in taken.calls if c.name == "rope_backward"]
    shapes = [taken.forward_of(c).arguments["x"].shape for c in rope]
    assert [c.arguments["dy"].shape for c in rope] == shapes and shapes[0] != shapes[1]  # q: 4 heads, k: 2


def test_off_the_record_costs_nothing_but_its_flag(monkeypatch):
    def taken(*args, **kwargs):
        raise AssertionError("recorded while no record is taken")

    for method in ("op", "module_forward", "module_backward"):
        monkeypatch.setattr(record.Record, method, taken)
    model = _gpt()
    model(IDS, IDS)
    model.backward()  # nothing recorded: no call reached the Record
    with pytest.raises(ZeroDivisionError), nn.recording(model):
        raise ZeroDivisionError
    assert record.ACTIVE is None  # an error inside leaves it off


def test_taking_the_record_sets_no_hook():
    """Hook points tell the record they were passed: none is active, so a forward runs the same
    code with a record as without (a layer may take another path while a hook is set)."""
    model = _gpt()
    with nn.recording(model):
        model(IDS, IDS)
        assert not any(hp.active for _, hp in model.named_modules() if isinstance(hp, nn.hooks.HookPoint))


def test_a_detached_value_is_marked_in_the_record_and_handed_back_while_held():
    """ops.detach: a copy of its input; the record marks its call, `Record.held` gives what it
    returned, and while those values are held (`record.hold`) the same op hands them back in
    order, whatever it is given (a check's finite difference of the forward holds it fixed)."""
    x = np.arange(6.0).reshape(2, 3)
    out = ops.detach(x)
    assert out is not x and np.array_equal(out, x)
    with nn.recording(_gpt()) as taken:
        first, second = ops.detach(x), ops.detach(2 * x)
    detached = [c for c in taken.calls if c.detached]
    assert [c.name for c in detached] == ["detach", "detach"]
    held = taken.held(taken.calls[0]) + taken.held(taken.calls[1])
    assert held[0] is first and held[1] is second
    record.hold(held)
    try:
        assert np.array_equal(ops.detach(x + 100), x) and np.array_equal(ops.detach(x + 100), 2 * x)
        assert np.array_equal(ops.detach(x + 100), x + 100)  # nothing left held: its own value
    finally:
        record.hold(None)
    assert np.array_equal(ops.detach(x + 1), x + 1)
