"""lens/sae.py: SAELens's measures as SAELens defines them, the feature attribution whose check
fails on each planted bug (and holds without one), and the feature pages' numbers."""

import numpy as np
import pytest

from scratchformer.errors import ConfigError
from scratchformer.lens import sae as LS
from scratchformer.lens.parts import Unembedding
from scratchformer.models import GPT, GPTConfig
from scratchformer.models.sae import SAEConfig, SparseAutoencoder

V, T, C = 11, 8, 12


def _gpt():
    model = GPT(
        GPTConfig(vocab_size=V, block_size=T, n_layer=2, n_head=3, n_embd=C, dtype="float64", init="pytorch"),
        seed=0,
    )
    rng = np.random.default_rng(1)
    for p in model.parameters():  # norms' gains and shifts away from 1 and 0, so a bug in them shows
        p.data += 0.3 * rng.standard_normal(p.shape)
    return model.eval()


def _sae(kind, d_in=C, seed=0):
    sae = SparseAutoencoder(SAEConfig(kind=kind, d_in=d_in, d_sae=24, k=5, dtype="float64"), seed=seed)
    rng = np.random.default_rng(seed + 5)
    sae.W_dec.data[...] = rng.standard_normal(sae.W_dec.shape) * rng.uniform(0.3, 2.0, (24, 1))
    sae.W_enc.data[...] = sae.W_dec.data.T * 0.7
    sae.b_enc.data[...] = 0.1 * rng.standard_normal(24)
    sae.b_dec.data[...] = 0.2 * rng.standard_normal(d_in)
    return sae.eval()


def _data(seed=0, B=6):
    rng = np.random.default_rng(seed)
    x = rng.integers(1, V, (B, T))
    y = np.roll(x, -1, axis=1)
    y[:, -1] = -100
    y[0, 5:] = -100  # padding after a short item
    x[:, 0] = 0  # a special start token
    return x, y


def _identity_sae(width=C):
    """relu(x) - relu(-x) = x: a relu autoencoder that reconstructs exactly."""
    sae = SparseAutoencoder(SAEConfig(kind="relu", d_in=width, d_sae=2 * width, dtype="float64"))
    eye = np.eye(width)
    sae.W_enc.data[...] = np.concatenate([eye, -eye], axis=1)
    sae.W_dec.data[...] = np.concatenate([eye, -eye], axis=0)
    sae.b_enc.data[...] = 0
    sae.b_dec.data[...] = 0
    return sae.eval()


@pytest.mark.parametrize(
    "site,width", [("blocks.0.resid_post", C), ("blocks.1.attn.head_out", C), ("blocks.0.mlp.post", 4 * C)]
)
def test_a_perfect_reconstruction_scores_one_and_the_clean_loss_is_the_models(site, width):
    """Spliced back through the hook, an exact reconstruction changes nothing: also at a hook
    with heads, (B, H, T, hs) read as rows of H * hs."""
    model = _gpt()
    x, y = _data()
    m = LS.Measures()
    m.add(model, _identity_sae(width), site, x, y, special=(0,))
    r = m.result()
    assert r["mse"] < 1e-20 and r["explained_variance"] == pytest.approx(1.0)
    assert r["ce_loss_score"] == pytest.approx(1.0) and r["kl_div_score"] == pytest.approx(1.0)
    assert r["l2_ratio"] == pytest.approx(1.0) and r["ce_loss_with_ablation"] > r["ce_loss_without_sae"]
    counted = LS.counted_positions(x, y, (0,))
    assert r["positions"] == counted.sum()
    _, own = model(x, np.where(counted, y, -100))  # the model's own cross-entropy on the counted targets
    assert r["ce_loss_without_sae"] == pytest.approx(own, rel=1e-12)


def test_measures_over_batches_follow_saelens_definitions():
    """Two batches added: L0, L1, MSE, explained variance (E||x - x_hat||^2 over the total
    variance E||x||^2 - ||E x||^2), L2 ratio and dead/dense as SAELens writes them, recomputed
    here over all the counted rows at once."""
    model, site, sae = _gpt(), "blocks.1.resid_mid", _sae("topk")
    sae.b_enc.data[3] = -1e6  # a feature that never fires
    m, rows = LS.Measures(), []
    for seed in (0, 1):
        x, y = _data(seed)
        m.add(model, sae, site, x, y, special=(0,))
        rows.append(LS.site_activations(model, (x,), site)[LS.counted_positions(x, y, (0,))])
    xs = np.concatenate(rows)
    acts = sae.encode(xs)
    x_hat = sae.decode(acts)
    r = m.result()
    assert r["l0"] == pytest.approx((acts > 0).sum(1).mean())
    assert r["l1"] == pytest.approx(acts.sum(1).mean())
    assert r["mse"] == pytest.approx(((xs - x_hat) ** 2).sum(1).mean())
    variance = ((xs - xs.mean(0)) ** 2).sum(1).mean()
    assert r["explained_variance"] == pytest.approx(1 - r["mse"] / variance)
    assert r["l2_ratio"] == pytest.approx((np.linalg.norm(x_hat, axis=1) / np.linalg.norm(xs, axis=1)).mean())
    density = (acts > 0).mean(0)
    assert r["dead_in_eval"] == (density == 0).sum() >= 1
    assert r["dense_in_eval"] == (density >= 1e-2).sum()


