"""A sparse autoencoder's features in report.html, and its measures over training.

    html = feature_part(features)        # the "Features" part of report.html
    fig = sae_measures(log_rows)         # SAELens's measures at each evaluation of the run

`features` is what `SAEJob.viz_inputs` gives: {"pages": lens.sae.FeaturePages, "labels": the
vocabulary's labels, "site": the hook name, "config": the autoencoder's settings}. The part
holds a browser over every feature (a table: density, largest activation, the token of most of
its strongest examples, the token it promotes most; each column sorts on a click) and the page
of the feature clicked: its strongest examples with every token shaded by the feature's
activation there and the example's own token framed, the histogram of its nonzero activations,
and its logit effects (lens.sae.FeaturePages). Every number on a page is computed by
lens.sae.feature_pages from the held-out split; the page states it, nothing is inferred.
Offline, as the rest of the report: the data and the script are inline.
"""

from __future__ import annotations

import html
import json

import numpy as np

from scratchformer.viz._plot import finish, new_figure

__all__ = ["feature_part", "sae_measures", "EXAMPLE_WINDOW"]

EXAMPLE_WINDOW = 12  # tokens shown before and after an example's own token


def _series(rows: list[dict], key: str):
    pts = [(r["step"], r[key]) for r in rows if isinstance(r.get(key), (int, float))]
    return [p[0] for p in pts], [p[1] for p in pts]


def sae_measures(rows: list[dict], path=None):
    """SAELens's measures logged at each evaluation (val_*): L0; explained variance and the L2
    ratio; the CE loss and KL scores; the dead and dense features."""
    panels = [
        ("L0 (features active per position)", ("val_l0",)),
        ("reconstruction", ("val_explained_variance", "val_l2_ratio")),
        ("the reconstruction spliced in", ("val_ce_loss_score", "val_kl_div_score")),
        ("features", ("val_dead_in_eval", "val_dense_in_eval", "val_dead_features")),
    ]
    fig = new_figure(10, 6)
    for ax, (title, keys) in zip(fig.subplots(2, 2).ravel(), panels):
        for key in keys:
            steps, values = _series(rows, key)
            if steps:
                ax.plot(steps, values, marker=".", label=key.removeprefix("val_"))
        if ax.lines:
            ax.legend(fontsize=8)
        else:
            ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("step")
    return finish(fig, path)


def _round(x: float) -> float:
    return float(f"{x:.4g}")


def feature_data(features: dict) -> dict:
    """The JSON the part's script reads (see the module docstring)."""
    p, labels = features["pages"], list(features["labels"])
    rows = []
    for s in range(len(p.density)):
        examples = []
        for c, pos, act in p.examples[s]:
            lo, hi = max(0, pos - EXAMPLE_WINDOW), min(int(p.lengths[c]), pos + EXAMPLE_WINDOW + 1)
            acts = p.context_acts[(c, s)][lo:hi]
            examples.append(
                {
                    "ids": p.contexts[c, lo:hi].tolist(),
                    "acts": [_round(a) for a in acts],
                    "at": pos - lo,
                    "act": _round(act),
                }
            )
        top = p.top_token[s]
        rows.append(
            {
                "before": None if p.before[s] is None else [p.before[s][0], _round(p.before[s][1])],
                "where": None if p.where[s] is None else [p.where[s][0], _round(p.where[s][1])],
                "density": _round(p.density[s]),
                "max": _round(p.max_act[s]),
                "top": None if top is None else [top[0], _round(top[1]), _round(top[2])],
                "hist": p.hist[s],
                "promoted": [[t, _round(v)] for t, v in p.promoted[s]],
                "suppressed": [[t, _round(v)] for t, v in p.suppressed[s]],
                "examples": examples,
            }
        )
    return {"site": features["site"], "labels": labels, "positions": p.positions, "features": rows}


