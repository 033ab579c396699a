"""The backward pass, step by step, at the depth of the formulas: what each op's hand-written
backward received and gave, for one input and its loss, each step checked by finite differences.

    steps = backward_steps(gpt, ids, targets)      # [BackwardStep], in the order the backward runs
    steps = backward_steps(classifier, x, y)       # any model whose forward(*inputs) -> (logits, loss)
    steps = backward_steps(seq2seq, src, tgt_in, tgt_out)
    steps = backward_steps(gpt, ids, targets, lane="fast")   # the fast lane (scratchformer/fast)
    backward_walkthrough(steps, path="backward.png")
    print(backward_table(steps))                   # one line a step: what `viz RUN --backward` prints

The library's own backward runs once, on a float64 copy of the model with dropout off, in the
lane asked for (`lane`: "reference", the default, or "fast"); what it calls is recorded as it
runs: the gradient each step received, the gradient it returned, and what it added to each
parameter's `.grad`. The arrays are the library's, not recomputed. The steps, for a GPT:

- `loss`: dlogits from the cross-entropy (ops/loss.py);
- each layer the model or a block holds directly (`lm_head`, `ln_f`, `h.1.ff_norm`, ..., `wpe`,
  `wte`), at the op holding its formula (Linear: ops/linear.py, LayerNorm: ops/layernorm.py, ...);
- the feed-forward op by op: `h.1.ff.fc2`, `h.1.ff.act` (ops/activations.py), `h.1.ff.fc1`;
- each residual sum, twice: `h.1.ff residual: split` (y = x + branch(x): dy goes on unchanged
  to the skip and into the branch) and `h.1.ff residual: add` (x fed both, so dx = the skip's
  gradient + the branch's), from nn/blocks.py's `residual_backward`;
- inside attention, op by op (ops/attention.py): `out_proj`, then `dv` and `dA` (out = A v),
  `dS` through the softmax's Jacobian (ops/softmax.py), `dq` and `dk` (S = q k^T / sqrt d),
  `rope (q)` / `rope (k)` with rotary positions, and `in_proj` (dx = [dq dk dv] W_in); in the
  fast lane the fused op's `dv`, `dq` and `dk` (fast/attention.py);
- after each attention and feed-forward, its wiring (`h.1.ff: wiring`): the layer's own code
  between its ops (nn/attention.py, nn/feedforward.py) handed each op's gradient to the next,
  returned its last op's dx and added to each `.grad` exactly what its ops computed; compared
  entry by entry with what the ops gave, not by finite differences;
- a classifier's pooling (ops/pooling.py): the (B, C) gradient of the pooled vector spread
  over the (B, T, C) positions.

Each step names its `where` (the op's file:line, at the line of its formula where there is one)
and its `lane`: "fast" where the fast lane ran a faster form of the op (`lane_where`: its
file:line), else "reference".

Each step is then checked on its own: with the gradient it received held fixed (g), what it
returned and what it added to its parameters are compared with central differences of
sum(forward(input) * g), its own forward alone: by default (`THOROUGH`) every entry of an array
of at most 256 entries, else 64 seeded random entries plus the 8 largest (in absolute value);
`QUICK`, which the report uses on bigger models, 3 random and the largest of an array of more
than 16 entries. `BackwardStep.checked` and the figure say which, per array ("dx all 96",
"dweight 64 random + 8 largest of 4,096").
An entry agrees when |backward - finite difference| <= FD_TOL * max(1, the array's largest
|entry|); float64 central differences (eps 1e-6) agree with a right backward to 1e-10 to 5e-9
(`scratchformer.gradcheck`), so the tolerance leaves room and a wrong entry shows. A wrong
backward in one op therefore turns that step red and no other (the steps before it receive
a wrong gradient, but handle it right); a wrong line between two ops turns that layer's
wiring step red.
"""

from __future__ import annotations

import ast
import copy
import inspect
import math
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from scratchformer import fast
from scratchformer.errors import ConfigError
from scratchformer.ops.loss import cross_entropy_backward, cross_entropy_forward
from scratchformer.viz._plot import finish, new_figure

__all__ = [
    "QUICK",
    "THOROUGH",
    "BackwardStep",
    "Sampling",
    "backward_steps",
    "backward_table",
    "backward_walkthrough",
]

# the derivative each step computes (dy: the gradient received, dx: returned)
FORMULAS = {
    "loss": "dlogits = (softmax(logits) - onehot(targets)) / N",
    "Linear": "dx = dy W;  dW += dy^T x;  db += sum of dy over rows",
    "LayerNorm": "g = dy w;  dx = rstd (g - mean g - xhat mean(g xhat));  dw += sum dy xhat;  db += sum dy",
    "RMSNorm": "g = dy w;  dx = rstd (g - xhat mean(g xhat));  dw += sum dy xhat",
    "NoNorm": "dx = dy",
    "FeedForward": "da = dy W2 (fc2's backward);  dh = da act'(h);  dx = dh W1 (fc1's)",
    "Embedding": "dW[id] += dy summed over every position holding id",
    "LearnedPositionalEmbedding": "dx = dy;  dW[t] += dy summed over the batch",
    "SinusoidalPositionalEncoding": "dx = dy (the table is fixed)",
    "split": "y = x + branch(x): dy goes on to the skip unchanged, and into the branch unchanged",
    "add": "x feeds the skip and the branch: dx = dy(skip) + dx(branch)",
    "dv": "out = A v  =>  dv = A^T dout",
    "dA": "out = A v  =>  dA = dout v^T",
    "dS": "W = softmax(S)  =>  dS = W * (dW - rowsum(dW * W))   (masked keys: W = 0, dS = 0)",
    "dq": "S = q k^T / sqrt(d)  =>  dq = dS k / sqrt(d)",
    "dk": "S = q k^T / sqrt(d)  =>  dk = dS^T q / sqrt(d)",
    "rope": "y = rope(x)  =>  dx = rope^T(dy), the rotation by -angle",
    "in_proj": "[q k v] = x W_in^T + b  =>  dx = [dq dk dv] W_in;  dW_in += [dq dk dv]^T x;  db += sum",
    "fused": "the fused fast-lane backward of attention(q, k, v), checked against attention's forward",
    "pool": "pooled = sum_t w_t h_t  =>  dh_t = w_t dpooled",
    "act": "a = act(h)  =>  dh = da * act'(h)   (act'(h) computed beside the forward)",
    "wiring": "the layer's backward hands each op's gradient to the next, returns its last op's dx, and adds to "
    ".grad exactly what its ops computed",
}
FD_EPS, FD_TOL = 1e-6, 1e-6  # float64 central differences; relative to max(1, the array's largest |entry|)
WIRING_TOL = 1e-12  # a wiring step compares the same arithmetic done twice: equal up to float64 rounding
LANES = ("reference", "fast")


