"""Experiments on a model's insides, each returning arrays and a `Check`: a one-line statement
of the analysis's own arithmetic (the parts sum to the whole, the last layer's lens is the
model's logits, patching everything restores the clean run) with its measured error.

`inputs` is the tuple the model's forward takes: ``(ids,)`` or ``(ids, targets)`` for a GPT,
``(src, tgt_in[, tgt_out])`` for seq2seq, ``(x[, labels])`` for a classifier, ``(input_ids,)``
for BERT. A `metric(output) -> float` turns the model's output into the number an experiment
follows (default: the loss, the output's second item).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from scratchformer.errors import ConfigError, DataError
from scratchformer.lens.hooks import hooked, run_with_cache, run_with_hooks
from scratchformer.lens.parts import as_batch, attentions, dropouts_off, family, stacks, unembedding
from scratchformer.nn.module import eval_mode

__all__ = ["Check", "logit_lens", "direct_logit_attribution", "head_ablation", "activation_patching",
           "saliency", "integrated_gradients", "head_scores", "loss_metric", "logit_metric",
           "logit_objective", "loss_objective", "similarity_objective"]


@dataclass
class Check:
    """`what` holds within `tolerance` when `error` <= tolerance; str() is the one-line report."""

    name: str
    what: str
    error: float
    tolerance: float

    @property
    def ok(self) -> bool:
        return bool(self.error <= self.tolerance)

    def __str__(self) -> str:
        return f"check {self.name}: {self.what}: error {self.error:.3g} (tolerance {self.tolerance:g}) {'ok' if self.ok else 'FAILED'}"


def loss_metric(output) -> float:
    """The model's loss (its output's second item): the forward needs targets."""
    if not isinstance(output, tuple) or output[1] is None:
        raise DataError("this metric is the loss: give the model its targets (e.g. inputs=(ids, targets))")
    return float(output[1])


def logit_metric(position: int, token: int, other: int | None = None) -> Callable:
    """metric(output) = logits[0, position, token] (minus logits[0, position, other])."""
    def metric(output):
        logits = output[0] if isinstance(output, tuple) else output
        row = logits[0, position] if logits.ndim == 3 else logits[0]
        return float(row[token] - (0.0 if other is None else row[other]))
    return metric


def _logits(output) -> np.ndarray:
    return output[0] if isinstance(output, tuple) else output


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


def logit_lens(model, inputs: tuple, k: int = 5) -> LogitLens:
    """Each layer's residual stream (the embeddings, then after each block) put through the
    final norm and the unembedding, for the first sequence of the batch."""
    un = unembedding(model)
    logits_out, cache = run_with_cache(model, *inputs, names=[f"{un.prefix}blocks.*.resid_*"])
    p = un.prefix
    residuals = [cache[f"{p}blocks.0.resid_pre"]] + [cache[f"{p}blocks.{i}.resid_post"] for i in range(un.n_layer)]
    with eval_mode(model):
        lens = np.stack([un(r[0]) for r in residuals])  # (L + 1, T, V)
    model_logits = _logits(logits_out)[0]
    error = float(np.abs(lens[-1] - model_logits).max())
    probs = np.exp(lens - lens.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    top = np.argsort(-lens, axis=-1, kind="stable")[..., :k]
    return LogitLens(["embed"] + [f"L{i}" for i in range(un.n_layer)], lens, top,
                     np.take_along_axis(probs, top, -1),
                     Check("logit lens", "the last layer's lens equals the model's logits", error, 0.0))


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


def direct_logit_attribution(model, inputs: tuple, token: int, position: int = -1) -> LogitAttribution:
    """Split the logit of `token` at `position` (first sequence) into the parts of the final
    residual stream. The model's own final norm is linear once its scale is frozen at the
    final residual x of the position (`Unembedding.frozen_norm`): LayerNorm's
    (x - mean(x)) / sqrt(var(x) + eps) * gamma + beta gives part c
    ((c - mean(c)) / sqrt(var(x) + eps) * gamma) @ W_U[token], with beta @ W_U[token] (+ the
    unembedding's bias) left over; RMSNorm's x / sqrt(mean(x^2) + eps) * gamma gives
    (c / sqrt(mean(x^2) + eps) * gamma) @ W_U[token], nothing left over but the bias.
    Rotary positions are no part (they act inside attention)."""
    un = unembedding(model)
    if not un.pre_norm:
        raise ConfigError("direct logit attribution needs a pre-norm model (its residual stream is a sum "
                          "of the parts; a post-norm block renormalises it)")
    p = un.prefix
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
            W, hs = attn.out_proj.weight.data, attn.head_size
            heads = cache[prefix + ".head_out"][0]  # (H, T, hs)
            for h in range(attn.n_head):
                parts.append((f"{label} H{h}", heads[h] @ W[:, h * hs:(h + 1) * hs].T))
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
    error = abs(contributions.sum() + bias - logit)
    return LogitAttribution([name for name, _ in parts], contributions, bias, logit, position, token,
                            Check("logit attribution", "the parts plus the bias terms sum to the logit", error,
                                  1e-9 * max(1.0, abs(logit)) if x.dtype == np.float64 else 1e-4 * max(1.0, abs(logit))))


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


def head_ablation(model, inputs: tuple, metric: Callable = loss_metric, mode: str = "zero",
                  which: str = "all") -> HeadAblation:
    """Ablate each head in turn (its output before the out projection, over every position):
    "zero" sets it to 0, "mean" to its mean over the batch and positions. which: "all", "self"
    or "cross" attentions."""
    if mode not in ("zero", "mean"):
        raise ConfigError(f"mode must be 'zero' or 'mean', got {mode!r}")
    atts = [a for a in attentions(model) if which == "all" or (which == "cross") == (".cross_attn" in a[0])]
    if not atts:
        raise ConfigError(f"this {type(model).__name__} has no {which} attention to ablate")
    base_out, cache = run_with_cache(model, *inputs, names=[a[0] + ".head_out" for a in atts])
    baseline = metric(base_out)
    same = metric(run_with_hooks(model, *inputs, hooks={a[0] + ".head_out": lambda x, n: x.copy() for a in atts}))
    H = max(a[2].n_head for a in atts)
    change = np.full((len(atts), H), np.nan)
    for row, (prefix, _, attn) in enumerate(atts):
        mean = cache[prefix + ".head_out"].mean(axis=(0, 2))  # (H, hs)
        for h in range(attn.n_head):
            def ablate(x, name, h=h):
                x = x.copy()
                x[:, h] = 0.0 if mode == "zero" else mean[h][None, None, :]
                return x
            change[row, h] = metric(run_with_hooks(model, *inputs, hooks={prefix + ".head_out": ablate})) - baseline
    return HeadAblation([a[1] for a in atts], change, baseline, mode,
                        Check("head ablation", "hooks returning a copy reproduce the baseline metric",
                              abs(same - baseline), 0.0))


# -- activation patching ------------------------------------------------------------------------
@dataclass
class Patching:
    """residual: (n_layer, T) fraction of the logit difference recovered by patching the clean
    residual stream entering each block at each position into the corrupted run; heads:
    (n_attentions, n_head), the same for each head's output at every position."""

    residual: np.ndarray
    heads: np.ndarray
    head_labels: list[str]
    clean_diff: float
    corrupt_diff: float
    check: Check


def activation_patching(model, clean: tuple, corrupt: tuple, metric: Callable) -> Patching:
    """Patch activations of the `clean` run into the `corrupt` run; metric(output) is usually a
    logit difference (`logit_metric(-1, right, wrong)`). Fraction recovered =
    (patched - corrupt) / (clean - corrupt)."""
    a, b = (as_batch(x) for x in clean), (as_batch(x) for x in corrupt)
    for i, (x, y) in enumerate(zip(a, b)):
        if x.shape != y.shape:
            raise DataError(f"patching needs inputs of equal length: clean input {i} has shape {x.shape}, "
                            f"the corrupted one {y.shape} (tokenize both to the same number of tokens)")
    prefix = "decoder." if family(model) == "seq2seq" else ""
    n_layer = len(stacks(model)[prefix])
    clean_out, cache = run_with_cache(model, *clean)
    corrupt_out = run_with_hooks(model, *corrupt, hooks={})
    c_clean, c_corrupt = metric(clean_out), metric(corrupt_out)
    denom = c_clean - c_corrupt
    scale = 1.0 / denom if denom != 0 else np.nan

    def patch_run(name, index):
        def patch(x, _name):
            x = x.copy()
            x[index] = cache[name][index]
            return x
        return metric(run_with_hooks(model, *corrupt, hooks={name: patch}))

    T = cache[f"{prefix}blocks.0.resid_pre"].shape[1]
    residual = np.array([[(patch_run(f"{prefix}blocks.{i}.resid_pre", (slice(None), t)) - c_corrupt) * scale
                          for t in range(T)] for i in range(n_layer)])
    atts = [a for a in attentions(model) if a[0].startswith(prefix)]
    heads = np.full((len(atts), max(a[2].n_head for a in atts)), np.nan)
    for row, (name, _, attn) in enumerate(atts):
        for h in range(attn.n_head):
            heads[row, h] = (patch_run(name + ".head_out", (slice(None), h)) - c_corrupt) * scale
    everything = run_with_hooks(model, *corrupt, hooks={f"{prefix}blocks.0.resid_pre": lambda x, n: cache[n]})
    if family(model) == "seq2seq":  # the decoder also reads the encoder's output
        everything = run_with_hooks(model, *corrupt, hooks={"encoder.blocks.0.resid_pre": lambda x, n: cache[n],
                                                             "decoder.blocks.0.resid_pre": lambda x, n: cache[n]})
    error = float(np.abs(_logits(everything) - _logits(clean_out)).max())
    return Patching(residual, heads, [a[1] for a in atts], c_clean, c_corrupt,
                    Check("patching", "patching the whole residual stream restores the clean logits", error, 0.0))


# -- saliency -----------------------------------------------------------------------------------
Objective = Callable[[object], tuple[float, "np.ndarray | None"]]


def logit_objective(position: int, token: int) -> Objective:
    """f = logits[0, position, token] (or logits[0, token] for a classifier); its gradient."""
    def objective(output):
        logits = _logits(output)
        g = np.zeros_like(logits)
        index = (0, position, token) if logits.ndim == 3 else (0, token)
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
        T = hidden.shape[1]
        a = hidden[0].mean(axis=0)  # (d,)
        na, nb = np.linalg.norm(a), np.linalg.norm(other)
        cos = float(a @ other / (na * nb))
        # d cos / d a = b / (|a| |b|) - cos a / |a|^2 ; d a / d hidden[t] = 1 / T
        da = other / (na * nb) - cos * a / na**2
        return cos, np.broadcast_to((da / T).astype(hidden.dtype), hidden.shape).copy()
    return objective


def _embed_name(model) -> str:
    """The input embeddings saliency differentiates by: seq2seq's source tokens."""
    return "encoder.embed" if family(model) == "seq2seq" else "embed"


@dataclass
class Saliency:
    """value: f(input); gradient: df/d(input embeddings) (B, T, C); grad_x_input: (B, T) the
    gradient dotted with each token's embedding; norm: (B, T) the gradient's L2 norm."""

    value: float
    gradient: np.ndarray
    embeddings: np.ndarray
    grad_x_input: np.ndarray
    norm: np.ndarray


def _value_and_gradient(model, inputs, objective, embed_name, replace=None):
    """One training-mode forward (dropout off) and the hand-written backward."""
    grads, seen = {}, {}
    restore, was_training = dropouts_off(model), model.training

    def record(x, name):  # the embeddings the forward uses (replaced along the IG path)
        seen["x"] = x.copy() if replace is None else replace(x, name)
        return None if replace is None else seen["x"]
    hooks = {embed_name: record}
    try:
        model.train()
        with hooked(model, hooks, {embed_name: lambda g, n: grads.setdefault("g", g.copy())}):
            value, grad_out = objective(model(*inputs))
            if grad_out is None:
                model.backward()
            else:
                model.backward(grad_output=grad_out)
    finally:
        restore()
        model.train(was_training)
    return value, grads["g"], seen["x"]


def saliency(model, inputs: tuple, objective: Objective) -> Saliency:
    """Gradient of objective(model output) with respect to the input (token) embeddings
    (seq2seq: the source's), through the hand-written backward (the parameters' .grad are left as they were)."""
    saved = [p.grad.copy() for p in model.parameters()]
    try:
        value, g, x = _value_and_gradient(model, inputs, objective, _embed_name(model))
    finally:
        for p, s in zip(model.parameters(), saved):
            p.grad[...] = s
    return Saliency(value, g, x, (g * x).sum(-1), np.sqrt((g * g).sum(-1)))


@dataclass
class IntegratedGradients:
    """attributions: (B, T) per token; value / baseline_value: f(input), f(baseline)."""

    attributions: np.ndarray
    value: float
    baseline_value: float
    check: Check


def integrated_gradients(model, inputs: tuple, objective: Objective, steps: int = 64,
                         baseline: np.ndarray | None = None) -> IntegratedGradients:
    """Integrated gradients (Sundararajan et al. 2017) along the straight line from `baseline`
    (default: zero embeddings) to the input embeddings, trapezoid rule with `steps` intervals:
    attribution = (x - x0) * mean of the gradients. Completeness: the attributions sum to
    f(x) - f(x0), up to the quadrature error (the check allows 1%)."""
    if not isinstance(steps, int) or steps < 1:
        raise ConfigError(f"steps must be a positive integer, got {steps!r}")
    name = _embed_name(model)
    saved = [p.grad.copy() for p in model.parameters()]
    try:
        value, _, x = _value_and_gradient(model, inputs, objective, name)
        x0 = np.zeros_like(x) if baseline is None else np.broadcast_to(baseline, x.shape)
        total = np.zeros_like(x)
        f0 = None
        for i, alpha in enumerate(np.linspace(0.0, 1.0, steps + 1)):
            f, g, _ = _value_and_gradient(model, inputs, objective, name,
                                          replace=lambda _x, n, a=alpha: x0 + a * (x - x0))
            if i == 0:
                f0 = f
            total += g * (0.5 if i in (0, steps) else 1.0)
    finally:
        for p, s in zip(model.parameters(), saved):
            p.grad[...] = s
    attributions = ((x - x0) * total / steps).sum(-1)
    gap = value - f0
    error = abs(attributions.sum() - gap) / max(abs(gap), 1e-12)
    return IntegratedGradients(attributions, value, f0,
                               Check("integrated gradients", "the attributions sum to f(input) - f(baseline)",
                                     error, 0.01))


# -- head scores ----------------------------------------------------------------------------------
@dataclass
class HeadScores:
    """labels: one per attention; scores: name -> (n_attentions, n_head) mean attention weight
    ("previous", "first", "same", "induction", and for cross attention "diagonal", "anti_diagonal")."""

    labels: list[str]
    scores: dict[str, np.ndarray]
    check: Check


def head_scores(model, inputs: tuple, ids: np.ndarray | None = None) -> HeadScores:
    """Where each head looks, averaged over the batch and the query positions:
    previous: weight on the position before (queries 1..T-1); first: on position 0 (an
    attention sink); same: on earlier positions holding the query's own token (`ids`, the
    tokens the attention reads; default the first input; queries that have one); induction: on
    the positions just after those earlier occurrences (prefix matching, Olsson et al. 2022: an
    induction head looks there for the token to copy); diagonal /
    anti_diagonal (cross attention only): on key i / key S-1-i for query i (copy / reverse)."""
    atts = attentions(model)
    _, cache = run_with_cache(model, *inputs, names=[a[0] + ".pattern" for a in atts])
    ids = as_batch(inputs[0] if ids is None else ids)
    H = max(a[2].n_head for a in atts)
    names = ("previous", "first", "same", "induction", "diagonal", "anti_diagonal")
    scores = {k: np.full((len(atts), H), np.nan) for k in names}
    worst = 0.0
    for row, (prefix, _, attn) in enumerate(atts):
        w = cache[prefix + ".pattern"]  # (B, H, Tq, Tk)
        worst = max(worst, float(np.abs(w.sum(-1) - 1).max()))
        B, _, Tq, Tk = w.shape
        if ".cross_attn" in prefix:
            n = min(Tq, Tk)
            q = np.arange(n)
            scores["diagonal"][row, : attn.n_head] = w[:, :, q, q].mean(axis=(0, 2))
            scores["anti_diagonal"][row, : attn.n_head] = w[:, :, q, Tk - 1 - q].mean(axis=(0, 2))
            continue
        scores["first"][row, : attn.n_head] = w[..., 0].mean(axis=(0, 2))
        if Tq > 1:
            q = np.arange(1, Tq)
            scores["previous"][row, : attn.n_head] = w[:, :, q, q - 1].mean(axis=(0, 2))
        if ids.shape[1] == Tk == Tq and not prefix.startswith("decoder."):
            earlier = (ids[:, :, None] == ids[:, None, :]) & np.tril(np.ones((Tq, Tk), bool), -1)  # (B, Tq, Tk)
            has = earlier.any(-1)  # (B, Tq)
            if has.any():
                on_same = (w * earlier[:, None]).sum(-1)  # (B, H, Tq)
                scores["same"][row, : attn.n_head] = on_same.transpose(1, 0, 2)[:, has].mean(-1)
                after = np.zeros_like(earlier)  # key j + 1 for each earlier occurrence j (j + 1 <= query)
                after[:, :, 1:] = earlier[:, :, :-1]
                on_next = (w * after[:, None]).sum(-1)  # (B, H, Tq)
                scores["induction"][row, : attn.n_head] = on_next.transpose(1, 0, 2)[:, has].mean(-1)
    return HeadScores([a[1] for a in atts], scores,
                      Check("head scores", "every attention row sums to 1", worst, 1e-5))
