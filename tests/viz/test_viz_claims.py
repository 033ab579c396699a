"""Figures say only what their data show: no title claims a pattern that the plotted model
contradicts, every heatmap has a colorbar and axis names, and the figures the audit found
misleading show what they should."""

from types import SimpleNamespace

import numpy as np
import pytest
from tiny_run import TINY

from scratchformer import viz
from scratchformer.models import GPT, GPTConfig
from scratchformer.nn import sinusoidal_table
from scratchformer.viz import claims


def _texts(fig) -> str:
    """Every title in the figure (suptitle and each panel's), one string."""
    parts = [fig._suptitle.get_text()] if fig._suptitle is not None else []
    return " | ".join(parts + [ax.get_title() for ax in fig.axes])


@pytest.fixture(scope="module")
def random_gpt():
    """A tiny untrained GPT: its learned positions are noise (nothing falls with distance)."""
    return GPT(
        GPTConfig(vocab_size=11, block_size=16, n_layer=2, n_head=2, n_embd=32, init="pytorch"), seed=0
    )


def _smooth_table(P=16, C=32):
    """Rows that change slowly with the position: similarity falls with distance."""
    return np.cumsum(np.random.default_rng(0).standard_normal((P, C)), axis=0)


def test_position_similarity_title_follows_the_data(random_gpt):
    noise = _texts(viz.position_similarity(viz.trace.position_table(random_gpt)))
    assert "falls with distance" not in noise and "similarity at distance 1: " in noise
    sinus = _texts(viz.position_similarity(sinusoidal_table(64, 32)))
    assert "not monotone (rises again at distance" in sinus and "falls with distance" not in sinus
    angle = np.arange(16) * np.pi / 16  # positions on a half circle: cosine = cos(distance * pi / 16)
    assert "falls with distance" in _texts(
        viz.position_similarity(np.stack([np.cos(angle), np.sin(angle)], axis=1))
    )


def test_distance_similarity_numbers_are_the_curve():
    m = np.array([1.0, 0.97, 0.9, 0.8, 0.85, 0.7, 0.6, 0.5])
    text = claims.distance_similarity(m)
    assert (
        text.startswith("similarity at distance 1: 0.97, at 6: 0.60") and "rises again at distance 4" in text
    )
    assert claims.distance_similarity([1, 0.02, -0.03, 0.01, 0.0]).endswith("about 0 at every distance")


def test_learned_positions_title_follows_the_data(random_gpt):
    noise = _texts(viz.learned_positions(viz.trace.position_table(random_gpt)))
    assert "no smooth structure" in noise and "look alike" not in noise.replace("no more alike", "")
    assert "nearby positions look alike" in _texts(viz.learned_positions(_smooth_table()))


def test_embedding_pca_title_follows_the_data(random_gpt):
    tok, pos = viz.trace.token_table(random_gpt), viz.trace.position_table(random_gpt)
    ids = np.array([0, 3, 4, 4, 1])
    scattered = _texts(viz.embedding_pca(tok, pos, ids, list("xabbc")))
    assert "scattered, no curve" in scattered and "trace a curve" not in scattered
    assert "they trace a curve" in _texts(
        viz.embedding_pca(tok, sinusoidal_table(16, 32), ids, list("xabbc"))
    )


def test_embedding_pca_shows_only_the_given_tokens(random_gpt):
    tok, pos = viz.trace.token_table(random_gpt), viz.trace.position_table(random_gpt)
    fig = viz.embedding_pca(tok, pos, np.array([0, 1, 2]), list("abc"), token_ids=[0, 1, 2])
    assert len(fig.axes[0].texts) == 3 and "(the task's)" in fig.axes[0].get_title()


def _trace(norms):
    """A stand-in Trace whose residual stream has the given mean token norms."""
    C = 4
    res = [np.full((1, 3, C), n / 2.0) for n in norms]  # |(n/2, n/2, n/2, n/2)| = n
    upd = [np.ones((1, 3, C))] * (len(norms) - 1)
    return SimpleNamespace(residual=res, attn_update=upd, ff_update=upd)


