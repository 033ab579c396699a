"""report.html's Features part (viz/features.py) in a real chromium: every feature listed, sorted
by frequency on a click, a feature's page with its examples shaded by activation and framed at
their token, its histogram and logit effects, each the number lens.sae.feature_pages computed."""

import copy
import json
import re

import numpy as np
from test_viz_report import chromium, opened  # noqa: F401 -- the module's one chromium

from scratchformer import viz
from scratchformer.lens.sae import feature_attribution, feature_pages
from scratchformer.models import GPT, GPTConfig
from scratchformer.models.sae import SAEConfig, SparseAutoencoder

V, T, C, S = 9, 8, 8, 16
LABELS = ["<eot>", *"abcdefgh"]


def _report(tmp_path):
    model = GPT(GPTConfig(vocab_size=V, block_size=T, n_layer=1, n_head=2, n_embd=C), seed=0).eval()
    sae = SparseAutoencoder(SAEConfig(kind="topk", d_in=C, d_sae=S, k=3), seed=1).eval()
    sae.b_enc.data[0] = -1e6  # one feature that never fires
    rng = np.random.default_rng(0)
    x = rng.integers(1, V, (20, T))
    x[:, 0] = 0
    y = np.roll(x, -1, 1)
    y[:, -1] = -100
    pages = feature_pages(
        model, sae, "blocks.0.resid_post", [(x[:10], y[:10]), (x[10:], y[10:])], (0,), top=4
    )
    model64, sae64 = copy.deepcopy(model).to(np.float64), copy.deepcopy(sae).to(np.float64)
    attribution = feature_attribution(model64, sae64, "blocks.0.resid_post", (x[:1],), token=3)
    features = {
        "pages": pages,
        "labels": LABELS,
        "site": "blocks.0.resid_post",
        "config": sae.config.to_dict(),
        "attribution": attribution,
        "tokens": [LABELS[i] for i in x[0]],
    }
    path = viz.report(
        model, tmp_path, ids=x[0], tokens=[LABELS[i] for i in x[0]], only=[], features=features
    )[-1]
    return path, pages, attribution


def test_the_feature_browser_and_pages_in_chromium(tmp_path, chromium):  # noqa: F811
    path, pages, attribution = _report(tmp_path)
    data = json.loads(re.search(r'id="sff-data">(.*?)</script>', path.read_text(), re.S).group(1))
    assert len(data["features"]) == S
    with opened(path, chromium) as page:
        assert page.locator("#sf-features").count() == 1
        assert page.locator("a.tab[href='#sf-features']").count() == 1
        check = page.inner_text("#sff-check")  # the attribution of the input's prediction, checked
        assert check.startswith("check feature attribution") and check.endswith(" ok")
        assert page.locator("#sff-attribution tr").count() == min(8, len(attribution.features)) + 5

        def freq():  # the frequency column, top to bottom
            cells = page.locator("#sff-table tbody td:nth-child(2)").all_inner_texts()
            return [0.0 if t == "never" else float(t.rstrip("%")) for t in cells]

        shown = freq()
        assert len(shown) == S and shown == sorted(shown, reverse=True)  # most frequent first
        assert shown[-1] == 0.0
        page.click("#sff-table th[data-key=density]")
        assert freq() == sorted(shown)
        # a feature whose weakest example shown is weaker than its strongest
        s = min(
            range(S), key=lambda f: pages.examples[f][-1][2] / pages.max_act[f] if pages.examples[f] else 2
        )
        page.click(f"#sff-table tbody tr[data-i='{s}']")
        assert page.inner_text("#sff-title") == f"feature {s}"
        claims = page.inner_text("#sff-claims")  # what the page computed, in words
        tok, share, _ = pages.top_token[s]
        assert f"token {LABELS[tok]} in {round(100 * share)}% of them" in claims
        assert f"position {pages.where[s][0]} in {round(100 * pages.where[s][1])}%" in claims
        examples = page.locator(".sff-ex")
        assert examples.count() == len(pages.examples[s]) > 0
        for i in range(examples.count()):
            assert examples.nth(i).locator(".sff-here").count() == 1
        last = examples.count() - 1  # the weakest example shown: shaded by its activation / the largest
        style = examples.nth(last).locator(".sff-here").get_attribute("style")
        alpha = float(re.search(r"rgba\(255,\s*140,\s*0,\s*([0-9.]+)\)", style).group(1))
        assert abs(alpha - pages.examples[s][last][2] / pages.max_act[s]) < 2e-3 and alpha < 1
        assert page.locator("#sff-hist rect").count() == pages.bins
        top = LABELS[pages.promoted[s][0][0]]
        assert page.inner_text("#sff-promoted").startswith(f"promotes: {top} +")
        page.click("#sff-table tbody tr[data-i='0']")
        assert "Never fires" in page.inner_text("#sff-page")
