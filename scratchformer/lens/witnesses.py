"""The checks the lens prints: each analysis's claim recomputed by a path that shares no code with
the analysis (`lens/analyses.py`, `lens/parts.py`, `lens/report.py`), only the model's own forward
and backward, read and steered through its hooks (`lens/hooks.py`), and the model's own names.

    check = check_patching(model, clean, corrupt, metric, result)   # a `Check`
    print(check)        # check patching: ...: error 0 (tolerance 1e-10) ok

What each witness recomputes (docs/lens.md, "The checks"):

    logit lens          the model's own logits in a run whose last residual is that layer's; its
                        own softmax over the vocabulary, top-k and layer labels from the hook names
    attribution         each part's removal in a run of its own, read through the model's own
                        final norm and head with the norm's scale frozen; the logit and the bias
    head ablation       each head ablated by its own hook, the metric of that run
    patching            its own clean and corrupted runs, each cell patched by its own hook, the
                        fraction from its own metrics; whether the difference is within noise
    saliency            finite differences of the objective, the embeddings and the value read
                        from runs of its own, the norm of the gradient
    integrated grads    its own baseline, completeness, and a random weighting of the tokens'
                        path integrals by finite differences at quadrature nodes of its own
    head scores         every score of every head from the patterns of its own run, by a second
                        (looped) implementation of each definition; every row sums to 1
    report              the target, the contrast token, the measures and the baseline the report
                        says it used

A label ("L0", "enc L1", "dec L0 H2", "cross L1", "L1 mlp") is read back into the hook name it
names among the model's own (`hook_names`): a table row under the wrong label, or a self-attention
called cross attention, fails. Each check's `error` is its worst part's, next to that part's
tolerance (a part's error in the units of its own tolerance; `Check.parts` holds every part).

Tolerances (relative to the scale each part names), by the model's dtype:

- REPLAY: the same value computed twice, by the same float operations in arrays of other shapes
  (a BLAS product may then sum in another order): 1e-10 in float64 (about a million times
  float64's rounding, 1.1e-16, summed over a few thousand terms), 1e-4 in float32 (6e-8).
- FINITE_DIFFERENCE: a central difference with one Richardson step, truncation O(h^4) and
  rounding O(eps / h): 1e-6 in float64, 3e-2 in float32.
- QUADRATURE: integrated gradients are a quadrature: 1% of the gap f(input) - f(baseline).
- NOISE: a patching difference |clean - corrupted| at most REPLAY times the metric's scale
  (max(1, |clean|, |corrupted|)) is rounding, not a difference: its fractions are undefined.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from scratchformer.lens.hooks import hook_names, run_with_cache, run_with_hooks
from scratchformer.nn.layers import LayerNorm, RMSNorm

__all__ = [
    "Check",
    "tolerance",
    "within_noise",
    "PATCHING_FRACTION_LIMIT",
    "SCORE_NAMES",
    "check_logit_lens",
    "check_attribution",
    "check_ablation",
    "check_patching",
    "check_saliency",
    "check_integrated_gradients",
    "check_head_scores",
    "check_report",
]

QUADRATURE = 0.01
# patching: a fraction beyond this (one patch moves the metric more than this many times the whole
# difference between the clean and corrupted runs) flags every fraction as a ratio to a small difference
PATCHING_FRACTION_LIMIT = 10.0
SCORE_NAMES = ("previous", "first", "same", "induction", "diagonal", "anti_diagonal")


def tolerance(dtype, kind: str) -> float:
    """The relative tolerance of a check part of `kind` ("replay", "fd") in `dtype`."""
    f64 = np.dtype(dtype) == np.float64
    return {"replay": 1e-10 if f64 else 1e-4, "fd": 1e-6 if f64 else 3e-2}[kind]


def within_noise(clean: float, corrupt: float, dtype) -> bool:
    """Whether two values of a metric differ by no more than its rounding: REPLAY tolerance times
    max(1, |clean|, |corrupt|)."""
    scale = max(1.0, abs(clean), abs(corrupt))
    return not abs(clean - corrupt) > tolerance(dtype, "replay") * scale


@dataclass
class Check:
    """`what` holds within `tolerance` when `error` <= tolerance; str() is the one-line report.
    A NaN error (nothing to compare) is never ok. parts: (what, error, tolerance) of each part a
    witness measured; error and tolerance are then the worst part's (largest error / tolerance)."""

    name: str
    what: str
    error: float
    tolerance: float
    parts: list = field(default_factory=list, repr=False)

    @property
    def ok(self) -> bool:
        return bool(self.error <= self.tolerance)

    def __str__(self) -> str:
        err = "undefined" if np.isnan(self.error) else f"{self.error:.3g}"
        return f"check {self.name}: {self.what}: error {err} (tolerance {self.tolerance:g}) {'ok' if self.ok else 'FAILED'}"  # noqa: E501

    @property
    def failed_parts(self) -> list[str]:
        """The parts that failed, as 'what: error (tolerance)'."""
        return [f"{w}: {e:.3g} ({t:g})" for w, e, t in self.parts if not e <= t]


