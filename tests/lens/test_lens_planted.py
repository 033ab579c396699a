"""Every lens check can fail: plant one realistic bug at a time in an analysis (by monkeypatching
one of its helpers) and watch the check the analysis prints say FAILED; without the bug it
says ok. The bugs are the ones found in the lens and in other interpretability libraries
(TransformerLens #1076's norm statistics, nnsight #143's patch that copies nothing) and more."""

from __future__ import annotations

import numpy as np
import pytest

from scratchformer.lens import analyses as A
from scratchformer.models import GPT, GPTConfig
from scratchformer.models.seq2seq import Seq2SeqConfig, Seq2SeqTransformer

IDS = np.array([[1, 4, 2, 7, 3, 5, 4, 2]])
CORRUPT = IDS.copy()
CORRUPT[0, 3] = 9  # the inputs differ at position 3 only


def _gpt(dtype="float64"):
    model = GPT(
        GPTConfig(vocab_size=11, block_size=8, n_layer=2, n_head=3, n_embd=12, dtype=dtype, init="pytorch"),
        seed=0,
    )
    rng = np.random.default_rng(1)
    for p in model.parameters():  # norms' gains and shifts away from 1 and 0, so a bug in them shows
        p.data += (0.3 * rng.standard_normal(p.shape)).astype(p.data.dtype)
    return model


def _seq2seq():
    return Seq2SeqTransformer(
        Seq2SeqConfig(src_vocab_size=9, tgt_vocab_size=9, n_layer=2, n_embd=8, n_head=2), seed=0
    ).to(np.float64)


SRC, TGT_IN, TGT_OUT = IDS[:, :5] % 9, IDS[:, 1:7] % 9, IDS[:, 2:8] % 9


# -- the analyses, each returning its result (with .check) ---------------------------------------
def run_lens(model):
    return A.logit_lens(model, (IDS,))


def run_attribution(model):
    return A.direct_logit_attribution(model, (IDS,), token=3, position=5)


def run_zero_ablation(model):
    return A.head_ablation(model, (IDS[:, :-1], IDS[:, 1:]))


def run_mean_ablation(model):
    return A.head_ablation(model, (IDS[:, :-1], IDS[:, 1:]), mode="mean")


def run_patching(model):
    return A.activation_patching(model, (IDS,), (CORRUPT,), A.logit_metric(-1, 3, 4))


def run_saliency(model):
    return A.saliency(model, (IDS,), A.logit_objective(-1, 3))


def run_ig(model):
    return A.integrated_gradients(model, (IDS,), A.logit_objective(-1, 3))


def run_scores(model):
    return A.head_scores(model, (IDS,))


def run_seq2seq_scores(model):
    return A.head_scores(model, (SRC, TGT_IN))


# -- the bugs -------------------------------------------------------------------------------------
def labels_reversed(label, heads, W, hs):
    parts = [(f"{label} H{h}", heads[h] @ W[:, h * hs : (h + 1) * hs].T) for h in range(heads.shape[0])]
    return [(name, part) for (name, _), (_, part) in zip(parts, parts[::-1])]


def wrong_out_columns(label, heads, W, hs):
    H = heads.shape[0]
    return [
        (f"{label} H{h}", heads[h] @ W[:, ((h + 1) % H) * hs : ((h + 1) % H + 1) * hs].T) for h in range(H)
    ]


def ablate_next_head(mode, clean, h):
    return A.__dict__["_real_ablation_hook"](mode, clean, (h + 1) % clean.shape[1])


def mean_over_heads(mode, clean, h):
    def ablate(x, name):
        x = x.copy()
        x[:, h] = clean.mean(axis=1)  # (B, T, hs): averaged over the heads, not the positions
        return x

    return ablate


def mean_over_batch_only(mode, clean, h):
    def ablate(x, name):
        x = x.copy()
        x[:, h] = clean.mean(axis=0)[h][None]  # (T, hs): the positions kept apart
        return x

    return ablate


def ablate_whole_layer(mode, clean, h):
    def ablate(x, name):
        return np.zeros_like(x)

    return ablate


def patch_next_position(source, index):
    def patch(x, name):
        x = x.copy()
        if name.endswith("resid_pre"):
            t = index[1]
            x[:, t] = source[:, min(t + 1, source.shape[1] - 1)]
        else:
            x[index] = source[index]
        return x

    return patch


def patch_nothing(source, index):
    return lambda x, name: x.copy()


def patch_next_head(source, index):
    def patch(x, name):
        x = x.copy()
        if name.endswith("head_out"):
            x[:, index[1]] = source[:, (index[1] + 1) % source.shape[1]]
        else:
            x[index] = source[index]
        return x

    return patch


def lens_reads_resid_mid(cache, prefix, n_layer):
    mids = [cache[f"{prefix}blocks.{i}.resid_mid"] for i in range(n_layer - 1)]
    return [cache[f"{prefix}blocks.0.resid_pre"]] + mids + [cache[f"{prefix}blocks.{n_layer - 1}.resid_post"]]