# -- feature attribution and its check --------------------------------------------------------------
IDS = np.array([[0, 4, 2, 7, 3, 5, 4, 2]])


@pytest.mark.parametrize("kind,site", [("topk", "blocks.0.resid_post"), ("relu", "blocks.1.mlp.out")])
def test_the_parts_sum_to_the_logit_and_the_check_holds(kind, site):
    model = _gpt()
    att = LS.feature_attribution(model, _sae(kind), site, (IDS,), token=3, position=5)
    assert att.check.ok, str(att.check)
    total = att.contributions.sum() + att.b_dec + att.error + att.rest + att.bias
    assert total == pytest.approx(model(IDS)[0][0, 5, 3], rel=1e-10)
    assert len(att.features) > 0 and att.rest != 0


def _no_activation(sae, acts, active):
    return sae.directions()[active]


def _raw_rows(sae, acts, active):
    return acts[active, None] * sae.W_dec.data[active]


def _unfrozen(self, x):
    return (lambda c: c), np.zeros_like(x)


@pytest.mark.parametrize(
    "where,bug",
    [
        (LS, ("_feature_writes", _no_activation)),
        (LS, ("_feature_writes", _raw_rows)),
        (Unembedding, ("frozen_norm", _unfrozen)),
    ],
    ids=["writes without the activation", "topk rows not unit", "final norm not frozen"],
)
def test_the_check_fails_on_each_planted_bug(monkeypatch, where, bug):
    model, sae = _gpt(), _sae("topk")
    monkeypatch.setattr(where, *bug)
    att = LS.feature_attribution(model, sae, "blocks.0.resid_post", (IDS,), token=3, position=5)
    assert not att.check.ok and "FAILED" in str(att.check)


def test_a_site_outside_the_residual_stream_is_refused():
    with pytest.raises(ConfigError, match="residual stream"):
        LS.feature_attribution(_gpt(), _sae("relu", d_in=4 * C), "blocks.0.mlp.post", (IDS,), token=3)


# -- the feature pages -------------------------------------------------------------------------------
def test_feature_pages_count_what_they_show_and_the_logit_effect_is_a_removal():
    model, site, sae = _gpt(), "blocks.0.resid_post", _sae("topk")
    batches = [_data(0), _data(1)]
    pages = LS.feature_pages(model, sae, site, batches, special=(0,), top=3, effects_examples=2)
    counted = sum(LS.counted_positions(x, y, (0,)).sum() for x, y in batches)
    assert pages.positions == counted
    acts = np.concatenate(
        [
            sae.encode(LS.site_activations(model, (x,), site)[LS.counted_positions(x, y, (0,))])
            for x, y in batches
        ]
    )
    np.testing.assert_allclose(pages.density, (acts > 0).mean(0))
    np.testing.assert_allclose(pages.max_act, acts.max(0))
    s = int(np.argmax(pages.density))
    values = [a for _, _, a in pages.examples[s]]
    assert values == sorted(values, reverse=True) and values[0] == pytest.approx(acts[:, s].max())
    assert sum(pages.hist[s]) == (acts[:, s] > 0).sum()
    # the logit effect of feature s, recomputed: one removal run per example, averaged, centred
    from scratchformer.lens.hooks import run_with_hooks

    def change(c, p, a):
        ids = pages.contexts[c : c + 1, : p + 1]

        def remove(v, _n):
            v = v.copy()
            v[0, p] -= a * sae.directions()[s]
            return v

        return model(ids)[0][0, p] - run_with_hooks(model, ids, hooks={site: remove})[0][0, p]

    mean = np.mean([change(*example) for example in pages.examples[s][:2]], axis=0)
    mean -= mean.mean()
    top = int(np.argmax(mean))
    assert pages.promoted[s][0][0] == top and pages.promoted[s][0][1] == pytest.approx(mean[top])
