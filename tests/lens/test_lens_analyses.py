"""The lens analyses (scratchformer.lens.analyses): each one's own check, and exact facts that a
planted bug would break."""

from __future__ import annotations

import numpy as np
import pytest

from scratchformer.errors import ConfigError, DataError
from scratchformer.interop.bert import BertConfig, BertEncoder
from scratchformer.lens import run_with_hooks
from scratchformer.lens.analyses import (
    activation_patching,
    direct_logit_attribution,
    head_ablation,
    head_scores,
    integrated_gradients,
    logit_lens,
    logit_metric,
    logit_objective,
    loss_metric,
    loss_objective,
    saliency,
    similarity_objective,
)
from scratchformer.models import GPT, GPTConfig
from scratchformer.models.seq2seq import Seq2SeqConfig, Seq2SeqTransformer

IDS = np.array([[1, 4, 2, 7, 3, 5, 4]])


def _gpt(**kw):
    cfg = dict(vocab_size=11, block_size=8, n_layer=2, n_head=2, n_embd=16, dtype="float64", init="pytorch")
    return GPT(GPTConfig(**{**cfg, **kw}), seed=0)


def _seq2seq():
    return Seq2SeqTransformer(
        Seq2SeqConfig(src_vocab_size=9, tgt_vocab_size=9, n_layer=2, n_embd=8, n_head=2), seed=0
    ).to(np.float64)


def test_logit_lens_last_layer_is_the_model_and_earlier_layers_are_not():
    model = _gpt()
    lens = logit_lens(model, (IDS,), k=3)
    assert lens.check.ok and lens.check.error < 1e-13  # the probabilities: two softmaxes' rounding
    assert lens.layers == ["embed", "L0", "L1"] and lens.logits.shape == lens.probs.shape == (3, 7, 11)
    assert np.allclose(lens.probs.sum(-1), 1.0, rtol=0, atol=1e-14)
    assert np.array_equal(lens.logits[-1], model.eval()(IDS)[0][0])
    assert not np.allclose(lens.logits[0], lens.logits[-1])
    assert np.array_equal(lens.top_ids[-1, :, 0], lens.logits[-1].argmax(-1))
    assert np.all(np.diff(lens.top_probs, axis=-1) <= 0)
    assert logit_lens(_seq2seq(), (IDS[:, :4] % 9, IDS[:, :5] % 9)).check.ok


def test_direct_logit_attribution_parts_sum_to_the_logit():
    model = _gpt()
    dla = direct_logit_attribution(model, (IDS,), token=3, position=4)
    assert dla.check.ok and dla.check.error < 1e-12
    assert dla.labels[:4] == ["embed", "pos_embed", "L0 H0", "L0 H1"] and dla.labels[-1] == "L1 mlp"
    assert dla.logit == model.eval()(IDS)[0][0, 4, 3]
    assert direct_logit_attribution(_seq2seq(), (IDS[:, :4] % 9, IDS[:, :5] % 9), token=2).check.ok
    with pytest.raises(ConfigError, match="pre-norm"):
        direct_logit_attribution(_gpt(norm_first=False), (IDS,), token=3)


def test_zero_ablating_a_head_equals_zeroing_its_columns_of_the_out_projection():
    model = _gpt()
    inputs = (IDS[:, :-1], IDS[:, 1:])
    table = head_ablation(model, inputs)
    assert table.check.ok and table.change.shape == (2, 2) and table.labels == ["L0", "L1"]
    W = model.h[1].self_attn.out_proj.weight.data
    saved = W.copy()
    W[:, 8:] = 0  # head 1 of layer 1 (head size 8)
    model.eval()
    by_weights = float(model(*inputs)[1])
    W[...] = saved
    assert by_weights - table.baseline == pytest.approx(table.change[1, 1], abs=1e-12)
    mean = head_ablation(model, inputs, mode="mean")
    assert mean.check.ok and not np.allclose(mean.change, table.change)
    cross = head_ablation(_seq2seq(), (IDS[:, :4] % 9, IDS[:, :5] % 9, IDS[:, 1:6] % 9), which="cross")
    assert cross.labels == ["cross L0", "cross L1"]
    with pytest.raises(ConfigError, match="no cross attention"):
        head_ablation(model, inputs, which="cross")
    with pytest.raises(DataError, match="targets"):
        head_ablation(model, (IDS,))