@dataclass(frozen=True)
class Sampling:
    """Which entries of each array are checked: all of an array of at most `full` entries (or
    of at most sampled + largest), else `sampled` seeded random ones and the `largest` largest."""

    full: int
    sampled: int
    largest: int

    def describe(self) -> str:
        return (
            f"every entry of an array of at most {max(self.full, self.sampled + self.largest)} entries, "
            f"else {self.sampled} random + {self.largest} largest"
        )


THOROUGH = Sampling(256, 64, 8)  # the default: a few thousand small forwards on a small model
QUICK = Sampling(16, 3, 1)  # a few per array: the report's, on models of up to millions of parameters


@dataclass
class _Check:
    """How a step is checked: loss_of(x) = sum(its forward(x) * the gradient it received);
    params: name -> the array loss_of reads, perturbed in place (what the step added is checked)."""

    loss_of: object
    x: np.ndarray | None
    params: dict = field(default_factory=dict)
    frozen: object = None  # the input loss_of is given while a parameter is perturbed (None: x)
    pairs: list | None = (
        None  # a wiring step: (name, the library's array, what its ops gave), compared as they are
    )


@dataclass
class BackwardStep:
    """One step of the backward as it ran. Arrays are float64 copies of the library's."""

    name: str  # "h.1.ff", "h.1.self_attn.dS", "h.1.ff residual: add", or "loss"
    op: str  # the layer's class, or the op ("dS", "split", "pool", ...)
    formula: str
    where: str  # file:line of the formula (the reference op)
    grad_in: np.ndarray | float  # what it received: dL/d(its output)
    grad_out: np.ndarray | None  # what it returned: dL/d(its float input); None for token ids
    param_grads: dict[str, np.ndarray] = field(default_factory=dict)  # what it added to each .grad
    checks: list[tuple[str, tuple, float, float]] = field(
        default_factory=list
    )  # (array, index, backward, FD)
    checked: dict[str, str] = field(
        default_factory=dict
    )  # array -> which entries: "all 96", "64 random + ..."
    sampling: Sampling | None = None  # the rule that chose them
    lane: str = "reference"  # the lane that ran it: "reference" or "fast"
    lane_where: str = ""  # file:line of the fast lane's form, when lane == "fast"
    also_in: np.ndarray | None = None  # a second gradient received: the branch's, at a residual's add
    against: str = "finite differences"  # what the checks compare with ("its ops" for a wiring step)
    tol: float = (
        FD_TOL  # an entry agrees when |backward - reference| <= tol * max(1, the array's largest |entry|)
    )
    extra: dict = field(
        default_factory=dict, repr=False
    )  # other checked arrays, by check name (their scales)
    into: dict = field(
        default_factory=dict, repr=False
    )  # param key -> (the parameter's full name, rows or None)
    spec: _Check | None = field(default=None, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        return all(_agrees(a, n, scale, self.tol) for (_, _, a, n), scale in zip(self.checks, self._scales()))

    @property
    def max_error(self) -> float:
        """The largest |backward - finite difference| / max(1, the array's largest |entry|)."""
        return max(
            (abs(a - n) / max(scale, 1.0) for (_, _, a, n), scale in zip(self.checks, self._scales())),
            default=0.0,
        )

    def _scales(self) -> list[float]:
        arrays = {"dx": self.grad_out, **{f"d{k}": v for k, v in self.param_grads.items()}, **self.extra}
        return [
            0.0 if arrays.get(name) is None else float(np.max(np.abs(arrays[name]), initial=0.0))
            for name, *_ in self.checks
        ]

    def failures(self) -> list[str]:
        return [
            f"{name}{list(i)}: backward {a:.6g}, {self.against} {n:.6g}"
            for (name, i, a, n), scale in zip(self.checks, self._scales())
            if not _agrees(a, n, scale, self.tol)
        ]


def _agrees(analytic: float, numeric: float, scale: float, tol: float = FD_TOL) -> bool:
    return abs(analytic - numeric) <= tol * max(scale, 1.0)


def _where_function(fn, formula: str | None = None) -> str:
    """'scratchformer/ops/attention.py:178': where fn is defined, from the package root; with
    `formula`, the first line of fn's source that holds it (else the def line)."""
    fn = inspect.unwrap(fn)
    file = Path(inspect.getsourcefile(fn))
    parts = file.parts
    rel = Path(*parts[parts.index("scratchformer") :]) if "scratchformer" in parts else file
    lines, start = inspect.getsourcelines(fn)
    body = ast.parse(textwrap.dedent("".join(lines))).body[0].body
    doc = (
        body[0].end_lineno if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) else 1
    )
    at = next((start + i for i, line in enumerate(lines) if i >= doc and formula and formula in line), start)
    return f"{rel}:{at}"