class _Parts:
    """A witness's measured parts: each `add(what, error, tolerance)`; `check(name, what)`
    reports the worst."""

    def __init__(self):
        self.parts: list[tuple[str, float, float]] = []

    def add(self, what: str, error, tol: float) -> None:
        error = float(error)
        self.parts.append((what, np.inf if np.isnan(error) else error, tol))

    def need(self, what: str, holds: bool, tol: float) -> None:
        """A part that holds or not: error 0 or infinite."""
        self.add(what, 0.0 if holds else np.inf, tol)

    def check(self, name: str, what: str) -> Check:
        if not self.parts:
            return Check(name, what, np.nan, 0.0, [])
        worst = max(self.parts, key=lambda p: p[1] / p[2] if p[2] > 0 else (np.inf if p[1] > 0 else 0.0))
        return Check(name, what, worst[1], worst[2], list(self.parts))


def _biggest(x) -> float:
    """The largest |entry| (0 for none); inf where an entry is NaN."""
    a = np.abs(np.asarray(x, dtype=np.float64))
    if a.size == 0:
        return 0.0
    return np.inf if np.isnan(a).any() else float(a.max())


def _output_logits(out) -> np.ndarray:
    return out[0] if isinstance(out, tuple) else out


def _same_shape(a, shape) -> bool:
    """Whether `a` is a table of numbers (a float array) of this shape."""
    return isinstance(a, np.ndarray) and a.dtype.kind == "f" and a.shape == tuple(shape)


# -- the model's own names ----------------------------------------------------------------------
def _numbered(names: list[str], prefix: str, tail: str) -> list[tuple[int, str]]:
    """(i, name) for the names `{prefix}blocks.{i}.{tail}`, by i."""
    pattern = re.compile(re.escape(prefix) + r"blocks\.(\d+)\." + re.escape(tail))
    found = [(int(m[1]), n) for n in names if (m := pattern.fullmatch(n))]
    return sorted(found)


def _attention_prefixes(names: list[str]) -> list[str]:
    """Every attention's hook-name prefix, in the order a forward meets them."""
    return [n.removesuffix(".head_out") for n in names if n.endswith(".head_out")]


_SELF_LABEL = re.compile(r"(?:(enc|dec) )?L(\d+)")
_OTHER_LABEL = re.compile(r"([a-z]+) L(\d+)")
_STACK_OF_SIDE = {None: "", "enc": "encoder.", "dec": "decoder."}


def _attention_named(label: str, names: list[str]) -> str | None:
    """The hook-name prefix of the attention `label` names, found among the model's own hook
    names: "L3" is block 3's self-attention of a one-stack model, "enc L3" / "dec L3" of the
    encoder's / decoder's; "cross L3" is the attention block 3 names cross_attn. None unless
    exactly one attention answers."""
    m = _SELF_LABEL.fullmatch(label)
    if m is not None:
        wanted = [f"{_STACK_OF_SIDE[m[1]]}blocks.{m[2]}.attn"]
    else:
        m = _OTHER_LABEL.fullmatch(label)
        if m is None:
            return None
        tail = f"blocks.{m[2]}.{m[1]}_attn"
        wanted = [a for a in _attention_prefixes(names) if a == tail or a.endswith("." + tail)]
    found = [a for a in wanted if a + ".head_out" in names]
    return found[0] if len(found) == 1 else None


def _rows_named(labels, names: list[str], expected: list[str]) -> bool:
    """Whether `labels` name exactly the attentions `expected`, in that order."""
    return [_attention_named(str(label), names) for label in labels] == expected


def _attention_module(model, prefix: str):
    """The attention at hook-name prefix `prefix` ("decoder.blocks.1.cross_attn"), asked of the
    model's own contract."""
    stack, _, rest = prefix.rpartition("blocks.")
    i, name = rest.split(".", 1)
    return model.block_parts(model.stacks()[stack][int(i)]).attentions[name]


