"""report.html: one self-contained page (inline CSS and JavaScript, figures as base64 PNG, no
request of any kind) with an interactive attention explorer drawn on canvas.

Attention is stored quantised: uint8 q = round(255 w), base64-encoded, one block per tab
(layer, head, query, key order); the page decodes w = q / 255 (error <= 0.5 / 255).
A tab with a step slider may carry the training diagnostics of each step (`diag_frame`): the
slider then replays the activation, activation-gradient and weight-gradient histograms and the
per-layer numbers with the attention. A frame may also hold a task's progress measures
(`frame["progress"]`, made by viz/induction.py and viz/grokking.py `slider_frames`):

    {"title", "series": [[name, value], ...], "log": bool,
     "spans": [[step a, step b, label], ...],
     "bars": {"title", "labels", "values", "on": [bool], "line": float or None}, "note"}

the page then draws each series over all the frames' steps with the slider's step marked (and
the spans the data put there, each in its colour with its label: a phase change, the phases of
grokking), the bars at this step, and the numbers at this step in a table. Axis labels are
plain numbers (0.0036, 25), with a power of ten written out (2.4x10^-7) only below 0.001 or
from 10,000 on. A run without feed-forward layers (attention-only blocks) has no activation
panels: the page shows its weight-matrix gradients alone. The page sets `window.scratchformerReady = true` once
the explorer is drawn.
"""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path

import numpy as np

from scratchformer.runfiles import write_atomic
from scratchformer.viz._plot import show_token

__all__ = ["encode_attention", "decode_attention", "write_report", "notebook_iframe", "diag_frame"]


def encode_attention(weights) -> str:
    """(L, H, Tq, Tk) weights in [0, 1] -> base64 of uint8 round(255 w)."""
    q = np.rint(np.clip(np.asarray(weights, np.float64), 0, 1) * 255).astype(np.uint8)
    return base64.b64encode(q.tobytes()).decode("ascii")


def decode_attention(text: str, shape) -> np.ndarray:
    """The inverse of `encode_attention`: float32 array of `shape`."""
    return (np.frombuffer(base64.b64decode(text), dtype=np.uint8).reshape(shape) / 255.0).astype(np.float32)


def diag_frame(record: dict) -> dict:
    """What the page replays of one diagnostics record (training/diagnostics.py): per layer the
    activation and activation-gradient histograms and numbers, per weight matrix its gradient
    histogram on its own range. Missing fields (an older file) are left out; None stays null."""
    from scratchformer.viz.diagnostics import is_matrix

    layers = record.get("layers", [])
    frame = {
        "step": record["step"],
        "act_range": record.get("act_range"),
        "act": [layer.get("hist") for layer in layers],
        "stats": [
            {k: layer.get(k) for k in ("mean", "std", "saturation", "dead", "grad_std")} for layer in layers
        ],
    }
    if "act_grad_range" in record:
        frame["grad_range"], frame["grad"] = (
            record["act_grad_range"],
            [layer.get("grad_hist") for layer in layers],
        )
    frame["weights"] = [
        [name, p.get("grad_range", record.get("grad_range")), p["grad_hist"], p.get("grad_std")]
        for name, p in record.get("params", {}).items()
        if is_matrix(name, p) and "grad_hist" in p
    ]
    return frame


def _tab(name, weights, keys, queries, steps=None, diag=None) -> dict:
    """One explorer tab. With `steps` (a training step per frame), weights is (S, L, H, Tq, Tk):
    the page shows a step slider that replays the frames; the last frame is shown first.
    diag: a `diag_frame` per step, replayed by the same slider."""
    if steps is None:
        L, H, Tq, Tk = np.shape(weights)
        frames = {"data": encode_attention(weights)}
    else:
        _, L, H, Tq, Tk = np.shape(weights)
        frames = {
            "data": encode_attention(weights[-1]),
            "steps": [int(s) for s in steps],
            "frames": [encode_attention(w) for w in weights],
        }
    if diag is not None:
        frames["diag"] = list(diag)
    return {
        "name": name,
        "L": L,
        "H": H,
        "Tq": Tq,
        "Tk": Tk,
        **frames,
        "keys": [show_token(t) for t in keys],
        "queries": [show_token(t) for t in queries],
    }


BACKWARD_CELLS = (
    64  # a step's values on the page: at most 64 x 64 of the returned gradient's first row (and head)
)


