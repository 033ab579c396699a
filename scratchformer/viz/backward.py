"""The backward pass, step by step: what each layer's hand-written backward received and gave,
for one input and its loss, each step checked by finite differences.

    steps = backward_steps(gpt, ids, targets)      # [BackwardStep], in the order the backward runs
    steps = backward_steps(classifier, x, y)       # any model whose forward(*inputs) -> (logits, loss)
    steps = backward_steps(seq2seq, src, tgt_in, tgt_out)
    backward_walkthrough(steps, path="backward.png")

The library's own backward runs once, on a float64 copy of the model with dropout off; every
layer it calls at the shown level (the model's direct layers and each block's sub-layers, e.g.
`lm_head`, `ln_f`, `h.3.ff`, `h.3.ff_norm`, `h.3.self_attn`, ..., `wte`) is recorded as it
runs: the gradient it received, the gradient it returned, and what it added to each parameter's
`.grad`. The arrays are the library's, not recomputed. The first step is the loss itself.

Each step is then checked on its own: with the gradient it received held fixed (g), what it
returned and what it added to its parameters are compared with central differences of
sum(layer.forward(input) * g): by default (`THOROUGH`) every entry of an array of at most 256
entries, else 64 seeded random entries plus the 8 largest (in absolute value); `QUICK`, which
the report uses on bigger models, 3 random and the largest of an array of more than 16 entries.
`BackwardStep.checked` and the figure say which, per array ("dx all 96", "dweight 64 random + 8
largest of 4,096").
An entry agrees when |backward - finite difference| <= FD_TOL * max(1, the array's largest
|entry|); float64 central differences (eps 1e-6) agree with a right backward to 1e-10 to 5e-9
(`scratchformer.gradcheck`), so the tolerance leaves room and a wrong entry shows. A wrong
backward in one layer therefore turns that step red and no other (the steps before it receive
a wrong gradient, but handle it right). The residual sums of the blocks (dx = dy + norm'(sublayer'(dy))) join these steps; they are the
blocks' own backward (scratchformer/nn/blocks.py).
"""

from __future__ import annotations

import copy
import inspect
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from scratchformer.ops.loss import cross_entropy_backward, cross_entropy_forward
from scratchformer.viz._plot import finish, new_figure

__all__ = ["QUICK", "THOROUGH", "BackwardStep", "Sampling", "backward_steps", "backward_walkthrough"]

# the derivative each layer's backward computes (dy: the gradient received, dx: returned)
FORMULAS = {
    "loss": "dlogits = (softmax(logits) - onehot(targets)) / N",
    "Linear": "dx = dy W;  dW += dy^T x;  db += sum of dy over rows",
    "LayerNorm": "g = dy w;  dx = rstd (g - mean g - xhat mean(g xhat));  dw += sum dy xhat;  db += sum dy",
    "FeedForward": "da = dy W2 (fc2's backward);  dh = da act'(h);  dx = dh W1 (fc1's)",
    "MultiHeadAttention": "dv = A^T do;  dS = A (do v^T - rowsum);  dq, dk = dS k, dS^T q (/sqrt d);  "
                          "dx = [dq dk dv] W_in",
    "Embedding": "dW[id] += dy summed over every position holding id",
    "LearnedPositionalEmbedding": "dx = dy;  dW[t] += dy summed over the batch",
    "SinusoidalPositionalEncoding": "dx = dy (the table is fixed)",
}
FD_EPS, FD_TOL = 1e-6, 1e-6  # float64 central differences; relative to max(1, the array's largest |entry|)


@dataclass(frozen=True)
class Sampling:
    """Which entries of each array are checked: all of an array of at most `full` entries (or
    of at most sampled + largest), else `sampled` seeded random ones and the `largest` largest."""

    full: int
    sampled: int
    largest: int

    def describe(self) -> str:
        return (f"every entry of an array of at most {max(self.full, self.sampled + self.largest)} entries, "
                f"else {self.sampled} random + {self.largest} largest")


THOROUGH = Sampling(256, 64, 8)  # the default: a few thousand layer forwards on a small model
QUICK = Sampling(16, 3, 1)  # a few per array: the report's, on models of up to millions of parameters


