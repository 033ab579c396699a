"""Optimizers that update `Parameter.data` in place from `Parameter.grad`.

Both follow `torch.optim` exactly (same formulas, same order of operations up to rounding),
so a run can be checked against PyTorch step by step. Updates run in each parameter's own
dtype (float32 by default; float64 in the tests).

Optimizer state format (`state_dict()`), designed to be saved without pickle: one flat dict
whose values are either numpy arrays or plain JSON scalars.

    {"kind": "AdamW", "step": 10, "num_params": 3,         # scalars -> JSON
     "m.0": ndarray, "v.0": ndarray, "m.1": ..., ...}      # arrays  -> safetensors

    {"kind": "SGD", "step": 10, "num_params": 3,
     "momentum_buffer.0": ndarray, ...}                     # only with momentum, after step 1

Index `i` is the position of the parameter in the optimizer's flat parameter list (groups
concatenated in order), so the same model built the same way maps back one-to-one. The
training checkpoint (`scratchformer.training.checkpoint`) stores the arrays in
`optimizer.safetensors` and the scalars under `"optimizer"` in `trainer_state.json`.

Per-group rates: a group dict may carry "lr_scale" (default 1.0); its rate is the optimizer's
`lr` times it (`group_lr`), so one schedule, which sets `lr` each step, moves every group at its
own ratio (torch's per-group "lr" under one LambdaLR). The scales are not optimizer state: the
caller rebuilds the same groups to resume (the trainer from TrainConfig.head_lr).

Declared state (`state_arrays()`, `adopt_state_arrays()`): every array an optimiser keeps
from step to step and updates in place, by name, and a way to take over copies of them (same
values). training/parallel.py moves them into shared memory through these two calls, before
it forks its workers.

The fast lane's AdamW is an optimiser of its own (`optim/flat.py`, `FlatAdamW`): the same
update on one flat buffer, bit for bit. Building an `AdamW` never touches the parameters'
arrays; `make_adamw` picks the lane's optimiser (the trainer's choice).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable

import numpy as np

from scratchformer import fast
from scratchformer.checks import check_bool, check_module, is_number
from scratchformer.errors import CheckpointError, ConfigError
from scratchformer.fast import optim as fast_optim
from scratchformer.nn import Embedding, LearnedPositionalEmbedding
from scratchformer.nn.module import Module, Parameter


# -- parameter groups ------------------------------------------------------------------------
def _as_groups(params, default_wd: float, kind: str) -> list[dict]:
    """Normalise `params` (Parameters, or group dicts) to
    [{"params": [...], "weight_decay": wd, "lr_scale": s}] (s: 1.0 unless the group gives one)."""
    if isinstance(params, Module):
        raise ConfigError(
            f"{kind} got a Module: pass model.parameters() or param_groups(model, weight_decay)"
        )
    try:
        items = list(params)
    except TypeError:
        raise ConfigError(
            f"{kind} params must be an iterable of Parameters (model.parameters()), got "
            f"{type(params).__name__}"
        ) from None
    if not items:
        raise ConfigError(f"{kind} got an empty parameter list: pass model.parameters()")
    if all(isinstance(it, dict) for it in items):
        raw_groups = items
    elif all(isinstance(it, Parameter) for it in items):
        raw_groups = [{"params": items}]
    else:
        bad = next(type(it).__name__ for it in items if not isinstance(it, (Parameter, dict)))
        raise ConfigError(
            f"{kind} params must be Parameters or group dicts {{'params': [...], "
            f"'weight_decay': float, 'lr_scale': float}}, got a {bad}"
        )

    groups, seen = [], set()
    for gi, g in enumerate(raw_groups):
        unknown = sorted(set(g) - {"params", "weight_decay", "lr_scale"})
        if unknown:
            raise ConfigError(
                f"{kind} param group {gi} has unknown keys {unknown}: only 'params', 'weight_decay' "
                "and 'lr_scale' are supported (lr is the optimizer's; a group's rate is lr * lr_scale)"
            )
        if "params" not in g:
            raise ConfigError(f"{kind} param group {gi} has no 'params' list")
        ps = list(g["params"])
        for p in ps:
            if not isinstance(p, Parameter):
                raise ConfigError(f"{kind} param group {gi} holds a {type(p).__name__}, expected Parameters")
            if id(p) in seen:  # would be updated twice per step
                raise ConfigError(f"{kind}: a parameter appears more than once; list each once")
            seen.add(id(p))
        wd = float(g.get("weight_decay", default_wd))
        if wd < 0:
            raise ConfigError(f"{kind} weight_decay must be >= 0, got {wd}")
        scale = g.get("lr_scale", 1.0)
        if not is_number(scale) or not (scale >= 0 and math.isfinite(scale)):
            raise ConfigError(f"{kind} param group {gi} lr_scale must be a finite number >= 0, got {scale!r}")
        groups.append({"params": ps, "weight_decay": wd, "lr_scale": float(scale)})
    return groups


def param_groups(model: Module, weight_decay: float, decay_embeddings: bool = False) -> list[dict]:
    """Split a model's parameters into a decayed and a non-decayed group.

    Decay: every parameter with ndim >= 2 (Linear weights, attention projections). No decay:
    biases and LayerNorm weights (ndim 1). Embedding tables (`Embedding`,
    `LearnedPositionalEmbedding`, and a head tied to the token embedding) are not decayed by
    default, since decaying a lookup table mostly shrinks the rows of rare tokens;
    `decay_embeddings=True` decays them too, as nanoGPT's `configure_optimizers` does (it
    decays every tensor with ndim >= 2).

    Returns:
        [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    """
    check_module("model", model)
    if not is_number(weight_decay) or not (weight_decay >= 0 and math.isfinite(weight_decay)):
        raise ConfigError(f"weight_decay must be a finite number >= 0, got {weight_decay!r}")
    check_bool("decay_embeddings", decay_embeddings)
    embedding_ids: set[int] = set()
    if not decay_embeddings:
        for m in model.modules():
            if isinstance(m, (Embedding, LearnedPositionalEmbedding)):
                embedding_ids.update(id(p) for _, p in m.named_parameters())

    decay, no_decay = [], []
    for _, p in model.named_parameters():
        if p.data.ndim >= 2 and id(p) not in embedding_ids:
            decay.append(p)
        else:
            no_decay.append(p)
    return [
        {"params": decay, "weight_decay": float(weight_decay)},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def _check_adopted(kind: str, name: str, own, new) -> None:
    """ConfigError unless `new` can stand in for the state array `own` named `name`."""
    if own is None:
        raise ConfigError(
            f"{kind}.adopt_state_arrays: no state array named {name!r} (state_arrays() names them)"
        )
    if not isinstance(new, np.ndarray) or new.shape != own.shape or new.dtype != own.dtype:
        got = f"{new.shape} {new.dtype}" if isinstance(new, np.ndarray) else type(new).__name__
        raise ConfigError(
            f"{kind}.adopt_state_arrays: {name} must be an array of shape {own.shape} and dtype "
            f"{own.dtype}, got {got}"
        )


# -- shared base -----------------------------------------------------------------------------
class _Optimizer:
    """Holds the groups, the flat parameter list, `lr` and the step counter."""

    kind = "Optimizer"

    def __init__(self, params, lr: float, weight_decay: float):
        for name, value in (("lr", lr), ("weight_decay", weight_decay)):
            if not is_number(value):
                raise ConfigError(f"{self.kind} {name} must be a number, got {value!r}")
        if not (lr >= 0 and math.isfinite(lr)):
            raise ConfigError(f"{self.kind} lr must be a finite number >= 0, got {lr}")
        if not (weight_decay >= 0 and math.isfinite(weight_decay)):
            raise ConfigError(f"{self.kind} weight_decay must be a finite number >= 0, got {weight_decay}")
        self.param_groups = _as_groups(params, float(weight_decay), self.kind)
        self.params: list[Parameter] = [p for g in self.param_groups for p in g["params"]]
        self.lr = float(lr)
        self.step_count = 0  # number of step() calls so far (torch's per-param "step")

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad[...] = 0

    def group_lr(self, group: dict) -> float:
        """A group's rate now: the optimizer's `lr` (which the schedule sets) times the group's
        lr_scale, so every group follows the one schedule at its own ratio; exactly `lr` at
        scale 1."""
        return self.lr if group["lr_scale"] == 1.0 else self.lr * group["lr_scale"]

    # Subclasses list their per-parameter buffers: name -> the list of arrays (one per param)
    # the optimiser itself holds, so that replacing an entry replaces its buffer.
    def _buffers(self) -> dict[str, list[np.ndarray]]:
        return {}

    def state_arrays(self) -> dict[str, np.ndarray]:
        """Every array this optimiser keeps between steps, by name ("m.0", "v.0", ... as in
        state_dict): what a process that forks workers may move into shared memory
        (`adopt_state_arrays`). The arrays themselves, not copies. (The per-parameter optimisers
        replace some of them at each step, so sharing them saves little; FlatAdamW's are updated
        in place.)"""
        return {f"{name}.{i}": b for name, bufs in self._buffers().items() for i, b in enumerate(bufs)}

    def adopt_state_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        """Use `arrays` (some of state_arrays()' names -> an array of the same shape, dtype and
        values, e.g. a copy in shared memory) in place of the arrays held now."""
        own = self.state_arrays()
        for name, a in arrays.items():
            _check_adopted(self.kind, name, own.get(name), a)
        buffers = self._buffers()
        for name, a in arrays.items():
            buf, i = name.rsplit(".", 1)
            buffers[buf][int(i)] = a

    def state_dict(self) -> dict:
        """Flat dict of scalars and arrays (copies); see the module docstring for the format."""
        state: dict = {"kind": self.kind, "step": self.step_count, "num_params": len(self.params)}
        for name, bufs in self._buffers().items():
            for i, b in enumerate(bufs):
                state[f"{name}.{i}"] = b.copy()
        return state

    def load_state_dict(self, state: dict) -> None:
        """Restore `step` and the buffers; raises CheckpointError on any mismatch."""
        where = f"{self.kind}.load_state_dict"
        if state.get("kind") != self.kind:
            raise CheckpointError(
                f"{where}: the state is for optimizer {state.get('kind')!r}, not {self.kind!r}: "
                "build the same optimizer as when it was saved"
            )
        n = state.get("num_params")
        if n != len(self.params):
            raise CheckpointError(
                f"{where}: the state has {n} parameters, this optimizer has {len(self.params)}: "
                "the model or its param groups differ from the saved run"
            )
        step = state.get("step")
        if not isinstance(step, (int, np.integer)) or step < 0:
            raise CheckpointError(f"{where}: 'step' must be an int >= 0, got {step!r}")

        expected = self._buffers_expected_after(int(step))
        expected_keys = {f"{name}.{i}" for name in expected for i in range(len(self.params))}
        given_keys = {k for k, v in state.items() if isinstance(v, np.ndarray)}
        missing = sorted(expected_keys - given_keys)
        unexpected = sorted(given_keys - expected_keys)
        if missing or unexpected:
            raise CheckpointError(
                f"{where}: buffers do not match (missing {missing[:4]}, unexpected "
                f"{unexpected[:4]}): the optimizer settings (e.g. momentum) differ from the saved run"
            )
        for name in expected:
            for i, p in enumerate(self.params):
                arr = state[f"{name}.{i}"]
                if arr.shape != p.data.shape:
                    raise CheckpointError(
                        f"{where}: {name}.{i} has shape {arr.shape}, parameter {i} has "
                        f"{p.data.shape}: the model differs from the saved run"
                    )
        # All checks passed: only now change anything (a failed load leaves us untouched).
        self.step_count = int(step)
        self._load_buffers(
            {
                name: [np.array(state[f"{name}.{i}"], dtype=p.data.dtype) for i, p in enumerate(self.params)]
                for name in expected
            }
        )

    def _buffers_expected_after(self, step: int) -> list[str]:
        return []

    def _load_buffers(self, buffers: dict[str, list[np.ndarray]]) -> None:
        pass


# -- AdamW -----------------------------------------------------------------------------------
class AdamW(_Optimizer):
    """Adam with decoupled weight decay, exactly as `torch.optim.AdamW` (amsgrad=False).

    Per parameter p with gradient g, at step t (1-based), with the group's weight decay wd and
    rate lr (the optimizer's lr times the group's lr_scale, `group_lr`):
        p -= lr * wd * p                       # decoupled decay, before the Adam update
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g^2
        p -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
    m and v are `self.m`, `self.v`: one array of each parameter's shape. The fast lane's form of
    the same update is `FlatAdamW` (optim/flat.py).
    """

    kind = "AdamW"

    def __init__(
        self,
        params,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.01,
    ):
        super().__init__(params, lr, weight_decay)
        if not (isinstance(betas, (tuple, list)) and len(betas) == 2 and all(is_number(b) for b in betas)):
            raise ConfigError(f"AdamW betas must be two numbers in [0, 1), got {betas!r}")
        if not is_number(eps):
            raise ConfigError(f"AdamW eps must be a number > 0, got {eps!r}")
        b1, b2 = (float(b) for b in betas)
        if not (0.0 <= b1 < 1.0 and 0.0 <= b2 < 1.0):
            raise ConfigError(f"AdamW betas must be in [0, 1), got {betas}")
        if not eps > 0:
            raise ConfigError(f"AdamW eps must be > 0, got {eps}")
        self.betas = (b1, b2)
        self.eps = float(eps)
        self.m, self.v = self._new_moments()

    def _new_moments(self) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """The first and second moments at step 0: zeros, one array per parameter."""
        return [np.zeros_like(p.data) for p in self.params], [np.zeros_like(p.data) for p in self.params]

    def _bias_corrections(self) -> tuple[list[tuple[float, float]], float]:
        """Count this step; ([(lr, step_size)] per group, bc2_sqrt): the group's rate
        (`group_lr`) and its rate / (1 - b1^t), m's bias correction folded into the step, and
        sqrt(1 - b2^t), v's."""
        self.step_count += 1
        t, (b1, b2) = self.step_count, self.betas
        rates = [self.group_lr(g) for g in self.param_groups]
        return [(lr, lr / (1.0 - b1**t)) for lr in rates], math.sqrt(1.0 - b2**t)

    def step(self) -> None:
        rates, bc2_sqrt = self._bias_corrections()
        (b1, b2), eps = self.betas, self.eps
        per_param = [
            (group["weight_decay"], rate)
            for group, rate in zip(self.param_groups, rates)
            for _ in group["params"]
        ]
        for i, (p, (wd, (lr, step_size))) in enumerate(zip(self.params, per_param)):
            g = p.grad
            p.data *= 1.0 - lr * wd  # decoupled weight decay
            self.m[i] = b1 * self.m[i] + (1.0 - b1) * g  # first moment
            self.v[i] = b2 * self.v[i] + (1.0 - b2) * g**2  # second moment
            p.data -= step_size * (self.m[i] / (np.sqrt(self.v[i]) / bc2_sqrt + eps))

    def _buffers(self):
        return {"m": self.m, "v": self.v}

    def _buffers_expected_after(self, step):
        return ["m", "v"]

    def _load_buffers(self, buffers):
        self.m, self.v = buffers["m"], buffers["v"]


# -- SGD -------------------------------------------------------------------------------------
class SGD(_Optimizer):
    """SGD with optional momentum and (coupled, L2) weight decay, as `torch.optim.SGD`
    (dampening=0, nesterov=False):
        g = g + wd * p
        buf = g                    at the first step, then buf = momentum * buf + g
        p -= lr * buf              (p -= lr * g without momentum)
    with lr the group's rate (`group_lr`).
    """

    kind = "SGD"

    def __init__(self, params, lr: float, momentum: float = 0.0, weight_decay: float = 0.0):
        super().__init__(params, lr, weight_decay)
        if not is_number(momentum) or not 0.0 <= momentum < 1.0:
            raise ConfigError(f"SGD momentum must be in [0, 1), got {momentum}")
        self.momentum = float(momentum)
        # Like torch, buffers exist only with momentum, from the first step on.
        self.momentum_buffer: list[np.ndarray] | None = None

    def step(self) -> None:
        self.step_count += 1
        mu = self.momentum
        first = self.momentum_buffer is None
        if mu != 0.0 and first:
            self.momentum_buffer = [np.empty_like(p.data) for p in self.params]
        i = 0
        for group in self.param_groups:
            wd, lr = group["weight_decay"], self.group_lr(group)
            for p in group["params"]:
                g = p.grad + wd * p.data if wd != 0.0 else p.grad
                if mu != 0.0:
                    buf = self.momentum_buffer[i]
                    if first:
                        buf[...] = g
                    else:
                        buf *= mu
                        buf += g
                    g = buf
                p.data -= lr * g
                i += 1

    def _buffers(self):
        return {"momentum_buffer": self.momentum_buffer} if self.momentum_buffer is not None else {}

    def _buffers_expected_after(self, step):
        return ["momentum_buffer"] if self.momentum != 0.0 and step > 0 else []

    def _load_buffers(self, buffers):
        loaded = buffers.get("momentum_buffer")
        self.momentum_buffer = None if loaded is None else [a.copy() for a in loaded]


def clip_grad_norm(params: Iterable[Parameter], max_norm: float) -> float:
    """Scale all gradients in place so their global L2 norm is at most `max_norm`.

    As `torch.nn.utils.clip_grad_norm_`: coefficient max_norm / (norm + 1e-6), applied only
    when it is < 1. The norm is accumulated in float64 so float32 grads do not overflow or
    lose precision. A non-finite norm (inf/nan grads) is returned unchanged and nothing is
    scaled, so the caller can skip the step.

    Returns:
        The global norm before clipping, as a Python float.
    """
    try:
        params = list(params)
    except TypeError:
        raise ConfigError(
            f"clip_grad_norm params must be an iterable of Parameters, got {type(params).__name__}"
        ) from None
    if not all(map(isinstance, params, itertools.repeat(Parameter))):  # one C loop: every step asks
        raise ConfigError("clip_grad_norm params must be Parameters (model.parameters())")
    if not is_number(max_norm) or not max_norm > 0:
        raise ConfigError(
            f"clip_grad_norm max_norm must be a number > 0 (inf: no clipping), got {max_norm!r}"
        )
    return _clip_grad_norm(params, max_norm)


@fast.lane(fast_optim, name="clip_grad_norm")
def _clip_grad_norm(params: list, max_norm: float) -> float:
    """The formula of `clip_grad_norm`, on its checked arguments (the fast lane: one pass over
    FlatAdamW's buffer, fast/optim.py)."""
    # norm = sqrt(sum over every gradient entry of g^2), squared in float64
    norm = math.sqrt(sum(float(np.square(p.grad, dtype=np.float64).sum()) for p in params))
    if math.isfinite(norm):
        coef = float(max_norm) / (norm + 1e-6)
        if coef < 1.0:
            for p in params:
                p.grad *= coef
    return norm