def feature_part(features: dict) -> tuple[str, str, str]:
    """(element id, nav name, html) of the report's Features part."""
    data = feature_data(features)
    p, c = features["pages"], features["config"]
    setting = f"k = {c['k']}" if c["kind"] == "topk" else f"L1 coefficient {c['l1_coefficient']:g}"
    dead = int((p.density == 0).sum())
    payload = json.dumps(data).replace("</", "<\\/")
    attribution = _attribution_html(features)
    intro = (
        f"<p>A {html.escape(c['kind'])} sparse autoencoder ({setting}) with {c['d_sae']:,} features on "
        f"<code>{html.escape(features['site'])}</code> ({c['d_in']} wide), read on {p.positions:,} held-out "
        f"positions: {dead:,} features never fire there. Click a column to sort, a row for the feature's "
        "page. Logit effects: the next-token logits' change at the feature's strongest examples when its "
        "write is removed at the hook point (the rest of the model run by its own forward), averaged and "
        "centred.</p>"
    )
    body = (
        '<h2 id="sf-features">Features</h2>\n'
        + intro
        + attribution
        + '<div id="sff-wrap"><div id="sff-browser"><table id="sff-table"><thead><tr>'
        '<th data-key="index">feature</th><th data-key="density">frequency</th><th data-key="max">max act</th>'
        '<th data-key="top">top token (share of examples)</th><th data-key="promotes">promotes</th>'
        '</tr></thead><tbody></tbody></table></div><div id="sff-page"><p>Click a feature.</p></div></div>\n'
        + _STYLE
        + f'<script type="application/json" id="sff-data">{payload}</script>\n'
        + _SCRIPT
    )
    return "sf-features", "Features", body


TOP_ATTRIBUTION = 8  # features listed in the attribution table


def _attribution_html(features: dict) -> str:
    """The prediction after the report's input split into the features (lens.sae.
    feature_attribution), with its check line; "" where there is none."""
    att = features.get("attribution")
    if att is None:
        return ""
    labels, tokens = features["labels"], features.get("tokens") or []
    order = np.argsort(-np.abs(att.contributions), kind="stable")[:TOP_ATTRIBUTION]
    rows = "".join(
        f"<tr><td>feature {int(att.features[i])}</td><td>{att.contributions[i]:+.4f}</td></tr>" for i in order
    )
    after = html.escape("".join(tokens)) if tokens else "the input"
    return (
        f'<p>The logit of {html.escape(repr(labels[att.token]))} after "{after}" ({att.logit:.4f}), split into '
        f"the {len(att.features)} active features, direct through the decoder (the final norm's scale frozen):</p>"
        f'<table id="sff-attribution">{rows}<tr><td>all features</td><td>{att.contributions.sum():+.4f}</td></tr>'
        f"<tr><td>b_dec</td><td>{att.b_dec:+.4f}</td></tr><tr><td>error</td><td>{att.error:+.4f}</td></tr>"
        f"<tr><td>the rest of the stream</td><td>{att.rest:+.4f}</td></tr>"
        f"<tr><td>the norm's shift and the bias</td><td>{att.bias:+.4f}</td></tr></table>"
        f'<pre id="sff-check">{html.escape(str(att.check))}</pre>'
    )


_STYLE = """<style>
#sff-wrap{display:flex;gap:16px;align-items:flex-start}
#sff-browser{max-height:640px;overflow:auto;flex:0 0 auto}
#sff-table{border-collapse:collapse;font-size:13px}
#sff-table th{cursor:pointer;position:sticky;top:0;background:#eee}
#sff-table td,#sff-table th{padding:2px 8px;text-align:left}
#sff-table tbody tr{cursor:pointer}
#sff-table tbody tr.sff-on{background:#ffe7c2}
#sff-page{flex:1 1 auto;font-size:13px}
.sff-ex{font-family:monospace;white-space:pre;margin:2px 0}
.sff-tok{padding:0 1px}
.sff-here{outline:2px solid #c00}
</style>
"""

