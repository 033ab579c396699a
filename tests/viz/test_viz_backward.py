"""The backward walk-through is the model's own record of one backward: every backward op and
module, with the library's own arrays, each checked by finite differences of its own forward at
its recorded inputs. A wrong backward turns its step red (the steps around it disagree only through
it), in either lane; a new op or module appears with no change in viz/."""

import copy
import re
from pathlib import Path

import numpy as np
import pytest

from scratchformer import fast
from scratchformer.data.tasks import BOS, EOS, PAD, VOCAB_SIZE, make_task
from scratchformer.models import (
    GPT,
    ClassifierConfig,
    GPTConfig,
    Seq2SeqConfig,
    Seq2SeqTransformer,
    TransformerClassifier,
)
from scratchformer.models import classifier as classifier_module
from scratchformer.nn import FeedForward, LayerNorm, Linear, Module, MultiHeadAttention, Parameter
from scratchformer.nn import blocks as nn_blocks
from scratchformer.nn import feedforward as nn_feedforward
from scratchformer.nn import layers as nn_layers
from scratchformer.ops import attention as ops_attention
from scratchformer.ops import cross_entropy_forward
from scratchformer.ops import dropout as ops_dropout
from scratchformer.ops.loss import cross_entropy_backward
from scratchformer.viz import backward_steps, backward_walkthrough
from scratchformer.viz.backward import QUICK, THOROUGH, Sampling, backward_table

IDS = np.random.default_rng(0).integers(0, 11, (2, 6))
TARGETS = np.random.default_rng(1).integers(0, 11, (2, 6))
LIGHT = Sampling(64, 8, 2, 1)  # for the tests whose claim is not how many entries are checked


def _gpt(tie=True, **kw):
    config = {"vocab_size": 11, "block_size": 8, "n_layer": 2, "n_head": 2, "n_embd": 16, "dropout": 0.0}
    return GPT(GPTConfig(**{**config, "tie_weights": tie, **kw}), seed=0)


def _block_names(b: str) -> list[str]:
    """A GPT block's steps in the reference lane, in the order its backward runs them."""
    names = [b, f"{b}.ff"]
    for fc in ("fc2", "fc1"):
        names += [f"{b}.ff.{fc}", f"{b}.ff.{fc}.linear_backward_into", f"{b}.ff.{fc}.linear_backward"]
        if fc == "fc2":
            names.append(f"{b}.ff.activation_backward")
    names += [f"{b}.ff_norm", f"{b}.ff_norm.layernorm_backward", f"{b}.self_attn", f"{b}.self_attn.out_proj"]
    names += [f"{b}.self_attn.out_proj.linear_backward_into", f"{b}.self_attn.out_proj.linear_backward"]
    names += [f"{b}.self_attn.{op}_backward" for op in ("attention", "weighted_sum", "softmax", "scores")]
    names += [f"{b}.self_attn.linear_backward_into", f"{b}.self_attn.linear_backward"]
    return names + [f"{b}.attn_norm", f"{b}.attn_norm.layernorm_backward"]


@pytest.mark.parametrize("tie", [True, False])
def test_every_step_agrees_on_a_correct_model(tie):
    steps = backward_steps(_gpt(tie), IDS, TARGETS)
    head = ["GPT", "cross_entropy_backward", "lm_head", "lm_head.linear_backward_into"]
    head += ["lm_head.linear_backward", "ln_f", "ln_f.layernorm_backward"]
    tail = ["wpe", "wte", "wte.embedding_backward_into"]
    assert [s.name for s in steps] == head + _block_names("h.1") + _block_names("h.0") + tail
    assert all(s.ok and s.checks for s in steps), [s.failures() for s in steps]
    ops = [s for s in steps if s.kind == "op"]
    assert all(s.lane == "reference" and s.where.startswith("scratchformer/ops/") for s in ops)
    assert {s.where.split(":")[0] for s in steps if s.kind == "module"} == {
        "scratchformer/models/gpt.py",
        "scratchformer/nn/layers.py",
        "scratchformer/nn/blocks.py",
        "scratchformer/nn/feedforward.py",
        "scratchformer/nn/attention.py",
        "scratchformer/nn/positional.py",
    }
    by = {s.name: s for s in steps}
    for name, first in [
        ("h.1.self_attn.softmax_backward", "return y * (dy"),
        ("h.0.self_attn.scores_backward", "sqrt_d"),
    ]:
        file, line = by[name].where.split(":")  # each points at the first line of its formula
        assert Path(file).resolve().parts[-2:] == (
            "ops",
            "softmax.py" if "softmax" in name else "attention.py",
        )
        source = Path(fast.__file__).resolve().parents[1].joinpath(*Path(file).parts[1:]).read_text()
        assert source.splitlines()[int(line) - 1].strip().startswith(first)
    assert [s.depth for s in steps[:5]] == [0, 1, 1, 2, 3]  # nested as they ran
    assert by["h.1.self_attn.softmax_backward"].against.startswith("finite differences of masked_softmax")