# -- logit lens ----------------------------------------------------------------------------------
def check_logit_lens(model, inputs: tuple, k: int, result) -> Check:
    """Each row of `result` (a LogitLens) against the model's own logits in a run whose last
    residual is that row's residual; its probabilities against a softmax of those logits; its
    top k against an order of them; its labels against the hook names of the residuals."""
    names = hook_names(model)
    p = model.unembedding().prefix
    posts = _numbered(names, p, "resid_post")
    rows = [("embed", f"{p}blocks.0.resid_pre")] + [(f"L{i}", n) for i, n in posts]
    last = posts[-1][1]
    parts = _Parts()
    dtype = np.float64
    parts.need("a row per residual, labelled by its hook", list(result.layers) == [r[0] for r in rows], 1)
    for row, (_, source) in enumerate(rows):
        held: dict = {}

        def read(x, name, held=held):
            held["x"] = x.copy()

        def give(x, name, held=held):
            return held["x"]

        z = _output_logits(
            run_with_hooks(model, *inputs, hooks={} if source == last else {source: read, last: give})
        )
        dtype, z = z.dtype, z[0].astype(np.float64)  # (T, V)
        if not (row < len(result.logits) and _same_shape(result.logits[row], z.shape)):
            parts.need("the lens's shape", False, 1)
            continue
        rep = tolerance(dtype, "replay")
        parts.add("logits", _biggest(result.logits[row] - z) / max(1.0, _biggest(z)), rep)
        probs = np.exp(z - np.logaddexp.reduce(z, axis=-1, keepdims=True))  # (T, V), rows sum to 1
        got = result.probs[row] if row < len(result.probs) else np.full_like(z, np.nan)
        parts.add("probabilities", _biggest(got - probs), rep)
        parts.add("probabilities sum to 1 over the vocabulary", _biggest(np.sum(got, -1) - 1), rep)
        top = np.asarray(result.top_ids[row]) if row < len(result.top_ids) else None
        if top is None or top.shape != (z.shape[0], k):
            parts.need(f"top {k}", False, rep)
            continue
        for t in range(z.shape[0]):
            ids, rest = top[t], np.setdiff1d(np.arange(z.shape[1]), top[t])
            ranked = len(set(ids.tolist())) == k and bool(np.all(np.diff(z[t, ids]) <= 0))
            above = rest.size == 0 or z[t, ids].min() >= z[t, rest].max()
            parts.need(f"top {k} ids", ranked and above, rep)
            parts.add(f"top {k} probabilities", _biggest(result.top_probs[row][t] - probs[t, ids]), rep)
    return parts.check(
        "logit lens",
        "each layer's lens equals the model's logits when its last residual is that layer's, "
        f"and its probabilities and top {k} are theirs",
    )


# -- direct logit attribution ---------------------------------------------------------------------
def _frozen_change(norm, x: np.ndarray, d: np.ndarray) -> np.ndarray:
    """How a norm's output moves when its input x (C,) moves by d (C,), its scale held at x's:
    LayerNorm (d - mean d) / sqrt(var x + eps) * gamma, RMSNorm d / sqrt(mean x^2 + eps) * gamma,
    anything else (no norm, NoNorm): d."""
    if isinstance(norm, LayerNorm):
        centred = d - np.sum(d) / d.size
        return centred * norm.weight.data / np.sqrt(np.mean((x - x.mean()) ** 2) + norm.eps)
    if isinstance(norm, RMSNorm):
        return d * norm.weight.data / np.sqrt(np.sum(x * x) / x.size + norm.eps)
    return d


def check_attribution(model, inputs: tuple, token: int, position: int, result) -> Check:
    """`result` (a LogitAttribution) part by part: each part's contribution is the fall of the
    model's own logit in a run of its own where hooks remove that part alone, hold every
    sub-layer's output at its clean value, and feed the model's head the final norm's output
    with its scale frozen at the clean residual; the bias is what is left of a residual of 0."""
    names = hook_names(model)
    p = model.unembedding().prefix
    last = _numbered(names, p, "resid_post")[-1][1]
    norm_out = f"{p}ln_final"
    outs = [n for n in names if n.startswith(p + "blocks.") and n.endswith(("attn.out", ".mlp.out"))]
    atts = [a for a in _attention_prefixes(names) if a.startswith(p + "blocks.")]
    heads = [a + ".head_out" for a in atts]
    out, clean = run_with_cache(model, *inputs, names=outs + heads + [last, norm_out])
    z = _output_logits(out)
    T, V = z.shape[1], z.shape[2]
    pos, tok = position % T, token % V
    x = clean[last][0, pos]
    logit = float(z[0, pos, tok])
    norm = model.final_norm(p)

    def fall(set_hooks: dict, free: tuple = (), d=None) -> float:
        """The logit's fall in a run with `set_hooks`, every sub-layer output but `free` held."""
        hooks = {n: (lambda _x, _n, v=clean[n]: v) for n in outs if n not in free}
        hooks.update(set_hooks)
        seen = {}

        def read(r, _n):
            seen["x"] = r[0, pos].copy()

        if d is None:
            hooks[last] = read
        else:
            seen["x"] = x - d

        def frozen(y, _n):
            y = y.copy()
            y[0, pos] = clean[norm_out][0, pos] - _frozen_change(norm, x, x - seen["x"])
            return y

        hooks[norm_out] = frozen
        return logit - float(_output_logits(run_with_hooks(model, *inputs, hooks=hooks))[0, pos, tok])

    zero = lambda v, _n: np.zeros_like(v)  # noqa: E731
    expected = {}
    for label in ("embed", "pos_embed"):
        if p + label in names:
            expected[(label,)] = fall({p + label: zero})
    for a in atts:
        for h in range(clean[a + ".head_out"].shape[1]):

            def head_off(v, _n, h=h):
                v = v.copy()
                v[:, h] = 0.0
                return v

            expected[(a, h)] = fall({a + ".head_out": head_off}, free=(a + ".out",))
        if _attention_module(model, a).out_proj.bias is not None:
            whole = fall({a + ".out": zero})
            expected[(a, "bias")] = whole - fall({a + ".head_out": zero}, free=(a + ".out",))
    for _, mlp in _numbered(names, p, "mlp.out"):
        expected[(mlp,)] = fall({mlp: zero})
    left = logit - fall({}, d=x)  # the logit of a residual of 0, the norm's scale frozen at x

    got = {}
    for label, c in zip(result.labels, result.contributions):
        got.setdefault(_route(str(label), names, p), []).append(float(c))
    parts = _Parts()
    rep = 10 * tolerance(z.dtype, "replay")
    scale = max(1.0, abs(logit), _biggest(list(expected.values())))
    parts.need(
        "a part per label",
        set(got) == set(expected) and all(len(v) == 1 for v in got.values()),
        rep,
    )
    for route, value in expected.items():
        parts.add(str(route), abs(got.get(route, [np.inf])[0] - value) / scale, rep)
    parts.add("the logit", abs(result.logit - logit) / scale, rep)
    parts.add("the bias terms", abs(result.bias - left) / scale, rep)
    parts.add(
        "the parts sum to the logit", abs(np.sum(result.contributions) + result.bias - logit) / scale, rep
    )
    parts.need("the token and position", (result.token % V, result.position % T) == (tok, pos), rep)
    return parts.check(
        "logit attribution",
        "each part equals the logit's fall when it alone is removed, the final norm's scale frozen, "
        "and the parts and bias sum to the logit",
    )