_SCRIPT = """<script>
(function(){
const D = JSON.parse(document.getElementById('sff-data').textContent);
const F = D.features, L = D.labels;
const show = t => ({' ': '\\u2423', '\\n': '\\u21b5', '': '\\u2205'})[t] ?? t;
const esc = s => String(s).replace(/[&<>"]/g, c => ({'&':'&amp;','<':'&lt;','>':'&gt;','"':'&quot;'})[c]);
const pct = d => d === 0 ? 'never' : (100 * d).toPrecision(3) + '%';
const tbody = document.querySelector('#sff-table tbody');
let order = F.map((f, i) => i), sortKey = 'density', desc = true;
const key = (i, k) => k === 'index' ? i : k === 'density' ? F[i].density : k === 'max' ? F[i].max
  : k === 'top' ? (F[i].top ? L[F[i].top[0]] : '') : (F[i].promoted.length ? L[F[i].promoted[0][0]] : '');
function sortBy(k){
  desc = (k === sortKey) ? !desc : (k === 'density' || k === 'max');
  sortKey = k;
  order.sort((a, b) => { const x = key(a, k), y = key(b, k); return (x < y ? -1 : x > y ? 1 : a - b) * (desc ? -1 : 1); });
  render();
}
function render(){
  tbody.innerHTML = order.map(i => { const f = F[i];
    const top = f.top ? esc(show(L[f.top[0]])) + ' (' + Math.round(100 * f.top[1]) + '%)' : '';
    const pro = f.promoted.length ? esc(show(L[f.promoted[0][0]])) : '';
    return '<tr data-i="' + i + '"><td>' + i + '</td><td>' + pct(f.density) + '</td><td>' + f.max + '</td><td>'
      + top + '</td><td>' + pro + '</td></tr>'; }).join('');
}
function hist(h, max){
  const w = 240, hh = 60, n = h.length, top = Math.max(1, ...h);
  const bars = h.map((c, j) => '<rect x="' + (j * w / n) + '" y="' + (hh - hh * c / top) + '" width="'
    + (w / n - 1) + '" height="' + (hh * c / top) + '" fill="#d67d00"><title>' + c + '</title></rect>').join('');
  return '<svg id="sff-hist" width="' + w + '" height="' + (hh + 14) + '">' + bars + '<text x="0" y="' + (hh + 12)
    + '" font-size="10">0</text><text x="' + (w - 40) + '" y="' + (hh + 12) + '" font-size="10">' + max + '</text></svg>';
}
function page(i){
  const f = F[i];
  tbody.querySelectorAll('tr').forEach(r => r.classList.toggle('sff-on', +r.dataset.i === i));
  let h = '<h3 id="sff-title">feature ' + i + '</h3>';
  if (!f.examples.length) { h += '<p>Never fires on the ' + D.positions + ' held-out positions.</p>'; }
  else {
    h += '<p id="sff-claims">Fires at ' + pct(f.density) + ' of the ' + D.positions + ' held-out positions; largest activation ' + f.max + '.';
    if (f.top) h += ' Its strongest examples: token ' + esc(show(L[f.top[0]])) + ' in ' + Math.round(100 * f.top[1])
      + '% of them; it fires at ' + (100 * f.top[2]).toPrecision(3) + '% of the positions holding that token.'
      + ' They follow ' + esc(show(L[f.before[0]])) + ' in ' + Math.round(100 * f.before[1]) + '%; they sit at position '
      + f.where[0] + ' in ' + Math.round(100 * f.where[1]) + '%.';
    h += '</p><h4>strongest examples</h4>';
    h += f.examples.map(e => '<div class="sff-ex">' + e.act.toFixed(3).padStart(8) + '  ' + e.ids.map((t, j) =>
      '<span class="sff-tok' + (j === e.at ? ' sff-here' : '') + '" style="background:rgba(255,140,0,'
      + (f.max > 0 ? Math.max(0, e.acts[j]) / f.max : 0).toFixed(3) + ')" title="' + e.acts[j] + '">'
      + esc(show(L[t])) + '</span>').join('') + '</div>').join('');
    h += '<h4>activations where it fires</h4>' + hist(f.hist, f.max);
    const list = a => a.map(([t, v]) => esc(show(L[t])) + ' ' + (v >= 0 ? '+' : '') + v).join(', ');
    h += '<h4>logit effects</h4><p id="sff-promoted">promotes: ' + list(f.promoted) + '</p><p id="sff-suppressed">suppresses: '
      + list(f.suppressed) + '</p>';
  }
  document.getElementById('sff-page').innerHTML = h;
}
document.querySelectorAll('#sff-table th').forEach(th => th.addEventListener('click', () => sortBy(th.dataset.key)));
tbody.addEventListener('click', e => { const r = e.target.closest('tr'); if (r) page(+r.dataset.i); });
desc = false; sortBy('density');
})();
</script>
"""