@dataclass
class BackwardStep:
    """One layer's backward as it ran. Arrays are float64 copies of the library's."""

    name: str  # "h.1.ff", or "loss"
    op: str  # the layer's class
    formula: str
    where: str  # file:line of its backward
    grad_in: np.ndarray | float  # what it received: dL/d(its output)
    grad_out: np.ndarray | None  # what it returned: dL/d(its float input); None for token ids
    param_grads: dict[str, np.ndarray] = field(default_factory=dict)  # what it added to each .grad
    checks: list[tuple[str, tuple, float, float]] = field(default_factory=list)  # (array, index, backward, FD)
    checked: dict[str, str] = field(default_factory=dict)  # array -> which entries: "all 96", "64 random + ..."
    sampling: Sampling | None = None  # the rule that chose them

    @property
    def ok(self) -> bool:
        return all(_agrees(a, n, scale) for (_, _, a, n), scale in zip(self.checks, self._scales()))

    def _scales(self) -> list[float]:
        arrays = {"dx": self.grad_out, **{f"d{k}": v for k, v in self.param_grads.items()}}
        return [float(np.max(np.abs(arrays[name]), initial=0.0)) for name, *_ in self.checks]

    def failures(self) -> list[str]:
        return [f"{name}{list(i)}: backward {a:.6g}, finite differences {n:.6g}"
                for (name, i, a, n), scale in zip(self.checks, self._scales()) if not _agrees(a, n, scale)]


def _agrees(analytic: float, numeric: float, scale: float) -> bool:
    return abs(analytic - numeric) <= FD_TOL * max(scale, 1.0)


def _shown_layers(model) -> list[tuple[str, object]]:
    """The model's direct layers, and each block's: the level the walk-through shows."""
    from scratchformer.nn.blocks import DecoderBlock, EncoderBlock
    from scratchformer.nn.hooks import HookPoint
    from scratchformer.nn.layers import Dropout

    modules = dict(model.named_modules())
    shown = []
    for name, m in modules.items():
        if not name or isinstance(m, (DecoderBlock, EncoderBlock, Dropout, HookPoint)):  # hook points: identities
            continue
        parent = modules.get(name.rpartition(".")[0], model)  # "h.0" -> "h", a list: the model's own
        if parent is model or isinstance(parent, (DecoderBlock, EncoderBlock)):
            shown.append((name, m))
    return shown


def _where(cls) -> str:
    return _where_function(cls.backward)


def backward_steps(model, *inputs, seed: int = 0, sampling: Sampling = THOROUGH) -> list[BackwardStep]:
    """Run the model's backward on one batch and return its steps, in the order they ran, each
    checked by finite differences (see the module docstring). inputs: the model's forward
    arguments, targets included (GPT: ids, targets; classifier: x, y; seq2seq: src, tgt_in,
    tgt_out)."""
    from scratchformer.nn.layers import Dropout

    m = copy.deepcopy(model).to(np.float64).train()
    for layer in m.modules():  # the walk-through checks the math, not the noise
        if hasattr(layer, "dropout_p"):
            layer.dropout_p = 0.0
        if isinstance(layer, Dropout):
            layer.p = 0.0
    m.zero_grad()
    layers = _shown_layers(m)
    calls: dict[str, dict] = {}
    steps: list[BackwardStep] = []

    def record(name, layer):
        forward, backward = layer.forward, layer.backward
        params = list(layer.named_parameters())

        def recording_forward(*args, **kwargs):
            calls[name] = {"args": args, "kwargs": kwargs}
            return forward(*args, **kwargs)

        def recording_backward(grad):
            before = {p_name: p.grad.copy() for p_name, p in params}
            result = backward(grad)
            out = result[0] if isinstance(result, tuple) else result
            added = {p_name: p.grad - before[p_name] for p_name, p in params}
            steps.append(BackwardStep(name, type(layer).__name__, FORMULAS.get(type(layer).__name__, ""),
                                      _where(type(layer)), np.array(grad, copy=True),
                                      None if out is None else np.array(out, copy=True), added))
            return result

        layer.forward, layer.backward = recording_forward, recording_backward
        return forward

    originals = {name: record(name, layer) for name, layer in layers}
    logits, _ = m(*inputs)
    ce = m._cache["loss"]  # the model's own loss cache: its targets, ignored positions, smoothing
    m.backward()
    for name, layer in layers:  # the instance attributes go; the class's methods are back
        del layer.forward, layer.backward
    first = steps[0]  # the head received dlogits from the loss
    targets = np.where(ce["valid"], ce["t"], -100).reshape(ce["shape"][:-1])

    def ce_loss(lg):
        return cross_entropy_forward(lg, targets, ignore_index=-100, label_smoothing=ce["eps"])[0]

    loss_step = BackwardStep("loss", "cross-entropy", FORMULAS["loss"], _where_function(cross_entropy_backward),
                             1.0, first.grad_in)
    rng = np.random.default_rng(seed)
    _check(loss_step, ce_loss, logits.copy(), {}, rng, sampling)
    layer_of = dict(layers)
    for step in steps:
        name, layer = step.name, layer_of[step.name]
        call, forward = calls[name], originals[name]
        args, kwargs = call["args"], call["kwargs"]
        g = step.grad_in

        def local(x, forward=forward, args=args, kwargs=kwargs, g=g):
            return float(np.sum(forward(x, *args[1:], **kwargs) * g))

        x = np.array(args[0], dtype=np.float64) if step.grad_out is not None else None
        _check(step, local, x, dict(layer.named_parameters()), rng, sampling, frozen_input=args[0])
    return [loss_step, *steps]


