"""Fast lane of `optim/`: the AdamW update on flat arrays, and clip_grad_norm on one flat buffer.

A NumPy step is bound by per-call overhead on small models, so `optim.FlatAdamW` keeps every
parameter, gradient and moment in one flat array each (parameter i is [offsets[i], offsets[i+1]))
and updates them here: once per parameter group on its contiguous range, in pieces of
`UPDATE_CHUNK` entries that stay in L2 through the ten passes, with in-place ufuncs into one
scratch buffer instead of a dozen NumPy calls and temporaries per parameter. The elementwise
arithmetic is the reference's (`optim.AdamW`), element for element, so the weights are
bit-identical to the per-parameter update. This module only computes on arrays it is given:
which arrays the parameters view is `optim.FlatAdamW.bind`'s business.
"""

from __future__ import annotations

import math

import numpy as np

UPDATE_CHUNK = 1 << 16  # entries per piece of the AdamW update (256 KiB of float32 per array)


def adamw_update(
    data: np.ndarray,
    grad: np.ndarray,
    m: np.ndarray,
    v: np.ndarray,
    tmp: np.ndarray,
    groups: list[tuple[int, int, float]],
    lr: float,
    betas: tuple[float, float],
    eps: float,
    step_size: float,
    bc2_sqrt: float,
) -> None:
    """One AdamW update of the flat (N,) arrays data, m, v in place from grad (N,); tmp: a
    scratch of min(UPDATE_CHUNK, N) entries; groups: (start, stop, weight decay) per parameter
    group, the ranges tiling what is updated."""
    for start, stop, wd in groups:
        # cache-sized pieces: the ten passes below then reread data still in L2
        for lo in range(start, stop, UPDATE_CHUNK):
            s = slice(lo, min(lo + UPDATE_CHUNK, stop))
            _update(
                data[s], grad[s], m[s], v[s], tmp[: s.stop - s.start], wd, lr, betas, eps, step_size, bc2_sqrt
            )


def _update(p, g, m, v, tmp, wd, lr, betas, eps, step_size, bc2_sqrt) -> None:
    """The AdamW update of one piece p (its gradient g, moments m, v; tmp as long)."""
    b1, b2 = betas
    # The reference's formula, on many parameters at once:
    #     p *= 1 - lr * wd
    #     m = b1 * m + (1 - b1) * g
    #     v = b2 * v + (1 - b2) * g^2
    #     p -= step_size * (m / (sqrt(v) / bc2_sqrt + eps))
    # written in place into `tmp` (no temporaries), operation for operation the same
    # rounding. Python-float scalars keep the arithmetic in p's dtype (NEP 50).
    if wd != 0.0:
        p *= 1.0 - lr * wd
    m *= b1
    np.multiply(g, 1.0 - b1, out=tmp)
    m += tmp
    v *= b2
    np.multiply(g, g, out=tmp)
    tmp *= 1.0 - b2
    v += tmp
    np.sqrt(v, out=tmp)
    tmp /= bc2_sqrt
    tmp += eps
    np.divide(m, tmp, out=tmp)
    tmp *= step_size
    p -= tmp


# float64 entries per piece of the norm: 64 KiB, stays in cache, and below the 10,000 entries
# from which OpenBLAS splits a dot product over threads (slow when the cores are busy)
CLIP_CHUNK = 8192


def clip_grad_norm(params: list, max_norm: float) -> float:
    """The reference's clip_grad_norm. The squares are summed in float64 piece by piece through
    one small float64 scratch (no float64 copy of a gradient), as BLAS dot products; when the
    gradients tile one flat buffer (a bound FlatAdamW's over exactly these params) the norm and the
    scaling are one pass over it. The norm rounds differently from the reference's sums."""
    grads = _one_flat_grad(params)
    grads = [p.grad for p in params] if grads is None else [grads]
    total_sq, chunk = 0.0, np.empty(CLIP_CHUNK, dtype=np.float64)
    for g in grads:
        flat = g.reshape(-1)
        for lo in range(0, flat.size, CLIP_CHUNK):
            part = chunk[: min(CLIP_CHUNK, flat.size - lo)]
            np.copyto(part, flat[lo : lo + CLIP_CHUNK])
            total_sq += float(np.dot(part, part))
    norm = math.sqrt(total_sq)
    if math.isfinite(norm):
        coef = float(max_norm) / (norm + 1e-6)
        if coef < 1.0:
            for g in grads:
                g *= coef
    return norm


def _one_flat_grad(params: list) -> np.ndarray | None:
    """The flat array that the params' grads exactly tile (a FlatAdamW bound to exactly these
    params), or None."""
    base = params[0].grad.base if params else None
    if not isinstance(base, np.ndarray) or base.ndim != 1 or not base.flags.c_contiguous:
        return None
    if len({id(p) for p in params}) != len(params) or sum(p.grad.size for p in params) != base.size:
        return None
    return base if all(p.grad.base is base for p in params) else None
