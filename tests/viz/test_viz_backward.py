"""The backward walk-through shows the library's own arrays, op by op (inside attention, the
residual sums, the pooling), checks each step on its own, and a wrong backward in one op turns
that step red and no other."""

import copy
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
from scratchformer.nn import FeedForward, LayerNorm, Linear, MultiHeadAttention
from scratchformer.nn import attention as nn_attention
from scratchformer.nn import blocks as nn_blocks
from scratchformer.nn import feedforward as nn_feedforward
from scratchformer.ops import attention as ops_attention
from scratchformer.ops.loss import cross_entropy_backward, cross_entropy_forward
from scratchformer.viz import backward_steps, backward_walkthrough
from scratchformer.viz.backward import backward_table

IDS = np.random.default_rng(0).integers(0, 11, (2, 6))
TARGETS = np.random.default_rng(1).integers(0, 11, (2, 6))


def _gpt(tie=True):
    return GPT(
        GPTConfig(vocab_size=11, block_size=8, n_layer=2, n_head=2, n_embd=16, dropout=0.0, tie_weights=tie),
        seed=0,
    )


def _gpt_names(n_layer):
    names = ["loss", "lm_head", "ln_f"]
    for i in reversed(range(n_layer)):
        b = f"h.{i}"
        names += [
            f"{b}.ff residual: split",
            f"{b}.ff.fc2",
            f"{b}.ff.act",
            f"{b}.ff.fc1",
            f"{b}.ff: wiring",
            f"{b}.ff_norm",
            f"{b}.ff residual: add",
            f"{b}.self_attn residual: split",
            f"{b}.self_attn.out_proj",
        ]
        names += [f"{b}.self_attn.{op}" for op in ("dv", "dA", "dS", "dq", "dk", "in_proj")]
        names += [f"{b}.self_attn: wiring", f"{b}.attn_norm", f"{b}.self_attn residual: add"]
    return names + ["wpe", "wte"]


@pytest.mark.parametrize("tie", [True, False])
def test_every_step_agrees_on_a_correct_model(tie):
    steps = backward_steps(_gpt(tie), IDS, TARGETS)
    assert [s.name for s in steps] == _gpt_names(2)
    assert all(s.ok and s.checks for s in steps), [s.failures() for s in steps]
    assert all(
        s.where.startswith("scratchformer/") and ":" in s.where and s.lane == "reference" for s in steps
    )
    where = {s.name.rpartition(".")[2]: s.where.split(":")[0] for s in steps}
    assert where["dS"] == "scratchformer/ops/softmax.py" and where["in_proj"] == "scratchformer/ops/linear.py"
    assert {where[op] for op in ("dv", "dA", "dq", "dk")} == {"scratchformer/ops/attention.py"}
    assert (
        where["lm_head"] == "scratchformer/ops/linear.py"
        and where["ln_f"] == "scratchformer/ops/layernorm.py"
    )
    assert (
        where["act"] == "scratchformer/ops/activations.py" and where["fc1"] == "scratchformer/ops/linear.py"
    )
    lines = {s.name.rpartition(".")[2]: int(s.where.split(":")[1]) for s in steps}
    source = Path(ops_attention.__file__).read_text().splitlines()  # each points at its own formula's line
    assert source[lines["dv"] - 1].strip().startswith("dv = ") and source[lines["dk"] - 1].strip().startswith(
        "dk = "
    )