def _layer_ops() -> dict:
    """A layer's class -> (its reference op and the text of its formula's line, its fast-lane
    form or None): where a layer step points."""
    from scratchformer.fast import layernorm as fast_layernorm
    from scratchformer.fast import linear as fast_linear
    from scratchformer.nn.feedforward import FeedForward
    from scratchformer.nn.layers import LayerNorm, Linear, RMSNorm
    from scratchformer.ops import layernorm, linear, rmsnorm

    return {
        Linear: ((linear.linear_backward, "dx = "), fast_linear.linear_backward_into),
        LayerNorm: ((layernorm.layernorm_backward, "dx = "), fast_layernorm.layernorm_backward),
        RMSNorm: ((rmsnorm.rmsnorm_backward, "dx = "), None),
        FeedForward: ((FeedForward.backward, None), fast_linear.linear_backward_into),
    }


def _shown_layers(model) -> list[tuple[str, object]]:
    """The layers shown whole: the model's direct layers, each block's (attention and the
    feed-forward excepted: shown op by op), and the linear layers inside those two."""
    from scratchformer.nn.attention import MultiHeadAttention
    from scratchformer.nn.blocks import DecoderBlock, EncoderBlock
    from scratchformer.nn.feedforward import FeedForward
    from scratchformer.nn.hooks import HookPoint
    from scratchformer.nn.layers import Dropout

    modules = dict(model.named_modules())
    shown = []
    for name, m in modules.items():
        if not name or isinstance(
            m, (DecoderBlock, EncoderBlock, Dropout, HookPoint, MultiHeadAttention, FeedForward)
        ):
            continue  # hook points: identities; dropout is off; attention and feed-forward: op by op
        parent = modules.get(name.rpartition(".")[0], model)  # "h.0" -> "h", a list: the model's own
        if parent is model or isinstance(
            parent, (DecoderBlock, EncoderBlock, MultiHeadAttention, FeedForward)
        ):
            shown.append((name, m))
    return shown


def _masked_softmax(scores: np.ndarray, allowed) -> np.ndarray:
    """Attention's softmax over the keys, hidden keys weight 0 (ops/attention.py's forward)."""
    s = scores if allowed is None else np.where(allowed, scores, -np.inf)
    row_max = s.max(axis=-1, keepdims=True)
    row_max[np.isneginf(row_max)] = 0
    e = np.exp(s - row_max)
    denom = e.sum(axis=-1, keepdims=True)
    return e / np.where(denom == 0, 1, denom)


def _sum_against(g: np.ndarray, forward):
    """loss_of(x) = sum(forward(x) * g), g a copy: a step's own loss for its received gradient."""
    g = np.array(g, dtype=np.float64, copy=True)
    return lambda x: float(np.sum(forward(x) * g))


class _Recorder:
    """Wraps the model's layers and the library's backward functions while one backward runs,
    and records a BackwardStep for each; `undo` puts everything back."""

    def __init__(self, model):
        self.steps: list[BackwardStep] = []
        self.names = {id(m): n for n, m in model.named_modules()}
        self._undo: list[tuple] = []
        self.attn, self.att_cache, self.calls = "", None, {"proj": 0, "rope": 0}
        self.branch = None  # (received, returned) by the last residual branch
        self.ff, self.inputs = (
            None,
            {},
        )  # the feed-forward whose backward runs; each composite's forward input

    def patch(self, owner, attr: str, make):
        """owner.attr = make(the original); returns the original."""
        original = getattr(owner, attr)
        self._undo.append((owner, attr, original, attr in vars(owner)))
        setattr(owner, attr, make(original))
        return original

    def undo(self) -> None:
        for owner, attr, original, own in reversed(self._undo):
            if own:
                setattr(owner, attr, original)
            else:  # an instance attribute over the class's method
                delattr(owner, attr)
        self._undo.clear()

    def add(
        self, name, op, where, grad_in, grad_out, spec, *, params=None, fast_form=None, also_in=None, at=None
    ):
        """Record a step (copies of the arrays); fast_form: the fast lane's function, if the op has one."""
        lane = fast.current_lane() if fast_form is not None else "reference"
        step = BackwardStep(
            name,
            op,
            FORMULAS.get(op, ""),
            where,
            _copy(grad_in),
            _copy(grad_out),
            params or {},
            lane=lane,
            lane_where=_where_function(fast_form) if lane == "fast" else "",
            also_in=_copy(also_in),
            spec=spec,
        )
        self.steps.insert(len(self.steps) if at is None else at, step)
        return step


def _copy(a):
    return None if a is None else (a if np.isscalar(a) else np.array(a, dtype=np.float64, copy=True))


def _record_layer(rec: _Recorder, name: str, layer) -> None:
    """The layer's backward as one step, checked against its own forward."""
    params = list(layer.named_parameters())
    call: dict = {}
    op_fn, formula, fast_form = type(layer).backward, None, None
    for cls, ((fn, text), fast_fn) in _layer_ops().items():
        if isinstance(layer, cls):
            fast_form = fast_fn
            if (
                type(layer).backward is cls.backward
            ):  # a subclass's own backward (a planted bug) is where it ran
                op_fn, formula = fn, text
    kind = next((c.__name__ for c in type(layer).__mro__ if c.__name__ in FORMULAS), "")

    def make_forward(forward):
        def recording_forward(*args, **kwargs):
            call.update(args=args, kwargs=kwargs)
            return forward(*args, **kwargs)

        return recording_forward

    forward = rec.patch(layer, "forward", make_forward)

    def make_backward(backward):
        def recording_backward(grad):
            before = {p_name: p.grad.copy() for p_name, p in params}
            result = backward(grad)
            out = result[0] if isinstance(result, tuple) else result
            added = {p_name: p.grad - before[p_name] for p_name, p in params}
            args, kwargs = call["args"], call["kwargs"]
            loss_of = _sum_against(grad, lambda x: forward(x, *args[1:], **kwargs))
            x = None if out is None else np.array(args[0], dtype=np.float64)
            spec = _Check(loss_of, x, {p_name: p.data for p_name, p in params}, frozen=args[0])
            step = rec.add(
                name,
                type(layer).__name__,
                _where_function(op_fn, formula),
                grad,
                out,
                spec,
                params=added,
                fast_form=fast_form,
            )
            step.formula = FORMULAS.get(kind, "")
            step.into = {p_name: (f"{name}.{p_name}", None) for p_name in added}
            return result

        return recording_backward

    rec.patch(layer, "backward", make_backward)


