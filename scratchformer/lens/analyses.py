"""Experiments on a model's insides, each returning arrays and a `Check`: a one-line statement
that the analysis's result agrees with a second computation that takes another path through
the model (its own forward, read back through the hooks, or finite differences), with the
measured error and the tolerance. Each check is proven able to fail: tests/lens/test_lens_planted.py
plants a bug of each kind in each analysis and watches its check fail.

`inputs` is the tuple the model's forward takes: ``(ids,)`` or ``(ids, targets)`` for a GPT,
``(src, tgt_in[, tgt_out])`` for seq2seq, ``(x[, labels])`` for a classifier, ``(input_ids,)``
for BERT. A `metric(output) -> float` turns the model's output into the number an experiment
follows (default: the loss, the output's second item).

Tolerances (relative to the scale each check names), by the model's dtype:

- REPLAY: the same value computed twice, by the same float operations but in arrays of other
  shapes (a BLAS product may then sum in another order): 1e-10 in float64 (about a million
  times float64's rounding, 1.1e-16, summed over a few thousand terms), 1e-4 in float32
  (float32 rounds at 6e-8).
- FINITE_DIFFERENCE: a central difference with one Richardson step, whose truncation error is
  O(h^4) and rounding error O(eps / h): 1e-6 in float64, 3e-2 in float32.
- Integrated gradients' completeness is a quadrature: 1% (its measured error is printed).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from scratchformer.errors import ConfigError, DataError, DTypeError, ShapeError
from scratchformer.lens.hooks import hook_names, hooked, run_with_cache, run_with_hooks
from scratchformer.lens.parts import as_batch, attentions, stacks, unembedding
from scratchformer.nn.layers import LayerNorm, RMSNorm, dropout_off
from scratchformer.nn.module import eval_mode

__all__ = [
    "Check",
    "logit_lens",
    "direct_logit_attribution",
    "head_ablation",
    "activation_patching",
    "saliency",
    "integrated_gradients",
    "head_scores",
    "loss_metric",
    "logit_metric",
    "logit_objective",
    "loss_objective",
    "similarity_objective",
    "token_embeddings",
    "mean_token_embedding",
    "default_baseline_kind",
    "baseline_embeddings",
    "MAX_STEPS",
]

MAX_STEPS = 4096  # integrated gradients: one forward and backward per step


def _tolerance(dtype, kind: str) -> float:
    """The relative tolerance of a check of `kind` ("replay", "fd") in `dtype` (module docstring)."""
    f64 = np.dtype(dtype) == np.float64
    return {"replay": 1e-10 if f64 else 1e-4, "fd": 1e-6 if f64 else 3e-2}[kind]


@dataclass
class Check:
    """`what` holds within `tolerance` when `error` <= tolerance; str() is the one-line report.
    A NaN error (nothing to compare) is never ok."""

    name: str
    what: str
    error: float
    tolerance: float

    @property
    def ok(self) -> bool:
        return bool(self.error <= self.tolerance)

    def __str__(self) -> str:
        err = "undefined" if np.isnan(self.error) else f"{self.error:.3g}"
        return f"check {self.name}: {self.what}: error {err} (tolerance {self.tolerance:g}) {'ok' if self.ok else 'FAILED'}"  # noqa: E501


def _one_sequence(x, what: str) -> None:
    n = np.shape(x)[0]
    if n != 1:
        raise DataError(f"{what} reads one sequence, got a batch of {n}: call it once per sequence")


def _index(value, size: int, what: str) -> int:
    """value as an index into an axis of `size` (negative counts from the end); DataError otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not -size <= value < size:
        raise DataError(f"{what} must be an integer in [{-size}, {size - 1}], got {value!r}")
    return int(value)


def loss_metric(output) -> float:
    """The model's loss (its output's second item): the forward needs targets."""
    if not isinstance(output, tuple) or output[1] is None:
        raise DataError("this metric is the loss: give the model its targets (e.g. inputs=(ids, targets))")
    return float(output[1])


def logit_metric(position: int, token: int, other: int | None = None) -> Callable:
    """metric(output) = logits[0, position, token] (minus logits[0, position, other]), for a batch
    of one sequence (DataError otherwise)."""

    def metric(output):
        logits = _logits(output)
        _one_sequence(logits, "logit_metric")
        row = logits[0, _index(position, logits.shape[1], "position")] if logits.ndim == 3 else logits[0]
        V = row.shape[-1]
        return float(
            row[_index(token, V, "token")] - (0.0 if other is None else row[_index(other, V, "other")])
        )

    return metric


def _logits(output) -> np.ndarray:
    return output[0] if isinstance(output, tuple) else output


def _max_abs(x) -> float:
    """The largest |entry| (0 for none); inf where an entry is NaN, so a NaN never passes a check."""
    m = float(np.max(np.abs(x), initial=0.0))
    return np.inf if np.isnan(m) else m


# -- logit lens ---------------------------------------------------------------------------------
@dataclass
class LogitLens:
    """layers: labels of the residuals read ("embed", "L0", ...); logits: (n_layers + 1, T, V);
    top_ids / top_probs: (n_layers + 1, T, k), each layer's k likeliest next tokens."""

    layers: list[str]
    logits: np.ndarray
    top_ids: np.ndarray
    top_probs: np.ndarray
    check: Check


def _lens_residuals(cache: dict, prefix: str, n_layer: int) -> list[np.ndarray]:
    """The residual stream entering block 0, then leaving each block: n_layer + 1 of (B, T, C)."""
    return [cache[f"{prefix}blocks.0.resid_pre"]] + [
        cache[f"{prefix}blocks.{i}.resid_post"] for i in range(n_layer)
    ]


def _lens_logits(un, residuals: list[np.ndarray]) -> np.ndarray:
    """Each residual's first sequence through the final norm (its own statistics) and the
    unembedding: (n_layer + 1, T, V)."""
    return np.stack([un(r[0]) for r in residuals])


def _check_inputs(inputs, name: str = "inputs") -> tuple:
    """The model's inputs as a tuple of arrays, e.g. (ids,) or (src, tgt_in): a typed error for
    anything else (the model's own door then checks the arrays)."""
    if not isinstance(inputs, (tuple, list)) or not inputs:
        raise DTypeError(
            f"{name} must be a tuple of the model's inputs, e.g. (ids,), got {type(inputs).__name__}"
        )
    if any(np.size(x) == 0 for x in inputs if isinstance(x, np.ndarray)):
        raise ShapeError(f"{name} holds an empty array: give at least one token")
    return tuple(inputs)