def _route(label: str, names: list[str], p: str) -> tuple:
    """What an attribution label names: ("embed",), (attention prefix, head), (attention
    prefix, "bias"), (the feed-forward output's hook name,); a label naming nothing: (label,)."""
    if label in ("embed", "pos_embed"):
        return (label,)
    if m := re.fullmatch(r"(.+) H(\d+)", label):
        return (_attention_named(m[1], names), int(m[2]))
    if m := re.fullmatch(r"(.+) bias", label):
        return (_attention_named(m[1], names), "bias")
    if m := re.fullmatch(r"L(\d+) mlp", label):
        return (f"{p}blocks.{m[1]}.mlp.out",)
    return ("?", label)


# -- head ablation ------------------------------------------------------------------------------
def check_ablation(model, inputs: tuple, metric: Callable, mode: str, which: str, result) -> Check:
    """`result` (a HeadAblation) head by head: the metric of a run of its own where its own hook
    sets that head's output to 0 (or to its mean over the batch and positions), minus the metric
    of its own clean run."""
    names = hook_names(model)
    wanted = [
        a
        for a in _attention_prefixes(names)
        if which == "all" or (which == "cross") == a.endswith(".cross_attn")
    ]
    out, clean = run_with_cache(model, *inputs, names=[a + ".head_out" for a in wanted])
    base = metric(out)
    parts = _Parts()
    dtype = clean[wanted[0] + ".head_out"].dtype if wanted else np.float64
    rep = tolerance(dtype, "replay")
    scale = max(1.0, abs(base))
    parts.add("the baseline", abs(result.baseline - base) / scale, rep)
    parts.need("the mode", result.mode == mode, rep)
    parts.need("a row per attention, labelled by its hook", _rows_named(result.labels, names, wanted), rep)
    width = max([clean[a + ".head_out"].shape[1] for a in wanted], default=0)
    if not _same_shape(result.change, (len(wanted), width)):
        parts.need("the table's shape", False, rep)
        return parts.check("head ablation", "the table's shape")
    for row, a in enumerate(wanted):
        c = clean[a + ".head_out"]  # (B, H, T, hs)
        for h in range(width):
            if h >= c.shape[1]:
                parts.need("no entry for a head the attention lacks", np.isnan(result.change[row, h]), rep)
                continue
            to = np.zeros(c.shape[-1]) if mode == "zero" else c[:, h].reshape(-1, c.shape[-1]).mean(axis=0)

            def ablate(v, _n, h=h, to=to):
                v = v.copy()
                v[:, h] = to
                return v

            value = metric(run_with_hooks(model, *inputs, hooks={a + ".head_out": ablate}))
            parts.add(f"{a} head {h}", abs(result.change[row, h] - (value - base)) / scale, rep)
    what = "zero" if mode == "zero" else "its mean over batch and positions"
    return parts.check(
        "head ablation", f"each entry is the metric's change in a run of its own with that head set to {what}"
    )


