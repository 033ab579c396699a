"""report.html in a real browser (Debian's chromium through playwright), and its size budget.

With CI=true a missing chromium or playwright fails; elsewhere the browser test skips and
says why. Every request that is not a file:// URL is aborted and recorded: the page must make
none."""

import os
import shutil

import pytest

from scratchformer.data.tokenizer import CharTokenizer
from scratchformer.models.gpt import GPT, GPTConfig

viz = pytest.importorskip("scratchformer.viz")

TEXT = "First Citizen: Before we proceed any further, hear me speak. All:"[:64]
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--no-first-run", "--disable-sync"]


@pytest.fixture(scope="module")
def shakespeare_report(tmp_path_factory):
    """A 4-layer, 4-head model (tinyshakespeare's default size) on a 64-character text."""
    tok = CharTokenizer.from_text(TEXT + "abcdefghijklmnopqrstuvwxyz")
    model = GPT(GPTConfig(vocab_size=tok.vocab_size, block_size=64, n_layer=4, n_head=4, n_embd=64), seed=0)
    paths = viz.report(model, tmp_path_factory.mktemp("report"), text=TEXT, tokenizer=tok)
    return paths[-1]


def test_report_size_budget(shakespeare_report):
    assert shakespeare_report.stat().st_size <= 5_000_000


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
                   return {w: c.width, h: c.height, colours: new Set(d).size, png: c.toDataURL()}; }""", canvas_id)


def test_report_in_chromium(shakespeare_report, tmp_path):
    sync_playwright, exe = _browser_or_skip()
    outside, errors = [], []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=exe, args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})

            def route(r):
                if r.request.url.startswith(("file://", "data:")):
                    r.continue_()
                else:
                    outside.append(r.request.url)
                    r.abort()

            page.route("**/*", route)
            page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
            page.on("console", lambda m: errors.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
            page.goto(shakespeare_report.resolve().as_uri())
            page.wait_for_function("window.scratchformerReady === true", timeout=15000)
            assert page.evaluate("document.querySelectorAll('img').length") == 13
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
            page.hover("#sf-matrix", position={"x": 64, "y": 64})  # hover a cell: its value is shown
            assert "\u2192" in page.inner_text("#sf-hover")
            with page.expect_download() as dl:
                page.click("button[data-export=sf-matrix]")
            png = tmp_path / "matrix.png"
            dl.value.save_as(png)
            assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
            page.screenshot(path=str(tmp_path / "report.png"), full_page=False)
            assert (tmp_path / "report.png").stat().st_size > 10_000
        finally:
            browser.close()
    assert not errors, errors
    assert not outside, f"the page requested {outside}"