def test_residual_norms_title_follows_the_data(random_gpt):
    assert "grows" not in _texts(viz.residual_norms(_trace([1.36, 1.37, 1.38, 1.42, 1.44])))
    assert "changes by less than 10%" in _texts(viz.residual_norms(_trace([1.36, 1.37, 1.38, 1.42, 1.44])))
    assert "10.6 -> 29.3: grows at every block" in _texts(
        viz.residual_norms(_trace([10.6, 13.8, 18.2, 23.9, 29.3]))
    )
    assert "not monotone" in _texts(viz.residual_norms(_trace([10, 20, 15, 30])))
    tr = viz.trace.trace(
        random_gpt, np.array([0, 3, 4, 4, 1])
    )  # a real model: the title says what its stream does
    norms = [float(np.linalg.norm(r[0], axis=-1).mean()) for r in tr.residual]
    assert claims.residual_growth(norms) in _texts(viz.residual_norms(tr))


def test_attention_steps_without_a_mask_does_not_repeat_the_scores():
    rng = np.random.default_rng(0)
    q, k, v = rng.standard_normal((3, 5, 4))
    tokens = list("abcde")
    bidirectional = viz.attention_steps(q, k, v, tokens, causal=False, layer=1, head=2)
    causal = viz.attention_steps(q, k, v, tokens, causal=True)
    titles = [ax.get_title() for ax in bidirectional.axes if ax.images]
    assert "no mask" not in " ".join(titles) and len(titles) == 3 and len(causal.axes) == 8
    assert "layer 1, head 2" in _texts(bidirectional) and "no mask (bidirectional)" in _texts(bidirectional)


@pytest.mark.parametrize(
    "draw",
    [
        "attention_steps",
        "attention_grid",
        "classifier_attention",
        "causal_vs_bidirectional",
        "seq2seq_attention",
    ],
)
def test_every_heatmap_has_a_colorbar_and_axis_names(draw):
    rng = np.random.default_rng(0)
    tokens = list("abcd")
    maps = rng.dirichlet(np.ones(4), size=(2, 2, 4))  # (L, H, T, T)
    q, k, v = rng.standard_normal((3, 4, 4))
    fig = {
        "attention_steps": lambda: viz.attention_steps(q, k, v, tokens),
        "attention_grid": lambda: viz.attention_grid(maps, tokens),
        "classifier_attention": lambda: viz.classifier_attention([0.2, 0.8], ["a", "b"], maps, tokens),
        "causal_vs_bidirectional": lambda: viz.causal_vs_bidirectional(q, k, tokens),
        "seq2seq_attention": lambda: viz.seq2seq_attention(
            {"encoder": maps, "decoder": maps, "cross": maps}, tokens, tokens
        ),
    }[draw]()
    panels = [ax for ax in fig.axes if ax.images]
    colorbars = [ax for ax in fig.axes if not ax.images and ax.get_label() == "<colorbar>"]
    assert panels and colorbars
    assert any(ax.get_xlabel() for ax in panels) and any(ax.get_ylabel() for ax in panels)
    labels = " ".join(ax.get_xlabel() + " " + ax.get_ylabel() for ax in panels)
    assert "key" in labels and "query" in labels


def test_classifier_title_names_input_truth_and_accuracy():
    maps = np.full((1, 2, 3, 3), 1 / 3)
    text = _texts(
        viz.classifier_attention(
            [0.1, 0.2, 0.7], ["c0", "c1", "c2"], maps, ["2", "0", "2"], true_class=2, accuracy=0.995
        )
    )
    assert "input 2 0 2" in text and "predicted c2" in text and "true c2 (right)" in text and "99.5%" in text