def lens_final_statistics(un, residuals):
    """TransformerLens #1076: every layer normalised by the final residual's std."""
    final = residuals[-1][0]
    std = np.sqrt(final.var(-1, keepdims=True) + un.norm.eps)
    out = []
    for r in residuals:
        x = r[0]
        h = (x - x.mean(-1, keepdims=True)) / std * un.norm.weight.data + un.norm.bias.data
        out.append(h @ un.W.T)
    return np.stack(out)


def lens_without_gain(un, residuals):
    out = []
    for r in residuals[:-1]:
        x = r[0]
        h = (x - x.mean(-1, keepdims=True)) / np.sqrt(
            x.var(-1, keepdims=True) + un.norm.eps
        ) + un.norm.bias.data
        out.append(h @ un.W.T)
    return np.stack(out + [un(residuals[-1][0])])


def gxi_wrong_tokens(gradient, embeddings):
    return (gradient * np.roll(embeddings, 1, axis=1)).sum(-1)


def gradient_reversed(model, inputs, objective, embed_name, replace=None):
    value, g, x = A.__dict__["_real_value_and_gradient"](model, inputs, objective, embed_name, replace)
    return value, g[:, ::-1].copy(), x


def left_riemann(steps):
    return np.linspace(0.0, 1.0, steps + 1), np.full(steps + 1, 1.0 / steps)


def previous_two_back(w):
    q = np.arange(2, w.shape[2])
    return w[:, :, q, q - 2].mean(axis=(0, 2))


def first_reads_last_key(w):
    return w[..., -1].mean(axis=(0, 2))


def same_includes_itself(w, ids):
    Tq, Tk = w.shape[2:]
    earlier = (ids[:, :, None] == ids[:, None, :]) & np.tril(np.ones((Tq, Tk), bool), 0)
    has = earlier.any(-1)
    return (w * earlier[:, None]).sum(-1).transpose(1, 0, 2)[:, has].mean(-1)


def diagonals_swapped(w):
    diagonal, anti = A.__dict__["_real_diagonal_scores"](w)
    return anti, diagonal


BUGS = {
    # name: (helper replaced, the bug, the analysis whose check must fail)
    "head labels reversed within a layer": ("_head_parts", labels_reversed, run_attribution),
    "head h paired with head h+1's out-projection columns": (
        "_head_parts",
        wrong_out_columns,
        run_attribution,
    ),
    "ablating head h+1 instead of h": ("_ablation_hook", ablate_next_head, run_zero_ablation),
    "mean ablation averaging over heads instead of positions": (
        "_ablation_hook",
        mean_over_heads,
        run_mean_ablation,
    ),
    "mean ablation averaging over the batch only": (
        "_ablation_hook",
        mean_over_batch_only,
        run_mean_ablation,
    ),
    "ablation zeroing every head of the layer": ("_ablation_hook", ablate_whole_layer, run_zero_ablation),
    "patching writes position t+1 into cell t": ("_patch_hook", patch_next_position, run_patching),
    "a patch that copies nothing": ("_patch_hook", patch_nothing, run_patching),
    "patching head h+1's output into head h": ("_patch_hook", patch_next_head, run_patching),
    "logit lens reading resid_mid before the last layer": ("_lens_residuals", lens_reads_resid_mid, run_lens),
    "logit lens with the final layer's norm statistics": ("_lens_logits", lens_final_statistics, run_lens),
    "logit lens without the norm's gain before the last layer": ("_lens_logits", lens_without_gain, run_lens),
    "gradient x input with the wrong tokens": ("_grad_x_input", gxi_wrong_tokens, run_saliency),
    "saliency gradient reversed over positions": ("_value_and_gradient", gradient_reversed, run_saliency),
    "integrated gradients by left Riemann weights that overcount": ("_quadrature", left_riemann, run_ig),
    "previous-token score reading two back": ("_previous_score", previous_two_back, run_scores),
    "first-token score reading the last key": ("_first_score", first_reads_last_key, run_scores),
    "same-token score counting the query itself": ("_same_score", same_includes_itself, run_scores),
    "cross attention's diagonal and anti-diagonal swapped": (
        "_diagonal_scores",
        diagonals_swapped,
        run_seq2seq_scores,
    ),
}


def _model_for(analysis, dtype="float64"):
    return _seq2seq() if analysis is run_seq2seq_scores else _gpt(dtype)


@pytest.mark.parametrize("name", list(BUGS))
def test_a_planted_bug_makes_the_printed_check_fail(monkeypatch, name):
    helper, bug, analysis = BUGS[name]
    real = analysis(_model_for(analysis))
    assert real.check.ok and str(real.check).endswith(" ok"), str(real.check)
    monkeypatch.setitem(A.__dict__, "_real" + helper, getattr(A, helper))
    monkeypatch.setattr(A, helper, bug)
    planted = analysis(_model_for(analysis))
    assert not planted.check.ok, f"{name}: {planted.check}"
    assert str(planted.check).endswith(" FAILED")