# -- activation patching ------------------------------------------------------------------------
def check_patching(model, clean: tuple, corrupt: tuple, metric: Callable, result) -> Check:
    """`result` (a Patching) cell by cell: its own clean and corrupted runs, each cell's clean
    value patched into the corrupted run by its own hook, the fraction (patched - corrupted) /
    (clean - corrupted) from its own metrics; undefined exactly where the difference is within
    noise (`within_noise`), and flagged where a fraction passes PATCHING_FRACTION_LIMIT."""
    names = hook_names(model)
    stacks = list(model.stacks())
    cells = {s: _numbered(names, s, "resid_pre") for s in stacks}
    heads = _attention_prefixes(names)
    keep = [n for s in stacks for _, n in cells[s]] + [a + ".head_out" for a in heads]
    clean_out, cache = run_with_cache(model, *clean, names=keep)
    c1, c0 = metric(clean_out), metric(run_with_hooks(model, *corrupt, hooks={}))
    dtype = cache[keep[0]].dtype
    rep = tolerance(dtype, "replay")
    parts = _Parts()
    scale = max(1.0, abs(c1), abs(c0))
    parts.add("the clean run's metric", abs(result.clean_diff - c1) / scale, rep)
    parts.add("the corrupted run's metric", abs(result.corrupt_diff - c0) / scale, rep)
    noise = within_noise(c1, c0, dtype)
    parts.need("undefined exactly where the difference is within noise", result.defined is (not noise), rep)
    parts.need(
        "a row per attention, labelled by its hook", _rows_named(result.head_labels, names, heads), rep
    )
    tables = [(result.residual, cells[stacks[-1]], stacks[-1])]
    if len(stacks) == 2:
        tables.append((result.encoder_residual, cells[stacks[0]], stacks[0]))
    elif result.encoder_residual is not None:
        parts.need("no encoder table for one stack", False, rep)
    own = []  # every fraction this witness computed

    def fraction(name, index) -> float:
        def patch(v, _n):
            v = v.copy()
            v[index] = cache[name][index]
            return v

        f = (metric(run_with_hooks(model, *corrupt, hooks={name: patch})) - c0) / (c1 - c0)
        own.append(f)
        return f

    def compare(table, shape, cell, what) -> None:
        if not _same_shape(table, shape):
            parts.need(f"{what}: the table's shape", False, rep)
            return
        for (i, j), f in cell:
            got = table[i, j]
            if noise:
                parts.need(f"{what}: undefined", np.isnan(got), rep)
            else:
                own_f = f()
                parts.add(f"{what} [{i}, {j}]", abs(got - own_f) / max(1.0, abs(own_f)), rep)

    for table, blocks, stack in tables:
        T = cache[blocks[0][1]].shape[1]
        cell = [
            ((i, t), (lambda n=n, t=t: fraction(n, (slice(None), t))))
            for i, (_, n) in enumerate(blocks)
            for t in range(T)
        ]
        compare(table, (len(blocks), T), cell, f"{stack}residual")
    width = max([cache[a + ".head_out"].shape[1] for a in heads], default=0)
    cell = []
    for row, a in enumerate(heads):
        H = cache[a + ".head_out"].shape[1]
        cell += [((row, h), (lambda a=a, h=h: fraction(a + ".head_out", (slice(None), h)))) for h in range(H)]
        cell += [((row, h), (lambda: np.nan)) for h in range(H, width)]
    compare(result.heads, (len(heads), width), cell, "heads")
    if not noise:
        limit = bool(np.max(np.abs(own), initial=0.0) > PATCHING_FRACTION_LIMIT)
        parts.need("flagged exactly where a fraction passes the limit", result.small is limit, rep)
    return parts.check(
        "patching",
        "each fraction is the metric's recovery in a run of its own patching that cell's clean value "
        "into the corrupted run"
        + (" (undefined: clean and corrupted runs give the same metric, within noise)" if noise else ""),
    )


# -- saliency -----------------------------------------------------------------------------------
def _embeddings_name(model) -> str:
    return model.main_prefix() + "embed"


def _f_at(model, inputs, objective, name, x) -> float:
    """The objective with the input embeddings replaced by x (an eval-mode forward)."""
    return float(objective(run_with_hooks(model, *inputs, hooks={name: lambda _v, _n: x}))[0])


def _slope(model, inputs, objective, name, x, v, h, richardson: bool = True) -> float:
    """d f(x + s v) / ds at 0 by central differences (with one Richardson step: error O(h^4))."""

    def central(step):
        up = _f_at(model, inputs, objective, name, (x + step * v).astype(x.dtype))
        down = _f_at(model, inputs, objective, name, (x - step * v).astype(x.dtype))
        return (up - down) / (2 * step)

    return (4 * central(h / 2) - central(h)) / 3 if richardson else central(h)


