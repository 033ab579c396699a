"""report.html's step slider draws a task's progress measures (issue 27's item 4): the
induction run's losses, ablation costs and per-head prefix-matching scores, and the modadd
run's losses and Fourier spectrum, each frame's numbers the record's own, in a real browser
(tests/viz/test_viz_report.py's `opened`: chromium through playwright, skipped with a reason
elsewhere, a failure with CI=true)."""

import json

import numpy as np
import pytest
from test_viz_report import _canvas, opened, page_data

from scratchformer import viz
from scratchformer.cli.main import main
from scratchformer.training.diagnostics import DIAG_FILE, read_records
from scratchformer.training.jobs import load_job
from scratchformer.viz import grokking as G
from scratchformer.viz import induction as IND


def _induction_run(tmp_path):
    out = tmp_path / "ind"
    assert (
        main(
            [
                "train",
                "--task",
                "induction",
                "--out",
                str(out),
                "--no-progress",
                "--quiet",
                "--symbols",
                "8",
                "--block-size",
                "12",
                "--n-embd",
                "16",
                "--n-head",
                "2",
                "--max-steps",
                "6",
                "--eval-interval",
                "6",
                "--diag-interval",
                "2",
                "--batch-size",
                "8",
                "--workers",
                "1",
                "--num-samples",
                "0",
            ]
        )
        == 0
    )
    return out