def test_patching_restores_everything_and_positions_before_the_change_recover_nothing():
    model = _gpt()
    corrupt = IDS.copy()
    corrupt[0, 3] = 9  # the inputs differ at position 3 only
    metric = logit_metric(-1, 3, 4)
    p = activation_patching(model, (IDS,), (corrupt,), metric)
    assert p.check.ok and p.check.error == 0.0
    assert p.residual.shape == (2, 7) and p.heads.shape == (2, 2)
    # causal: the residual at positions 0..2 is the same in both runs
    assert np.all(p.residual[:, :3] == 0.0)
    assert p.residual[0, 3] == pytest.approx(1.0, abs=1e-12)  # block 0's input there is all that differs
    with pytest.raises(DataError, match="equal length"):
        activation_patching(model, (IDS,), (IDS[:, :5],), metric)


def test_saliency_matches_finite_differences_and_leaves_the_gradients_alone():
    model = _gpt(dropout=0.3)
    for p in model.parameters():
        p.grad[...] = 7.0
    s = saliency(model, (IDS,), logit_objective(-1, 3))
    assert all(np.all(p.grad == 7.0) for p in model.parameters())
    assert model.training and model.drop.p == 0.3  # mode and dropout restored
    eps, t, c = 1e-6, 2, 5

    def f(delta):
        def nudge(x, n):
            x = x.copy()
            x[0, t, c] += delta
            return x

        return run_with_hooks(model, IDS, hooks={"embed": nudge})[0][0, -1, 3]

    assert s.value == pytest.approx(f(0.0), abs=1e-13)
    assert (f(eps) - f(-eps)) / (2 * eps) == pytest.approx(s.gradient[0, t, c], abs=1e-8)
    assert np.allclose(s.grad_x_input, (s.gradient * s.embeddings).sum(-1))


def test_integrated_gradients_are_complete_for_logits_losses_and_sentence_similarity():
    model = _gpt()
    ig = integrated_gradients(model, (IDS,), logit_objective(-1, 3))
    assert ig.check.ok and ig.attributions.shape == (1, 7)
    assert integrated_gradients(model, (IDS[:, :-1], IDS[:, 1:]), loss_objective, steps=32).check.ok
    bad = integrated_gradients(model, (IDS,), logit_objective(-1, 3), steps=1)  # one trapezoid: too coarse
    assert bad.check.error > ig.check.error
    bert = BertEncoder(
        BertConfig(
            vocab_size=11, hidden_size=8, num_hidden_layers=2, num_attention_heads=2, intermediate_size=16
        ),
        dtype=np.float64,
    )
    other = np.random.default_rng(0).standard_normal(8)
    obj = similarity_objective(other)
    s = saliency(bert, (IDS,), obj)
    hidden = bert(IDS)
    a = hidden[0].mean(0)
    assert s.value == pytest.approx(a @ other / np.linalg.norm(a) / np.linalg.norm(other), abs=1e-14)
    assert integrated_gradients(bert, (IDS,), obj).check.ok