def check_saliency(model, inputs: tuple, objective: Callable, result) -> Check:
    """`result` (a Saliency) against finite differences of the objective along a random
    direction (the gradient) and along each token's embedding weighted at random (gradient x
    input), the embeddings and the value of a run of its own, and the gradient's norm per token."""
    name = _embeddings_name(model)
    out, cache = run_with_cache(model, *inputs, names=[name])
    x = cache[name]
    dtype = x.dtype
    rep, fd = tolerance(dtype, "replay"), tolerance(dtype, "fd")
    parts = _Parts()
    value = float(objective(out)[0])
    parts.add("the value", abs(result.value - value) / max(1.0, abs(value)), rep)
    if not (_same_shape(result.gradient, x.shape) and _same_shape(result.embeddings, x.shape)):
        parts.need("the gradient's shape", False, rep)
        return parts.check("saliency", "the shapes")
    parts.add("the embeddings", _biggest(result.embeddings - x) / max(1.0, _biggest(x)), rep)
    g = result.gradient.astype(np.float64)
    rng = np.random.default_rng(0)
    u = rng.standard_normal(x.shape)
    weights = rng.uniform(0.5, 1.5, x.shape[:-1])  # (B, T): tokens in another order give another sum
    g_norm = float(np.sqrt(np.sum(g * g)))
    x64 = x.astype(np.float64)
    for what, v, expected in (
        ("the gradient", u, float(np.sum(g * u))),
        (
            "gradient x input",
            x64 * weights[..., None],
            float(np.sum(np.asarray(result.grad_x_input) * weights)),
        ),
    ):
        size = float(np.linalg.norm(v))
        if size == 0:
            continue
        h = (1e-5 if dtype == np.float64 else 3e-2) * max(1.0, float(np.linalg.norm(x64))) / size
        d = _slope(model, inputs, objective, name, x, v.astype(dtype), h)
        parts.add(what, abs(d - expected) / max(g_norm * size, 1e-30), fd)
    norm = np.sqrt(np.einsum("btc,btc->bt", g, g))
    parts.add("the gradient's norm per token", _biggest(result.norm - norm) / max(g_norm, 1e-30), rep)
    return parts.check(
        "saliency",
        "central differences along a random direction and along the weighted embeddings equal the "
        "gradient and gradient x input; its norm per token",
    )


# -- integrated gradients -------------------------------------------------------------------------
class _Enough(Exception):
    """Raised by a hook that has read what it needs: the forward stops there."""


def _vocabulary_mean(model, inputs: tuple, name: str) -> np.ndarray:
    """The mean of the input embeddings of every token id of the main stack's vocabulary (C,),
    read at the embedding hook of runs stopped there, one id per row."""
    V = model.token_table(model.main_prefix()).shape[0]
    total, width = None, 0
    for start in range(0, V, 256):
        ids = np.arange(start, min(V, start + 256))[:, None]
        rest = tuple(np.repeat(np.asarray(a).reshape(1, -1)[:, :1], len(ids), 0) for a in inputs[1:])
        got = {}

        def take(v, _n, got=got):
            got["v"] = v[:, 0].astype(np.float64)
            raise _Enough

        try:
            run_with_hooks(model, ids, *rest, hooks={name: take})
        except _Enough:
            pass
        total = got["v"].sum(0) if total is None else total + got["v"].sum(0)
        width += len(ids)
    return total / width


def baseline_of(model, inputs: tuple, baseline, baseline_inputs=None) -> np.ndarray:
    """The integrated-gradients start a witness builds for itself: zeros ("zero", None), the
    vocabulary's mean embedding ("mean"), the embeddings of `baseline_inputs`, or the given array."""
    name = _embeddings_name(model)
    _, cache = run_with_cache(model, *inputs, names=[name])
    x = cache[name]
    if baseline_inputs is not None:
        return run_with_cache(model, *baseline_inputs, names=[name])[1][name]
    if baseline is None or (isinstance(baseline, str) and baseline == "zero"):
        return np.zeros_like(x)
    if isinstance(baseline, str):  # "mean"
        return np.broadcast_to(_vocabulary_mean(model, inputs, name).astype(x.dtype), x.shape).copy()
    return np.broadcast_to(np.asarray(baseline, dtype=x.dtype), x.shape).copy()


