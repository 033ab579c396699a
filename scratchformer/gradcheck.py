"""Check any module's hand-written backward against central finite differences, in float64.

    report = gradcheck(module, x, kwargs={"mask": mask})
    print(report)            # worst relative error per tensor
    assert report.max_error < 5e-8  # float64 reaches 1e-10 to 5e-9

The error of a tensor is  max|analytic - numeric| / max(max|analytic|, max|numeric|),
i.e. the worst absolute difference relative to the gradient's own scale. Unlike an
elementwise relative error it does not blow up on entries that are (near) zero.

Dropout is allowed: every Generator in the module is rewound before each forward, so all
evaluations see the same dropout masks.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from scratchformer.nn.layers import dropout_modules
from scratchformer.nn.module import Module


def relative_error(analytic: np.ndarray, numeric: np.ndarray) -> float:
    """max|a - n| / max(max|a|, max|n|); the plain max difference when both are ~0."""
    diff = float(np.max(np.abs(analytic - numeric), initial=0.0))
    scale = max(float(np.max(np.abs(analytic), initial=0.0)), float(np.max(np.abs(numeric), initial=0.0)))
    return diff / scale if scale > 1e-12 else diff


def numerical_gradient(
    f: Callable[[], float], x: np.ndarray, eps: float = 1e-6, points: int = 2
) -> np.ndarray:
    """d f / d x by central differences, perturbing `x` in place one entry at a time.

    points=2: (f(x + eps) - f(x - eps)) / (2 eps), error O(eps^2) plus rounding / eps (about
    1e-9 relative at eps 1e-6). points=4, the five-point stencil: (f(x - 2e) - 8 f(x - e) +
    8 f(x + e) - f(x + 2e)) / (12 e), error O(eps^4): at eps 3e-4 about 1e-11 relative in
    float64, four evaluations an entry (what the exercises' grader measures with)."""
    if points not in (2, 4):
        raise ValueError(f"points must be 2 or 4, got {points!r}")
    grad = np.zeros(x.shape, dtype=np.float64)
    flat, gflat = x.reshape(-1), grad.reshape(-1)  # views
    for i in range(flat.size):
        orig = flat[i]
        if points == 2:
            flat[i] = orig + eps
            f_plus = f()
            flat[i] = orig - eps
            f_minus = f()
            gflat[i] = (f_plus - f_minus) / (2 * eps)
        else:
            values = []
            for step in (-2, -1, 1, 2):
                flat[i] = orig + step * eps
                values.append(f())
            gflat[i] = (values[0] - 8 * values[1] + 8 * values[2] - values[3]) / (12 * eps)
        flat[i] = orig
    return grad


@dataclass
class GradcheckReport:
    errors: dict[str, float] = field(default_factory=dict)  # tensor name -> relative error

    @property
    def max_error(self) -> float:
        return max(self.errors.values(), default=0.0)

    def __str__(self) -> str:
        width = max((len(k) for k in self.errors), default=0)
        lines = [f"{name:<{width}}  {err:.2e}" for name, err in self.errors.items()]
        return "\n".join(lines + [f"{'worst':<{width}}  {self.max_error:.2e}"])


def gradcheck(
    module: Module, *inputs, kwargs: dict | None = None, eps: float = 1e-6, seed: int = 0
) -> GradcheckReport:
    """Compare `module.backward` with finite differences for every float input and parameter.

    The module is deep-copied and converted to float64 (the original is untouched). The
    forward must return one array; the loss is sum(out * R) for a fixed random R, so the
    backward is called with R (a model's `grad_output`). Float inputs are named input0, input1, ...; integer inputs
    (token ids) are passed through untouched.
    """
    kwargs = kwargs or {}
    m = copy.deepcopy(module).to(np.float64).train()
    xs = [np.array(x, dtype=np.float64) if _is_float(x) else x for x in inputs]
    gens = [mod.rng for mod in dropout_modules(m)]  # replayed: every forward draws the same masks
    states = [g.bit_generator.state for g in gens]

    def forward() -> np.ndarray:
        for g, s in zip(gens, states):
            g.bit_generator.state = s
        return m(*xs, **kwargs)

    out = forward()
    R = np.random.default_rng(seed).standard_normal(out.shape)
    m.zero_grad()
    # a model (models/base.py: it has loss_terms) takes the output's gradient by name; a layer positionally
    grads = m.backward(grad_output=R) if hasattr(m, "loss_terms") else m.backward(R)
    grads = grads if isinstance(grads, tuple) else (grads,)
    float_idx = [i for i, x in enumerate(xs) if _is_float(x)]

    def loss() -> float:
        return float(np.sum(forward() * R))

    report = GradcheckReport()
    for j, i in enumerate(float_idx):
        numeric = numerical_gradient(loss, xs[i], eps)
        report.errors[f"input{i}"] = relative_error(grads[j], numeric)
    for name, p in m.named_parameters():
        analytic = p.grad.copy()
        report.errors[name] = relative_error(analytic, numerical_gradient(loss, p.data, eps))
    return report


def _is_float(x) -> bool:
    return isinstance(x, np.ndarray) and np.issubdtype(x.dtype, np.floating)