def _where_function(fn) -> str:
    """'scratchformer/nn/layers.py:78': where fn is defined, from the package root."""
    file = Path(inspect.getsourcefile(fn))
    parts = file.parts
    rel = Path(*parts[parts.index("scratchformer"):]) if "scratchformer" in parts else file
    return f"{rel}:{inspect.getsourcelines(fn)[1]}"


def _picks(a: np.ndarray, rng, sampling: Sampling) -> tuple[list[tuple], str]:
    """The indices of the entries of `a` to check, and what they are (see Sampling)."""
    if a.size <= max(sampling.full, sampling.sampled + sampling.largest):
        flat, what = np.arange(a.size), f"all {a.size:,}"
    else:
        largest = np.argsort(np.abs(a).reshape(-1), kind="stable")[a.size - sampling.largest:]
        others = np.setdiff1d(np.arange(a.size), largest)
        flat = np.concatenate([largest, rng.choice(others, sampling.sampled, replace=False)])
        what = f"{sampling.sampled} random + {sampling.largest} largest of {a.size:,}"
    return [tuple(int(j) for j in np.unravel_index(int(i), a.shape)) for i in flat], what


def _check(step: BackwardStep, loss_of, x, params: dict, rng, sampling: Sampling, frozen_input=None) -> None:
    """Central differences of loss_of at the entries `sampling` picks of x (the input) and of
    what the step added to each parameter."""
    step.sampling = sampling
    if x is not None and step.grad_out is not None:
        picks, step.checked["dx"] = _picks(step.grad_out, rng, sampling)
        for i in picks:
            plus, minus = x.copy(), x.copy()
            plus[i] += FD_EPS
            minus[i] -= FD_EPS
            step.checks.append(("dx", i, float(step.grad_out[i]), (loss_of(plus) - loss_of(minus)) / (2 * FD_EPS)))
    for p_name, added in step.param_grads.items():
        p = params[p_name]
        picks, step.checked[f"d{p_name}"] = _picks(added, rng, sampling)
        for i in picks:
            orig = p.data[i]
            p.data[i] = orig + FD_EPS
            plus = loss_of(frozen_input)
            p.data[i] = orig - FD_EPS
            minus = loss_of(frozen_input)
            p.data[i] = orig
            step.checks.append((f"d{p_name}", i, float(added[i]), (plus - minus) / (2 * FD_EPS)))