def logit_lens(model, inputs: tuple, k: int = 5) -> LogitLens:
    """Each layer's residual stream (the embeddings, then after each block) put through the
    final norm and the unembedding, for a batch of one sequence.

    Check: layer i's lens equals the model's own logits in a run whose last residual hook
    returns layer i's residual (read in that run), for every layer (REPLAY tolerance, relative
    to the largest logit)."""
    inputs = _check_inputs(inputs, "inputs")
    _one_sequence(as_batch(inputs[0]), "the logit lens")
    un = unembedding(model)
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= un.W.shape[0]:
        raise ConfigError(f"k must be an integer in [1, {un.W.shape[0]}] (the vocabulary), got {k!r}")
    _, cache = run_with_cache(model, *inputs, names=[f"{un.prefix}blocks.*.resid_*"])
    with eval_mode(model):
        lens = _lens_logits(un, _lens_residuals(cache, un.prefix, un.n_layer))  # (L + 1, T, V)
    probs = np.exp(lens - lens.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    top = np.argsort(-lens, axis=-1, kind="stable")[..., :k]
    return LogitLens(
        ["embed"] + [f"L{i}" for i in range(un.n_layer)],
        lens,
        top,
        np.take_along_axis(probs, top, -1),
        _lens_check(model, inputs, un, lens),
    )


def _lens_check(model, inputs, un, lens: np.ndarray) -> Check:
    p = un.prefix
    last = f"{p}blocks.{un.n_layer - 1}.resid_post"
    sources = [f"{p}blocks.0.resid_pre"] + [f"{p}blocks.{i}.resid_post" for i in range(un.n_layer)]
    worst, scale, dtype = 0.0, 1.0, None
    for i, source in enumerate(sources):
        held: dict = {}

        def read(x, name):
            held["x"] = x.copy()

        hooks = {} if source == last else {source: read, last: lambda x, name: held["x"]}
        logits = _logits(run_with_hooks(model, *inputs, hooks=hooks))[0]  # (T, V)
        dtype = logits.dtype
        scale = max(scale, _max_abs(logits))
        worst = max(worst, _max_abs(lens[i] - logits)) if lens.shape[1:] == logits.shape else np.inf
    if len(lens) != len(sources):
        worst = np.inf
    return Check(
        "logit lens",
        "each layer's lens equals the model's logits when its last residual is that layer's",
        worst / scale,
        _tolerance(dtype, "replay"),
    )


# -- direct logit attribution ---------------------------------------------------------------------
@dataclass
class LogitAttribution:
    """labels / contributions (n_parts,): each part's direct effect on one logit (the embeddings,
    each head, each attention's output bias, each MLP); bias: what the final norm's shift and
    the unembedding's bias add; logit: the model's logit."""

    labels: list[str]
    contributions: np.ndarray
    bias: float
    logit: float
    position: int
    token: int
    check: Check


def _head_parts(label: str, heads: np.ndarray, W: np.ndarray, hs: int) -> list[tuple[str, np.ndarray]]:
    """Each head's write into the residual stream: heads (H, T, hs), W the out projection's
    weight (C, H * hs) -> [("L0 H0", (T, C)), ...]."""
    return [(f"{label} H{h}", heads[h] @ W[:, h * hs : (h + 1) * hs].T) for h in range(heads.shape[0])]


def direct_logit_attribution(model, inputs: tuple, token: int, position: int = -1) -> LogitAttribution:
    """Split the logit of `token` at `position` (a batch of one sequence) into the parts of the
    final residual stream. The model's own final norm is linear once its scale is frozen at the
    final residual x of the position (`Unembedding.frozen_norm`): LayerNorm's
    (x - mean(x)) / sqrt(var(x) + eps) * gamma + beta gives part c
    ((c - mean(c)) / sqrt(var(x) + eps) * gamma) @ W_U[token], with beta @ W_U[token] (+ the
    unembedding's bias) left over; RMSNorm's x / sqrt(mean(x^2) + eps) * gamma gives
    (c / sqrt(mean(x^2) + eps) * gamma) @ W_U[token], nothing left over but the bias.
    Rotary and ALiBi positions are no part (they act inside attention).

    Check: the parts plus the bias terms sum to the logit, and each part (embeddings, each head,
    each MLP) equals the logit's change, with the final norm's scale frozen, in a run where
    the hooks remove that part alone and hold every sub-layer's output at its value in the
    unablated run (REPLAY tolerance x 10, relative to the largest of the logit and the parts)."""
    inputs = _check_inputs(inputs, "inputs")
    _one_sequence(as_batch(inputs[0]), "direct logit attribution")
    un = unembedding(model)
    if not un.pre_norm:
        raise ConfigError(
            "direct logit attribution needs a pre-norm model (its residual stream is a sum "
            "of the parts; a post-norm block renormalises it)"
        )
    p = un.prefix
    token = _index(token, un.W.shape[0], "token")
    position = _index(position, as_batch(inputs[1] if p else inputs[0]).shape[1], "position")
    out, cache = run_with_cache(model, *inputs)
    embed = cache[p + "embed"][0]  # (T, C)
    parts: list[tuple[str, np.ndarray]] = [("embed", embed)]
    if p + "pos_embed" in cache:  # rotary positions add nothing to the stream: no such part
        parts.append(("pos_embed", np.broadcast_to(cache[p + "pos_embed"], cache[p + "embed"].shape)[0]))
    by_layer = {}
    for prefix, label, attn in attentions(model):
        if prefix.startswith(p):
            by_layer.setdefault(int(prefix.split(".")[-2]), []).append((prefix, label, attn))
    for i in range(un.n_layer):
        for prefix, label, attn in by_layer[i]:
            parts += _head_parts(
                label, cache[prefix + ".head_out"][0], attn.out_proj.weight.data, attn.head_size
            )
            if attn.out_proj.bias is not None:
                parts.append((f"{label} bias", np.broadcast_to(attn.out_proj.bias.data, embed.shape)))
        if f"{p}blocks.{i}.mlp.out" in cache:  # attention-only blocks have no feed-forward
            parts.append((f"L{i} mlp", cache[f"{p}blocks.{i}.mlp.out"][0]))
    x = cache[f"{p}blocks.{un.n_layer - 1}.resid_post"][0][position]  # (C,)
    apply, shift = un.frozen_norm(x)  # the model's own final norm, its scale frozen at x
    w_u = un.W[token]
    contributions = np.array([float(apply(c[position]) @ w_u) for _, c in parts])
    bias = float(shift @ w_u)
    if un.b is not None:
        bias += float(un.b[token])
    logit = float(_logits(out)[0, position, token])
    labels = [name for name, _ in parts]
    return LogitAttribution(
        labels,
        contributions,
        bias,
        logit,
        position,
        token,
        _attribution_check(model, inputs, un, labels, contributions, bias, logit, token, position),
    )


def _frozen_norm_change(norm, x: np.ndarray, d: np.ndarray) -> np.ndarray:
    """How the final norm's output moves when its input x (C,) moves by d (C,) with the scale
    held at x's: LayerNorm (d - mean d) / sqrt(var x + eps) * gamma; RMSNorm
    d / sqrt(mean x^2 + eps) * gamma; no norm: d."""
    if norm is None:
        return d
    if isinstance(norm, RMSNorm):
        return d / np.sqrt(np.mean(x * x) + norm.eps) * norm.weight.data
    if isinstance(norm, LayerNorm):
        return (d - d.mean()) / np.sqrt(x.var() + norm.eps) * norm.weight.data
    raise ConfigError(f"direct logit attribution knows LayerNorm and RMSNorm, got {type(norm).__name__}")


def _attribution_check(model, inputs, un, labels, contributions, bias, logit, token, position) -> Check:
    p = un.prefix
    last = f"{p}blocks.{un.n_layer - 1}.resid_post"
    names = hook_names(model)
    outs = [
        n
        for n in names
        if n.startswith(p + "blocks.") and n.endswith((".attn.out", ".cross_attn.out", ".mlp.out"))
    ]
    _, clean = run_with_cache(model, *inputs, names=outs + [last])
    x = clean[last][0, position]
    routes = [(label, p + label, None) for label in ("embed", "pos_embed") if p + label in names]
    for prefix, label, attn in attentions(model):
        if prefix.startswith(p):
            routes += [(f"{label} H{h}", prefix + ".head_out", h) for h in range(attn.n_head)]
    routes += [
        (f"L{i} mlp", f"{p}blocks.{i}.mlp.out", None)
        for i in range(un.n_layer)
        if f"{p}blocks.{i}.mlp.out" in names
    ]  # attention-only blocks have no feed-forward
    scale = max(1.0, abs(logit), _max_abs(contributions))
    worst = abs(float(np.sum(contributions)) + bias - logit)
    for label, name, head in routes:
        hooks = {n: (lambda _x, _n, v=clean[n]: v) for n in outs}
        if head is None:
            hooks[name] = lambda v, _n: np.zeros_like(v)
        else:
            del hooks[name.replace(".head_out", ".out")]  # the ablated attention recomputes its output

            def zero(v, _n, h=head):
                v = v.copy()
                v[:, h] = 0.0
                return v

            hooks[name] = zero
        _, run = run_with_cache(model, *inputs, names=[last], hooks=hooks)
        expected = float(_frozen_norm_change(un.norm, x, x - run[last][0, position]) @ un.W[token])
        got = contributions[labels.index(label)] if label in labels else np.inf
        worst = max(worst, abs(got - expected))
    return Check(
        "logit attribution",
        "the parts sum to the logit, and each equals its removal's effect with the norm's scale frozen",
        worst / scale,
        10 * _tolerance(x.dtype, "replay"),
    )


# -- head ablation ----------------------------------------------------------------------------
@dataclass
class HeadAblation:
    """labels: one per attention ("L0", "cross L1" ...); change: (n_attentions, n_head), the
    metric after ablating that head minus the metric without ablation."""

    labels: list[str]
    change: np.ndarray
    baseline: float
    mode: str
    check: Check


def _ablation_hook(mode: str, clean: np.ndarray, h: int) -> Callable:
    """The hook that ablates head h of a head_out (B, H, T, hs) whose unablated value is `clean`:
    zero, or its mean over the batch and positions."""
    mean = clean.mean(axis=(0, 2))  # (H, hs)

    def ablate(x, name):
        x = x.copy()
        x[:, h] = 0.0 if mode == "zero" else mean[h][None, None, :]
        return x

    return ablate


def head_ablation(
    model, inputs: tuple, metric: Callable = loss_metric, mode: str = "zero", which: str = "all"
) -> HeadAblation:
    """Ablate each head in turn (its output before the out projection, over every position of
    every sequence): "zero" sets it to 0, "mean" to its mean over the batch and positions.
    which: "all", "self" or "cross" attentions.

    Check: each ablated run, read back through the hooks, holds exactly one head changed, and
    that head at 0 (or at its mean over the batch and positions, computed again from an
    unablated run), every other head unchanged; the table's entry for that head is that run's
    metric minus the baseline (REPLAY tolerance, relative to the activations' and the metric's
    scale)."""
    inputs = _check_inputs(inputs, "inputs")
    if mode not in ("zero", "mean"):
        raise ConfigError(f"mode must be 'zero' or 'mean', got {mode!r}")
    if which not in ("all", "self", "cross"):
        raise ConfigError(f"which must be 'all', 'self' or 'cross', got {which!r}")
    atts = [a for a in attentions(model) if which == "all" or (which == "cross") == (".cross_attn" in a[0])]
    if not atts:
        raise ConfigError(f"this {type(model).__name__} has no {which} attention to ablate")
    base_out, cache = run_with_cache(model, *inputs, names=[a[0] + ".head_out" for a in atts])
    baseline = metric(base_out)
    H = max(a[2].n_head for a in atts)
    change = np.full((len(atts), H), np.nan)
    log = []  # (name, the head_out the ablated run used, its metric)
    for row, (prefix, _, attn) in enumerate(atts):
        name = prefix + ".head_out"
        for h in range(attn.n_head):
            out, back = run_with_cache(
                model, *inputs, names=[name], hooks={name: _ablation_hook(mode, cache[name], h)}
            )
            value = metric(out)
            log.append((name, back[name], value))
            change[row, h] = value - baseline
    return HeadAblation(
        [a[1] for a in atts],
        change,
        baseline,
        mode,
        _ablation_check(model, inputs, metric, atts, mode, change, baseline, log),
    )


def _ablation_check(model, inputs, metric, atts, mode, change, baseline, log) -> Check:
    names = [a[0] + ".head_out" for a in atts]
    out, clean = run_with_cache(model, *inputs, names=names)
    dtype = clean[names[0]].dtype
    m_scale = max(1.0, abs(baseline))
    worst = abs(metric(out) - baseline) / m_scale
    seen = set()
    for name, back, value in log:
        c = clean[name]  # (B, H, T, hs)
        a_scale = max(1.0, _max_abs(c))
        best, best_head = np.inf, None
        for g in range(c.shape[1]):
            target = (
                np.zeros(c.shape[-1])
                if mode == "zero"
                else np.mean(np.swapaxes(c[:, g], 0, 1).reshape(-1, c.shape[-1]), axis=0)
            )  # (hs,)
            others = np.delete(np.arange(c.shape[1]), g)
            err = max(_max_abs(back[:, g] - target), _max_abs(back[:, others] - c[:, others])) / a_scale
            entry = change[names.index(name), g] if g < change.shape[1] else np.nan  # a head the table lacks
            err = max(err, _max_abs(entry - (value - baseline)) / m_scale)
            if err < best:
                best, best_head = err, g
        seen.add((name, best_head))
        worst = max(worst, best)
    heads = sum(clean[n].shape[1] for n in names)  # the heads the activations hold
    if not len(seen) == len(log) == int(np.isfinite(change).sum()) == heads:
        worst = np.inf  # a head ablated twice or never, or a table entry no run gave
    what = "every ablated run read back holds its one head at " + (
        "zero" if mode == "zero" else "its mean over batch and positions"
    )
    return Check(
        "head ablation",
        what + ", the other heads unchanged, and its metric in the table",
        worst,
        _tolerance(dtype, "replay"),
    )


# -- activation patching ------------------------------------------------------------------------
@dataclass
class Patching:
    """residual: (n_layer, T) fraction of the metric's difference recovered by patching the clean
    residual stream entering each block at each position into the corrupted run (seq2seq: the
    decoder's); encoder_residual: the same for the encoder's stream (n_enc_layer, S), None for
    one-stack models; heads: (n_attentions, n_head), the same for each head's output at every
    position (seq2seq: encoder, decoder and cross attention), labelled by head_labels. Every
    fraction is NaN when the clean and corrupted runs give the same metric (`defined` False)."""

    residual: np.ndarray
    heads: np.ndarray
    head_labels: list[str]
    clean_diff: float
    corrupt_diff: float
    check: Check
    encoder_residual: np.ndarray | None = None

    @property
    def defined(self) -> bool:
        """False when clean and corrupted runs give the same metric: nothing to recover."""
        return bool(self.clean_diff != self.corrupt_diff)


def _patch_hook(source: np.ndarray, index: tuple) -> Callable:
    """The hook that writes source[index] (the clean run's activation) into the same cell."""

    def patch(x, name):
        x = x.copy()
        x[index] = source[index]
        return x

    return patch


def activation_patching(model, clean: tuple, corrupt: tuple, metric: Callable) -> Patching:
    """Patch activations of the `clean` run into the `corrupt` run; metric(output) is usually a
    logit difference (`logit_metric(-1, right, wrong)`). Fraction recovered =
    (patched - corrupt) / (clean - corrupt). Seq2seq: the encoder's and the decoder's residual
    streams and every attention (encoder, decoder, cross).

    Check: every patched run, read back through the hooks, holds the clean run's value in the
    patched cells and the corrupted run's everywhere else (both from runs of their own), each
    table entry is that run's fraction, and patching the stack's last residual stream (every
    position) recovers exactly 1 (REPLAY tolerance)."""
    clean = _check_inputs(clean, "clean")
    corrupt = _check_inputs(corrupt, "corrupt")
    a, b = [as_batch(x) for x in clean], [as_batch(x) for x in corrupt]
    if len(a) != len(b):
        raise DataError(f"clean and corrupted inputs differ in number: {len(a)} and {len(b)}")
    for i, (x, y) in enumerate(zip(a, b)):
        if x.shape != y.shape:
            raise DataError(
                f"patching needs inputs of equal length: clean input {i} has shape {x.shape}, "
                f"the corrupted one {y.shape} (tokenize both to the same number of tokens)"
            )
    clean_out, cache = run_with_cache(model, *clean)
    corrupt_out = run_with_hooks(model, *corrupt, hooks={})
    c_clean, c_corrupt = metric(clean_out), metric(corrupt_out)
    denom = c_clean - c_corrupt
    log = []  # (name, index, the activation the patched run used, its fraction)

    def patch_run(name, index):
        out, back = run_with_cache(
            model, *corrupt, names=[name], hooks={name: _patch_hook(cache[name], index)}
        )
        fraction = (metric(out) - c_corrupt) / denom if denom != 0 else np.nan
        log.append((name, index, back[name], fraction))
        return fraction

    residual = {}
    for prefix, blocks in stacks(model).items():
        T = cache[f"{prefix}blocks.0.resid_pre"].shape[1]
        residual[prefix] = np.array(
            [
                [patch_run(f"{prefix}blocks.{i}.resid_pre", (slice(None), t)) for t in range(T)]
                for i in range(len(blocks))
            ]
        )
    atts = attentions(model)
    heads = np.full((len(atts), max(a[2].n_head for a in atts)), np.nan)
    for row, (name, _, attn) in enumerate(atts):
        for h in range(attn.n_head):
            heads[row, h] = patch_run(name + ".head_out", (slice(None), h))
    main = "decoder." if "decoder." in residual else ""
    last = f"{main}blocks.{len(stacks(model)[main]) - 1}.resid_post"
    everything = patch_run(last, (slice(None),))
    check = _patching_check(model, clean, corrupt, log, residual, heads, atts, everything, last)
    return Patching(
        residual[main],
        heads,
        [a[1] for a in atts],
        c_clean,
        c_corrupt,
        check,
        residual.get("encoder.") if main else None,
    )


def _patching_check(model, clean, corrupt, log, residual, heads, atts, everything, last) -> Check:
    # every cell the tables must hold: each stack's residual entering each block x position,
    # each attention's heads (counted from the activations, not from the analysis's loops)
    wanted = [f"{p}blocks.{i}.resid_pre" for p, blocks in stacks(model).items() for i in range(len(blocks))]
    wanted += [a[0] + ".head_out" for a in atts]
    names = sorted(set(wanted) | {name for name, *_ in log})
    _, c_cache = run_with_cache(model, *clean, names=names)
    _, k_cache = run_with_cache(model, *corrupt, names=names)
    dtype = c_cache[names[0]].dtype
    head_rows = {a[0] + ".head_out": row for row, a in enumerate(atts)}
    worst, done = 0.0, []
    for name, index, back, fraction in log:
        c, k = c_cache[name], k_cache[name]
        mask = np.zeros(c.shape, bool)
        mask[index] = True
        scale = max(1.0, _max_abs(c), _max_abs(k))
        worst = max(worst, _max_abs(np.where(mask, back - c, back - k)) / scale)
        if name == last:
            continue
        # where the table keeps this run: the layer (or attention) the name says, the position
        # (or head) the index says
        parts = name.split(".")
        table, row = (
            (heads, head_rows[name])
            if name in head_rows
            else (residual.get("".join(p + "." for p in parts[:-3])), int(parts[-2]))
        )
        inside = table is not None and row < table.shape[0] and index[1] < table.shape[1]
        cell = table[row, index[1]] if inside else np.inf
        done.append((name, index[1]))
        if not (np.isnan(cell) and np.isnan(fraction)):
            worst = max(worst, _max_abs(cell - fraction))
    expected = {(n, j) for n in wanted for j in range(c_cache[n].shape[1])}
    if len(done) != len(set(done)) or set(done) != expected:
        worst = np.inf  # a cell patched twice or never
    if np.isnan(everything):
        what = (
            "every patched cell read back is the clean run's and every other cell the corrupted run's "
            "(recovery undefined: clean and corrupted runs give the same metric)"
        )
    else:
        worst = max(worst, abs(everything - 1.0))
        what = (
            "every patched cell read back is the clean run's and every other cell the corrupted run's, "
            "and patching the last residual stream recovers 1"
        )
    return Check("patching", what, worst, _tolerance(dtype, "replay"))


# -- saliency -----------------------------------------------------------------------------------
Objective = Callable[[object], tuple[float, "np.ndarray | None"]]


def logit_objective(position: int, token: int) -> Objective:
    """f = logits[0, position, token] (or logits[0, token] for a classifier); its gradient. For
    a batch of one sequence (DataError otherwise)."""

    def objective(output):
        logits = _logits(output)
        _one_sequence(logits, "logit_objective")
        g = np.zeros_like(logits)
        t = _index(token, logits.shape[-1], "token")
        index = (0, _index(position, logits.shape[1], "position"), t) if logits.ndim == 3 else (0, t)
        g[index] = 1.0
        return float(logits[index]), g

    return objective


def loss_objective(output):
    """f = the model's loss (the forward needs targets); the backward starts from it."""
    return loss_metric(output), None


def similarity_objective(other: np.ndarray) -> Objective:
    """For a sentence encoder (BertEncoder): f = cosine similarity between the mean of the
    hidden states (B=1, T, d) and the embedding `other` (d,) of a second sentence."""
    other = np.asarray(other, dtype=np.float64)

    def objective(hidden):
        _one_sequence(hidden, "similarity_objective")
        T = hidden.shape[1]
        a = hidden[0].mean(axis=0)  # (d,)
        na, nb = np.linalg.norm(a), np.linalg.norm(other)
        cos = float(a @ other / (na * nb))
        # d cos / d a = b / (|a| |b|) - cos a / |a|^2 ; d a / d hidden[t] = 1 / T
        da = other / (na * nb) - cos * a / na**2
        return cos, np.broadcast_to((da / T).astype(hidden.dtype), hidden.shape).copy()

    return objective


def _embed_name(model) -> str:
    """The input embeddings saliency differentiates by: the main stack's (seq2seq: the source's)."""
    stacks(model)
    return model.main_prefix() + "embed"


@dataclass
class Saliency:
    """value: f(input); gradient: df/d(input embeddings) (B, T, C); grad_x_input: (B, T) the
    gradient dotted with each token's embedding; norm: (B, T) the gradient's L2 norm."""

    value: float
    gradient: np.ndarray
    embeddings: np.ndarray
    grad_x_input: np.ndarray
    norm: np.ndarray
    check: Check | None = None


def _value_and_gradient(model, inputs, objective, embed_name, replace=None):
    """One training-mode forward (dropout off) and the hand-written backward."""
    grads, seen = {}, {}
    was_training = model.training

    def record(x, name):  # the embeddings the forward uses (replaced along the IG path)
        seen["x"] = x.copy() if replace is None else replace(x, name)
        return None if replace is None else seen["x"]

    hooks = {embed_name: record}
    try:
        model.train()
        with (
            dropout_off(model),
            hooked(model, hooks, {embed_name: lambda g, n: grads.setdefault("g", g.copy())}),
        ):
            value, grad_out = objective(model(*inputs))
            if grad_out is None:
                model.backward()
            else:
                model.backward(grad_output=grad_out)
    finally:
        model.train(was_training)
    if "g" not in grads:  # the model's backward stopped before its input (a frozen encoder)
        raise ConfigError(
            f"no gradient reaches this {type(model).__name__}'s input embeddings ({embed_name}): its "
            "backward stops before them (a frozen encoder?), so saliency has nothing to show"
        )
    return value, grads["g"], seen["x"]


def _grad_x_input(gradient: np.ndarray, embeddings: np.ndarray) -> np.ndarray:
    """(B, T, C), (B, T, C) -> (B, T): each token's gradient dotted with its own embedding."""
    return (gradient * embeddings).sum(-1)


def _value_at(model, inputs, objective, name, x) -> float:
    """f with the input embeddings replaced by x (an eval-mode forward)."""
    return objective(run_with_hooks(model, *inputs, hooks={name: lambda _x, _n: x}))[0]


def _directional(model, inputs, objective, name, x, v, h) -> float:
    """d f(x + s v) / ds at s = 0: central differences at h and h / 2, one Richardson step (error O(h^4))."""

    def central(step):
        return (
            _value_at(model, inputs, objective, name, x + step * v)
            - _value_at(model, inputs, objective, name, x - step * v)
        ) / (2 * step)

    return (4 * central(h / 2) - central(h)) / 3


def saliency(model, inputs: tuple, objective: Objective) -> Saliency:
    """Gradient of objective(model output) with respect to the input (token) embeddings
    (seq2seq: the source's), through the hand-written backward (the parameters' .grad are left
    as they were); gradient x input per token.

    Check: central finite differences of f (eval-mode forwards, the embeddings read from a run
    of their own) along a random direction equal the gradient's projection on it, and along
    each token's embedding scaled by a random weight per token equal the weighted sum of
    gradient x input (FINITE_DIFFERENCE tolerance, relative to the gradient's norm times the
    direction's)."""
    inputs = _check_inputs(inputs, "inputs")
    name = _embed_name(model)
    saved = [p.grad.copy() for p in model.parameters()]
    try:
        value, g, x = _value_and_gradient(model, inputs, objective, name)
    finally:
        for p, s in zip(model.parameters(), saved):
            p.grad[...] = s
    gxi = _grad_x_input(g, x)
    return Saliency(
        value, g, x, gxi, np.sqrt((g * g).sum(-1)), _saliency_check(model, inputs, objective, name, g, gxi)
    )


def _saliency_check(model, inputs, objective, name, gradient, gxi) -> Check:
    _, cache = run_with_cache(model, *inputs, names=[name])
    x = cache[name].astype(np.float64)  # (B, T, C)
    rng = np.random.default_rng(0)
    u = rng.standard_normal(x.shape)
    weights = rng.uniform(0.5, 1.5, x.shape[:-1])  # (B, T): tokens in another order give another sum
    worst, g_norm = 0.0, float(np.linalg.norm(gradient))
    f64 = cache[name].dtype == np.float64
    for v, expected in (
        (u, float((gradient * u).sum())),
        (x * weights[..., None], float((gxi * weights).sum())),
    ):
        size = float(np.linalg.norm(v))
        if size == 0:
            continue
        # float64: a small step (rounding stays near 1e-11; a ReLU kink rarely falls inside);
        # float32 needs a large one to rise above its rounding
        h = (1e-5 if f64 else 3e-2) * max(1.0, float(np.linalg.norm(x))) / size
        d = _directional(model, inputs, objective, name, cache[name], (v * 1.0).astype(cache[name].dtype), h)
        worst = max(worst, abs(d - expected) / max(g_norm * size, 1e-30))
    return Check(
        "saliency",
        "central differences along a random direction and along the weighted embeddings "
        "equal the gradient and gradient x input",
        worst,
        _tolerance(cache[name].dtype, "fd"),
    )


def token_embeddings(model, inputs: tuple) -> np.ndarray:
    """The input embeddings saliency differentiates by (B, T, C) for `inputs`: an integrated-
    gradients baseline from a text (tokenized to the input's length)."""
    inputs = _check_inputs(inputs, "inputs")
    name = _embed_name(model)
    _, cache = run_with_cache(model, *inputs, names=[name])
    return cache[name]


class _Stop(Exception):
    """Raised by a hook to end a forward once it has what it needs."""


def mean_token_embedding(model, inputs: tuple, vocab_size: int) -> np.ndarray:
    """The mean of the input embeddings of every token id 0 .. vocab_size - 1 (C,), read at the
    embedding hook: rows of the input's length are run until the hook, then stopped."""
    inputs = _check_inputs(inputs, "inputs")
    name = _embed_name(model)
    first = as_batch(inputs[0])
    T, rows = first.shape[1], []
    ids = np.arange(vocab_size)
    ids = np.concatenate([ids, np.zeros(-len(ids) % T, ids.dtype)]).reshape(-1, T)

    def grab(x, _n):
        rows.append(x.reshape(-1, x.shape[-1]).copy())
        raise _Stop

    for start in range(0, len(ids), 64):
        chunk = ids[start : start + 64]
        # the other inputs ride along (seq2seq's decoder input: the hook stops the run in the encoder)
        rest = tuple(np.repeat(as_batch(x)[:1], len(chunk), 0) for x in inputs[1:])
        try:
            with eval_mode(model), hooked(model, {name: grab}):
                model(chunk, *rest)
        except _Stop:
            pass
    return np.concatenate(rows)[:vocab_size].mean(axis=0)


def default_baseline_kind(model) -> str:
    """Integrated gradients' default start: "zero" embeddings where the model adds a position
    table to the token embeddings, "mean" (the mean token embedding) where positions live inside
    attention (RoPE, ALiBi). From zero embeddings such a model's first norm reads x = a * x1, and
    x / rms(x) jumps from 0 to its full value within a ~ sqrt(eps) / rms(x1) of the start: 32
    quadrature nodes cannot follow it (the completeness check measured error 9.3 on a tiny ALiBi
    GPT; 2,048 nodes 4e-6; from the mean, 32 nodes 3e-7)."""
    return "zero" if model.position_table() is not None else "mean"


def baseline_embeddings(model, inputs: tuple, kind: str | None = None):
    """The baseline `integrated_gradients` takes for `kind` ("zero", "mean"; None: the model's
    default_baseline_kind): None for zero embeddings, the mean token embedding (C,) over the
    vocabulary of the stack the input enters."""
    kind = default_baseline_kind(model) if kind is None else kind
    if kind == "zero":
        return None
    if kind != "mean":
        raise ConfigError(f"baseline kind must be 'zero' or 'mean', got {kind!r}")
    return mean_token_embedding(model, inputs, model.token_table(model.main_prefix()).shape[0])


@dataclass
class IntegratedGradients:
    """attributions: (B, T) per token; value / baseline_value: f(input), f(baseline)."""

    attributions: np.ndarray
    value: float
    baseline_value: float
    check: Check


def _quadrature(steps: int) -> tuple[np.ndarray, np.ndarray]:
    """Gauss-Legendre nodes and weights on [0, 1] (weights sum to 1): exact for polynomials of
    degree 2 * steps - 1, so the error falls much faster with steps than the trapezoid's."""
    nodes, weights = np.polynomial.legendre.leggauss(steps)
    return (nodes + 1) / 2, weights / 2


def integrated_gradients(
    model, inputs: tuple, objective: Objective, steps: int = 32, baseline=None
) -> IntegratedGradients:
    """Integrated gradients (Sundararajan et al. 2017) along the straight line from `baseline`
    to the input embeddings: attribution = (x - x0) . integral over a in [0, 1] of the gradient
    at x0 + a (x - x0), by Gauss-Legendre quadrature with `steps` nodes (1 .. MAX_STEPS).
    baseline: None or "zero" (zero embeddings), or an array broadcast to the embeddings (B, T, C):
    `mean_token_embedding(...)`, or `token_embeddings(model, other_inputs)` of a text.

    Check (completeness): the attributions sum to f(input) - f(baseline), both from eval-mode
    forwards of their own, within 1% of |f(input) - f(baseline)| (a quadrature error; the
    default 32 nodes measured 1e-13 on random GPT-2-shaped models and 9e-5 on MiniLM, docs/lens.md)."""
    inputs = _check_inputs(inputs, "inputs")
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or not 1 <= steps <= MAX_STEPS:
        raise ConfigError(f"steps must be an integer in [1, {MAX_STEPS}], got {steps!r}")
    name = _embed_name(model)
    saved = [p.grad.copy() for p in model.parameters()]
    try:
        _, _, x = _value_and_gradient(model, inputs, objective, name)
        if baseline is None or (isinstance(baseline, str) and baseline == "zero"):
            x0 = np.zeros_like(x)
        elif isinstance(baseline, str):
            raise ConfigError(f"baseline must be None, 'zero' or an array of embeddings, got {baseline!r}")
        else:
            try:
                x0 = np.broadcast_to(np.asarray(baseline, dtype=x.dtype), x.shape)
            except ValueError:
                raise DataError(
                    f"the baseline's shape {np.shape(baseline)} does not fit the embeddings {x.shape}: "
                    "give (C,), (T, C) or (B, T, C)"
                ) from None
        total = np.zeros_like(x)
        for alpha, weight in zip(*_quadrature(int(steps))):
            _, g, _ = _value_and_gradient(
                model, inputs, objective, name, replace=lambda _x, n, a=alpha: x0 + a * (x - x0)
            )
            total += weight * g
    finally:
        for p, s in zip(model.parameters(), saved):
            p.grad[...] = s
    attributions = ((x - x0) * total).sum(-1)
    value = _value_at(model, inputs, objective, name, x)
    f0 = _value_at(model, inputs, objective, name, np.array(x0))
    gap = value - f0
    # relative to the gap; a gap below 1e-8 of f (a baseline the model cannot tell from the input)
    # is measured against 1e-8 of f instead
    error = abs(float(attributions.sum()) - gap) / max(abs(gap), 1e-8 * max(1.0, abs(value)))
    return IntegratedGradients(
        attributions,
        value,
        f0,
        Check("integrated gradients", "the attributions sum to f(input) - f(baseline)", error, 0.01),
    )


# -- head scores ----------------------------------------------------------------------------------
@dataclass
class HeadScores:
    """labels: one per attention; scores: name -> (n_attentions, n_head) mean attention weight
    ("previous", "first", "same", "induction", and for cross attention "diagonal", "anti_diagonal")."""

    labels: list[str]
    scores: dict[str, np.ndarray]
    check: Check


SCORES = ("previous", "first", "same", "induction", "diagonal", "anti_diagonal")


def _previous_score(w: np.ndarray) -> np.ndarray | None:
    """w (B, H, Tq, Tk) -> (H,) mean weight on the key just before the query (queries 1..T-1)."""
    if w.shape[2] < 2:
        return None
    q = np.arange(1, w.shape[2])
    return w[:, :, q, q - 1].mean(axis=(0, 2))


def _first_score(w: np.ndarray) -> np.ndarray:
    return w[..., 0].mean(axis=(0, 2))


def _same_score(w: np.ndarray, ids: np.ndarray) -> np.ndarray | None:
    """Mean weight on earlier keys holding the query's own token, over the queries that have one."""
    B, _, Tq, Tk = w.shape
    earlier = (ids[:, :, None] == ids[:, None, :]) & np.tril(np.ones((Tq, Tk), bool), -1)  # (B, Tq, Tk)
    has = earlier.any(-1)  # (B, Tq)
    if not has.any():
        return None
    on_same = (w * earlier[:, None]).sum(-1)  # (B, H, Tq)
    return on_same.transpose(1, 0, 2)[:, has].mean(-1)


def _induction_score(w: np.ndarray, ids: np.ndarray) -> np.ndarray | None:
    """Prefix matching (Olsson et al. 2022): mean weight on the keys just after the earlier
    occurrences of the query's token (key j + 1 for each earlier j), over the queries that have
    one: where an induction head looks for the token to copy."""
    B, _, Tq, Tk = w.shape
    earlier = (ids[:, :, None] == ids[:, None, :]) & np.tril(np.ones((Tq, Tk), bool), -1)  # (B, Tq, Tk)
    has = earlier.any(-1)  # (B, Tq)
    if not has.any():
        return None
    after = np.zeros_like(earlier)  # key j + 1 for each earlier occurrence j (j + 1 <= query)
    after[:, :, 1:] = earlier[:, :, :-1]
    on_next = (w * after[:, None]).sum(-1)  # (B, H, Tq)
    return on_next.transpose(1, 0, 2)[:, has].mean(-1)


def _diagonal_scores(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Cross attention: mean weight on key i / key S-1-i for query i < min(Tq, S)."""
    Tk = w.shape[3]
    q = np.arange(min(w.shape[2], Tk))
    return w[:, :, q, q].mean(axis=(0, 2)), w[:, :, q, Tk - 1 - q].mean(axis=(0, 2))


def _scores_of(patterns: dict, atts, ids: np.ndarray) -> dict[str, np.ndarray]:
    """{prefix: pattern (B, H, Tq, Tk)} -> {score: (n_attentions, n_head)}, NaN where a score
    does not apply."""
    H = max(a[2].n_head for a in atts)
    scores = {k: np.full((len(atts), H), np.nan) for k in SCORES}
    for row, (prefix, _, attn) in enumerate(atts):
        w = patterns[prefix]
        n = attn.n_head
        if ".cross_attn" in prefix:
            scores["diagonal"][row, :n], scores["anti_diagonal"][row, :n] = _diagonal_scores(w)
            continue
        scores["first"][row, :n] = _first_score(w)
        prev = _previous_score(w)
        if prev is not None:
            scores["previous"][row, :n] = prev
        if ids.shape[1] == w.shape[3] == w.shape[2] and not prefix.startswith("decoder."):
            same = _same_score(w, ids)
            if same is not None:
                scores["same"][row, :n] = same
                scores["induction"][row, :n] = _induction_score(w, ids)
    return scores


def _planted(kind: str, shape: tuple, ids: np.ndarray) -> np.ndarray:
    """An exact attention pattern (B, H, Tq, Tk) of one kind, each row one 1: "previous" (query
    q on key q-1, query 0 on itself), "self" (q on q), "first" (on key 0), "same" (on the
    latest earlier key with the query's token, else itself), "induction" (on the key after that
    latest earlier one, else itself), "diagonal" (q on q), "anti" (q on Tk-1-q); queries
    beyond the keys on key 0."""
    B, H, Tq, Tk = shape
    key = np.zeros((B, Tq), int)
    for b in range(B):
        for q in range(Tq):
            if kind == "previous":
                key[b, q] = max(q - 1, 0)
            elif kind in ("same", "induction") and ids.shape[1] == Tq == Tk:
                earlier = [k for k in range(q) if ids[b, k] == ids[b, q]]
                key[b, q] = (earlier[-1] + (kind == "induction")) if earlier else q
            elif kind in ("self", "diagonal", "same", "induction"):
                key[b, q] = q if q < Tk else 0
            elif kind == "anti":
                key[b, q] = Tk - 1 - q if q < Tk else 0
    w = np.zeros(shape)
    w[
        np.arange(B)[:, None, None],
        np.arange(H)[None, :, None],
        np.arange(Tq)[None, None, :],
        key[:, None, :],
    ] = 1.0
    return w


# planted pattern -> (score, what it must read) for self- and cross attention
_PLANTS = {
    "self": [
        ("previous", "previous", 1.0),
        ("self", "previous", 0.0),
        ("first", "first", 1.0),
        ("same", "same", 1.0),
        ("self", "same", 0.0),
        ("induction", "induction", 1.0),
    ],
    "cross": [("diagonal", "diagonal", 1.0), ("anti", "anti_diagonal", 1.0)],
}


def head_scores(model, inputs: tuple, ids: np.ndarray | None = None) -> HeadScores:
    """Where each head looks, averaged over the batch and the query positions:
    previous: weight on the position before (queries 1..T-1); first: on position 0 (an
    attention sink); same: on earlier positions holding the query's own token (`ids`, the
    tokens the attention reads; default the first input; queries that have one); induction: on
    the positions just after those earlier occurrences (prefix matching, Olsson et al. 2022: an
    induction head looks there for the token to copy); diagonal / anti_diagonal (cross attention
    only): on key i / key S-1-i for query i (copy / reverse).

    Check: the same scoring of a run whose pattern hooks plant an exact pattern gives 1 for
    that pattern's score (previous-token, first-token, same-token, induction, diagonal,
    anti-diagonal) and 0 for a query-on-itself pattern's previous and same scores (read back
    through the hooks); and every attention row of the real run sums to 1 (REPLAY tolerance)."""
    inputs = _check_inputs(inputs, "inputs")
    atts = attentions(model)
    names = [a[0] + ".pattern" for a in atts]
    _, cache = run_with_cache(model, *inputs, names=names)
    ids = as_batch(inputs[0] if ids is None else ids)
    scores = _scores_of({a[0]: cache[a[0] + ".pattern"] for a in atts}, atts, ids)
    return HeadScores([a[1] for a in atts], scores, _scores_check(model, inputs, atts, ids, cache))


def _applies(atts, cache, ids) -> dict[str, np.ndarray]:
    """Which (attention, head) each score must have, decided apart from the scoring: previous
    (self-attention over 2+ positions), first (self-attention), same (an encoder's or a single
    stack's self-attention over `ids` where a token repeats), diagonal and anti-diagonal (cross)."""
    H = max(a[2].n_head for a in atts)
    out = {k: np.zeros((len(atts), H), bool) for k in SCORES}
    repeats = any(len(set(row.tolist())) < len(row) for row in ids)
    for row, (prefix, _, attn) in enumerate(atts):
        Tq, Tk = cache[prefix + ".pattern"].shape[2:]
        n, cross = attn.n_head, ".cross_attn" in prefix
        out["diagonal"][row, :n] = out["anti_diagonal"][row, :n] = cross
        out["first"][row, :n] = not cross
        out["previous"][row, :n] = not cross and Tq >= 2
        out["same"][row, :n] = out["induction"][row, :n] = (
            not cross and not prefix.startswith("decoder.") and ids.shape[1] == Tq == Tk and repeats
        )
    return out


def _scores_check(model, inputs, atts, ids, cache) -> Check:
    dtype = cache[atts[0][0] + ".pattern"].dtype
    worst = max(_max_abs(cache[a[0] + ".pattern"].sum(-1) - 1) for a in atts)
    applies = _applies(atts, cache, ids)
    checked: list[str] = []
    for kind in ("previous", "self", "first", "same", "induction", "diagonal", "anti"):

        def plant(x, name, kind=kind):
            return (
                _planted(kind, x.shape, ids)
                if (".cross_attn" in name) == (kind in ("diagonal", "anti"))
                else None
            )

        _, back = run_with_cache(
            model,
            *inputs,
            names=[a[0] + ".pattern" for a in atts],
            hooks={a[0] + ".pattern": plant for a in atts},
        )
        got = _scores_of({a[0]: back[a[0] + ".pattern"] for a in atts}, atts, ids)
        for side in ("self", "cross"):
            for planted, score, expected in _PLANTS[side]:
                if planted != kind:
                    continue
                rows = np.array([(".cross_attn" in a[0]) == (side == "cross") for a in atts])
                mask = applies[score] & rows[:, None]
                if mask.any():
                    worst = max(worst, _max_abs(np.where(mask, got[score] - expected, 0.0)))
                    if expected == 1.0:
                        checked.append(score.replace("_", "-"))
    what = f"planted exact patterns score 1 ({', '.join(checked) or 'none applies'}; a query on itself 0)"
    return Check(
        "head scores", what + ", and every attention row sums to 1", worst, _tolerance(dtype, "replay")
    )