def check_integrated_gradients(
    model, inputs: tuple, objective: Callable, steps: int, baseline, baseline_inputs, result
) -> Check:
    """`result` (IntegratedGradients) from a baseline this witness builds itself: f(input) and
    f(baseline) from runs of its own; completeness (the attributions sum to their difference);
    and the tokens' path integrals weighted at random, by central differences along the path at
    steps + 1 Gauss-Legendre nodes of its own (an attribution moved to another token fails)."""
    name = _embeddings_name(model)
    _, cache = run_with_cache(model, *inputs, names=[name])
    x = cache[name]
    x0 = baseline_of(model, inputs, baseline, baseline_inputs)
    dtype = x.dtype
    f1 = _f_at(model, inputs, objective, name, x)
    f0 = _f_at(model, inputs, objective, name, x0)
    gap = f1 - f0
    parts = _Parts()
    rep = tolerance(dtype, "replay")
    parts.add("f(input)", abs(result.value - f1) / max(1.0, abs(f1)), rep)
    parts.add("f(baseline)", abs(result.baseline_value - f0) / max(1.0, abs(f0)), rep)
    A = np.asarray(result.attributions, dtype=np.float64)
    if A.shape != x.shape[:-1]:
        parts.need("an attribution per token", False, QUADRATURE)
        return parts.check("integrated gradients", "the shape")
    floor = 1e-8 * max(1.0, abs(f1))  # a baseline the model cannot tell from the input
    parts.add("completeness", abs(float(A.sum()) - gap) / max(abs(gap), floor), QUADRATURE)
    weights = np.random.default_rng(1).uniform(0.5, 1.5, A.shape)
    delta = (x - x0).astype(np.float64)
    v = delta * weights[..., None]
    size = float(np.linalg.norm(v))
    if size > 0:
        t, c = np.polynomial.legendre.leggauss(int(steps) + 1)
        # a step of 1e-4 (float64) or 1e-2 (float32: rounding) of the path's own length; in float32,
        # one Richardson step, so the larger step's truncation error stays below the quadrature's
        h = (1e-4 if dtype == np.float64 else 1e-2) * float(np.linalg.norm(delta)) / size
        path = sum(
            0.5
            * ci
            * _slope(
                model,
                inputs,
                objective,
                name,
                (x0 + 0.5 * (ti + 1) * delta).astype(dtype),
                v.astype(dtype),
                h,
                richardson=dtype != np.float64,
            )
            for ti, ci in zip(t, c)
        )
        weighted = float(np.sum(A * weights))
        parts.add(
            "the tokens' path integrals, weighted",
            abs(weighted - path) / max(abs(gap), abs(path), floor),
            QUADRATURE,
        )
    return parts.check(
        "integrated gradients",
        "the attributions sum to f(input) - f(baseline), and a random weighting of them equals the "
        "tokens' path integrals by finite differences",
    )


# -- head scores ---------------------------------------------------------------------------------
def _scores_by_loops(w: np.ndarray, cross: bool, ids: np.ndarray | None) -> dict[str, np.ndarray]:
    """Every score of one attention's pattern w (B, H, Tq, Tk), one query at a time: {name: (H,)},
    NaN where it does not apply. ids (B, Tq): the tokens the queries read, or None."""
    B, H, Tq, Tk = w.shape
    out = {k: np.full(H, np.nan) for k in SCORE_NAMES}

    def mean(rows):
        return np.mean(rows, axis=0) if rows else np.full(H, np.nan)

    if cross:
        n = min(Tq, Tk)
        out["diagonal"] = mean([w[b, :, q, q] for b in range(B) for q in range(n)])
        out["anti_diagonal"] = mean([w[b, :, q, Tk - 1 - q] for b in range(B) for q in range(n)])
        return out
    out["first"] = mean([w[b, :, q, 0] for b in range(B) for q in range(Tq)])
    out["previous"] = mean([w[b, :, q, q - 1] for b in range(B) for q in range(1, Tq)])
    if ids is None:
        return out
    same, after = [], []
    for b in range(B):
        for q in range(Tq):
            earlier = [j for j in range(q) if ids[b, j] == ids[b, q]]
            if earlier:
                same.append(w[b, :, q, earlier].sum(axis=0))
                after.append(w[b, :, q, [j + 1 for j in earlier]].sum(axis=0))
    if same:
        out["same"], out["induction"] = mean(same), mean(after)
    return out


def check_head_scores(model, inputs: tuple, ids, result) -> Check:
    """`result` (HeadScores): every score of every head from the patterns of a run of its own,
    each definition computed again one query at a time; every attention row sums to 1."""
    names = hook_names(model)
    atts = _attention_prefixes(names)
    _, cache = run_with_cache(model, *inputs, names=[a + ".pattern" for a in atts])
    ids = np.asarray(inputs[0] if ids is None else ids)
    ids = ids.reshape(1, -1) if ids.ndim == 1 else ids
    reads_ids = model.main_prefix() + "blocks."
    parts = _Parts()
    dtype = cache[atts[0] + ".pattern"].dtype
    rep = tolerance(dtype, "replay")
    parts.need("a row per attention, labelled by its hook", _rows_named(result.labels, names, atts), rep)
    parts.need("the scores", set(result.scores) == set(SCORE_NAMES), rep)
    width = max(cache[a + ".pattern"].shape[1] for a in atts)
    for row, a in enumerate(atts):
        w = cache[a + ".pattern"].astype(np.float64)
        parts.add(f"{a}: rows sum to 1", _biggest(w.sum(-1) - 1), rep)
        Tq, Tk = w.shape[2:]
        own_ids = ids if a.startswith(reads_ids) and ids.shape[1] == Tq == Tk else None
        own = _scores_by_loops(w, a.endswith(".cross_attn"), own_ids)
        for score in SCORE_NAMES:
            table = result.scores.get(score)
            if not _same_shape(table, (len(atts), width)):
                parts.need(f"{score}: the table's shape", False, rep)
                continue
            expected = np.concatenate([own[score], np.full(width - w.shape[1], np.nan)])
            got = table[row]
            same_nan = np.array_equal(np.isnan(got), np.isnan(expected))
            parts.need(f"{a} {score}: where it applies", same_nan, rep)
            if same_nan:
                parts.add(f"{a} {score}", _biggest(np.nan_to_num(got - expected)), rep)
    return parts.check(
        "head scores",
        "every score of every head equals its definition computed again, one query at a time, on "
        "the patterns of a run of its own, and every attention row sums to 1",
    )