def test_the_arrays_are_the_library_backward():
    model = _gpt(tie=False)
    steps = {s.name: s for s in backward_steps(model, IDS, TARGETS)}
    ref = copy.deepcopy(model).to(np.float64).train()
    ref.zero_grad()
    with fast.reference():  # the walk-through's lane
        logits, _ = ref(IDS, TARGETS)
        ref.backward()
    for full, p in ref.named_parameters():  # what the steps added is, bit for bit, the library's .grad
        if ".in_proj_" in full:
            layer, key = full.replace(".in_proj_", ".in_proj ").split(" ")
        else:
            layer = next(name for name in steps if full.startswith(name + "."))
            key = full[len(layer) + 1 :]
        np.testing.assert_array_equal(steps[layer].param_grads[key], p.grad, err_msg=full)
    with fast.reference():
        _, cache = cross_entropy_forward(logits, TARGETS, ignore_index=-1)
        np.testing.assert_array_equal(steps["loss"].grad_out, cross_entropy_backward(cache))
    a = "h.1.self_attn."
    for giver, taker in [
        ("loss", "lm_head"),
        ("lm_head", "ln_f"),
        ("wpe", "wte"),
        (a + "dA", a + "dS"),
        (a + "dS", a + "dq"),
        (a + "dS", a + "dk"),
        ("h.1.attn_norm", "h.1.self_attn residual: add"),
    ]:
        got = steps[taker].also_in if taker.endswith("add") else steps[taker].grad_in
        np.testing.assert_array_equal(steps[giver].grad_out, got, err_msg=f"{giver} -> {taker}")
    B, T, C = steps[a + "out_proj"].grad_out.shape  # the heads' split: (B, T, C) -> (B, H, T, C / H)
    np.testing.assert_array_equal(
        steps[a + "dv"].grad_in, steps[a + "out_proj"].grad_out.reshape(B, T, 2, C // 2).transpose(0, 2, 1, 3)
    )
    add = steps["h.1.ff residual: add"]  # dx = the skip's gradient + the branch's
    np.testing.assert_array_equal(add.grad_out, add.grad_in + steps["h.1.ff_norm"].grad_out)
    np.testing.assert_array_equal(add.grad_in, steps["h.1.ff residual: split"].grad_in)


def _gpt_variant(**kw):
    return GPT(
        GPTConfig(
            **{
                "vocab_size": 11,
                "block_size": 8,
                "n_layer": 1,
                "n_head": 2,
                "n_embd": 16,
                "dropout": 0.0,
                **kw,
            }
        ),
        seed=0,
    )


@pytest.mark.parametrize(
    "kw, extra",
    [
        ({"positional": "rope", "n_head": 4, "n_kv_head": 2}, ["rope (q)", "rope (k)"]),
        ({"activation": "swiglu", "normalization": "rmsnorm"}, []),
        ({"norm_first": False}, []),
        ({"positional": "alibi"}, []),
    ],
)
def test_rotary_grouped_post_norm_and_alibi_steps_agree(kw, extra):
    steps = backward_steps(_gpt_variant(**kw), IDS, TARGETS)
    assert all(s.ok for s in steps), [(s.name, s.failures()[:1]) for s in steps if not s.ok]
    names = [s.name for s in steps]
    assert all(f"h.0.self_attn.{e}" in names for e in extra)
    if kw.get("norm_first") is False:  # post-norm: the norm's backward first, then the split at z
        i = names.index("h.0.ff_norm")
        assert names[i + 1 : i + 3] == ["h.0.ff residual: split", "h.0.ff.fc2"]


def test_the_fast_lane_is_named_and_its_fused_attention_checked():
    steps = backward_steps(_gpt(), IDS, TARGETS, lane="fast")
    assert all(s.ok for s in steps), [(s.name, s.failures()[:1]) for s in steps if not s.ok]
    by = {s.name: s for s in steps}
    assert by["lm_head"].lane == "fast" and by["lm_head"].lane_where.startswith(
        "scratchformer/fast/linear.py:"
    )
    fused = [s for s in steps if s.name.startswith("h.0.self_attn.d")]
    assert [s.name for s in fused] == [
        "h.0.self_attn.dv (fused)",
        "h.0.self_attn.dq (fused)",
        "h.0.self_attn.dk (fused)",
    ]
    assert all(s.lane_where.startswith("scratchformer/fast/attention.py:") for s in fused)
    assert by["wte"].lane == "reference"  # no fast form
    with pytest.raises(Exception, match="lane must be one of"):
        backward_steps(_gpt(), IDS, TARGETS, lane="quick")


def _wrong_softmax(dy, y):
    return y * (dy - (dy * y).sum(axis=-1, keepdims=True)) * 1.01  # the Jacobian 1% too large


def _wrong_dk(dscores, q, k):
    dq, _ = scores_backward_reference(dscores, q, k)
    return dq, dscores @ q  # dS q instead of dS^T q, and no 1 / sqrt(d): Tq == Tk, so the shape fits


scores_backward_reference = ops_attention.scores_backward
weighted_sum_reference = ops_attention.weighted_sum_backward


def _wrong_dv_only(dout, a, v):
    da, dv = weighted_sum_reference(dout, a, v)
    return da, 1.01 * dv


def _forgot_the_skip(dy, norm, sublayer, drop, norm_first):
    ds, dcontext = nn_blocks._sublayer_backward(sublayer, drop.backward(dy))
    return 0.5 * dy + norm.backward(ds), dcontext  # half the skip's gradient


def _wrong_activation(dy, dydx):
    return dy * dydx + 1e-3 * np.sign(dy)  # a planted bug: a small offset on every entry


def _wrong_pool(dpooled, weights):
    return np.ones_like(weights)[:, :, None] * dpooled[:, None, :]  # every position the whole gradient


@pytest.mark.parametrize(
    "owner, attr, bug, red",
    [
        (ops_attention, "softmax_backward", _wrong_softmax, ["h.0.self_attn.dS"]),
        (ops_attention, "weighted_sum_backward", _wrong_dv_only, ["h.0.self_attn.dv"]),
        (ops_attention, "scores_backward", _wrong_dk, ["h.0.self_attn.dk"]),
        (
            nn_blocks,
            "residual_backward",
            _forgot_the_skip,
            ["h.0.ff residual: add", "h.0.self_attn residual: add"],
        ),
        (nn_feedforward, "activation_backward", _wrong_activation, ["h.0.ff.act"]),
    ],
)
def test_a_planted_bug_in_one_op_turns_exactly_that_step_red(monkeypatch, owner, attr, bug, red):
    monkeypatch.setattr(owner, attr, bug)
    steps = backward_steps(_gpt_variant(), IDS, TARGETS)
    assert [s.name for s in steps if not s.ok] == red
    text = backward_table(steps)
    assert f"{len(red)} of {len(steps)} steps disagree with finite differences: {', '.join(red)}" in text
    assert all(
        line.rstrip().endswith(" ok")
        for line in text.splitlines()[:-1]
        if not any(r + " " in line for r in red)
    )


class _ScaledFeedForward(FeedForward):
    def backward(self, dy):
        return 1.01 * super().backward(dy)  # a planted bug: the input gradient 1% too large


class _WrongGainLayerNorm(LayerNorm):
    def backward(self, dy):
        self.weight.grad -= 0.01  # a planted bug in dweight only
        return super().backward(dy)


FIVE = [7, 23, 41, 58, 90]  # of the 96 entries of dx: (1 sequence, 6 positions, 16 wide)


class _FiveEntriesAttention(MultiHeadAttention):
    def backward(self, grad_output):
        dx, dcontext = super().backward(grad_output)
        dx = dx.copy()
        dx.reshape(-1)[FIVE] += (
            0.01 * np.abs(dx).max()
        )  # a planted bug in the layer's own code, after its ops
        return dx, dcontext


@pytest.mark.parametrize(
    "where, bug, red",
    [
        ("h.0.ff", _ScaledFeedForward, "h.0.ff: wiring"),
        ("h.1.attn_norm", _WrongGainLayerNorm, "h.1.attn_norm"),
        ("h.1.self_attn", _FiveEntriesAttention, "h.1.self_attn: wiring"),
    ],
)
def test_a_planted_bug_turns_that_step_red_and_no_other(where, bug, red, tmp_path):
    """A bug in a layer's own code between its ops (what it returns, what it adds to .grad)
    turns its wiring step red; a bug in a layer shown whole, that layer's step."""
    model = _gpt()
    block, layer = where.rsplit(".", 1)
    getattr(model.h[int(block.split(".")[1])], layer).__class__ = bug
    steps = backward_steps(model, IDS, TARGETS)
    assert [s.name for s in steps if not s.ok] == [red]
    fig = backward_walkthrough(steps, path=tmp_path / "backward.png")
    assert f"1 step(s) disagree with finite differences: {red}" in fig._suptitle.get_text()
    assert (tmp_path / "backward.png").stat().st_size > 5000


def test_a_bug_in_5_of_96_entries_turns_the_step_red(monkeypatch, tmp_path):
    linear_backward_into, calls = nn_attention.linear_backward_into, []

    def five_entries_wrong(dy, x, weight, weight_grad, bias_grad=None):
        dx = linear_backward_into(dy, x, weight, weight_grad, bias_grad).copy()
        calls.append(1)
        if len(calls) == 1:  # the last block's, whose backward runs first
            dx.reshape(-1)[FIVE] += (
                0.01 * np.abs(dx).max()
            )  # a planted bug in 5 of 96 entries, not the largest
        return dx

    monkeypatch.setattr(nn_attention, "linear_backward_into", five_entries_wrong)
    steps = {s.name: s for s in backward_steps(_gpt(), IDS[:1], TARGETS[:1])}
    proj = steps["h.1.self_attn.in_proj"]
    assert proj.grad_out.size == 96 and proj.checked["dx"] == "all 96"
    assert int(np.argmax(np.abs(proj.grad_out))) not in FIVE  # the largest entry alone would have missed it
    wrong = [f for f in proj.failures() if f.startswith("dx")]
    assert len(wrong) == 5 and [s for s in steps if not steps[s].ok] == ["h.1.self_attn.in_proj"]
    fig = backward_walkthrough(list(steps.values()), path=tmp_path / "b.png")
    assert "1 step(s) disagree with finite differences: h.1.self_attn.in_proj" in fig._suptitle.get_text()


def test_the_figure_says_what_was_checked():
    steps = {s.name: s for s in backward_steps(_gpt(), IDS[:1], TARGETS[:1])}
    ff = steps["h.0.ff.fc1"]
    assert ff.checked["dx"] == "all 96"  # (1, 6, 16): small, every entry
    params = {k: v for k, v in ff.checked.items() if k != "dx"}
    big = {k: v for k, v in params.items() if v != f"all {ff.param_grads[k[1:]].size:,}"}
    assert big and all(
        v == f"64 random + 8 largest of {ff.param_grads[k[1:]].size:,}" for k, v in big.items()
    )
    assert len(ff.checks) == 96 + sum(
        min(g.size, 72) if g.size > 256 else g.size for g in ff.param_grads.values()
    )
    title = backward_walkthrough(list(steps.values()))._suptitle.get_text()
    assert f"at all {sum(len(s.checks) for s in steps.values()):,} entries checked" in title
    assert "every entry of an array of at most 256 entries, else 64 random + 8 largest" in title
    assert "<= 1e-06 x max(1, the array's largest |entry|)" in title


def test_the_largest_entry_of_a_sampled_array_is_always_checked():
    class _LargestWrong(Linear):
        def backward(self, dy):
            before = self.weight.grad.copy()
            dx = super().backward(dy)
            added = self.weight.grad - before
            self.weight.grad.reshape(-1)[int(np.argmax(np.abs(added)))] *= (
                1.01  # one entry of 1,024: the largest
            )
            return dx

    model = _gpt()
    model.h[0].ff.fc1.__class__ = _LargestWrong
    steps = {s.name: s for s in backward_steps(model, IDS[:1], TARGETS[:1])}
    assert [n for n, s in steps.items() if not s.ok] == ["h.0.ff.fc1"]
    assert steps["h.0.ff.fc1"].checked["dweight"] == "64 random + 8 largest of 1,024"


@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_classifier_pooling_is_a_step_of_its_own(pooling, monkeypatch):
    clf = TransformerClassifier(
        ClassifierConfig(
            vocab_size=3, n_classes=3, max_len=8, n_layer=1, n_head=2, n_embd=16, dropout=0.0, pooling=pooling
        ),
        seed=0,
    )
    data = make_task("majority", 1, rng=0)
    steps = backward_steps(clf, data.x, data.y)
    assert all(s.ok for s in steps) and [s.name for s in steps][:4] == ["loss", "head", "pool", "ln_f"]
    pool = steps[2]
    T = data.x.shape[1] + (pooling == "cls")
    assert pool.grad_in.shape == (1, 16) and pool.grad_out.shape == (1, T, 16)  # (1, C) -> (1, T, C)
    assert pool.where.startswith("scratchformer/ops/pooling.py:")
    np.testing.assert_array_equal(pool.grad_out, steps[3].grad_in)  # what ln_f received
    monkeypatch.setattr(classifier_module, "pool_backward", _wrong_pool)
    assert [s.name for s in backward_steps(clf, data.x, data.y) if not s.ok] == ["pool"]


def test_seq2seq_steps_agree():
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
    batch = make_task("reverse", 3, rng=0)
    steps = backward_steps(s2s, batch.src, batch.tgt_in, batch.tgt_out)
    names = [s.name for s in steps]
    assert all(s.ok for s in steps), [(s.name, s.failures()[:1]) for s in steps if not s.ok]
    assert "decoder.0.cross_attn.in_proj (q)" in names and "decoder.0.cross_attn.in_proj (k, v)" in names
    assert "decoder.0.cross_attn.dS" in names and names[-1] == "src_emb"


def test_a_wrong_line_between_two_ops_turns_the_wiring_step_red(monkeypatch):
    """Grouped-query attention sums each key/value head's group in the layer's own code, between
    dk, dv and in_proj: a bug there is no op's, and only the wiring step sees it."""
    summed = MultiHeadAttention._sum_groups
    monkeypatch.setattr(MultiHeadAttention, "_sum_groups", lambda self, g: 1.01 * summed(self, g))
    steps = backward_steps(_gpt_variant(positional="rope", n_head=4, n_kv_head=2), IDS, TARGETS)
    wiring = {s.name: s for s in steps}["h.0.self_attn: wiring"]
    assert [s.name for s in steps if not s.ok] == ["h.0.self_attn: wiring"]
    assert {f.split("[")[0] for f in wiring.failures()} == {"rope (k) received", "in_proj received"}
    assert all(", its ops " in f for f in wiring.failures())  # compared with what the ops gave