def test_head_scores_of_uniform_causal_attention():
    model = _gpt()
    for block in model.h:  # q = 0: every query attends uniformly to the keys it sees
        block.self_attn.in_proj_weight.data[:16] = 0
        block.self_attn.in_proj_bias.data[:16] = 0
    hs = head_scores(model, (IDS,))
    T = IDS.shape[1]
    assert hs.check.ok
    assert np.allclose(hs.scores["first"], np.mean(1 / np.arange(1, T + 1)))
    assert np.allclose(hs.scores["previous"], np.mean(1 / np.arange(2, T + 1)))
    assert np.allclose(hs.scores["same"], 1 / 7)  # token 4 at position 6 repeats position 1
    assert np.isnan(hs.scores["diagonal"]).all()
    s2 = head_scores(_seq2seq(), (IDS[:, :4] % 9, IDS[:, :5] % 9))
    assert not np.isnan(s2.scores["anti_diagonal"][3]).any() and np.isnan(s2.scores["anti_diagonal"][0]).all()


def test_loss_metric_needs_targets():
    with pytest.raises(DataError, match="targets"):
        loss_metric((np.zeros((1, 2, 3)), None))


def test_every_analysis_draws_a_figure(tmp_path):
    from scratchformer.viz import lens as figures

    model, tokens = _gpt(), [str(i) for i in IDS[0]]
    corrupt = IDS.copy()
    corrupt[0, 3] = 9
    drawn = [
        figures.logit_lens_figure(logit_lens(model, (IDS,)), tokens, str, path=tmp_path / "lens.png"),
        figures.attribution_figure(direct_logit_attribution(model, (IDS,), token=3), "3"),
        figures.ablation_figure(head_ablation(model, (IDS[:, :-1], IDS[:, 1:]))),
        figures.patching_figure(
            activation_patching(model, (IDS,), (corrupt,), logit_metric(-1, 3, 4)), tokens
        ),
        figures.saliency_figure(
            tokens, {"grad x input": saliency(model, (IDS,), logit_objective(-1, 3)).grad_x_input[0]}
        ),
        figures.head_scores_figure(head_scores(_seq2seq(), (IDS[:, :4] % 9, IDS[:, :5] % 9))),
    ]
    assert all(len(fig.axes) >= 1 for fig in drawn)
    assert (tmp_path / "lens.png").stat().st_size > 1000


def test_one_sequence_analyses_refuse_a_batch_in_one_line():
    model, batch = _gpt(), np.concatenate([IDS, IDS[:, ::-1]])
    for call in (
        lambda: logit_lens(model, (batch,)),
        lambda: direct_logit_attribution(model, (batch,), token=3),
        lambda: saliency(model, (batch,), logit_objective(-1, 3)),
        lambda: head_ablation(model, (batch,), metric=logit_metric(-1, 3)),
    ):
        with pytest.raises(DataError, match="got a batch of 2: call it once per sequence") as e:
            call()
        assert len(str(e.value).splitlines()) == 1
    # the analyses that average over the batch use every sequence
    table = head_ablation(model, (batch[:, :-1], batch[:, 1:]))
    assert table.check.ok and not np.allclose(
        table.change, head_ablation(model, (IDS[:, :-1], IDS[:, 1:])).change
    )


def test_integrated_gradients_baselines_and_bounded_steps():
    from scratchformer.lens import mean_token_embedding, token_embeddings

    model = _gpt()
    objective = logit_objective(-1, 3)
    mean = mean_token_embedding(model, (IDS,), 11)
    assert np.allclose(mean, model.wte.weight.data.mean(axis=0), atol=1e-15)
    other = IDS[:, ::-1].copy()
    text = token_embeddings(model, (other,))
    assert np.array_equal(text, model.wte.weight.data[other])
    for baseline in (None, "zero", mean, text):
        ig = integrated_gradients(model, (IDS,), objective, baseline=baseline)
        assert ig.check.ok, ig.check
    x0 = integrated_gradients(model, (IDS,), objective, baseline=text)
    assert x0.baseline_value == pytest.approx(model.eval()(other)[0][0, -1, 3], abs=1e-12)
    for steps in (0, 4097, 2.5, True):
        with pytest.raises(ConfigError, match=r"\[1, 4096\]"):
            integrated_gradients(model, (IDS,), objective, steps=steps)
    with pytest.raises(DataError, match="does not fit"):
        integrated_gradients(model, (IDS,), objective, baseline=np.zeros(5))
    with pytest.raises(ConfigError, match="baseline"):
        integrated_gradients(model, (IDS,), objective, baseline="ones")