def test_cell_text_is_dark_on_pale_cells():
    fig = viz.attention_steps(
        *np.zeros((3, 3, 2)), list("abc"), causal=False
    )  # every score 0: the pale middle
    scores = fig.axes[0]
    assert scores.texts and all(t.get_color() == "black" for t in scores.texts)


def test_dead_neurons_are_not_called_from_a_few_tokens(random_gpt):
    tr = viz.trace.trace(random_gpt, np.array([0, 3, 4, 4, 1]))
    assert "too few tokens" in _texts(viz.ff_activations(tr))
    more = [viz.trace.trace(random_gpt, np.random.default_rng(i).integers(0, 11, 16)) for i in range(15)]
    text = _texts(viz.ff_activations(tr, more=more))
    assert "on 245 tokens" in text and "too few tokens" not in text


def test_layernorm_figure_picks_an_unnormalised_input():
    rng = np.random.default_rng(0)
    calm, wild = rng.standard_normal((1, 5, 8)), 3 * rng.standard_normal((1, 5, 8)) + 5
    tr = SimpleNamespace(layernorms=[("0.attn_norm", calm, calm), ("1.attn_norm", wild, wild)])
    text = _texts(viz.layernorm_histograms(tr))
    assert "1.attn_norm input" in text and "normalised (before gain and bias)" in text
    assert "per token: mean -0.00" in text or "per token: mean 0.00" in text


def test_training_curves_leave_out_what_was_not_logged():
    rows = [{"step": s, "lr": 1e-3, "train_loss": 3.0 - s / 10, "grad_norm": 1.0} for s in range(5)]
    fig = viz.training_curves(rows)
    titles = [ax.get_title() for ax in fig.axes]
    assert len(titles) == 3 and "tokens / s" not in titles
    assert titles[0] == "loss (training only: no validation loss logged)"


def test_closeup_titles_are_computed_from_the_data():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 6, 8))
    assert "median |correlation| 1.00" in _texts(viz.ff_scatter(x, 2 * x + 1))
    assert "median |correlation| 1.00" not in _texts(viz.ff_scatter(x, rng.standard_normal((1, 6, 8))))
    assert "variance is 0.01 x the residual's" in _texts(viz.residual_variance(x, 0.1 * x, list("abcdef")))
    w = np.eye(3)[[0, 0, 1]]  # query 2 attends to key 1
    assert "query 2 (c): most on b" in _texts(viz.attention_bars(w, list("abc")))
    assert "5 tokens, 3 distinct ids" in _texts(viz.token_ids([4, 1, 1, 2, 4], list("xaayx")))


def test_compare_init_draws_the_runs_initial_weights(tmp_path, capsys):
    from scratchformer.cli.main import main
    from scratchformer.cli.viz import _initial_model
    from scratchformer.training.jobs import build_job, load_job

    run = tmp_path / "run"
    settings = [*TINY, "--max-steps", "3", "--seed", "7", "--workers", "1"]
    assert main(["train", *settings, "--out", str(run)]) == 0
    fresh, _ = build_job(
        "lines", {"n_layer": 1, "n_head": 2, "n_embd": 16}, {"seed": 7}
    )  # what training started from
    job = load_job(run)
    initial_model, source = _initial_model(run, job)
    assert source is None  # trained from scratch: the untrained model of its config and seed
    initial = initial_model.state_dict()
    for name, value in fresh.model.state_dict().items():
        np.testing.assert_array_equal(initial[name], value, err_msg=name)
    assert any(
        not np.array_equal(initial[n], v) for n, v in job.model.state_dict().items()
    )  # training moved them
    assert main(["viz", str(run), "--compare-init", "--out", str(tmp_path / "figs")]) == 0
    written = {p.stem for p in (tmp_path / "figs").glob("*.png")}
    assert {"attention_grid_init", "embedding_pca_init", "residual_norms_init"} <= written
    assert main(["viz", "--bert", "--text", "a", "--compare-init"]) == 2
    assert "--compare-init needs a run directory" in capsys.readouterr().err