def _record_composite(rec: _Recorder, name: str, layer) -> None:
    """An attention or feed-forward layer, shown op by op: name it for the op steps inside, and
    after its backward add its wiring step (`_wiring`)."""
    params = list(layer.named_parameters())

    def make_forward(forward):
        def recording_forward(*args, **kwargs):
            rec.inputs[name] = args[0]
            return forward(*args, **kwargs)

        return recording_forward

    def make(backward):
        def composite_backward(grad):
            before = {p_name: p.grad.copy() for p_name, p in params}
            base = len(rec.steps)
            rec.attn, rec.attn_layer, rec.calls = name, layer, {"proj": 0, "rope": 0}
            rec.ff = (name, layer)
            result = backward(grad)
            added = {p_name: p.grad - before[p_name] for p_name, p in params}
            _wiring(rec, name, layer, grad, result, added, rec.steps[base:])
            return result

        return composite_backward

    rec.patch(layer, "forward", make_forward)
    rec.patch(layer, "backward", make)
    if getattr(layer, "gated", False):  # a gated feed-forward's activation (SwiGLU): its own backward

        def gated(orig):
            def f(da, h):
                dh = orig(da, h)
                rec.add(
                    f"{name}.act",
                    "act",
                    _where_function(orig),
                    da,
                    dh,
                    _Check(_sum_against(da, layer.activate), np.array(h, dtype=np.float64)),
                )
                return dh

            return f

        rec.patch(layer, "_gated_backward", gated)