@pytest.mark.parametrize(
    "name",
    [
        "a patch that copies nothing",
        "ablating head h+1 instead of h",
        "previous-token score reading two back",
        "gradient x input with the wrong tokens",
        "logit lens with the final layer's norm statistics",
    ],
)
def test_planted_bugs_fail_in_float32_too(monkeypatch, name):
    helper, bug, analysis = BUGS[name]
    assert analysis(_gpt("float32")).check.ok
    monkeypatch.setitem(A.__dict__, "_real" + helper, getattr(A, helper))
    monkeypatch.setattr(A, helper, bug)
    assert not analysis(_gpt("float32")).check.ok


def test_the_planted_bugs_change_the_result_they_are_planted_in(monkeypatch):
    """A bug the check flags is a bug in the numbers shown, not only in the check's path."""
    model = _gpt()
    before = run_zero_ablation(model).change.copy()
    monkeypatch.setitem(A.__dict__, "_real_ablation_hook", A._ablation_hook)
    monkeypatch.setattr(A, "_ablation_hook", ablate_next_head)
    assert not np.allclose(run_zero_ablation(model).change, before)


def test_seq2seq_patching_covers_the_encoder_and_every_attention(monkeypatch):
    model = _seq2seq()
    corrupt_src = SRC.copy()
    corrupt_src[0, 1] = (SRC[0, 1] + 1) % 9
    metric = A.logit_metric(-1, 3, 4)
    p = A.activation_patching(model, (SRC, TGT_IN), (corrupt_src, TGT_IN), metric)
    assert p.check.ok and p.defined
    assert p.encoder_residual.shape == (2, 5) and p.residual.shape == (2, 6)
    assert p.head_labels == ["enc L0", "enc L1", "dec L0", "cross L0", "dec L1", "cross L1"]
    assert p.encoder_residual[0, 1] == pytest.approx(1.0, abs=1e-12)  # all that differs enters there
    assert np.all(p.residual[0] == 0.0)  # the decoder's own input is the same in both runs
    monkeypatch.setattr(A, "_patch_hook", patch_nothing)
    assert not A.activation_patching(model, (SRC, TGT_IN), (corrupt_src, TGT_IN), metric).check.ok


def test_patching_the_same_input_is_undefined_not_nan_ok():
    p = A.activation_patching(_gpt(), (IDS,), (IDS,), A.logit_metric(-1, 3, 4))
    assert not p.defined and np.isnan(p.residual).all()
    assert p.check.ok and "undefined" in str(p.check)


def test_a_score_that_goes_missing_fails_the_check(monkeypatch):
    monkeypatch.setattr(A, "_previous_score", lambda w: None)  # the previous-token score never computed
    assert not run_scores(_gpt()).check.ok


def test_a_head_left_out_of_the_ablation_fails_the_check(monkeypatch):
    real = A.attentions

    class OneHeadFewer:  # a loop that stops one head short in every layer
        def __init__(self, attn):
            self.attn, self.n_head = attn, attn.n_head - 1

        def __getattr__(self, name):
            return getattr(self.attn, name)

    monkeypatch.setattr(
        A, "attentions", lambda model: [(p, lab, OneHeadFewer(a)) for p, lab, a in real(model)]
    )
    table = run_zero_ablation(_gpt())
    assert table.change.shape == (2, 2)  # 3 heads per layer
    assert not table.check.ok


def test_a_position_or_head_left_out_of_patching_fails_the_check(monkeypatch):
    real = A.attentions

    class OneHeadFewer:
        def __init__(self, attn):
            self.attn, self.n_head = attn, attn.n_head - 1

        def __getattr__(self, name):
            return getattr(self.attn, name)

    monkeypatch.setattr(
        A, "attentions", lambda model: [(p, lab, OneHeadFewer(a)) for p, lab, a in real(model)]
    )
    assert not run_patching(_gpt()).check.ok


def test_a_flag_that_is_not_true_or_false_and_a_table_that_is_not_numbers_fail_the_checks():
    """Two mutants the mutation run found (docs/mutants.md): patching's `defined` made None (None
    != False held), and an ablation table of Python objects with the right values."""
    from scratchformer.lens.witnesses import check_ablation, check_patching

    model = _gpt()
    metric = A.logit_metric(-1, 3, 4)
    patching = run_patching(model)
    assert patching.check.ok and patching.defined is True
    for flag, value in (("defined", None), ("small", 0)):
        wrong = A.Patching(**{**vars(patching), flag: value})
        assert not check_patching(model, (IDS,), (CORRUPT,), metric, wrong).ok
    ablation = run_zero_ablation(model)
    assert ablation.check.ok
    ablation.change = ablation.change.astype(object)
    loss = (IDS[:, :-1], IDS[:, 1:])
    assert not check_ablation(model, loss, A.loss_metric, "zero", "all", ablation).ok