def backward_step_data(step) -> dict:
    """What the Backward part shows of one `viz.backward.BackwardStep`: its name, op, formula,
    file:line and lane, the shapes received and returned, the largest error against finite
    differences and what was checked, and the returned gradient's first batch row (and head),
    at most BACKWARD_CELLS x BACKWARD_CELLS, as float32 in base64 (row-major, `rows` x `cols`)."""

    def shape(g):
        return None if g is None else list(np.shape(g))

    out = {
        "name": step.name,
        "op": step.op,
        "formula": step.formula,
        "where": step.where,
        "lane": step.lane,
        "lane_where": step.lane_where,
        "in": shape(step.grad_in),
        "out": shape(step.grad_out),
        "ok": bool(step.ok),
        "red": bool(step.red),
        "through": list(step.through),
        "depth": int(step.depth),
        "max_error": float(step.max_error),
        "n_checks": len(step.checks),
        "checked": step.checked,
        "failures": step.failures()[:3],
        "norm": None if step.grad_out is None else float(np.linalg.norm(step.grad_out)),
    }
    g = (
        step.grad_in if step.grad_out is None else step.grad_out
    )  # token ids return nothing: show what came in
    g = np.atleast_2d(np.asarray(g, dtype=np.float64))
    while g.ndim > 2:
        g = g[0]
    g = g[:BACKWARD_CELLS, :BACKWARD_CELLS]
    out.update(
        rows=g.shape[0],
        cols=g.shape[1],
        shown="received" if step.grad_out is None else "returned",
        values=base64.b64encode(g.astype("<f4").tobytes()).decode("ascii"),
    )
    return out


def write_report(
    path,
    title: str,
    attention: list[tuple],
    figures: list[tuple],
    config: dict,
    summary: dict | None = None,
    lens: tuple[list[tuple], list[str]] | None = None,
    backward: list | None = None,
    parts=(),
) -> Path:
    """Write report.html atomically and return its path.

    attention: (tab name, (L, H, Tq, Tk) weights, key tokens, query tokens) per tab, or
    (name, (S, L, H, Tq, Tk) weights, keys, queries, S training steps[, S `diag_frame`s]): a tab
    with a step slider (which also replays the diagnostics, when given).
    figures: (title, caption, png bytes) per static figure. config / summary: shown as tables.
    lens: (figures as above, check lines) of the lens analyses, shown in a "Lens" part.
    backward: the backward walk-through's steps (`viz.backward.backward_steps`), shown in an
    interactive "Backward" part: a list of the steps (click one for its values as a heatmap,
    hover for each value).
    parts: (element id, nav name, html) of further parts, after the Lens (viz/features.py's).
    """
    data = {
        "tabs": [_tab(*a) for a in attention],
        "backward": None if backward is None else [backward_step_data(s) for s in backward],
        "backward_checked": None if not backward else backward[0].sampling.describe(),
    }
    payload = json.dumps(data).replace("</", "<\\/")  # safe inside <script>

    def figs_html(figures):
        return "\n".join(
            f"<figure><figcaption><b>{html.escape(t)}</b> {html.escape(c)}</figcaption>"
            f'<img alt="{html.escape(t)}" src="data:image/png;base64,{base64.b64encode(png).decode("ascii")}">'
            f"</figure>"
            for t, c, png in figures
        )

    figs = figs_html(figures)
    lens_part = (
        ""
        if lens is None
        else (
            '<h2 id="sf-lens">Lens</h2>\n<p>Experiments on this input (docs/lens.md); each prints a check of its '
            'own arithmetic:</p>\n<pre id="sf-checks">'
            + html.escape("\n".join(lens[1]))
            + "</pre>\n"
            + figs_html(lens[0])
        )
    )

    def table(d):
        rows = "".join(
            f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(str(v))}</td></tr>" for k, v in d.items()
        )
        return f"<table>{rows}</table>"

    page = (
        _PAGE.replace("%TITLE%", html.escape(title))
        .replace("%CONFIG%", table(config))
        .replace("%SUMMARY%", table(summary) if summary else "<p>no training log</p>")
        .replace("%FIGURES%", figs)
        .replace("%LENS%", lens_part + "".join(part for _, _, part in parts))
        .replace("%BACKWARD%", _BACKWARD_PART if backward is not None else "")
        .replace("%NAV%", _nav(backward is not None, lens is not None, parts))
        .replace("%DATA%", payload)
        .replace("%SCRIPT%", _SCRIPT)
    )
    return write_atomic(path, page.encode("utf-8"))


def _nav(backward: bool, lens: bool, more=()) -> str:
    """Links to the page's parts, at its top."""
    parts = (
        [("sf-explorer", "Attention explorer")]
        + ([("sf-backward", "Backward")] if backward else [])
        + [("sf-figures", "Figures")]
        + ([("sf-lens", "Lens")] if lens else [])
        + [(i, name) for i, name, _ in more]
    )
    return " ".join(f'<a class="tab" href="#{i}">{name}</a>' for i, name in parts)


def notebook_iframe(path, height: int = 900) -> str:
    """HTML that shows a report inside Jupyter: an iframe whose srcdoc is the whole page
    (display it with IPython.display.HTML). Nothing is fetched."""
    page = Path(path).read_text(encoding="utf-8")
    return (
        f'<iframe style="width:100%;height:{height}px;border:0" '
        f'srcdoc="{html.escape(page, quote=True)}"></iframe>'
    )


