"""A sparse autoencoder inside the model it was trained on: its activations read through the
model's hook points, its reconstruction spliced back in through them, and what each feature
does. Nothing here runs a block of its own: the model's forward runs, the hooks read or replace.

    acts = site_activations(model, (x,), "blocks.1.resid_post")     # (B, T, width), stopped at the site
    m = Measures(); m.add(model, sae, site, x, y, special); m.result()   # SAELens's measures
    att = feature_attribution(model, sae, site, (ids,), token)       # a logit split into features
    pages = feature_pages(model, sae, site, batches, labels, special)  # what each feature fires on

Rows: a hook point's activation is read as one vector per position, (B, T, width): (B, T, C)
as it is, (B, H, T, d) with the heads side by side (B, T, H * d), as SAELens reads hook_z. A
position counts (is trained on and measured) when its target counts (not IGNORE_INDEX) and its
input token is not a special one (the names' boundary token): SAELens's evals leave special
tokens out (`exclude_special_tokens=True`).

SAELens's measures, by SAELens's definitions (sae_lens/evals.py, version 6.51.1; quoted in
docs/lens.md), over the counted positions of the batches added:

    l0, l1          the mean over positions of (acts > 0).sum(-1) and of acts.sum(-1)
    mse             the mean over positions of ||x - x_hat||^2
    explained_variance   1 - E||x - x_hat||^2 / (E||x||^2 - ||E x||^2)   (ExplainedVarianceCalculator)
    l2_ratio        the mean over positions of ||x_hat|| / ||x|| (a norm under 1e-4 divides as 1)
    ce_loss_score   (CE with the site zero-ablated - CE with x_hat spliced in)
                    / (CE zero-ablated - CE clean); per-token CE averaged over the counted positions
    kl_div_score    (KL zero-ablated - KL with x_hat) / KL zero-ablated; KL(clean || run) per token
    dead, dense     the features whose density (firing positions / positions) is 0, and >= 1e-2
                    (SAELens's evals tutorial: "latents that fire every one in one hundred tokens or
                    fewer can be considered dense ... between -2 and 0 on the [log10 density] histogram")

The splice replaces the counted positions only (SAELens's standard_replacement_hook keeps the
special tokens' activations); the ablation zeroes every position (standard_zero_ablate_hook).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from scratchformer.errors import ConfigError, DataError
from scratchformer.lens.analyses import Check, _tolerance
from scratchformer.lens.hooks import hook_names, resolve_names, run_with_cache, run_with_hooks
from scratchformer.lens.parts import unembedding
from scratchformer.models.base import IGNORE_INDEX
from scratchformer.nn.layers import RMSNorm
from scratchformer.nn.module import eval_mode
from scratchformer.ops.softmax import log_softmax_forward

__all__ = [
    "DENSE_DENSITY",
    "FeatureAttribution",
    "FeaturePages",
    "Measures",
    "counted_positions",
    "feature_attribution",
    "feature_pages",
    "from_rows",
    "site_activations",
    "site_width",
    "to_rows",
]

DENSE_DENSITY = 1e-2  # SAELens's evals tutorial: log10 density between -2 and 0 is dense


# -- reading a site -----------------------------------------------------------------------------------
def to_rows(a: np.ndarray) -> np.ndarray:
    """A hook point's activation -> (B, T, width): (B, T, C) as it is; (B, H, T, d) -> (B, T, H * d)."""
    if a.ndim == 3:
        return a
    if a.ndim == 4:
        B, H, T, d = a.shape
        return a.transpose(0, 2, 1, 3).reshape(B, T, H * d)
    raise DataError(
        f"an autoencoder reads one vector per position: activations of shape (B, T, C) or "
        f"(B, H, T, d), got shape {a.shape} (a table the same for every input has nothing to learn)"
    )


def from_rows(rows: np.ndarray, shape: tuple) -> np.ndarray:
    """The inverse of `to_rows` for an activation of `shape`."""
    if len(shape) == 3:
        return rows.reshape(shape)
    B, H, T, d = shape
    return rows.reshape(B, T, H, d).transpose(0, 2, 1, 3)


class _Stop(Exception):
    """Raised by the site's hook once it has read the activation: the rest of the forward is not needed."""