def _attention_pairs(name: str, layer, outs, inner: list, by: dict) -> list[tuple]:
    """An attention's hand-offs, (name, what the library passed, what the steps before gave):
    out_proj's dx split into heads is dout; dA on to dS (dropout is off), dS on to dq and dk;
    dq, dk, dv (rotated back, each key/value head's group summed) merged into what in_proj
    received; in_proj's dx (and the context's) is what the layer returned."""
    proj = [s for s in inner if s.op == "in_proj"]
    pairs = [("dx", outs[0], proj[0].grad_out)] + (
        [("dcontext", outs[1], proj[1].grad_out)] if outs[1] is not None else []
    )
    dy = by[f"{name}.out_proj"].grad_out
    B, T, C = dy.shape
    H = layer.n_head

    def heads_last(g):  # (B, heads, T, hs) -> (B, T, heads, hs): the layout of [q k v] in in_proj's output
        return g.transpose(0, 2, 1, 3)

    first = next(s for s in inner if s.op in ("dv", "fused"))
    pairs.append(("dv received", first.grad_in, dy.reshape(B, T, H, C // H).transpose(0, 2, 1, 3)))
    dq, dk, dv = (
        next(s for s in inner if s.name.startswith(f"{name}.{d}")).grad_out for d in ("dq", "dk", "dv")
    )
    if first.op == "dv":  # the reference lane's ops
        pairs += [
            ("dS received", by[f"{name}.dS"].grad_in, by[f"{name}.dA"].grad_out),
            ("dq received", by[f"{name}.dq"].grad_in, by[f"{name}.dS"].grad_out),
        ]
    if len(proj) == 2:  # cross-attention: q from x, k and v from the context
        return pairs + [
            ("in_proj (q) received", proj[0].grad_in, heads_last(dq).reshape(B, T, -1)),
            (
                "in_proj (k, v) received",
                proj[1].grad_in,
                np.concatenate(
                    [heads_last(dk).reshape(B, dk.shape[2], -1), heads_last(dv).reshape(B, dv.shape[2], -1)],
                    axis=-1,
                ),
            ),
        ]
    group = H // layer.n_kv_head

    def summed(g):  # each key/value head receives its group of query heads' gradients
        return g if group == 1 else g.reshape(B, layer.n_kv_head, group, *g.shape[2:]).sum(axis=2)

    dk, dv = summed(dk), summed(dv)
    if f"{name}.rope (q)" in by:  # rotated back
        pairs += [
            ("rope (q) received", by[f"{name}.rope (q)"].grad_in, dq),
            ("rope (k) received", by[f"{name}.rope (k)"].grad_in, dk),
        ]
        dq, dk = by[f"{name}.rope (q)"].grad_out, by[f"{name}.rope (k)"].grad_out
    merged = np.concatenate([heads_last(dq), heads_last(dk), heads_last(dv)], axis=2).reshape(B, T, -1)
    return pairs + [("in_proj received", proj[0].grad_in, merged)]


def _record_activation(rec: _Recorder) -> None:
    """A feed-forward's activation (nn/feedforward.py calls ops/activations.py's backward with the
    derivative its forward computed), checked against the activation's forward at fc1's output."""
    from scratchformer.nn import feedforward
    from scratchformer.ops.linear import linear_forward

    def act(orig):
        def f(da, dadh):
            dh = orig(da, dadh)
            name, layer = rec.ff
            fc1 = layer.fc1
            h = linear_forward(
                np.array(rec.inputs[name], dtype=np.float64),
                fc1.weight.data,
                None if fc1.bias is None else fc1.bias.data,
            )
            rec.add(
                f"{name}.act",
                "act",
                _where_function(layer._act_with_grad),
                da,
                dh,
                _Check(_sum_against(da, layer.activate), h),
            )
            return dh

        return f

    rec.patch(feedforward, "activation_backward", act)


def _wiring(rec: _Recorder, name: str, layer, grad, result, added: dict, inner: list) -> None:
    """The step that checks what the op steps cannot: that the layer's backward handed each op's
    gradient to the next, returned its last op's dx, and added to each .grad exactly the sum of
    what its ops computed (compared entry by entry with the library's arrays, no differences)."""
    from scratchformer.nn.feedforward import FeedForward

    expected = {p_name: np.zeros(a.shape) for p_name, a in added.items()}
    for s in inner:
        for key, (full, rows) in s.into.items():
            rel = full[len(name) + 1 :]
            if full.startswith(name + ".") and rel in expected and key in s.param_grads:
                expected[rel][slice(None) if rows is None else rows] += s.param_grads[key]
    outs = result if isinstance(result, tuple) else (result, None)
    by = {s.name: s for s in inner}
    if isinstance(layer, FeedForward):
        pairs = [
            ("dx", outs[0], by[f"{name}.fc1"].grad_out),
            ("act received", by[f"{name}.act"].grad_in, by[f"{name}.fc2"].grad_out),
            ("fc1 received", by[f"{name}.fc1"].grad_in, by[f"{name}.act"].grad_out),
        ]
    else:
        pairs = _attention_pairs(name, layer, outs, inner, by)
    pairs += [(f"d{p_name}", added[p_name], expected[p_name]) for p_name in added]
    step = rec.add(
        f"{name}: wiring",
        "wiring",
        _where_function(type(layer).backward),
        grad,
        outs[0],
        _Check(None, None, pairs=[(n, _copy(a), e) for n, a, e in pairs]),
        params=added,
    )
    step.against, step.tol, step.extra = (
        "its ops",
        WIRING_TOL,
        {n: _copy(a) for n, a, _ in pairs if n not in ("dx",) and n[1:] not in added},
    )


def _record_attention_ops(rec: _Recorder) -> None:
    """The fast lane's fused attention backward, checked against attention's forward; in the
    reference lane, the cache its ops read (`_record_attention_math`)."""
    from scratchformer.fast import attention as fast_attention
    from scratchformer.nn import attention as nn_attention
    from scratchformer.ops import attention as ops_attention
    from scratchformer.ops.attention import attention_forward

    def attention(orig):
        def f(dout, cache):
            rec.att_cache = cache
            dq, dk, dv = orig(dout, cache)
            if fast.lane_of(cache) == "fast":  # one fused op: each of its outputs against attention's forward
                q, k, v = (np.array(cache[a], dtype=np.float64) for a in "qkv")
                allowed = cache["allowed"]  # True = may attend, as the forward was given it

                def fwd(q, k, v):
                    return attention_forward(q, k, v, mask=allowed, bias=cache["bias"])[0]

                where = _where_function(ops_attention.attention_backward, "dq, dk = ")  # the formulas
                for out, x, of in (
                    (dv, v, lambda t: fwd(q, k, t)),
                    (dq, q, lambda t: fwd(t, k, v)),
                    (dk, k, lambda t: fwd(q, t, v)),
                ):
                    label = "dv" if out is dv else "dq" if out is dq else "dk"
                    step = rec.add(
                        f"{rec.attn}.{label} (fused)",
                        "fused",
                        where,
                        dout,
                        out,
                        _Check(_sum_against(dout, of), x),
                        fast_form=fast_attention.attention_backward,
                    )
                    step.formula = FORMULAS[label] + ";  " + FORMULAS["fused"]
            return dq, dk, dv

        return f

    rec.patch(nn_attention, "attention_backward", attention)
    _record_attention_math(rec)
    _record_projections(rec)


def _record_attention_math(rec: _Recorder) -> None:
    """dv, dA (out = A v), dS (the softmax, ops/softmax.py), dq, dk (S = q k^T / sqrt d): the
    reference lane's attention backward, op by op (ops/attention.py)."""
    from scratchformer.ops import attention as ops_attention

    def weighted_sum(orig):
        def f(dout, a, v):
            da, dv = orig(dout, a, v)
            A, V = np.array(a, dtype=np.float64), np.array(v, dtype=np.float64)
            rec.add(
                f"{rec.attn}.dv",
                "dv",
                _where_function(orig, "dv ="),
                dout,
                dv,
                _Check(_sum_against(dout, lambda t: A @ t), V),
            )
            rec.add(
                f"{rec.attn}.dA",
                "dA",
                _where_function(orig, "da ="),
                dout,
                da,
                _Check(_sum_against(dout, lambda t: t @ V), A),
            )
            return da, dv

        return f

    def softmax(orig):
        def f(dweights, weights):
            ds = orig(dweights, weights)
            c = rec.att_cache
            scores = np.array(
                c["q"] @ c["k"].swapaxes(-1, -2) / math.sqrt(c["q"].shape[-1]), dtype=np.float64
            )
            if c.get("bias") is not None:
                scores = scores + c["bias"]
            allowed = c.get("allowed")
            rec.add(
                f"{rec.attn}.dS",
                "dS",
                _where_function(orig, "return y * (dy"),
                dweights,
                ds,
                _Check(_sum_against(dweights, lambda s: _masked_softmax(s, allowed)), scores),
            )
            return ds

        return f

    def scores(orig):
        def f(dscores, q, k):
            dq, dk = orig(dscores, q, k)
            Q, K = np.array(q, dtype=np.float64), np.array(k, dtype=np.float64)
            s = 1 / math.sqrt(q.shape[-1])
            rec.add(
                f"{rec.attn}.dq",
                "dq",
                _where_function(orig, "dq ="),
                dscores,
                dq,
                _Check(_sum_against(dscores, lambda t: t @ K.swapaxes(-1, -2) * s), Q),
            )
            rec.add(
                f"{rec.attn}.dk",
                "dk",
                _where_function(orig, "dk ="),
                dscores,
                dk,
                _Check(_sum_against(dscores, lambda t: Q @ t.swapaxes(-1, -2) * s), K),
            )
            return dq, dk

        return f

    rec.patch(ops_attention, "weighted_sum_backward", weighted_sum)
    rec.patch(ops_attention, "softmax_backward", softmax)
    rec.patch(ops_attention, "scores_backward", scores)


def _record_projections(rec: _Recorder) -> None:
    """in_proj (dx = [dq dk dv] W_in) and the rotary positions' backward: nn/attention.py's calls."""
    from scratchformer.nn import attention as nn_attention
    from scratchformer.ops.linear import linear_backward, linear_forward
    from scratchformer.ops.rope import rope_forward

    def in_proj(orig):
        def f(dy, x, weight, weight_grad, bias_grad=None):
            before_w = weight_grad.copy()
            before_b = None if bias_grad is None else bias_grad.copy()
            dx = orig(dy, x, weight, weight_grad, bias_grad)
            added = {"weight": weight_grad - before_w}
            bias = np.zeros(weight.shape[0])  # the forward is affine in b: any b gives the same differences
            if bias_grad is not None:
                added["bias"] = bias_grad - before_b
            rec.calls["proj"] += 1
            whole = weight_grad.shape == rec.attn_layer.in_proj_weight.grad.shape  # self-attention: one call
            part = "" if whole else (" (q)" if rec.calls["proj"] == 1 else " (k, v)")
            X = np.array(x, dtype=np.float64)
            spec = _Check(
                _sum_against(dy, lambda t: linear_forward(t, weight, bias)),
                X,
                {"weight": weight, "bias": bias},
                frozen=X,
            )
            from scratchformer.fast import linear as fast_linear

            step = rec.add(
                f"{rec.attn}.in_proj{part}",
                "in_proj",
                _where_function(linear_backward, "dx = "),
                dy,
                dx,
                spec,
                params=added,
                fast_form=fast_linear.linear_backward_into,
            )
            start = weight.shape[1] if part == " (k, v)" else 0  # cross-attention's W[d:] for the context
            rows = slice(start, start + weight.shape[0])
            step.into = {
                "weight": (f"{rec.attn}.in_proj_weight", rows),
                "bias": (f"{rec.attn}.in_proj_bias", rows),
            }
            return dx

        return f

    def rope(orig):
        def f(dy, cos, sin):
            dx = orig(dy, cos, sin)
            rec.calls["rope"] += 1
            part = "q" if rec.calls["rope"] == 1 else "k"
            rec.add(
                f"{rec.attn}.rope ({part})",
                "rope",
                _where_function(orig),
                dy,
                dx,
                _Check(_sum_against(dy, lambda t: rope_forward(t, cos, sin)), np.zeros(dy.shape)),
            )
            return dx

        return f

    rec.patch(nn_attention, "linear_backward_into", in_proj)
    rec.patch(nn_attention, "rope_backward", rope)


def _record_residuals(rec: _Recorder) -> None:
    """Each residual sum as two steps around its branch's: the split (dy into the skip and the
    branch) and the add (the skip's gradient + the branch's), from nn/blocks.py."""
    from scratchformer.nn import blocks

    def sublayer(orig):
        def f(layer, ds):
            out = orig(layer, ds)
            rec.branch = (ds, out[0])
            return out

        return f

    def residual(orig):
        def f(dy, norm, layer, drop, norm_first):
            base = len(rec.steps)
            dx, dcontext = orig(dy, norm, layer, drop, norm_first)
            received, returned = rec.branch
            norm_name = rec.names[id(norm)]
            norm_at = next(i for i in range(base, len(rec.steps)) if rec.steps[i].name == norm_name)
            norm_dx = rec.steps[norm_at].grad_out
            if norm_first:  # y = x + s(norm(x)): the split at y, the add at x
                into, skip, branch, at = dy, dy, norm_dx, base
                split_line, add_line = "drop.backward(dy)", "return dy + norm"
            else:  # y = norm(z), z = x + s(x): the split at z (after the norm's backward), the add at x
                into, skip, branch, at = norm_dx, norm_dx, returned, norm_at + 1
                split_line, add_line = "drop.backward(dz)", "return dz + ds"
            name = rec.names[id(layer)]
            rec.add(
                f"{name} residual: split",
                "split",
                _where_function(orig, split_line),
                into,
                received,
                _Check(_sum_against(into, lambda b: b), np.zeros(np.shape(into))),
                at=at,
            )
            skip_, branch_ = np.array(skip, dtype=np.float64), np.array(branch, dtype=np.float64)
            rec.add(
                f"{name} residual: add",
                "add",
                _where_function(orig, add_line),
                skip,
                dx,
                _Check(lambda x: float(np.sum(x * skip_) + np.sum(x * branch_)), np.zeros(np.shape(dx))),
                also_in=branch,
            )
            return dx, dcontext

        return f

    rec.patch(blocks, "_sublayer_backward", sublayer)
    rec.patch(blocks, "residual_backward", residual)


def _record_pooling(rec: _Recorder) -> None:
    """A classifier's pooling (ops/pooling.py): (B, C) -> (B, T, C)."""
    from scratchformer.models import classifier
    from scratchformer.ops.pooling import pool_forward

    def pool(orig):
        def f(dpooled, weights):
            dh = orig(dpooled, weights)
            w = np.array(weights, dtype=np.float64)
            rec.add(
                "pool",
                "pool",
                _where_function(orig, "return weights"),
                dpooled,
                dh,
                _Check(_sum_against(dpooled, lambda h: pool_forward(h, w)), np.zeros(np.shape(dh))),
            )
            return dh

        return f

    rec.patch(classifier, "pool_backward", pool)


def backward_steps(
    model, *inputs, seed: int = 0, sampling: Sampling = THOROUGH, lane: str = "reference"
) -> list[BackwardStep]:
    """Run the model's backward on one batch and return its steps, in the order they ran, each
    checked by finite differences (see the module docstring). inputs: the model's forward
    arguments, targets included (GPT: ids, targets; classifier: x, y; seq2seq: src, tgt_in,
    tgt_out). lane: "reference" (the ops' formulas, attention op by op) or "fast" (the fast
    lane, attention's backward one fused op)."""
    from scratchformer.nn.attention import MultiHeadAttention
    from scratchformer.nn.feedforward import FeedForward
    from scratchformer.nn.layers import Dropout

    if lane not in LANES:
        raise ConfigError(f"lane must be one of {LANES}, got {lane!r}")
    m = copy.deepcopy(model).to(np.float64).train()
    for layer in m.modules():  # the walk-through checks the math, not the noise
        if hasattr(layer, "dropout_p"):
            layer.dropout_p = 0.0
        if isinstance(layer, Dropout):
            layer.p = 0.0
    m.zero_grad()
    rec = _Recorder(m)
    try:
        for name, layer in _shown_layers(m):
            _record_layer(rec, name, layer)
        for name, layer in m.named_modules():
            if isinstance(layer, (MultiHeadAttention, FeedForward)):
                _record_composite(rec, name, layer)
        _record_attention_ops(rec)
        _record_activation(rec)
        _record_residuals(rec)
        _record_pooling(rec)
        with fast.reference(lane == "reference"):
            logits, _ = m(*inputs)
            ce = m._cache["loss"]  # the model's own loss cache: its targets, ignored positions, smoothing
            m.backward()
    finally:
        rec.undo()
    targets = np.where(ce["valid"], ce["t"], -100).reshape(ce["shape"][:-1])

    def ce_loss(lg):
        return cross_entropy_forward(lg, targets, ignore_index=-100, label_smoothing=ce["eps"])[0]

    loss_step = BackwardStep(
        "loss",
        "cross-entropy",
        FORMULAS["loss"],
        _where_function(cross_entropy_backward),
        1.0,
        rec.steps[0].grad_in,
        spec=_Check(ce_loss, np.array(logits, dtype=np.float64)),
    )
    steps = [loss_step, *rec.steps]
    rng = np.random.default_rng(seed)
    with fast.reference():  # each step against its forward's formula
        for step in steps:
            _check(step, rng, sampling)
    return steps


def _picks(a: np.ndarray, rng, sampling: Sampling) -> tuple[list[tuple], str]:
    """The indices of the entries of `a` to check, and what they are (see Sampling)."""
    if a.size <= max(sampling.full, sampling.sampled + sampling.largest):
        flat, what = np.arange(a.size), f"all {a.size:,}"
    else:
        largest = np.argsort(np.abs(a).reshape(-1), kind="stable")[a.size - sampling.largest :]
        others = np.setdiff1d(np.arange(a.size), largest)
        flat = np.concatenate([largest, rng.choice(others, sampling.sampled, replace=False)])
        what = f"{sampling.sampled} random + {sampling.largest} largest of {a.size:,}"
    return [tuple(int(j) for j in np.unravel_index(int(i), a.shape)) for i in flat], what


def _check(step: BackwardStep, rng, sampling: Sampling) -> None:
    """Central differences of the step's own loss at the entries `sampling` picks of its input
    and of what it added to each parameter."""
    spec, step.sampling = step.spec, sampling
    if spec.pairs is not None:
        _compare(step, spec.pairs, rng, sampling)
        return
    if spec.x is not None and step.grad_out is not None:
        picks, step.checked["dx"] = _picks(step.grad_out, rng, sampling)
        for i in picks:
            plus, minus = spec.x.copy(), spec.x.copy()
            plus[i] += FD_EPS
            minus[i] -= FD_EPS
            step.checks.append(
                ("dx", i, float(step.grad_out[i]), (spec.loss_of(plus) - spec.loss_of(minus)) / (2 * FD_EPS))
            )
    frozen = spec.x if spec.frozen is None else spec.frozen
    for p_name, added in step.param_grads.items():
        p = spec.params[p_name]
        picks, step.checked[f"d{p_name}"] = _picks(added, rng, sampling)
        for i in picks:
            orig = p[i]
            p[i] = orig + FD_EPS
            plus = spec.loss_of(frozen)
            p[i] = orig - FD_EPS
            minus = spec.loss_of(frozen)
            p[i] = orig
            step.checks.append((f"d{p_name}", i, float(added[i]), (plus - minus) / (2 * FD_EPS)))


def backward_walkthrough(steps: list[BackwardStep], path=None):
    """One row per step, in the order the backward ran: the step, its formula, file:line and lane,
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
    text_ax.text(0, -0.6, "step (op)", fontsize=8, weight="bold")
    text_ax.text(0.2, -0.6, "formula  /  backward at", fontsize=8, weight="bold")
    text_ax.text(0.6, -0.6, "in -> out (shape, norm)", fontsize=8, weight="bold")
    text_ax.text(0.775, -0.6, "out, row 0", fontsize=8, weight="bold")
    text_ax.text(0.86, -0.6, "finite differences", fontsize=8, weight="bold")
    for r, s in enumerate(steps):
        colour = "tab:green" if s.ok else "tab:red"
        text_ax.text(0, r, f"{r}. {s.name} ({s.op})", fontsize=7, va="center")
        text_ax.text(0.2, r - 0.18, _clip(s.formula, 100), fontsize=6, va="center")
        text_ax.text(0.2, r + 0.2, f"{s.where}  ({s.lane} lane)", fontsize=6, va="center", color="grey")
        text_ax.text(0.6, r, f"{_describe(s.grad_in)} -> {_describe(s.grad_out)}", fontsize=6, va="center")
        if s.grad_out is not None and np.ndim(s.grad_out) >= 2:  # a thumbnail of the gradient it returned
            g = np.asarray(s.grad_out)
            while g.ndim > 2:  # the first batch row (and head)
                g = g[0]
            lim = float(np.abs(g).max()) or 1.0
            # drawn into the text's axes, in the box of its column and row (row 0 at the top): an
            # axes per thumbnail would cost more than the rest of the figure
            text_ax.imshow(
                g,
                cmap="RdBu_r",
                vmin=-lim,
                vmax=lim,
                aspect="auto",
                interpolation="nearest",
                extent=(0.775, 0.85, r + 0.4, r - 0.4),
                zorder=4,  # over the text, as a thumbnail of its own would be
            )
        bad = s.failures()
        verdict = (
            f"{len(s.checks):,} entries agree"
            if s.ok
            else f"{len(bad)} of {len(s.checks):,} disagree: {bad[0]}"
        )
        text_ax.text(0.86, r - 0.18, _clip(verdict, 70), fontsize=6, va="center", color=colour, weight="bold")
        text_ax.text(
            0.86,
            r + 0.2,
            _clip("; ".join(f"{k} {v}" for k, v in s.checked.items()), 80),
            fontsize=5,
            va="center",
            color="grey",
        )
    y = np.arange(n)
    out = [0.0 if s.grad_out is None else float(np.linalg.norm(s.grad_out)) for s in steps]
    par = [
        0.0 if s.op == "wiring" else float(np.sqrt(sum(np.sum(g * g) for g in s.param_grads.values())))
        for s in steps
    ]  # a wiring step's are its ops', already shown
    bars.barh(
        y - 0.2,
        out,
        height=0.4,
        label="|returned gradient|",
        color=["tab:blue" if s.ok else "tab:red" for s in steps],
    )
    bars.barh(y + 0.2, par, height=0.4, label="|added to parameters|", color="tab:orange")
    bars.set_yticks(y, [s.name for s in steps], fontsize=7)
    bars.set_ylim(n - 0.5, -0.5)
    bars.set_xlabel("L2 norm")
    bars.legend(fontsize=7, loc="lower right")
    bars.set_title("gradient flow", fontsize=9)
    red = [s.name for s in steps if not s.ok]
    total = sum(len(s.checks) for s in steps)
    fig.suptitle(
        f"the backward, step by step ({n} steps, in the order they run): "
        + (
            f"{len(red)} step(s) disagree with finite differences: {', '.join(red)}"
            if red
            else f"every step agrees with finite differences at all {total:,} entries checked"
        )
        + f"\nchecked: {steps[0].sampling.describe()} (per row, in grey); agree: |backward - central difference (float64, eps "  # noqa: E501
        f"{FD_EPS:g})| <= {FD_TOL:g} x max(1, the array's largest |entry|)",
        fontsize=9,
    )
    return finish(fig, path)


def _clip(text: str, n: int) -> str:
    """At most n characters (the figure's columns stay apart; backward_table and the report say it all)."""
    return text if len(text) <= n else text[: n - 3] + "..."


def _describe(g) -> str:
    if g is None:
        return "none (token ids)"
    if np.isscalar(g) or np.ndim(g) == 0:
        return f"{float(g):g}"
    return f"{tuple(g.shape)}, {np.linalg.norm(g):.3g}"


def backward_table(steps: list[BackwardStep]) -> str:
    """The steps as text, one line each: number, name, shapes in -> out, the op's file:line and
    lane, the largest error against finite differences and the verdict; then a summary line."""
    width = max(len(s.name) for s in steps)
    lines = []
    for r, s in enumerate(steps):
        shapes = f"{_shape(s.grad_in)} -> {_shape(s.grad_out)}"
        lane = s.lane + (f" {s.lane_where}" if s.lane_where else "")
        verdict = "ok" if s.ok else f"DISAGREES: {s.failures()[0]}"
        lines.append(
            f"{r:3d}  {s.name:<{width}}  {shapes:<28}  {s.where} [{lane}]  max error {s.max_error:.1e}  "
            f"{verdict}"
        )
    red = [s.name for s in steps if not s.ok]
    total = sum(len(s.checks) for s in steps)
    lines.append(
        f"{len(red)} of {len(steps)} steps disagree with finite differences: {', '.join(red)}"
        if red
        else f"all {len(steps)} steps agree with finite differences (the wiring steps: with their ops) at the "
        f"{total:,} entries checked"
    )
    return "\n".join(lines)


def _shape(g) -> str:
    if g is None:
        return "ids"
    return "()" if np.ndim(g) == 0 else str(tuple(np.shape(g))).replace(" ", "")


def _compare(step: BackwardStep, pairs, rng, sampling: Sampling) -> None:
    """A wiring step: each library array against what its ops gave, at the entries `sampling`
    picks and at the largest difference (so any entry that differs is among those checked)."""
    for name, got, want in pairs:
        if got is None or np.shape(got) != np.shape(want):
            step.checks.append((name, (), float("nan"), 0.0))  # never agrees: the shapes do not even fit
            step.checked[name] = f"shape {np.shape(got)} against {np.shape(want)}"
            continue
        picks, what = _picks(got, rng, sampling)
        worst = tuple(int(j) for j in np.unravel_index(int(np.argmax(np.abs(got - want))), got.shape))
        step.checked[name] = f"{what} and the largest difference"
        for i in [*picks, worst]:
            step.checks.append((name, i, float(got[i]), float(want[i])))