_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'unsafe-inline'">
<title>%TITLE%</title>
<style>
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222;max-width:1400px}
h1{font-size:1.4em} h2{font-size:1.15em;border-bottom:1px solid #ddd;padding-bottom:.2em}
table{border-collapse:collapse;font-size:.85em;margin:.5em 0} th,td{border:1px solid #ddd;padding:2px 8px;text-align:left}
.cols{display:flex;gap:2em;flex-wrap:wrap}
.bar{margin:.5em 0;display:flex;gap:.6em;align-items:center;flex-wrap:wrap}
.tab{padding:4px 12px;border:1px solid #888;background:#f4f4f4;cursor:pointer}
.tab.on{background:#2a6ebb;color:#fff}
.panel{display:inline-block;vertical-align:top;margin:0 1em 1em 0}
.panel h3{font-size:.95em;margin:.2em 0} canvas{border:1px solid #ccc}
#sf-hover{font-family:monospace;min-height:1.3em}
#sf-bw-list{max-height:480px;overflow:auto;display:inline-block;vertical-align:top;margin-right:1em}
#sf-bw-list tr{cursor:pointer} #sf-bw-list tr.on{background:#dbe8f6} .bad{color:#b00;font-weight:bold}
.good{color:#070} .through{color:#83c} #sf-bw-detail{display:inline-block;vertical-align:top;max-width:560px}
figure{margin:1em 0} figure img{max-width:100%;border:1px solid #eee} figcaption{margin-bottom:.3em}
</style></head><body>
<h1>%TITLE%</h1>
<nav class="bar">%NAV%</nav>
<div class="cols"><div><h2>Model</h2>%CONFIG%</div><div><h2>Training</h2>%SUMMARY%</div></div>
<h2 id="sf-explorer">Attention explorer</h2>
<p>Pick a tab, a layer and a head (or the average over heads). Lines: each query token (left)
is joined to the keys (right) it reads, darker = more weight. Click a thumbnail to open it.
Hover the matrix for values. Colours are scaled to each map's largest weight.</p>
<div class="bar" id="sf-tabs"></div>
<div class="bar">layer <select id="sf-layer"></select> head <select id="sf-head"></select>
<span id="sf-hover"></span></div>
<div class="bar" id="sf-steps" style="display:none">training step <input type="range" id="sf-step" min="0" step="1">
<span id="sf-step-label"></span></div>
<div class="panel"><h3>matrix <button data-export="sf-matrix">PNG</button></h3><canvas id="sf-matrix"></canvas></div>
<div class="panel"><h3>lines <button data-export="sf-lines">PNG</button></h3><canvas id="sf-lines"></canvas></div>
<div class="panel"><h3>all layers x heads <button data-export="sf-grid">PNG</button></h3><canvas id="sf-grid"></canvas></div>
<div id="sf-progress" style="display:none">
<h3 id="sf-progress-title"></h3>
<p id="sf-progress-note"></p>
<table id="sf-progress-table"></table>
<div class="panel"><h3>over training (the dashed line: this step)</h3><canvas id="sf-progress-curves"></canvas></div>
<div class="panel"><h3 id="sf-progress-bars-title"></h3><canvas id="sf-progress-bars"></canvas></div>
</div>
<div id="sf-diag" style="display:none">
<h3>Training diagnostics at this step (the slider replays them)</h3>
<p>As makemore part 3: the feed-forward activations and the gradient arriving at them, per layer,
on the probe batch (each layer a colour, all on one range); the gradient of each weight matrix,
each on its own range. Step 0 is the initialisation.</p>
<div id="sf-diag-layers">
<table id="sf-diag-table"></table>
<div class="panel"><h3>activations f(h)</h3><canvas id="sf-diag-act"></canvas></div>
<div class="panel"><h3>gradient at the activations</h3><canvas id="sf-diag-grad"></canvas></div>
</div>
<div class="panel"><h3>weight-matrix gradients (own ranges)</h3><canvas id="sf-diag-weights"></canvas></div>
</div>
<h2 id="sf-figures">Figures</h2>
%BACKWARD%
%FIGURES%
%LENS%
<script type="application/json" id="sf-data">%DATA%</script>
<script>%SCRIPT%</script>
</body></html>
"""

_BACKWARD_PART = """<h2 id="sf-backward">Backward</h2>
<p>The backward pass on this input and its loss, step by step in the order it ran, as the model recorded it
(viz/backward.py): each op's formula, where it lives (file:line) and the lane that ran it, and each module's
backward around its ops; the gradient each received and returned, and a check of each by finite differences of
its own forward (green: agrees; red: it does not; purple: it disagrees only through a red step inside it).
Click a step for its returned gradient (first batch row and head) as a heatmap, red positive, blue negative;
hover for values.</p>
<div id="sf-bw-summary"></div><p id="sf-bw-checked"></p>
<div><div id="sf-bw-list"><table><thead><tr><th>#</th><th>step</th><th>received &rarr; returned</th>
<th>max error</th></tr></thead><tbody id="sf-bw-rows"></tbody></table></div>
<div id="sf-bw-detail"><h3 id="sf-bw-name"></h3><div id="sf-bw-formula" style="font-family:monospace"></div>
<div id="sf-bw-where" style="font-family:monospace;color:#555"></div><div id="sf-bw-check"></div>
<canvas id="sf-bw-heat"></canvas><div id="sf-bw-hover" style="font-family:monospace;min-height:1.3em"></div>
</div></div>
"""

_SCRIPT = r"""
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("sf-data").textContent);
  var $ = function (id) { return document.getElementById(id); };
  var state = {tab: 0, layer: 0, head: 0};  // head == H means the average over heads
  function bytes(text) {  // base64 -> Uint8Array, w = q / 255
    var s = atob(text), a = new Uint8Array(s.length);
    for (var i = 0; i < s.length; i++) a[i] = s.charCodeAt(i);
    return a;
  }
  data.tabs.forEach(function (t) {
    t.q = bytes(t.data);
    if (t.frames) { t.qs = t.frames.map(bytes); t.frame = t.qs.length - 1; }  // a step slider replays them
  });
  function showStep(t) {
    $("sf-steps").style.display = t.frames ? "" : "none";
    if (!t.frames) return;
    $("sf-step").max = String(t.qs.length - 1); $("sf-step").value = String(t.frame);
    t.q = t.qs[t.frame];
    $("sf-step-label").textContent = t.steps[t.frame] + " (" + (t.frame + 1) + " of " + t.qs.length + ")";
  }
  var SPAN_COLOURS = ["rgba(255,165,0,0.3)", "rgba(31,119,180,0.2)", "rgba(44,160,44,0.25)", "rgba(148,103,189,0.25)"];
  var LAYER_COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                       "#bcbd22", "#17becf"];
  function num(x, digits, exp) {
    if (x === null || x === undefined) return "n/a";
    return exp ? x.toExponential(digits) : x.toFixed(digits);
  }
  var SUPERSCRIPT = {"-": "\u207b", "0": "\u2070", "1": "\u00b9", "2": "\u00b2", "3": "\u00b3", "4": "\u2074",
                     "5": "\u2075", "6": "\u2076", "7": "\u2077", "8": "\u2078", "9": "\u2079"};
  function tick(x) {  // an axis label: 2 significant digits as a plain number; 10 to a power only far from 1
    if (x === null || x === undefined || !isFinite(x)) return "n/a";
    if (x === 0) return "0";
    var a = Math.abs(x);
    if (a >= 0.001 && a < 10000) return String(Number(x.toPrecision(2)));
    var e = Math.floor(Math.log10(a)), m = Number((x / Math.pow(10, e)).toPrecision(2));
    if (Math.abs(m) >= 10) { m /= 10; e += 1; }
    return m + "\u00d710" + String(e).split("").map(function (c) { return SUPERSCRIPT[c]; }).join("");
  }
  function histogram(g, x0, y0, w, h, series, range, label, note) {
    // series: [{counts, colour}], each drawn as its fraction of its own total
    g.strokeStyle = "#999"; g.lineWidth = 1; g.strokeRect(x0, y0, w, h);
    var top = 1e-12;
    series.forEach(function (s) {
      var n = s.counts.reduce(function (a, b) { return a + b; }, 0) || 1;
      s.frac = s.counts.map(function (c) { return c / n; });
      s.frac.forEach(function (f) { top = Math.max(top, f); });
    });
    series.forEach(function (s) {
      g.strokeStyle = s.colour; g.lineWidth = 1.5; g.beginPath();
      s.frac.forEach(function (f, i) {
        var x = x0 + (i + 0.5) * w / s.frac.length, y = y0 + h - f / top * (h - 4);
        if (i === 0) g.moveTo(x, y); else g.lineTo(x, y);
      });
      g.stroke();
    });
    g.fillStyle = "#222"; g.font = "10px sans-serif"; g.textBaseline = "top";
    if (range) {
      g.textAlign = "left"; g.fillText(tick(range[0]), x0, y0 + h + 2);
      g.textAlign = "right"; g.fillText(tick(range[1]), x0 + w, y0 + h + 2);
    }
    if (note) { g.textAlign = "center"; g.fillText(note, x0 + w / 2, y0 + h + 2); }
    if (label) { g.textAlign = "left"; g.textBaseline = "bottom"; g.fillText(label, x0, y0 - 2); }
  }
  function layerSeries(hists) {
    return (hists || []).map(function (c, i) { return {counts: c || [], colour: LAYER_COLOURS[i % LAYER_COLOURS.length]}; });
  }
  function drawLayerPanel(id, hists, range) {
    var c = $(id), g = c.getContext("2d"), n = (hists || []).length;
    c.width = 380; c.height = 200;
    g.fillStyle = "#fff"; g.fillRect(0, 0, c.width, c.height);
    if (!hists || !range) { g.fillStyle = "#222"; g.fillText("not recorded", 20, 20); return; }
    histogram(g, 10, 10, 360, 150, layerSeries(hists), range, "");
    g.font = "10px sans-serif"; g.textBaseline = "middle"; g.textAlign = "left";
    for (var i = 0; i < n; i++) {
      g.fillStyle = LAYER_COLOURS[i % LAYER_COLOURS.length]; g.fillRect(10 + i * 60, 186, 10, 10);
      g.fillStyle = "#222"; g.fillText("layer " + i, 24 + i * 60, 191);
    }
  }
  function drawProgress(t) {  // a task's progress measures (frame.progress), when the frames hold them
    var box = $("sf-progress"), d = t.diag ? t.diag[t.frame] : null, p = d ? d.progress : null;
    if (!p) { box.style.display = "none"; return; }
    box.style.display = "";
    $("sf-progress-title").textContent = p.title + " at step " + d.step;
    $("sf-progress-note").textContent = p.note || "";
    $("sf-progress-table").innerHTML = "<tr>" + p.series.map(function (s) { return "<th>" + s[0] + "</th>"; }).join("") +
      "</tr><tr>" + p.series.map(function (s) { return "<td>" + num(s[1], 4) + "</td>"; }).join("") + "</tr>";
    var steps = t.diag.map(function (f) { return f.step; });
    var spans = p.spans || [], c = $("sf-progress-curves"), g = c.getContext("2d"), x0 = 60, y0 = 10, w = 380, h = 170;
    c.width = 580; c.height = 200 + 14 * Math.max(1, spans.length);
    g.fillStyle = "#fff"; g.fillRect(0, 0, c.width, c.height);
    var ys = function (v) { return p.log ? Math.log10(v) : v; }, lo = Infinity, hi = -Infinity;
    t.diag.forEach(function (f) { f.progress.series.forEach(function (s) {
      if (s[1] !== null && isFinite(ys(s[1]))) { lo = Math.min(lo, ys(s[1])); hi = Math.max(hi, ys(s[1])); } }); });
    if (!(hi > lo)) { lo -= 1; hi += 1; }
    var s0 = steps[0], s1 = Math.max(steps[steps.length - 1], s0 + 1);
    var X = function (s) { return x0 + (s - s0) / (s1 - s0) * w; }, Y = function (v) { return y0 + h - (ys(v) - lo) / (hi - lo) * h; };
    spans.forEach(function (sp, i) {
      g.fillStyle = SPAN_COLOURS[i % SPAN_COLOURS.length];
      g.fillRect(X(sp[0]) - 1, y0, Math.max(2, X(sp[1]) - X(sp[0]) + 2), h);
    });
    g.strokeStyle = "#999"; g.lineWidth = 1; g.strokeRect(x0, y0, w, h);
    p.series.forEach(function (s, i) {
      var colour = LAYER_COLOURS[i % LAYER_COLOURS.length];
      g.strokeStyle = colour; g.lineWidth = 1.5; g.beginPath();
      var started = false;
      t.diag.forEach(function (f, k) {
        var v = f.progress.series[i][1];
        if (v === null || !isFinite(ys(v))) { started = false; return; }
        if (started) g.lineTo(X(steps[k]), Y(v)); else g.moveTo(X(steps[k]), Y(v));
        started = true;
      });
      g.stroke();
      g.fillStyle = colour; g.fillRect(x0 + w + 10, y0 + 4 + 14 * i, 10, 10);
      g.fillStyle = "#222"; g.font = "10px sans-serif"; g.textAlign = "left"; g.textBaseline = "middle";
      g.fillText(s[0], x0 + w + 24, y0 + 9 + 14 * i);
    });
    g.strokeStyle = "#000"; g.lineWidth = 1.5; g.setLineDash([4, 3]); g.beginPath(); g.moveTo(X(d.step), y0);
    g.lineTo(X(d.step), y0 + h); g.stroke(); g.setLineDash([]);
    g.fillStyle = "#222"; g.font = "10px sans-serif"; g.textBaseline = "top"; g.textAlign = "left";
    g.fillText(String(s0), x0, y0 + h + 3); g.textAlign = "right"; g.fillText(String(s1) + " (step)", x0 + w, y0 + h + 3);
    var unlog = function (v) { return p.log ? Math.pow(10, v) : v; };
    g.textAlign = "right"; g.fillText(tick(unlog(hi)), x0 - 3, y0); g.fillText(tick(unlog(lo)), x0 - 3, y0 + h - 10);
    spans.forEach(function (sp, i) {
      var ly = y0 + h + 16 + 14 * i;
      g.fillStyle = SPAN_COLOURS[i % SPAN_COLOURS.length]; g.fillRect(x0, ly, 10, 10);
      g.fillStyle = "#222"; g.textAlign = "left"; g.fillText(sp[2], x0 + 14, ly);
    });
    var b = p.bars, cb = $("sf-progress-bars"), gb = cb.getContext("2d"), n = b.values.length;
    var bw = Math.max(4, Math.min(40, Math.floor(480 / n))), top = Math.max.apply(null, b.values.concat([b.line || 0, 1e-12]));
    cb.width = 40 + n * bw + 10; cb.height = 210;
    gb.fillStyle = "#fff"; gb.fillRect(0, 0, cb.width, cb.height);
    $("sf-progress-bars-title").textContent = b.title;
    b.values.forEach(function (v, k) {
      gb.fillStyle = b.on[k] ? "#d62728" : "#888";
      var bh = Math.max(0, v) / top * 160;
      gb.fillRect(40 + k * bw + 1, 10 + 160 - bh, bw - 2, bh);
      if (n <= 16 || k % 5 === 4) {
        gb.fillStyle = "#222"; gb.font = "9px sans-serif"; gb.textAlign = "center"; gb.textBaseline = "top";
        gb.fillText(b.labels[k], 40 + k * bw + bw / 2, 174);
      }
    });
    if (b.line !== null && b.line !== undefined) {
      gb.strokeStyle = "#444"; gb.setLineDash([3, 3]); gb.beginPath();
      gb.moveTo(40, 10 + 160 - b.line / top * 160); gb.lineTo(40 + n * bw, 10 + 160 - b.line / top * 160); gb.stroke();
      gb.setLineDash([]);
    }
    gb.fillStyle = "#222"; gb.font = "10px sans-serif"; gb.textAlign = "right"; gb.textBaseline = "top";
    gb.fillText(tick(top), 36, 10); gb.fillText("0", 36, 162);
  }
  function drawDiag(t) {
    drawProgress(t);
    var box = $("sf-diag");
    if (!t.diag) { box.style.display = "none"; return; }
    box.style.display = "";
    var d = t.diag[t.frame];
    $("sf-diag-layers").style.display = d.stats.length ? "" : "none";  // attention-only blocks: no feed-forward
    var rows = "<tr><th>layer</th><th>mean f(h)</th><th>std f(h)</th><th>saturated</th><th>dead</th>" +
               "<th>std of d loss / d f(h)</th></tr>";
    d.stats.forEach(function (s, i) {
      rows += "<tr><td>" + i + "</td><td>" + num(s.mean, 3) + "</td><td>" + num(s.std, 3) + "</td><td>" +
              (s.saturation === null ? "n/a" : (100 * s.saturation).toFixed(1) + "%") + "</td><td>" +
              (s.dead === null ? "n/a" : (100 * s.dead).toFixed(1) + "%") + "</td><td>" + num(s.grad_std, 2, true) +
              "</td></tr>";
    });
    $("sf-diag-table").innerHTML = rows;
    drawLayerPanel("sf-diag-act", d.act, d.act_range);
    drawLayerPanel("sf-diag-grad", d.grad, d.grad_range);
    var c = $("sf-diag-weights"), g = c.getContext("2d"), cols = 4, cw = 185, ch = 80;
    var nrows = Math.max(1, Math.ceil(d.weights.length / cols));
    c.width = cols * cw + 10; c.height = nrows * ch + 10;
    g.fillStyle = "#fff"; g.fillRect(0, 0, c.width, c.height);
    d.weights.forEach(function (w, k) {
      var x0 = 5 + (k % cols) * cw, y0 = 5 + Math.floor(k / cols) * ch;
      histogram(g, x0 + 4, y0 + 14, cw - 12, ch - 32, [{counts: w[2], colour: "#2a6ebb"}], w[1],
                w[0].length > 30 ? "\u2026" + w[0].slice(-29) : w[0], "std " + tick(w[3]));
    });
  }
  function weight(t, l, h, i, j) {
    if (h === t.H) { var s = 0; for (var k = 0; k < t.H; k++) s += weight(t, l, k, i, j); return s / t.H; }
    return t.q[((l * t.H + h) * t.Tq + i) * t.Tk + j] / 255;
  }
  function color(w) {  // white -> dark blue
    var r = Math.round(255 - 213 * w), g = Math.round(255 - 145 * w), b = Math.round(255 - 68 * w);
    return "rgb(" + r + "," + g + "," + b + ")";
  }
  function cellSize(t) { return Math.max(10, Math.min(28, Math.floor(640 / Math.max(t.Tq, t.Tk)))); }
  function peak(t, l, h) {  // the largest weight of one map: colours are scaled to it
    var m = 1e-6;
    for (var i = 0; i < t.Tq; i++) for (var j = 0; j < t.Tk; j++) m = Math.max(m, weight(t, l, h, i, j));
    return m;
  }
  var MARGIN = 60;
  function drawMatrix() {
    var t = data.tabs[state.tab], c = $("sf-matrix"), s = cellSize(t);
    c.width = MARGIN + s * t.Tk + 4; c.height = MARGIN + s * t.Tq + 4;
    var g = c.getContext("2d"), m = peak(t, state.layer, state.head);
    g.fillStyle = "#fff"; g.fillRect(0, 0, c.width, c.height);
    for (var i = 0; i < t.Tq; i++) for (var j = 0; j < t.Tk; j++) {
      g.fillStyle = color(weight(t, state.layer, state.head, i, j) / m);
      g.fillRect(MARGIN + j * s, MARGIN + i * s, s, s);
    }
    g.fillStyle = "#222"; g.font = Math.min(12, s) + "px monospace"; g.textBaseline = "middle";
    g.textAlign = "right";
    for (i = 0; i < t.Tq; i++) g.fillText(t.queries[i], MARGIN - 4, MARGIN + i * s + s / 2);
    for (j = 0; j < t.Tk; j++) {
      g.save(); g.translate(MARGIN + j * s + s / 2, MARGIN - 4); g.rotate(-Math.PI / 2);
      g.textAlign = "left"; g.fillText(t.keys[j], 0, 0); g.restore();
    }
  }
  function drawLines() {
    var t = data.tabs[state.tab], c = $("sf-lines"), n = Math.max(t.Tq, t.Tk);
    var row = Math.max(10, Math.min(20, Math.floor(640 / n)));
    c.width = 360; c.height = row * n + 20;
    var g = c.getContext("2d"), xl = 90, xr = 270, m = peak(t, state.layer, state.head);
    g.fillStyle = "#fff"; g.fillRect(0, 0, c.width, c.height);
    for (var i = 0; i < t.Tq; i++) for (var j = 0; j < t.Tk; j++) {
      var w = weight(t, state.layer, state.head, i, j) / m;
      if (w < 0.01) continue;
      g.strokeStyle = "rgba(42,110,187," + w + ")"; g.lineWidth = 1 + 3 * w;
      g.beginPath(); g.moveTo(xl, 10 + i * row + row / 2); g.lineTo(xr, 10 + j * row + row / 2); g.stroke();
    }
    g.fillStyle = "#222"; g.font = Math.min(12, row) + "px monospace"; g.textBaseline = "middle";
    g.textAlign = "right";
    for (i = 0; i < t.Tq; i++) g.fillText(t.queries[i], xl - 6, 10 + i * row + row / 2);
    g.textAlign = "left";
    for (j = 0; j < t.Tk; j++) g.fillText(t.keys[j], xr + 6, 10 + j * row + row / 2);
  }
  function drawGrid() {
    var t = data.tabs[state.tab], c = $("sf-grid");
    var px = Math.max(1, Math.floor(96 / Math.max(t.Tq, t.Tk))), tw = px * t.Tk, th = px * t.Tq, gap = 6;
    c.width = (t.H + 1) * (tw + gap) + 30; c.height = t.L * (th + gap) + 20;
    var g = c.getContext("2d");
    g.fillStyle = "#fff"; g.fillRect(0, 0, c.width, c.height);
    g.fillStyle = "#222"; g.font = "10px sans-serif";
    for (var h = 0; h <= t.H; h++) g.fillText(h === t.H ? "avg" : "h" + h, 30 + h * (tw + gap), 12);
    for (var l = 0; l < t.L; l++) {
      g.fillStyle = "#222"; g.fillText("L" + l, 2, 20 + l * (th + gap) + th / 2);
      for (h = 0; h <= t.H; h++) {
        var x0 = 30 + h * (tw + gap), y0 = 16 + l * (th + gap), m = peak(t, l, h);
        for (var i = 0; i < t.Tq; i++) for (var j = 0; j < t.Tk; j++) {
          g.fillStyle = color(weight(t, l, h, i, j) / m); g.fillRect(x0 + j * px, y0 + i * px, px, px);
        }
        if (l === state.layer && h === state.head) {
          g.strokeStyle = "#d33"; g.lineWidth = 2; g.strokeRect(x0 - 1, y0 - 1, tw + 2, th + 2);
        }
      }
    }
    c.onclick = function (e) {
      var r = c.getBoundingClientRect();
      var h = Math.floor((e.clientX - r.left - 30) / (tw + gap)), l = Math.floor((e.clientY - r.top - 16) / (th + gap));
      if (h >= 0 && h <= t.H && l >= 0 && l < t.L) { state.layer = l; state.head = h; sync(); draw(); }
    };
  }
  function sync() { $("sf-layer").value = String(state.layer); $("sf-head").value = String(state.head); }
  function options(sel, n, extra) {
    sel.innerHTML = "";
    for (var i = 0; i < n; i++) { var o = document.createElement("option"); o.value = String(i); o.textContent = String(i); sel.appendChild(o); }
    if (extra) { o = document.createElement("option"); o.value = String(n); o.textContent = extra; sel.appendChild(o); }
  }
  function selectTab(k) {
    state.tab = k; var t = data.tabs[k];
    state.layer = Math.min(state.layer, t.L - 1); state.head = Math.min(state.head, t.H);
    options($("sf-layer"), t.L); options($("sf-head"), t.H, "average");
    Array.prototype.forEach.call($("sf-tabs").children, function (b, i) { b.className = i === k ? "tab on" : "tab"; });
    showStep(t); sync(); draw(); drawDiag(t);
  }
  function draw() { drawMatrix(); drawLines(); drawGrid(); }
  data.tabs.forEach(function (t, k) {
    var b = document.createElement("button"); b.textContent = t.name; b.className = "tab";
    b.onclick = function () { selectTab(k); }; $("sf-tabs").appendChild(b);
  });
  $("sf-layer").onchange = function () { state.layer = +this.value; draw(); };
  $("sf-head").onchange = function () { state.head = +this.value; draw(); };
  $("sf-step").oninput = function () {
    var t = data.tabs[state.tab]; t.frame = +this.value; showStep(t); draw(); drawDiag(t);
  };
  $("sf-matrix").onmousemove = function (e) {
    var t = data.tabs[state.tab], s = cellSize(t), r = this.getBoundingClientRect();
    var j = Math.floor((e.clientX - r.left - MARGIN) / s), i = Math.floor((e.clientY - r.top - MARGIN) / s);
    $("sf-hover").textContent = (i >= 0 && i < t.Tq && j >= 0 && j < t.Tk)
      ? t.queries[i] + " \u2192 " + t.keys[j] + ": " + weight(t, state.layer, state.head, i, j).toFixed(3) : "";
  };
  Array.prototype.forEach.call(document.querySelectorAll("[data-export]"), function (b) {
    b.onclick = function () {
      var t = data.tabs[state.tab], a = document.createElement("a");
      a.href = $(b.dataset.export).toDataURL("image/png");
      a.download = b.dataset.export.slice(3) + "-" + t.name + "-L" + state.layer + "-" + (state.head === t.H ? "avg" : "h" + state.head) + ".png";
      document.body.appendChild(a); a.click(); a.remove();
    };
  });
  if (data.tabs.length) selectTab(0);
  if (data.backward) drawBackward(data.backward);
  window.scratchformerNumber = tick;  // how the page writes an axis label (tests read it)
  window.scratchformerReady = true;
  function floats(text) {  // base64 of little-endian float32 -> Float32Array
    var b = bytes(text);
    return new Float32Array(b.buffer, b.byteOffset, b.length / 4);
  }
  function drawBackward(steps) {
    var red = steps.filter(function (s) { return s.red; });
    $("sf-bw-checked").textContent = "Checked: " + data.backward_checked + ".";
    $("sf-bw-summary").innerHTML = red.length ?
      '<span class="bad">' + red.length + " step(s) disagree with finite differences: " +
      red.map(function (s) { return s.name; }).join(", ") + "</span>" :
      '<span class="good">all ' + steps.length + " steps agree with finite differences</span>";
    var shape = function (a) { return a ? "(" + a.join(", ") + ")" : "ids"; };
    steps.forEach(function (s, i) {
      var tr = document.createElement("tr");
      tr.className = "sf-bw-step";
      [String(i), "\u00a0\u00a0".repeat(s.depth) + s.name, shape(s.in) + " \u2192 " + shape(s.out),
       s.max_error.toExponential(1)].forEach(
        function (text, j) {
          var td = document.createElement("td"); td.textContent = text;
          if (j === 3) td.className = s.ok ? "good" : s.red ? "bad" : "through";
          tr.appendChild(td);
        });
      tr.onclick = function () { showBackwardStep(steps, i); };
      $("sf-bw-rows").appendChild(tr);
    });
    showBackwardStep(steps, red.length ? steps.indexOf(red[0]) : 0);
  }
  function showBackwardStep(steps, i) {
    var s = steps[i], c = $("sf-bw-heat"), v = floats(s.values), lim = 0;
    Array.prototype.forEach.call($("sf-bw-rows").children, function (r, j) { r.className = j === i ? "on" : ""; });
    $("sf-bw-name").textContent = i + ". " + s.name + " (" + s.op + ")";
    $("sf-bw-formula").textContent = s.formula;
    $("sf-bw-where").textContent = s.where + (s.lane ? "  \u2014  " + s.lane + " lane" : "  \u2014  module") + (s.lane_where ? " (" + s.lane_where + ")" : "");
    var checked = Object.keys(s.checked).map(function (k) { return k + " " + s.checked[k]; }).join("; ");
    $("sf-bw-check").innerHTML = (s.ok ? '<span class="good">' + s.n_checks + " checks agree" :
      s.red ? '<span class="bad">disagrees: ' + s.failures.join("; ") :
      '<span class="through">disagrees through ' + s.through.join(", ")) + "</span> (max error " +
      s.max_error.toExponential(2) + "; checked: " + checked + ")";
    for (var k = 0; k < v.length; k++) lim = Math.max(lim, Math.abs(v[k]));
    var cell = Math.max(4, Math.min(24, Math.floor(512 / Math.max(s.rows, s.cols))));
    c.width = s.cols * cell; c.height = s.rows * cell;
    var g = c.getContext("2d");
    for (var r = 0; r < s.rows; r++) for (var q = 0; q < s.cols; q++) {
      var t = lim ? v[r * s.cols + q] / lim : 0, w = Math.round(255 * (1 - Math.abs(t)));
      g.fillStyle = t >= 0 ? "rgb(255," + w + "," + w + ")" : "rgb(" + w + "," + w + ",255)";
      g.fillRect(q * cell, r * cell, cell, cell);
    }
    c.onmousemove = function (e) {
      var b = c.getBoundingClientRect(), q = Math.floor((e.clientX - b.left) / cell), r = Math.floor((e.clientY - b.top) / cell);
      if (r >= 0 && r < s.rows && q >= 0 && q < s.cols)
        $("sf-bw-hover").textContent = s.shown + "[" + r + ", " + q + "] = " + v[r * s.cols + q].toPrecision(6);
    };
    window.scratchformerBackwardStep = i;
  }
})();
"""
