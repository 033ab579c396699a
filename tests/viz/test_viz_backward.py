"""The backward walk-through shows the library's own arrays, checks each step on its own, and a
wrong backward in one layer turns that step red and no other."""

import copy

import numpy as np
import pytest

from scratchformer.data.tasks import BOS, EOS, PAD, VOCAB_SIZE, make_task
from scratchformer.models import GPT, ClassifierConfig, GPTConfig, Seq2SeqConfig, Seq2SeqTransformer, TransformerClassifier
from scratchformer.nn import FeedForward, LayerNorm, MultiHeadAttention
from scratchformer.ops.loss import cross_entropy_backward, cross_entropy_forward
from scratchformer.viz import backward_steps, backward_walkthrough

IDS = np.random.default_rng(0).integers(0, 11, (2, 6))
TARGETS = np.random.default_rng(1).integers(0, 11, (2, 6))


def _gpt(tie=True):
    return GPT(GPTConfig(vocab_size=11, block_size=8, n_layer=2, n_head=2, n_embd=16, dropout=0.0,
                         tie_weights=tie), seed=0)


@pytest.mark.parametrize("tie", [True, False])
def test_every_step_agrees_on_a_correct_model(tie):
    steps = backward_steps(_gpt(tie), IDS, TARGETS)
    assert [s.name for s in steps] == ["loss", "lm_head", "ln_f", "h.1.ff", "h.1.ff_norm", "h.1.self_attn",
                                       "h.1.attn_norm", "h.0.ff", "h.0.ff_norm", "h.0.self_attn", "h.0.attn_norm",
                                       "wpe", "wte"]
    assert all(s.ok and s.checks for s in steps), [s.failures() for s in steps]
    assert all(s.where.startswith("scratchformer/") and ":" in s.where for s in steps)


def test_the_arrays_are_the_library_backward():
    model = _gpt(tie=False)
    steps = {s.name: s for s in backward_steps(model, IDS, TARGETS)}
    ref = copy.deepcopy(model).to(np.float64).train()
    ref.zero_grad()
    logits, _ = ref(IDS, TARGETS)
    ref.backward()
    for full, p in ref.named_parameters():  # what the steps added is, bit for bit, the library's .grad
        layer = next(name for name in steps if full.startswith(name + "."))
        np.testing.assert_array_equal(steps[layer].param_grads[full[len(layer) + 1:]], p.grad, err_msg=full)
    _, cache = cross_entropy_forward(logits, TARGETS, ignore_index=-1)
    np.testing.assert_array_equal(steps["loss"].grad_out, cross_entropy_backward(cache))
    for giver, taker in [("loss", "lm_head"), ("lm_head", "ln_f"), ("wpe", "wte")]:  # one step hands on to the next
        np.testing.assert_array_equal(steps[giver].grad_out, steps[taker].grad_in)


class _ScaledFeedForward(FeedForward):
    def backward(self, dy):
        return 1.01 * super().backward(dy)  # a planted bug: the input gradient 1% too large


class _WrongGainLayerNorm(LayerNorm):
    def backward(self, dy):
        self.weight.grad -= 0.01  # a planted bug in dweight only
        return super().backward(dy)


@pytest.mark.parametrize("where, bug", [("h.0.ff", _ScaledFeedForward), ("h.1.attn_norm", _WrongGainLayerNorm)])
def test_a_planted_bug_turns_that_step_red_and_no_other(where, bug, tmp_path):
    model = _gpt()
    block, layer = where.rsplit(".", 1)
    getattr(model.h[int(block.split(".")[1])], layer).__class__ = bug
    steps = backward_steps(model, IDS, TARGETS)
    assert [s.name for s in steps if not s.ok] == [where]
    fig = backward_walkthrough(steps, path=tmp_path / "backward.png")
    assert f"1 step(s) disagree with finite differences: {where}" in fig._suptitle.get_text()
    assert (tmp_path / "backward.png").stat().st_size > 5000


FIVE = [7, 23, 41, 58, 90]  # of the 96 entries of dx: (1 sequence, 6 positions, 16 wide)