def site_activations(model, inputs: tuple, site: str) -> np.ndarray:
    """The activation at `site` (one hook name) for `inputs`, as (B, T, width) rows (a copy);
    the forward stops there."""
    held = {}

    def grab(x, _name):
        held["x"] = to_rows(np.array(x, copy=True))
        raise _Stop

    try:
        run_with_hooks(model, *inputs, hooks={site: grab})
    except _Stop:
        pass
    if "x" not in held:  # a hook point the forward never reached (a decoder site given no decoder input)
        raise DataError(f"the forward never reached {site}: it reads no activation there")
    return held["x"]


def site_width(model, inputs: tuple, site: str) -> int:
    """The width of one row of `site` (checked: the name is one hook point, and its rows are as
    wide for the first token alone as for all of `inputs`)."""
    names = resolve_names(model, site)
    if len(names) != 1 or names[0] != site:
        raise ConfigError(f"--site names one hook point, got {site!r} (matching {len(names)})")
    width = site_activations(model, inputs, site).shape[-1]
    first = (np.asarray(inputs[0])[:, :1],) + tuple(inputs[1:])
    if np.asarray(inputs[0]).shape[1] > 1 and site_activations(model, first, site).shape[-1] != width:
        raise ConfigError(
            f"the rows of {site} grow with the input (a row over the keys): an autoencoder reads rows of one "
            "width; choose another hook point, e.g. resid_post, mlp.post or attn.head_out"
        )
    return width


def counted_positions(x: np.ndarray, y: np.ndarray, special: tuple[int, ...]) -> np.ndarray:
    """(B, T) bool: a target that counts, and an input token that is not special."""
    return (np.asarray(y) != IGNORE_INDEX) & ~np.isin(x, list(special))


def _splice(sae, mask: np.ndarray):
    """A hook replacing the site's counted positions by the autoencoder's reconstruction."""

    def hook(a, _name):
        rows = to_rows(a)
        return from_rows(np.where(mask[..., None], sae.reconstruct(rows), rows), a.shape)

    return hook


def _zero(a, _name):
    return np.zeros_like(a)