# -- the report ----------------------------------------------------------------------------------
def check_report(model, example, report, *, baseline=None, corrupt=None, k=None) -> Check:
    """What a `LensReport` says it measured: the target (the one the example fixes, else the
    model's prediction at the last position of a run of its own); the logit the attribution and
    saliency explain; the loss ablation follows; integrated gradients' start (`baseline`, the
    kind asked for: "zero" or "mean", None for the default, () for embeddings or inputs given;
    the default is zero embeddings where the model adds positions to its token embeddings (its
    main stack has a pos_embed hook), else the mean token embedding); patching's contrast (the
    corrupted run's likeliest token other than the target) and the logit difference it follows;
    every analysis that applies is there (the logit lens, of k tokens, where the model has an
    unembedding; ablation where the example has a loss; saliency and integrated gradients where
    its output has labels; head scores; patching exactly when a corrupted input is given)."""
    names = hook_names(model)
    parts = _Parts()
    rep = tolerance(model.dtype, "replay")
    lens = report.logit_lens
    parts.need("the logit lens", (lens is not None) == (model.unembedding() is not None), rep)
    if lens is not None and k is not None:
        parts.need(f"the logit lens's top {k}", lens.top_ids.shape[-1] == min(k, lens.logits.shape[-1]), rep)
    parts.need("head ablation", (report.ablation is not None) == (example.loss_inputs is not None), rep)
    labelled = example.output_labels is not None
    parts.need("saliency", (report.saliency is not None) == labelled, rep)
    parts.need("integrated gradients", (report.integrated_gradients is not None) == labelled, rep)
    parts.need("head scores", report.head_scores is not None, rep)
    parts.need(
        "patching exactly when a corrupted input is given",
        (report.patching is None) == (corrupt is None),
        rep,
    )

    def last_logits(inputs):
        z = _output_logits(run_with_hooks(model, *inputs, hooks={}))
        return (z[0, -1] if z.ndim == 3 else z[0]).astype(np.float64)

    z = last_logits(example.explained) if example.output_labels is not None else None
    if example.target is not None:
        parts.need("the target is the example's", report.target == example.target, rep)
    elif z is None:
        parts.need("no target where the output has no labels", report.target is None, rep)
    elif z is not None:
        predicted = report.target is not None and 0 <= report.target < len(z) and z[report.target] == z.max()
        parts.need("the target is the model's prediction", predicted, rep)
    scale = 1.0 if z is None else max(1.0, _biggest(z))
    if report.attribution is not None:
        parts.need("attribution explains the target", report.attribution.token == report.target, rep)
    if report.saliency is not None:
        parts.add(
            "saliency explains the target's logit", abs(report.saliency.value - z[report.target]) / scale, rep
        )
    if report.ablation is not None:
        loss = float(run_with_hooks(model, *example.loss_inputs, hooks={})[1])
        parts.add("ablation follows the loss", abs(report.ablation.baseline - loss) / max(1.0, loss), rep)
    if report.integrated_gradients is not None:
        if baseline is None:
            baseline = "zero" if model.main_prefix() + "pos_embed" in names else "mean"
        parts.need("integrated gradients' start", report.baseline == (baseline or None), rep)
    if report.patching is not None:
        corrupted = (np.asarray(corrupt).reshape(1, -1),) + tuple(example.explained[1:])
        zc = last_logits(corrupted)
        others = np.delete(zc, report.target)
        parts.need(
            "the contrast is the corrupted run's likeliest other token",
            report.other != report.target and zc[report.other] == others.max(),
            rep,
        )
        for what, got, logits in (
            ("clean", report.patching.clean_diff, z),
            ("corrupted", report.patching.corrupt_diff, zc),
        ):
            diff = logits[report.target] - logits[report.other]
            parts.add(f"patching's {what} logit difference", abs(got - diff) / scale, rep)
    return parts.check(
        "report",
        "the target, the logits and loss each analysis follows, integrated gradients' start and "
        "patching's contrast token are what the report says",
    )