@pytest.mark.parametrize("positional", ["alibi", "rope"])
def test_the_default_baseline_keeps_integrated_gradients_complete_without_a_position_table(positional):
    """From zero embeddings a model with positions inside attention feeds its first norm a * x,
    whose x / rms jumps near a = 0: 32 nodes miss it and the completeness check says so. The
    default start there is the mean token embedding, which the check passes; a model with a
    position table keeps zero embeddings (the lens CLI and the report both take this default)."""
    from scratchformer.lens import baseline_embeddings, default_baseline_kind, mean_token_embedding

    model, objective = _gpt(positional=positional), logit_objective(-1, 3)
    assert not integrated_gradients(model, (IDS,), objective).check.ok  # zero embeddings: the check fails
    assert default_baseline_kind(model) == "mean"
    start = baseline_embeddings(model, (IDS,))
    assert np.array_equal(start, mean_token_embedding(model, (IDS,), 11))
    assert integrated_gradients(model, (IDS,), objective, baseline=start).check.ok
    assert default_baseline_kind(_gpt()) == "zero" and baseline_embeddings(_gpt(), (IDS,)) is None
    with pytest.raises(ConfigError, match="'zero' or 'mean'"):
        baseline_embeddings(model, (IDS,), "ones")


def test_gauss_legendre_beats_the_trapezoid_at_the_same_number_of_gradients():
    from scratchformer.lens import analyses

    model = _gpt()
    gl = integrated_gradients(model, (IDS,), logit_objective(-1, 3), steps=4).check.error
    nodes = np.linspace(0, 1, 4)
    weights = np.array([1, 2, 2, 1]) / 6.0  # the trapezoid on the same 4 gradients
    trapezoid = analyses._quadrature
    try:
        analyses._quadrature = lambda steps: (nodes, weights)
        trap = integrated_gradients(model, (IDS,), logit_objective(-1, 3), steps=4).check.error
    finally:
        analyses._quadrature = trapezoid
    assert gl < trap / 10


def test_a_check_with_nothing_to_compare_is_undefined_and_not_ok():
    from scratchformer.lens import Check

    c = Check("x", "something", float("nan"), 1e-9)
    assert not c.ok and "error undefined" in str(c) and str(c).endswith("FAILED")
    assert not Check("x", "y", float("inf"), 1e-9).ok


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda m: logit_lens(m, (IDS,), k=0), r"k must be an integer in \[1, 11\]"),
        (lambda m: logit_lens(m, (IDS,), k=12), r"k must be an integer in \[1, 11\]"),
        (lambda m: direct_logit_attribution(m, (IDS,), token=11), r"token must be an integer in \[-11, 10\]"),
        (
            lambda m: direct_logit_attribution(m, (IDS,), token=3, position=7),
            r"position must be an integer in \[-7, 6\]",
        ),
        (lambda m: saliency(m, (IDS,), logit_objective(9, 3)), "position must be"),
        (lambda m: activation_patching(m, (IDS,), (IDS,), logit_metric(-1, 3, 99)), "other must be"),
    ],
)
def test_out_of_range_arguments_are_typed_errors(call, message):
    with pytest.raises((ConfigError, DataError), match=message):
        call(_gpt())


def test_an_undefined_patching_figure_says_so():
    from scratchformer.viz import lens as figures

    p = activation_patching(_gpt(), (IDS,), (IDS,), logit_metric(-1, 3, 4))
    fig = figures.patching_figure(p, [str(i) for i in IDS[0]])
    assert "undefined" in fig._suptitle.get_text()
    assert all(t.get_text() != "nan" or not t.get_visible() for ax in fig.axes for t in ax.texts)