def _modadd_run(tmp_path):
    out = tmp_path / "modadd"
    assert (
        main(
            [
                "train",
                "--task",
                "modadd",
                "--modulus",
                "7",
                "--n-embd",
                "16",
                "--max-steps",
                "6",
                "--eval-interval",
                "6",
                "--diag-interval",
                "2",
                "--workers",
                "1",
                "--no-progress",
                "--quiet",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    return out


def _report(run, tmp_path):
    job = load_job(run)
    v = job.viz_inputs(None)
    return viz.report(
        job.model,
        tmp_path / f"fig-{run.name}",
        np.asarray(v["ids"]),
        list(v["tokens"]),
        vocab_labels=v["vocab_labels"],
        log=run,
        only=[],
    )[-1]


def test_frames_hold_each_records_measures(tmp_path):
    records = read_records(_induction_run(tmp_path) / DIAG_FILE)[1]
    frames = IND.slider_frames(records)
    assert len(frames) == len(records) == 4
    for f, r in zip(frames, records):
        assert dict(f["series"])["loss repeat"] == r["loss_repeat"]
        assert f["bars"]["values"] == np.asarray(r["prefix_matching"]).ravel().tolist()
        assert f["bars"]["labels"] == ["L0H0", "L0H1", "L1H0", "L1H1"]
        assert f["bars"]["on"] == [v > 0.5 for v in f["bars"]["values"]]
    records = read_records(_modadd_run(tmp_path) / DIAG_FILE)[1]
    frames = G.slider_frames(records)
    for f, r in zip(frames, records):
        assert dict(f["series"])["test loss"] == r["modadd"]["test_loss"] and f["log"]
        assert f["bars"]["values"] == r["modadd"]["freq_norms"] and len(f["bars"]["labels"]) == 3
        assert [int(k) for k, on in zip(f["bars"]["labels"], f["bars"]["on"]) if on] == sorted(
            r["modadd"]["key_freqs"]
        )
    json.dumps(frames, allow_nan=False)  # strict JSON: the page parses it


def test_a_diverged_record_is_null_not_nan():
    rec = {
        "step": 0,
        "loss_first": float("nan"),
        "loss_repeat": 1.0,
        "heads": ["L0"],
        "prefix_matching": [[float("nan")]],
        "best_head": [0, 0],
        "worst_head": [0, 0],
        "ablate_best": float("inf"),
        "ablate_worst": 0.0,
    }
    (frame,) = IND.slider_frames([rec])
    json.dumps(frame, allow_nan=False)
    assert dict(frame["series"])["loss first copy"] is None and frame["bars"]["values"] == [0.0]


@pytest.mark.parametrize("task", ["induction", "modadd"])
def test_the_step_slider_draws_the_progress_measures(tmp_path, task):
    run = _induction_run(tmp_path) if task == "induction" else _modadd_run(tmp_path)
    records = read_records(run / DIAG_FILE)[1]
    path = _report(run, tmp_path)
    tab = page_data(path.read_text(encoding="utf-8"))["tabs"][-1]
    assert [f["step"] for f in tab["diag"]] == [r["step"] for r in records] and all(
        "progress" in f for f in tab["diag"]
    )

    def shown(page):  # the numbers of the table at this step
        return [
            float(c)
            for c in page.evaluate(
                "Array.from(document.querySelectorAll('#sf-progress-table tr')[1].cells).map(c => c.textContent)"
            )
        ]

    def expected(r):
        return (
            [r["loss_first"], r["loss_repeat"], r["ablate_best"], r["ablate_worst"]]
            if task == "induction"
            else [r["modadd"][k] for k in ("train_loss", "test_loss", "restricted_loss", "excluded_loss")]
        )

    with opened(path) as page:
        assert page.locator("#sf-progress").is_hidden()  # the model's own tab: no slider
        page.click("#sf-tabs button >> text=probe over training")
        assert page.locator("#sf-progress").is_visible()
        assert page.inner_text("#sf-progress-title").endswith(f"at step {records[-1]['step']}")
        np.testing.assert_allclose(shown(page), expected(records[-1]), rtol=1e-3, atol=1e-4)
        last = [_canvas(page, c) for c in ("sf-progress-curves", "sf-progress-bars")]
        assert all(c["colours"] > 3 for c in last), "blank canvas"
        page.fill("#sf-step", "0")
        page.dispatch_event("#sf-step", "input")
        assert page.inner_text("#sf-progress-title").endswith("at step 0")
        np.testing.assert_allclose(shown(page), expected(records[0]), rtol=1e-3, atol=1e-4)
        first = [_canvas(page, c)["png"] for c in ("sf-progress-curves", "sf-progress-bars")]
        assert first[0] != last[0]["png"], "another step, the same step marker"
        assert first[1] != last[1]["png"], "another step, the same bars"


def test_the_grokking_frames_shade_the_phases_the_records_put_there():
    from test_grokking import _records  # tests/training: the synthetic run of a grokking summary

    recs = _records(
        [0, 100, 200, 300, 400, 500, 600],
        test_loss=[5, 20, 15, 8, 4, 0.5, 0.005],
        train_loss=[4, 0.01, 0.005, 0.005, 0.004, 0.002, 0.001],
        excluded=[4, 0.02, 0.01, 1.0, 2.0, 2.95, 3.0],
    )
    frames = G.slider_frames(recs)
    assert [s[:2] for s in frames[0]["spans"]] == [[0, 200], [200, 500], [500, 600]]
    assert [s[2].split(":")[0] for s in frames[-1]["spans"]] == list(G.PHASES)
    assert G.slider_frames(recs[:4])[0]["spans"] == []  # not all three phases yet: none drawn


def test_axis_labels_are_plain_numbers_and_attention_only_runs_draw_no_activation_panels(tmp_path):
    path = _report(_induction_run(tmp_path), tmp_path)
    with opened(path) as page:
        label = "x => window.scratchformerNumber(x)"
        assert page.evaluate(label, -0.0036) == "-0.0036"  # not -3.6e-3
        assert page.evaluate(label, 10**0.86) == "7.2"  # a log axis's top: not 1e0.86
        assert page.evaluate(label, 25.0) == "25" and page.evaluate(label, 0) == "0"
        assert page.evaluate(label, 2.4e-7) == "2.4\u00d710\u207b\u2077"
        assert page.evaluate(label, 31000.0) == "3.1\u00d710\u2074"
        page.click("#sf-tabs button >> text=probe over training")
        assert page.locator("#sf-diag").is_visible() and page.locator("#sf-diag-weights").is_visible()
        layers = page.locator("#sf-diag-layers")
        assert layers.count() == 1 and layers.is_hidden()  # no feed-forward: no activation panels
        assert _canvas(page, "sf-diag-weights")["colours"] > 3


def test_the_slider_shades_the_three_phases_in_a_browser(tmp_path):
    """A modadd run whose records hold the three phases (memorisation to the excluded loss's lowest
    record at step 2, circuit formation until its rise at step 4, cleanup until the test loss is
    below 0.01 at step 6): the page fills each phase's steps with its colour, the same as its
    legend's square, three colours."""
    from test_grokking import _records  # tests/training: the synthetic run of a grokking summary

    run = _modadd_run(tmp_path)
    path = run / DIAG_FILE
    kept = read_records(path)[1]
    phased = _records(
        [r["step"] for r in kept],
        test_loss=[5, 20, 0.5, 0.005],
        train_loss=[4, 0.01, 0.005, 0.001],
        excluded=[4, 0.01, 3.0, 3.0],
    )
    lines = path.read_text(encoding="utf-8").splitlines()
    for i, fake in enumerate(phased, start=len(lines) - len(kept)):
        lines[i] = json.dumps({**json.loads(lines[i]), "modadd": fake["modadd"]})
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    spans = G.slider_frames(read_records(path)[1])[-1]["spans"]
    assert [s[:2] for s in spans] == [[0, 2], [2, 4], [4, 6]]
    report = _report(run, tmp_path)
    pixel = (
        "([x, y]) => Array.from(document.getElementById('sf-progress-curves')"
        ".getContext('2d').getImageData(x, y, 1, 1).data)"
    )
    with opened(report) as page:
        page.click("#sf-tabs button >> text=probe over training")
        assert _canvas(page, "sf-progress-curves")["h"] == 200 + 14 * 3  # a legend row per phase
        x0, w, y0, h = 60, 380, 10, 170  # the curves' box (viz/html.py)
        fills = []
        for i, (a, b, _) in enumerate(spans):
            inside = page.evaluate(pixel, [round(x0 + (a + b) / 2 / 6 * w), y0 + h - 2])
            legend = page.evaluate(pixel, [x0 + 5, y0 + h + 16 + 14 * i + 5])
            assert inside == legend and inside != [255, 255, 255, 255], (i, inside, legend)
            fills.append(tuple(inside))
        assert len(set(fills)) == 3