def _token_losses(logits: np.ndarray, y: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """The cross-entropy of each counted position (K,), float64."""
    logp = log_softmax_forward(logits[mask].astype(np.float64))
    return -logp[np.arange(len(logp)), y[mask]]


def _kl(clean_logits: np.ndarray, logits: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """KL(clean || run) at each counted position (K,), float64: sum p_clean (log p_clean - log p_run)."""
    lp_clean = log_softmax_forward(clean_logits[mask].astype(np.float64))
    lp = log_softmax_forward(logits[mask].astype(np.float64))
    return (np.exp(lp_clean) * (lp_clean - lp)).sum(axis=-1)


# -- SAELens's measures ----------------------------------------------------------------------------------
@dataclass
class Measures:
    """Sums over the counted positions of the batches `add`ed; `result()` gives the measures."""

    sums: dict = field(default_factory=dict)
    sum_x: np.ndarray | None = None
    fired: np.ndarray | None = None  # (d_sae,) counted positions each feature fired at
    n: int = 0

    def _add(self, name: str, values: np.ndarray) -> None:
        self.sums[name] = self.sums.get(name, 0.0) + float(np.sum(values, dtype=np.float64))

    def add(self, model, sae, site: str, x: np.ndarray, y: np.ndarray, special: tuple[int, ...]):
        """One batch of the model's inputs x (B, T) and next-token targets y (B, T); returns the
        site's rows at its counted positions (K, width), float64, or None where none counts."""
        mask = counted_positions(x, y, special)
        if not mask.any():
            return None
        clean, cache = run_with_cache(model, x, names=[site])
        clean = clean[0] if isinstance(clean, tuple) else clean
        rows = to_rows(cache[site])[mask].astype(np.float64)  # (K, width)
        with eval_mode(sae):
            acts = sae.encode(rows)
            x_hat = sae.decode(acts).astype(np.float64)
        spliced = run_with_hooks(model, x, hooks={site: _splice(sae, mask)})
        ablated = run_with_hooks(model, x, hooks={site: _zero})
        spliced = spliced[0] if isinstance(spliced, tuple) else spliced
        ablated = ablated[0] if isinstance(ablated, tuple) else ablated
        norm_in, norm_out = np.linalg.norm(rows, axis=1), np.linalg.norm(x_hat, axis=1)
        self._add("l0", (acts > 0).sum(axis=1))
        self._add("l1", acts.sum(axis=1, dtype=np.float64))
        self._add("mse", ((rows - x_hat) ** 2).sum(axis=1))
        self._add("sq_norm", (rows**2).sum(axis=1))
        self._add("l2_ratio", norm_out / np.where(np.abs(norm_in) < 1e-4, 1.0, norm_in))
        self._add("ce_clean", _token_losses(clean, y, mask))
        self._add("ce_sae", _token_losses(spliced, y, mask))
        self._add("ce_ablated", _token_losses(ablated, y, mask))
        self._add("kl_sae", _kl(clean, spliced, mask))
        self._add("kl_ablated", _kl(clean, ablated, mask))
        batch_sum = rows.sum(axis=0)
        self.sum_x = batch_sum if self.sum_x is None else self.sum_x + batch_sum
        fired = (acts > 0).sum(axis=0)
        self.fired = fired if self.fired is None else self.fired + fired
        self.n += len(rows)
        return rows

    def result(self) -> dict[str, float]:
        """{l0, l1, mse, explained_variance, l2_ratio, ce_loss_score, kl_div_score, the three
        CE losses and two KLs, dead, dense (feature counts), positions}."""
        if self.n == 0:
            raise DataError("no counted position to measure the autoencoder on: give more data")
        n, s = self.n, self.sums
        mean = {k: v / n for k, v in s.items()}
        variance = mean["sq_norm"] - float((self.sum_x / n) @ (self.sum_x / n))
        ce_gap = mean["ce_ablated"] - mean["ce_clean"]
        density = self.fired / n
        return {
            "l0": mean["l0"],
            "l1": mean["l1"],
            "mse": mean["mse"],
            "explained_variance": 1.0 - mean["mse"] / variance if variance > 1e-10 else float("nan"),
            "l2_ratio": mean["l2_ratio"],
            "ce_loss_score": (mean["ce_ablated"] - mean["ce_sae"]) / ce_gap if ce_gap else float("nan"),
            "kl_div_score": (mean["kl_ablated"] - mean["kl_sae"]) / mean["kl_ablated"]
            if mean["kl_ablated"]
            else float("nan"),
            "ce_loss_without_sae": mean["ce_clean"],
            "ce_loss_with_sae": mean["ce_sae"],
            "ce_loss_with_ablation": mean["ce_ablated"],
            "kl_div_with_sae": mean["kl_sae"],
            "kl_div_with_ablation": mean["kl_ablated"],
            "dead_in_eval": int((density == 0).sum()),
            "dense_in_eval": int((density >= DENSE_DENSITY).sum()),
            "positions": n,
        }


# -- attributing a logit to the features ----------------------------------------------------------------
RESIDUAL_SITES = (".resid_pre", ".resid_mid", ".resid_cross", ".resid_post", "attn.out", "mlp.out")


@dataclass
class FeatureAttribution:
    """The logit of `token` at `position`, split: features (their ids and contributions, every
    active feature), the autoencoder's bias b_dec, its error (the activation less the
    reconstruction), the rest of the final residual stream (what is added before or after the
    site), and `bias` (the final norm's shift and the unembedding's bias)."""

    features: np.ndarray
    contributions: np.ndarray
    b_dec: float
    error: float
    rest: float
    bias: float
    logit: float
    position: int
    token: int
    check: Check


def feature_attribution(
    model, sae, site: str, inputs: tuple, token: int, position: int = -1
) -> FeatureAttribution:
    """Direct attribution of a logit to the autoencoder's features, through the decoder: the
    site's activation at `position` is b_dec + sum_s acts_s * direction_s + error, and the final
    residual stream is that plus the rest; with the final norm's scale frozen at the final
    residual (lens.parts.Unembedding.frozen_norm), each part's share of the logit is its vector
    through the frozen norm and the unembedding row of `token`. The site must be one the
    residual stream adds up (RESIDUAL_SITES) in a pre-norm model.

    Check (another path: the model's and the autoencoder's own forwards): the parts and the bias
    terms sum to the logit of the model's forward; and each active feature, b_dec and the error
    equal the logit's change, with the norm's scale frozen, in a run whose hook at the site
    removes that part's write at the position (a feature's write: the autoencoder's decode of
    the activations less its decode without that feature; b_dec: the decode of nothing; the
    error: the activation less the decode) while every later sub-layer output is held at its
    clean value (REPLAY x 10, relative to the largest of the logit and the parts)."""
    un = unembedding(model)
    if not un.pre_norm:
        raise ConfigError(
            "feature attribution needs a pre-norm model (its residual stream is a sum of parts)"
        )
    if not site.endswith(RESIDUAL_SITES) or not site.startswith(un.prefix + "blocks."):
        raise ConfigError(
            f"feature attribution splits the residual stream: the autoencoder must read resid_pre, "
            f"resid_mid, resid_post, attn.out or mlp.out of the stack the logits read, not {site}"
        )
    last = f"{un.prefix}blocks.{un.n_layer - 1}.resid_post"
    out, cache = run_with_cache(model, *inputs, names=[site, last])
    logits = out[0] if isinstance(out, tuple) else out
    T = logits.shape[1]
    if not -T <= position < T:
        raise DataError(f"position must be in [{-T}, {T - 1}], got {position}")
    position %= T
    x_site = cache[site][0, position].astype(np.float64)  # (C,)
    final = cache[last][0, position].astype(np.float64)
    with eval_mode(sae):
        acts = sae.encode(x_site[None])[0].astype(np.float64)
    active = np.flatnonzero(acts)
    writes = _feature_writes(sae, acts, active)  # (n_active, C)
    b_dec = sae.b_dec.data.astype(np.float64)
    error = x_site - (b_dec + writes.sum(axis=0))
    apply, shift = un.frozen_norm(final)
    w_u = un.W[token].astype(np.float64)

    def share(v):
        return float(apply(v) @ w_u)

    bias = float(shift @ w_u) + (float(un.b[token]) if un.b is not None else 0.0)
    att = FeatureAttribution(
        active,
        np.array([share(w) for w in writes]),
        share(b_dec),
        share(error),
        share(final - x_site),
        bias,
        float(logits[0, position, token]),
        position,
        token,
        None,
    )
    att.check = _attribution_check(model, sae, site, inputs, att, last, x_site, acts)
    return att


def _feature_writes(sae, acts: np.ndarray, active: np.ndarray) -> np.ndarray:
    """What each active feature adds to the reconstruction: its activation times its direction
    (the topk kind's unit decoder row, the relu kind's row)."""
    return acts[active, None] * sae.directions().astype(np.float64)[active]


def _frozen_change(norm, x: np.ndarray, d: np.ndarray) -> np.ndarray:
    """The final norm's output change when its input x moves by d, its scale held at x's: written
    here from the norm's own weight and eps, apart from the attribution's frozen map."""
    if norm is None:
        return d
    w, eps = norm.weight.data.astype(np.float64), norm.eps
    if isinstance(norm, RMSNorm):
        return d * w / np.sqrt(np.mean(x * x) + eps)
    return (d - d.mean()) * w / np.sqrt(np.var(x) + eps)


def _attribution_check(model, sae, site, inputs, att, last, x_site, acts) -> Check:
    un = unembedding(model)
    logits = run_with_hooks(model, *inputs, hooks={})
    logits = logits[0] if isinstance(logits, tuple) else logits
    logit = float(logits[0, att.position, att.token])
    total = float(np.sum(att.contributions)) + att.b_dec + att.error + att.rest + att.bias
    scale = max(1.0, abs(logit), float(np.max(np.abs(att.contributions), initial=0.0)))
    worst = abs(total - logit)
    names = hook_names(model)
    later = [
        n
        for n in names[names.index(site) + 1 :]
        if n.startswith(un.prefix + "blocks.") and n.endswith((".attn.out", ".cross_attn.out", ".mlp.out"))
    ]
    _, clean = run_with_cache(model, *inputs, names=later + [last])
    x = clean[last][0, att.position].astype(np.float64)
    with eval_mode(sae):
        decoded = sae.decode(acts[None])[0].astype(np.float64)

        def without(s):
            fewer = acts.copy()
            fewer[s] = 0.0
            return decoded - sae.decode(fewer[None])[0].astype(np.float64)

        parts = [(att.contributions[i], without(s)) for i, s in enumerate(att.features)]
        parts += [(att.b_dec, sae.decode(np.zeros((1, len(acts))))[0].astype(np.float64))]
    parts += [(att.error, x_site - decoded)]
    for claimed, write in parts:

        def remove(a, _n, write=write):
            a = np.array(a, copy=True)
            a[0, att.position] -= write.astype(a.dtype)
            return a

        hooks = {n: (lambda _a, _n, v=clean[n]: v) for n in later}
        hooks[site] = remove
        _, run = run_with_cache(model, *inputs, names=[last], hooks=hooks)
        moved = x - run[last][0, att.position].astype(np.float64)
        expected = float(_frozen_change(un.norm, x, moved) @ un.W[att.token].astype(np.float64))
        worst = max(worst, abs(claimed - expected))
    dtype = np.result_type(logits.dtype, sae.W_dec.data.dtype)
    return Check(
        "feature attribution",
        "the features, b_dec, the error and the rest sum to the logit, and each feature, b_dec and the "
        "error equal their removal's effect with the norm's scale frozen",
        worst / scale,
        10 * _tolerance(dtype, "replay"),
    )


# -- what each feature does -------------------------------------------------------------------------------
@dataclass
class FeaturePages:
    """What the pages of report.html show, per feature s of d_sae:

    density (d_sae,): firing positions / counted positions; max_act (d_sae,);
    examples[s]: up to `top` (context index, position, activation), strongest first;
    contexts (n, T) int: the token ids of the contexts read; context_acts: {(context, s): (T,)
    activations of s along that context} for the contexts of the examples;
    hist[s]: counts of the nonzero activations over `bins` bins of [0, max_act[s]];
    promoted[s] / suppressed[s]: (token id, logit change) of the tokens whose next-token logit
    the feature's write raises most / lowers most (its removal at the site, the rest of the model
    run by its own forward, averaged over its examples, centred over the vocabulary);
    top_token[s]: (token id, share of the examples whose token it is, P(fires | that token)) or
    None for a feature that never fired; before[s]: (token id, share) of the token most of its
    examples follow, and where[s]: (position, share) of the position most of them sit at (None
    for a feature that never fired); lengths (n,): each context's positions up to its last
    target; positions: counted positions read."""

    density: np.ndarray
    max_act: np.ndarray
    examples: list
    contexts: np.ndarray
    context_acts: dict
    hist: list
    bins: int
    promoted: list
    suppressed: list
    top_token: list
    before: list
    where: list
    lengths: np.ndarray
    positions: int


def feature_pages(
    model,
    sae,
    site: str,
    batches,
    special: tuple[int, ...],
    top: int = 10,
    bins: int = 20,
    effects_examples: int = 4,
    n_tokens: int = 5,
) -> FeaturePages:
    """Read every (x, y) batch of `batches` at the site once: each feature's density, strongest
    examples, histogram and most frequent token; then each feature's logit effects (see
    FeaturePages). Memory: the nonzero activations (L0 per position) and the contexts."""
    S = sae.config.d_sae
    xs, ys, entries = [], [], []  # entries: (context, position, feature, activation) of each firing
    offset, n = 0, 0
    for x, y in batches:
        x, y = np.asarray(x), np.asarray(y)
        mask = counted_positions(x, y, special)
        rows = site_activations(model, (x,), site)
        with eval_mode(sae):
            acts = sae.encode(rows.reshape(-1, rows.shape[-1])).reshape(*rows.shape[:2], S)
        acts = np.where(mask[..., None], acts, 0)
        b, t, s = np.nonzero(acts)
        entries.append(np.stack([b + offset, t, s, acts[b, t, s]], axis=1))
        xs.append(x)
        ys.append(y)
        offset, n = offset + len(x), n + int(mask.sum())
    T = max(a.shape[1] for a in xs)
    contexts = np.concatenate([np.pad(a, ((0, 0), (0, T - a.shape[1]))) for a in xs])
    targets = np.concatenate(
        [np.pad(a, ((0, 0), (0, T - a.shape[1])), constant_values=IGNORE_INDEX) for a in ys]
    )
    counted = counted_positions(contexts, targets, special)
    real = targets != IGNORE_INDEX
    lengths = np.where(real.any(axis=1), T - np.argmax(real[:, ::-1], axis=1), 0)
    e = np.concatenate(entries) if entries else np.zeros((0, 4))
    ctx, pos, feat, val = e[:, 0].astype(int), e[:, 1].astype(int), e[:, 2].astype(int), e[:, 3]
    density = np.bincount(feat, minlength=S) / max(n, 1)
    max_act = np.zeros(S)
    np.maximum.at(max_act, feat, val)
    token_at = contexts[ctx, pos]
    token_counts = np.bincount(contexts[counted], minlength=int(contexts.max()) + 1)
    order = np.lexsort((-val, feat))  # by feature, strongest first
    starts = np.searchsorted(feat[order], np.arange(S + 1))
    examples, hist, top_token, before, where = [], [], [], [], []
    for s in range(S):
        mine = order[starts[s] : starts[s + 1]]
        examples.append([(int(ctx[i]), int(pos[i]), float(val[i])) for i in mine[:top]])
        if not len(mine):
            hist.append([0] * bins)
            top_token.append(None)
            before.append(None)
            where.append(None)
            continue
        hist.append(np.histogram(val[mine], bins=bins, range=(0.0, max_act[s]))[0].tolist())
        shown = token_at[mine[:top]]
        tok = int(np.bincount(shown).argmax())
        fires_on_tok = int((token_at[mine] == tok).sum())
        top_token.append((tok, float((shown == tok).mean()), fires_on_tok / int(token_counts[tok])))
        before.append(_most_common(contexts[ctx[mine[:top]], np.maximum(pos[mine[:top]] - 1, 0)]))
        where.append(_most_common(pos[mine[:top]]))
    context_acts = {(c, s): np.zeros(T) for s, ex in enumerate(examples) for c, _, _ in ex}
    for c, p, s, a in zip(ctx, pos, feat, val):  # each shown context's activations along it
        if (c, s) in context_acts:
            context_acts[(c, s)][p] = a
    promoted, suppressed = _logit_effects(model, sae, site, contexts, examples, effects_examples, n_tokens)
    return FeaturePages(
        density,
        max_act,
        examples,
        contexts,
        context_acts,
        hist,
        bins,
        promoted,
        suppressed,
        top_token,
        before,
        where,
        lengths,
        n,
    )


def _most_common(values: np.ndarray) -> tuple[int, float]:
    """(the most common value, its share), the smallest value among equals."""
    v = int(np.bincount(values).argmax())
    return v, float((values == v).mean())


def _logit_effects(model, sae, site, contexts, examples, n_examples: int, n_tokens: int):
    """Per feature, the next-token logits' change at its strongest examples when its write
    (activation x direction) is removed at the site: clean minus removed, averaged over the
    examples, centred over the vocabulary (a softmax ignores a shift); -> (promoted, suppressed),
    each a list per feature of (token id, change) pairs."""
    directions = sae.directions()
    rows = [(s, c, p, a) for s, ex in enumerate(examples) for c, p, a in ex[:n_examples]]
    effects: dict[int, list] = {}
    chunk = 256
    for start in range(0, len(rows), chunk):
        part = rows[start : start + chunk]
        length = max(p for _, _, p, _ in part) + 1  # causal: nothing after the position matters
        ids = contexts[[c for _, c, _, _ in part], :length]
        writes = np.stack([a * directions[s] for s, _, _, a in part])  # (R, width)
        at = np.array([p for _, _, p, _ in part])

        def remove(a, _n):
            rows_ = to_rows(np.array(a, copy=True))
            rows_[np.arange(len(at)), at] -= writes.astype(rows_.dtype)
            return from_rows(rows_, a.shape)

        clean = run_with_hooks(model, ids, hooks={})
        removed = run_with_hooks(model, ids, hooks={site: remove})
        clean = clean[0] if isinstance(clean, tuple) else clean
        removed = removed[0] if isinstance(removed, tuple) else removed
        change = (clean[np.arange(len(at)), at] - removed[np.arange(len(at)), at]).astype(np.float64)
        for (s, _, _, _), row in zip(part, change):
            effects.setdefault(s, []).append(row)
    promoted, suppressed = [], []
    for s in range(len(examples)):
        if s not in effects:
            promoted.append([])
            suppressed.append([])
            continue
        mean = np.mean(effects[s], axis=0)
        mean -= mean.mean()
        order = np.argsort(-mean, kind="stable")
        promoted.append([(int(i), float(mean[i])) for i in order[:n_tokens]])
        suppressed.append([(int(i), float(mean[i])) for i in order[::-1][:n_tokens]])
    return promoted, suppressed