def test_the_arrays_are_the_library_backward():
    model = _gpt(tie=False)
    steps = {s.name: s for s in backward_steps(model, IDS, TARGETS, sampling=LIGHT)}
    ref = copy.deepcopy(model).to(np.float64).train()
    ref.zero_grad()
    with fast.reference():  # the walk-through's lane
        logits, _ = ref(IDS, TARGETS)
        ref.backward()
    model_step = steps["GPT"]  # what the model's backward added is, bit for bit, the library's .grad
    for full, p in ref.named_parameters():
        np.testing.assert_array_equal(model_step.param_grads[full], p.grad, err_msg=full)
    np.testing.assert_array_equal(steps["h.1.ff.fc1"].param_grads["weight"], ref.h[1].ff.fc1.weight.grad)
    with fast.reference():
        _, cache = cross_entropy_forward(logits, TARGETS, ignore_index=-1)
        np.testing.assert_array_equal(steps["cross_entropy_backward"].grad_out, cross_entropy_backward(cache))
    a = "h.1.self_attn."
    for giver, taker in [
        ("cross_entropy_backward", "lm_head"),
        ("lm_head", "ln_f"),
        ("ln_f", "h.1"),
        (a + "weighted_sum_backward", a + "softmax_backward"),  # dropout off: dA goes on as it is
        (a + "softmax_backward", a + "scores_backward"),
        ("h.1.ff.fc2", "h.1.ff.activation_backward"),
    ]:
        np.testing.assert_array_equal(
            steps[giver].grad_out, steps[taker].grad_in, err_msg=f"{giver} -> {taker}"
        )
    B, T, C = steps[a + "out_proj"].grad_out.shape  # the heads' split: (B, T, C) -> (B, H, T, C / H)
    np.testing.assert_array_equal(
        steps[a + "attention_backward"].grad_in,
        steps[a + "out_proj"].grad_out.reshape(B, T, 2, C // 2).transpose(0, 2, 1, 3),
    )
    block = steps["h.1"]  # pre-norm: dx = the skip's gradient + what the attention's branch gave
    np.testing.assert_array_equal(
        block.grad_out,
        steps["h.1.ff"].grad_in + steps["h.1.ff_norm"].grad_out + steps["h.1.attn_norm"].grad_out,
    )


@pytest.mark.parametrize(
    "kw",
    [
        {"positional": "rope", "n_head": 4, "n_kv_head": 2},
        {"activation": "swiglu", "normalization": "rmsnorm"},
        {"norm_first": False},
        {"positional": "alibi"},
        {"attn_only": True, "normalization": "none"},
        {"dropout": 0.2},  # the masks drawn again for each finite difference
        {"subclass": True},
    ],
)
@pytest.mark.parametrize("lane", ["reference", "fast"])
def test_every_block_option_agrees_in_both_lanes(kw, lane):
    model = _gpt(n_layer=1, **{k: v for k, v in kw.items() if k != "subclass"})
    if kw.get("subclass"):
        model.__class__ = type("MyGPT", (GPT,), {})  # a user's own subclass of a model
    steps = backward_steps(model, IDS[:1], TARGETS[:1], sampling=LIGHT, lane=lane)
    assert all(s.ok for s in steps), [(s.name, s.failures()[:1]) for s in steps if not s.ok]
    names = [s.name for s in steps]
    if kw.get("positional") == "rope":
        assert names.count("h.0.self_attn.rope_backward") == 1 and "h.0.self_attn.rope_backward #2" in names
    if kw.get("activation") == "swiglu":
        assert "h.0.ff.swiglu_backward" in names and "h.0.attn_norm.rmsnorm_backward" in names
    if kw.get("attn_only"):
        assert not any(".ff" in n for n in names)
    if kw.get("dropout"):
        assert "h.0.attn_dropout.dropout_backward" in names  # p > 0: not the identity, checked
    if kw.get("subclass"):
        assert names[0] == "MyGPT"


def test_the_fast_lane_is_named_and_its_fused_attention_checked():
    steps = backward_steps(_gpt(), IDS, TARGETS, lane="fast", sampling=LIGHT)
    assert all(s.ok for s in steps), [(s.name, s.failures()[:1]) for s in steps if not s.ok]
    by = {s.name: s for s in steps}
    assert by["lm_head.linear_backward_into"].lane == "fast"
    assert by["lm_head.linear_backward_into"].lane_where.startswith("scratchformer/fast/linear.py:")
    fused = by["h.0.self_attn.attention_backward"]
    assert fused.lane_where.startswith("scratchformer/fast/attention.py:")
    assert not any(n.startswith("h.0.self_attn.softmax") for n in by)  # one op: nothing inside it
    assert set(fused.checked) == {"dq", "dk", "dv"} and fused.against.startswith(
        "finite differences of attend"
    )
    assert by["h.0.ff.activation_backward"].lane == "reference"  # no fast form
    assert by["h.0"].lane == "" and by["h.0"].kind == "module"
    with pytest.raises(Exception, match="lane must be one of"):
        backward_steps(_gpt(), IDS, TARGETS, lane="quick")


# -- planted bugs ---------------------------------------------------------------------------------
def _wrong_softmax(dy, y):
    return y * (dy - (dy * y).sum(axis=-1, keepdims=True)) * 1.01  # the Jacobian 1% too large


SCORES_BACKWARD, WEIGHTED_SUM_BACKWARD = ops_attention.scores_backward, ops_attention.weighted_sum_backward


def _wrong_dk(dscores, q, k):
    dq, _ = SCORES_BACKWARD.__wrapped__(dscores, q, k)
    return dq, dscores @ q  # dS q instead of dS^T q, and no 1 / sqrt(d): Tq == Tk, so the shape fits


def _wrong_dv_only(dout, a, v):
    da, dv = WEIGHTED_SUM_BACKWARD.__wrapped__(dout, a, v)
    return da, 1.01 * dv


def _wrong_activation(dy, dydx):
    return dy * dydx + 1e-3 * np.sign(dy)  # a small offset on every entry


ATTENTION = ["GPT", "h.0", "h.0.self_attn", "h.0.self_attn.attention_backward"]


@pytest.mark.parametrize(
    "owner, attr, bug, red, around",
    [
        (ops_attention, "softmax_backward", _wrong_softmax, "h.0.self_attn.softmax_backward", ATTENTION),
        (
            ops_attention,
            "weighted_sum_backward",
            _wrong_dv_only,
            "h.0.self_attn.weighted_sum_backward",
            ATTENTION,
        ),
        (ops_attention, "scores_backward", _wrong_dk, "h.0.self_attn.scores_backward", ATTENTION),
        (
            nn_feedforward,
            "activation_backward",
            _wrong_activation,
            "h.0.ff.activation_backward",
            ["GPT", "h.0", "h.0.ff"],
        ),
    ],
)
def test_a_planted_bug_in_one_op_turns_exactly_that_step_red(monkeypatch, owner, attr, bug, red, around):
    monkeypatch.setattr(owner, attr, fast.same_op(getattr(owner, attr), bug))
    steps = backward_steps(_gpt(n_layer=1), IDS[:1], TARGETS[:1], sampling=LIGHT)
    assert [s.name for s in steps if s.red] == [red]
    through = [s for s in steps if not s.ok and not s.red]  # what ran it may disagree, only through it
    assert {s.name for s in through} <= set(around) and all(s.through == [red] for s in through)
    text = backward_table(steps)
    assert text.splitlines()[-1].startswith(
        f"1 of {len(steps)} steps disagree with finite differences: {red}"
    )
    assert all(
        line.rstrip().endswith(" ok") or "disagree" in line.lower()
        for line in text.splitlines()[: len(steps)]
    )


class _ScaledFeedForward(FeedForward):
    def backward(self, dy):
        return 1.01 * super().backward(dy)  # the input gradient 1% too large


class _WrongGainLayerNorm(LayerNorm):
    def backward(self, dy):
        self.weight.grad -= 0.01  # a bug in what it adds to dweight only
        return super().backward(dy)


FIVE = [7, 23, 41, 58, 90]  # of the 96 entries of dx: (1 sequence, 6 positions, 16 wide)


class _FiveEntriesAttention(MultiHeadAttention):
    def backward(self, grad_output):
        dx, dcontext = super().backward(grad_output)
        dx = dx.copy()
        dx.reshape(-1)[FIVE] += 0.01 * np.abs(dx).max()  # in the layer's own code, after its ops
        return dx, dcontext


def _forgot_the_skip(dy, norm, sublayer, drop, norm_first):
    ds, dcontext = nn_blocks._sublayer_backward(sublayer, drop.backward(dy))
    return 0.5 * dy + norm.backward(ds), dcontext  # half the skip's gradient


@pytest.mark.parametrize(
    "where, bug, red",
    [
        ("h.0.ff", _ScaledFeedForward, "h.0.ff"),
        ("h.1.attn_norm", _WrongGainLayerNorm, "h.1.attn_norm"),
        ("h.1.self_attn", _FiveEntriesAttention, "h.1.self_attn"),
        ("residual_backward", _forgot_the_skip, "h.0"),
    ],
)
def test_a_bug_in_a_layers_own_code_turns_its_step_red(where, bug, red, monkeypatch):
    """A bug in a module's code between its ops (what it returns, what it adds to .grad, the
    residual sum of nn/blocks.py) turns that module's step red: its check is its own forward."""
    model = _gpt()
    if where == "residual_backward":
        monkeypatch.setattr(nn_blocks, "residual_backward", bug)
    else:
        block, layer = where.rsplit(".", 1)
        getattr(model.h[int(block.split(".")[1])], layer).__class__ = bug
    steps = backward_steps(model, IDS[:1], TARGETS[:1], sampling=LIGHT)
    assert [s.name for s in steps if s.red] == (["h.1", red] if red == "h.0" else [red])
    by = {s.name: s for s in steps}
    assert by["GPT"].through == [s.name for s in steps if s.red]
    if bug is _WrongGainLayerNorm:
        assert {re.split(r"[ \[]", f)[0] for f in by[red].failures()} == {"dweight"}
        assert by[red].where.startswith(str(Path(__file__)))  # the subclass's backward is where it ran


def test_a_wrong_line_between_two_ops_turns_the_module_step_red(monkeypatch):
    """Grouped-query attention sums each key/value head's group in the layer's own code, between
    attention_backward and the projection's backward: no op's bug, the layer's step sees it."""
    summed = MultiHeadAttention._sum_groups
    monkeypatch.setattr(MultiHeadAttention, "_sum_groups", lambda self, g: 1.01 * summed(self, g))
    steps = backward_steps(
        _gpt(n_layer=1, positional="rope", n_head=4, n_kv_head=2), IDS[:1], TARGETS[:1], sampling=LIGHT
    )
    layer = {s.name: s for s in steps}["h.0.self_attn"]
    assert [s.name for s in steps if s.red] == ["h.0.self_attn"]
    assert {re.split(r"[ \[]", f)[0] for f in layer.failures()} == {"dx", "din_proj_weight", "din_proj_bias"}


def test_a_bug_in_32_of_4096_entries_of_a_weight_gradient_turns_its_step_red(monkeypatch, tmp_path):
    """The default checks every entry of an op's array of up to 4,096: one wrong row of fc1's
    (128, 32) dweight, 32 entries, none of them the largest, is found (TEST-GAPS: the CLI once
    sampled 3 entries an array), and so is the same bug in a layer's own code (a module step:
    random directions cover every entry)."""
    model = _gpt(n_layer=1, n_embd=32, vocab_size=5)
    wrong = np.arange(77 * 32, 78 * 32)  # one row of fc1's (128, 32) dweight: 32 of its 4,096 entries
    into = nn_layers.linear_backward_into

    def off_in_32(dy, x, weight, weight_grad, bias_grad=None):
        dx = into.__wrapped__(dy, x, weight, weight_grad, bias_grad)
        if weight_grad.shape == (128, 32):  # fc1's
            weight_grad.reshape(-1)[wrong] += 1e-3 * np.abs(weight_grad).max()
        return dx

    monkeypatch.setattr(nn_layers, "linear_backward_into", fast.same_op(into, off_in_32))
    steps = backward_steps(model, IDS[:1] % 5, TARGETS[:1] % 5)
    by = {s.name: s for s in steps}
    op = by["h.0.ff.fc1.linear_backward_into"]
    assert op.checked["dweight"] == "all 4,096" and [s.name for s in steps if s.red] == [op.name]
    assert int(np.argmax(np.abs(op.param_grads["weight"]))) not in wrong  # the largest alone would miss it
    assert len([f for f in op.failures() if f.startswith("dweight")]) == 32
    fig = backward_walkthrough(steps, path=tmp_path / "b.png")
    assert f"1 step(s) disagree with finite differences: {op.name} (" in fig._suptitle.get_text()
    assert (tmp_path / "b.png").stat().st_size > 5000

    monkeypatch.undo()

    class _OffIn32(Linear):
        def backward(self, dy):
            dx = super().backward(dy)
            self.weight.grad.reshape(-1)[wrong] *= 1.001
            return dx

    model.h[0].ff.fc1.__class__ = _OffIn32  # a module's own parameter: entry by entry, as an op's
    steps = {s.name: s for s in backward_steps(model, IDS[:1] % 5, TARGETS[:1] % 5)}
    assert [n for n, s in steps.items() if s.red] == ["h.0.ff.fc1"] and steps["h.0.ff.fc1"].checked[
        "dweight"
    ] == "all 4,096"
    assert len(steps["h.0.ff.fc1"].failures()) == 32


def test_the_figure_and_the_table_say_what_was_checked():
    steps = {s.name: s for s in backward_steps(_gpt(n_layer=1), IDS[:1], TARGETS[:1], sampling=QUICK)}
    fc1 = steps["h.0.ff.fc1.linear_backward_into"]
    assert fc1.checked == {
        "dx": "3 random + the 1 largest of 96",
        "dweight": "3 random + the 1 largest of 1,024",
        "dbias": "3 random + the 1 largest of 64",
    }
    assert len(fc1.checks) == 12
    assert steps["h.0.ff"].checked["dx"] == "1 random direction (all 96 entries at once)"
    assert steps["h.0.ff"].checked["d(fc1.weight)"] == "1 random direction (all 1,024 entries at once)"
    assert steps["h.0.ff.fc1"].checked["dweight"] == "3 random + the 1 largest of 1,024"  # its own: entries
    thorough = {s.name: s for s in backward_steps(_gpt(n_layer=1), IDS[:1], TARGETS[:1])}
    assert thorough["h.0.ff.fc1.linear_backward_into"].checked["dweight"] == "all 1,024"
    assert len(thorough["h.0.ff"].checks) == 2 * 5  # dx, fc1's and fc2's weight and bias: 2 directions each
    title = backward_walkthrough(list(thorough.values()))._suptitle.get_text()
    assert f"at the {sum(len(s.checks) for s in thorough.values()):,} entries and directions checked" in title
    assert (
        THOROUGH.describe() in title
        and "4,096 entries, else 256 random + the 8 largest" in THOROUGH.describe()
    )
    assert "<= 1e-06 x (the array's largest |entry| + sum|forward(inputs) x g| / 100)" in title
    assert backward_table(list(thorough.values())).splitlines()[-2] == f"checked: {THOROUGH.describe()}"


def test_the_largest_entry_of_a_sampled_array_is_always_checked(monkeypatch):
    into = nn_layers.linear_backward_into

    def largest_wrong(dy, x, weight, weight_grad, bias_grad=None):
        before = weight_grad.copy()
        dx = into.__wrapped__(dy, x, weight, weight_grad, bias_grad)
        added = (weight_grad - before).reshape(-1)
        weight_grad.reshape(-1)[int(np.argmax(np.abs(added)))] += 0.01 * np.abs(added).max()  # 1 of 1,024
        return dx

    monkeypatch.setattr(nn_layers, "linear_backward_into", fast.same_op(into, largest_wrong))
    steps = backward_steps(_gpt(n_layer=1), IDS[:1], TARGETS[:1], sampling=QUICK)
    red = [s for s in steps if s.red]
    linears = ("lm_head", "h.0.self_attn.out_proj", "h.0.ff.fc1", "h.0.ff.fc2")  # each Linear's
    assert {s.name for s in red} == {f"{n}.linear_backward_into" for n in linears}
    assert all(f.startswith("dweight") for s in red for f in s.failures())


@pytest.mark.parametrize("pooling, lane", [("mean", "reference"), ("cls", "fast")])
def test_classifier_pooling_is_a_step_of_its_own(pooling, lane, monkeypatch):
    clf = TransformerClassifier(
        ClassifierConfig(
            vocab_size=3, n_classes=3, max_len=8, n_layer=1, n_head=2, n_embd=16, dropout=0.0, pooling=pooling
        ),
        seed=0,
    )
    data = make_task("majority", 1, rng=0)
    steps = backward_steps(clf, data.x, data.y, sampling=LIGHT, lane=lane)
    names = [s.name for s in steps]
    assert all(s.ok for s in steps) and names[:4] == [
        "TransformerClassifier",
        "cross_entropy_backward",
        "head",
        "head.linear_backward_into",
    ]
    pool = steps[names.index("pool_backward")]
    T = data.x.shape[1] + (pooling == "cls")
    assert pool.grad_in.shape == (1, 16) and pool.grad_out.shape == (1, T, 16)  # (1, C) -> (1, T, C)
    assert pool.where.startswith("scratchformer/ops/pooling.py:")
    np.testing.assert_array_equal(pool.grad_out, steps[names.index("pool_backward") + 1].grad_in)  # ln_f's
    wrong = fast.same_op(
        classifier_module.pool_backward,
        lambda dpooled, weights: np.ones_like(weights)[:, :, None] * dpooled[:, None, :],
    )
    monkeypatch.setattr(classifier_module, "pool_backward", wrong)
    steps = backward_steps(clf, data.x, data.y, sampling=LIGHT, lane=lane)
    assert [s.name for s in steps if s.red] == ["pool_backward"]


@pytest.mark.parametrize("lane", ["reference", "fast"])
def test_seq2seq_steps_agree(lane):
    s2s = Seq2SeqTransformer(
        Seq2SeqConfig(
            src_vocab_size=VOCAB_SIZE,
            tgt_vocab_size=VOCAB_SIZE,
            max_len=13,
            n_layer=1,
            n_head=2,
            n_embd=16,
            pad_id=PAD,
            bos_id=BOS,
            eos_id=EOS,
            dropout=0.0,
            share_embeddings=True,
            label_smoothing=0.1,
        ),
        seed=0,
    )
    batch = make_task("reverse", 1, rng=0)
    steps = backward_steps(s2s, batch.src, batch.tgt_in, batch.tgt_out, sampling=LIGHT, lane=lane)
    names = [s.name for s in steps]
    assert all(s.ok for s in steps), [(s.name, s.failures()[:1]) for s in steps if not s.ok]
    cross = "decoder.0.cross_attn.linear_backward_into"
    assert cross in names and f"{cross} #2" in names  # q from the decoder, k and v from the memory
    assert names[-2:] == ["src_emb", "src_emb.embedding_backward_into"]


# -- a new op and module, defined here: the walk-through needs no change -------------------------
@fast.lane()
def gain_forward(x: np.ndarray, gain: np.ndarray) -> np.ndarray:
    """y = x * gain, gain (C,) over x's last axis."""
    return x * gain


@fast.lane(derivative_of=gain_forward, grads=("x", "gain"))
def gain_backward(dy: np.ndarray, x: np.ndarray, gain: np.ndarray):
    """dx = dy * gain, dgain = sum of dy * x over every position."""
    return dy * gain, (dy * x).reshape(-1, x.shape[-1]).sum(axis=0)


class Gain(Module):
    def __init__(self, n):
        super().__init__()
        self.gain = Parameter(np.linspace(0.5, 1.5, n))

    def forward(self, x):
        self._save(x=x)
        return gain_forward(x, self.gain.data)

    def backward(self, dy):
        dx, dgain = gain_backward(dy, self._pop_cache()["x"], self.gain.data)
        self.gain.grad += dgain
        return dx


class GainGPT(GPT):
    """A GPT with a learned gain on its final hidden states: a subclass with a new module."""

    def __init__(self, config, seed=0):
        super().__init__(config, seed=seed)
        self.lm_head = _Then(Gain(config.n_embd), self.lm_head)  # the gain runs before the head


class _Then(Module):
    def __init__(self, first, second):
        super().__init__()
        self.first, self.second = first, second

    def forward(self, x):
        return self.second(self.first(x))

    def backward(self, dy):
        return self.first.backward(self.second.backward(dy))


def test_a_new_op_and_module_appear_with_no_change_in_viz(monkeypatch):
    model = GainGPT(
        GPTConfig(vocab_size=11, block_size=8, n_layer=1, n_head=2, n_embd=16, dropout=0.0, tie_weights=False)
    )
    steps = backward_steps(model, IDS[:1], TARGETS[:1], sampling=LIGHT)
    by = {s.name: s for s in steps}
    assert all(s.ok for s in steps), [(s.name, s.failures()[:1]) for s in steps if not s.ok]
    assert steps[0].op == "GainGPT"
    new = by["lm_head.first.gain_backward"]
    assert new.where.startswith(str(Path(__file__))) and set(new.checked) == {"dx", "dgain"}
    assert new.formula == "dx = dy * gain, dgain = sum of dy * x over every position."
    assert "lm_head.first" in by and by["lm_head.first"].kind == "module"

    right = gain_backward

    def wrong(dy, x, gain):
        dx, dgain = right.__wrapped__(dy, x, gain)
        return dx, 1.01 * dgain

    monkeypatch.setitem(globals(), "gain_backward", fast.same_op(right, wrong))
    steps = backward_steps(model, IDS[:1], TARGETS[:1], sampling=LIGHT)
    assert [s.name for s in steps if s.red] == ["lm_head.first.gain_backward"]


@pytest.mark.parametrize("auxk", [False, True], ids=["", "auxk"])
@pytest.mark.parametrize("kind", ["relu", "topk"])
def test_a_sparse_autoencoders_steps_agree_each_with_all_it_received(kind, auxk, monkeypatch):
    """ops/sae.py's backwards are steps like any op's: sae_backward receives gradients of three
    more of its forward's outputs (acts, and hidden and norms in its cache: `also=`), and
    sae_loss_backward's is of the loss, its forward's third output (`output=2`). With AuxK on
    (every feature dead), its residual is detached (`ops.detach`): the finite differences hold it
    at its recorded value, as the backward does, and without that hold the loss's step is red."""
    from scratchformer import record
    from scratchformer.models.sae import SAEConfig, SparseAutoencoder

    extra = {"k": 3} if kind == "topk" else {}
    config = SAEConfig(
        kind=kind, d_in=6, d_sae=10, l1_coefficient=0.5, aux_coefficient=0.3, dead_window=1, **extra
    )
    sae = SparseAutoencoder(config, seed=0)
    if auxk:
        sae.steps_since_fired.data[:] = 2
    x = np.random.default_rng(1).standard_normal((4, 6))
    steps = backward_steps(sae, x)
    assert all(s.ok for s in steps), backward_table(steps)
    names = {s.op for s in steps}
    assert {"sae_loss_backward", "mse_backward", "sae_backward", "decoder_norms_backward"} <= names
    assert ("l1_penalty_backward" in names) == (kind == "relu")
    assert ("auxk_backward" in names) == auxk
    if auxk:  # the hold is what makes it agree: the residual moves with x and the weights
        monkeypatch.setattr(record, "hold", lambda values: None)
        red = {s.op for s in backward_steps(sae, x) if s.red}
        assert "sae_loss_backward" in red, red
    inner = next(s for s in steps if s.op == "sae_backward")
    assert (inner.call.arguments["dacts"] is not None) == (kind == "relu")  # the penalty's gradient


def test_a_dropout_backward_that_hands_its_gradient_back_unmasked_is_a_red_step(monkeypatch):
    """Handing back the gradient received is the identity only for a forward that handed back its
    input (p = 0); with a mask drawn, the step stays and disagrees (a mutant found by
    scripts/mutants.py ops_backward: `return dy if mask is None or True else dy * mask`)."""
    unmasked = fast.same_op(ops_dropout.dropout_backward, lambda dy, mask: dy)
    monkeypatch.setattr(nn_layers, "dropout_backward", unmasked)
    monkeypatch.setattr(ops_attention, "dropout_backward", unmasked)
    steps = backward_steps(_gpt(n_layer=1, dropout=0.3), IDS, TARGETS, sampling=LIGHT)
    red = [s for s in steps if s.red]
    assert red and {s.op for s in red} == {"dropout_backward"}