class _FiveEntriesAttention(MultiHeadAttention):
    def backward(self, grad_output):
        dx, dcontext = super().backward(grad_output)
        dx = dx.copy()
        dx.reshape(-1)[FIVE] += 0.01 * np.abs(dx).max()  # a planted bug in 5 of 96 entries, not the largest
        return dx, dcontext


def test_a_bug_in_5_of_96_entries_turns_the_step_red(tmp_path):
    model = _gpt()
    model.h[1].self_attn.__class__ = _FiveEntriesAttention
    steps = {s.name: s for s in backward_steps(model, IDS[:1], TARGETS[:1])}
    attn = steps["h.1.self_attn"]
    assert attn.grad_out.size == 96 and attn.checked["dx"] == "all 96"
    assert int(np.argmax(np.abs(attn.grad_out))) not in FIVE  # the largest entry alone would have missed it
    wrong = [f for f in attn.failures() if f.startswith("dx")]
    assert len(wrong) == 5 and [s for s in steps if not steps[s].ok] == ["h.1.self_attn"]
    fig = backward_walkthrough(list(steps.values()), path=tmp_path / "b.png")
    assert "1 step(s) disagree with finite differences: h.1.self_attn" in fig._suptitle.get_text()


def test_the_figure_says_what_was_checked():
    steps = {s.name: s for s in backward_steps(_gpt(), IDS[:1], TARGETS[:1])}
    ff = steps["h.0.ff"]
    assert ff.checked["dx"] == "all 96"  # (1, 6, 16): small, every entry
    params = {k: v for k, v in ff.checked.items() if k != "dx"}
    big = {k: v for k, v in params.items() if v != f"all {ff.param_grads[k[1:]].size:,}"}
    assert big and all(v == f"64 random + 8 largest of {ff.param_grads[k[1:]].size:,}" for k, v in big.items())
    assert len(ff.checks) == 96 + sum(min(g.size, 72) if g.size > 256 else g.size for g in ff.param_grads.values())
    title = backward_walkthrough(list(steps.values()))._suptitle.get_text()
    assert f"at all {sum(len(s.checks) for s in steps.values()):,} entries checked" in title
    assert "every entry of an array of at most 256 entries, else 64 random + 8 largest" in title
    assert "<= 1e-06 x max(1, the array's largest |entry|)" in title


def test_the_largest_entry_of_a_sampled_array_is_always_checked():
    class _LargestWrong(FeedForward):
        def backward(self, dy):
            before = {n: p.grad.copy() for n, p in self.named_parameters()}
            dx = super().backward(dy)
            p = dict(self.named_parameters())["fc1.weight"]
            added = p.grad - before["fc1.weight"]
            p.grad.reshape(-1)[int(np.argmax(np.abs(added)))] *= 1.01  # one entry of 1,024: the largest
            return dx

    model = _gpt()
    model.h[0].ff.__class__ = _LargestWrong
    steps = {s.name: s for s in backward_steps(model, IDS[:1], TARGETS[:1])}
    assert [n for n, s in steps.items() if not s.ok] == ["h.0.ff"]
    assert steps["h.0.ff"].checked["dfc1.weight"] == "64 random + 8 largest of 1,024"


def test_classifier_and_seq2seq_steps_agree():
    clf = TransformerClassifier(ClassifierConfig(vocab_size=3, n_classes=3, max_len=8, n_layer=1, n_head=2, n_embd=16,
                                                 dropout=0.0), seed=0)
    data = make_task("majority", 4, rng=0)
    steps = backward_steps(clf, data.x, data.y)
    assert all(s.ok for s in steps) and [s.name for s in steps][:2] == ["loss", "head"]
    s2s = Seq2SeqTransformer(Seq2SeqConfig(src_vocab_size=VOCAB_SIZE, tgt_vocab_size=VOCAB_SIZE, max_len=13, n_layer=1,
                                           n_head=2, n_embd=16, pad_id=PAD, bos_id=BOS, eos_id=EOS, dropout=0.0,
                                           share_embeddings=True, label_smoothing=0.1), seed=0)
    batch = make_task("reverse", 3, rng=0)
    steps = backward_steps(s2s, batch.src, batch.tgt_in, batch.tgt_out)
    names = [s.name for s in steps]
    assert all(s.ok for s in steps) and "decoder.0.cross_attn" in names and names[-1] == "src_emb"