def backward_walkthrough(steps: list[BackwardStep], path=None):
    """One row per step, in the order the backward ran: the layer, its formula and file:line,
    the gradient received and returned (shape, norm; a heatmap of the returned one's first batch
    row, red positive, blue negative, each on its own scale), and its finite-difference check
    (green when it agrees, red with the numbers when not); beside it, the gradient-flow bars:
    the norm of the gradient each step returned, and of what it added to its parameters."""
    n = len(steps)
    fig = new_figure(15, 1.2 + 0.42 * n)
    text_ax, bars = fig.subplots(1, 2, width_ratios=[3.2, 1])
    text_ax.set_axis_off()
    text_ax.set_xlim(0, 1)
    text_ax.set_ylim(n, -1)
    text_ax.text(0, -0.6, "step (layer)", fontsize=8, weight="bold")
    text_ax.text(0.2, -0.6, "formula  /  backward at", fontsize=8, weight="bold")
    text_ax.text(0.6, -0.6, "in -> out (shape, norm)", fontsize=8, weight="bold")
    text_ax.text(0.775, -0.6, "out, row 0", fontsize=8, weight="bold")
    text_ax.text(0.86, -0.6, "finite differences", fontsize=8, weight="bold")
    for r, s in enumerate(steps):
        colour = "tab:green" if s.ok else "tab:red"
        text_ax.text(0, r, f"{r}. {s.name} ({s.op})", fontsize=7, va="center")
        text_ax.text(0.2, r - 0.18, s.formula, fontsize=6, va="center")
        text_ax.text(0.2, r + 0.2, s.where, fontsize=6, va="center", color="grey")
        text_ax.text(0.6, r, f"{_describe(s.grad_in)} -> {_describe(s.grad_out)}", fontsize=6, va="center")
        if s.grad_out is not None and np.ndim(s.grad_out) >= 2:  # a thumbnail of the gradient it returned
            g = np.asarray(s.grad_out)[0] if np.ndim(s.grad_out) == 3 else np.asarray(s.grad_out)
            lim = float(np.abs(g).max()) or 1.0
            thumb = text_ax.inset_axes([0.775, r - 0.4, 0.075, 0.8], transform=text_ax.transData)
            thumb.imshow(g, cmap="RdBu_r", vmin=-lim, vmax=lim, aspect="auto", interpolation="nearest")
            thumb.set_axis_off()
        bad = s.failures()
        verdict = f"{len(s.checks):,} entries agree" if s.ok else f"{len(bad)} of {len(s.checks):,} disagree: {bad[0]}"
        text_ax.text(0.86, r - 0.18, verdict, fontsize=6, va="center", color=colour, weight="bold")
        text_ax.text(0.86, r + 0.2, "; ".join(f"{k} {v}" for k, v in s.checked.items()), fontsize=5, va="center",
                     color="grey")
    y = np.arange(n)
    out = [0.0 if s.grad_out is None else float(np.linalg.norm(s.grad_out)) for s in steps]
    par = [float(np.sqrt(sum(np.sum(g * g) for g in s.param_grads.values()))) for s in steps]
    bars.barh(y - 0.2, out, height=0.4, label="|returned gradient|",
              color=["tab:blue" if s.ok else "tab:red" for s in steps])
    bars.barh(y + 0.2, par, height=0.4, label="|added to parameters|", color="tab:orange")
    bars.set_yticks(y, [s.name for s in steps], fontsize=7)
    bars.set_ylim(n - 0.5, -0.5)
    bars.set_xlabel("L2 norm")
    bars.legend(fontsize=7, loc="lower right")
    bars.set_title("gradient flow", fontsize=9)
    red = [s.name for s in steps if not s.ok]
    total = sum(len(s.checks) for s in steps)
    fig.suptitle(f"the backward, step by step ({n} steps, in the order they run): "
                 + (f"{len(red)} step(s) disagree with finite differences: {', '.join(red)}" if red else
                    f"every step agrees with finite differences at all {total:,} entries checked")
                 + f"\nchecked: {steps[0].sampling.describe()} (per row, in grey); agree: |backward - central difference (float64, eps "
                   f"{FD_EPS:g})| <= {FD_TOL:g} x max(1, the array's largest |entry|)", fontsize=9)
    return finish(fig, path)


def _describe(g) -> str:
    if g is None:
        return "none (token ids)"
    if np.isscalar(g) or np.ndim(g) == 0:
        return f"{float(g):g}"
    return f"{tuple(g.shape)}, {np.linalg.norm(g):.3g}"
