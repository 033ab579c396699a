"""Fast lane of `optim/optimizers.py`: AdamW on one flat buffer, and clip_grad_norm on it.

A NumPy step is bound by per-call overhead on small models, so the fast AdamW keeps every
parameter in one flat buffer (they must share one dtype): `FlatAdamW` copies all `.data` into
one contiguous array and all `.grad` into another, and makes each `Parameter.data` / `.grad` a
view of its slice (values unchanged; backward passes add into `.grad` in place, so the views
stay valid). The update then runs once per parameter group on contiguous slices, in pieces of
`UPDATE_CHUNK` entries that stay in L2 through its ten passes, with in-place ufuncs into one
scratch buffer instead of a dozen NumPy calls and temporaries per parameter; `zero_grad` and
`clip_grad_norm` are one call each. The elementwise arithmetic is the reference's, element for
element, so the weights are bit-identical to the per-parameter update. If something later
replaces a parameter's arrays (`model.to(dtype)`, or a second optimizer over the same
parameters), the next step notices and rebuilds the flat buffer from the new arrays.

The flat arrays are ordinary memory; training/parallel.py moves them into shared memory when it
forks its workers (`share_arrays`).
"""

from __future__ import annotations

import math

import numpy as np

from scratchformer.errors import ConfigError

UPDATE_CHUNK = 1 << 16  # entries per piece of the AdamW update (256 KiB of float32 per array)


class FlatAdamW:
    """The parameters (a list of objects with `.data` and `.grad`) and AdamW's moments m, v as
    flat arrays; parameter i is [offsets[i], offsets[i + 1])."""

    def __init__(self, params: list, kind: str = "AdamW"):
        self.params, self.kind = params, kind
        self._flatten()
        self.m, self.v = np.zeros_like(self.data), np.zeros_like(self.data)
        self.tmp = np.empty(min(UPDATE_CHUNK, self.data.size), dtype=self.data.dtype)

    def _flatten(self) -> None:
        """Copy every parameter's data and grad into one flat array each and make the
        Parameters view their slices."""
        dtypes = {p.data.dtype for p in self.params}
        if len(dtypes) != 1:
            raise ConfigError(f"{self.kind} needs parameters of one dtype, got {sorted(map(str, dtypes))}: "
                              "convert the model first, e.g. model.to(np.float32)")
        self.offsets = np.concatenate([[0], np.cumsum([p.data.size for p in self.params])]).tolist()
        self.data = np.empty(self.offsets[-1], dtype=dtypes.pop())
        self.grad = np.empty_like(self.data)
        for p, lo, hi in zip(self.params, self.offsets, self.offsets[1:]):
            self.data[lo:hi] = p.data.ravel()
            self.grad[lo:hi] = p.grad.ravel()
            p.data = self.data[lo:hi].reshape(p.data.shape)
            p.grad = self.grad[lo:hi].reshape(p.grad.shape)
        self._views = [(p.data, p.grad) for p in self.params]

    def per_param(self, flat: np.ndarray) -> list[np.ndarray]:
        """flat cut into one array of each parameter's shape (views)."""
        return [flat[lo:hi].reshape(p.data.shape) for p, lo, hi in zip(self.params, self.offsets, self.offsets[1:])]

    def zero_grad(self) -> None:
        self.grad[...] = 0

    def step(self, group_sizes: list[tuple[int, float]], lr: float, betas: tuple[float, float], eps: float,
             step_size: float, bc2_sqrt: float) -> None:
        """One AdamW update; group_sizes: (number of parameters, weight decay) per group, in order."""
        if any(p.data is not d or p.grad is not g for p, (d, g) in zip(self.params, self._views)):
            self._flatten()  # a parameter's arrays were replaced since (model.to())
        if self.m.dtype != self.data.dtype:  # the model was converted: so are the moments
            self.m, self.v = (a.astype(self.data.dtype) for a in (self.m, self.v))
            self.tmp = self.tmp.astype(self.data.dtype)
        i = 0
        for n, wd in group_sizes:  # groups are contiguous in the flat buffer
            start, stop = self.offsets[i], self.offsets[i + n]
            i += n
            # cache-sized pieces: the ten passes below then reread data still in L2
            for lo in range(start, stop, UPDATE_CHUNK):
                self._update(slice(lo, min(lo + UPDATE_CHUNK, stop)), wd, lr, betas, eps, step_size, bc2_sqrt)

    def _update(self, s: slice, wd, lr, betas, eps, step_size, bc2_sqrt) -> None:
        """The AdamW update of the flat slice `s` of the parameters."""
        (b1, b2), p, g, m, v = betas, self.data[s], self.grad[s], self.m[s], self.v[s]
        tmp = self.tmp[:s.stop - s.start]
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
    gradients tile one flat buffer (an AdamW's, built on exactly these params) the norm and the
    scaling are one pass over it. The norm rounds differently from the reference's sums."""
    grads = _one_flat_grad(params)
    grads = [p.grad for p in params] if grads is None else [grads]
    total_sq, chunk = 0.0, np.empty(CLIP_CHUNK, dtype=np.float64)
    for g in grads:
        flat = g.reshape(-1)
        for lo in range(0, flat.size, CLIP_CHUNK):
            part = chunk[:min(CLIP_CHUNK, flat.size - lo)]
            np.copyto(part, flat[lo:lo + CLIP_CHUNK])
            total_sq += float(np.dot(part, part))
    norm = math.sqrt(total_sq)
    if math.isfinite(norm):
        coef = float(max_norm) / (norm + 1e-6)
        if coef < 1.0:
            for g in grads:
                g *= coef
    return norm


def _one_flat_grad(params: list) -> np.ndarray | None:
    """The flat array that the params' grads exactly tile (an AdamW built on exactly these
    params), or None."""
    base = params[0].grad.base if params else None
    if not isinstance(base, np.ndarray) or base.ndim != 1 or not base.flags.c_contiguous:
        return None
    if len({id(p) for p in params}) != len(params) or sum(p.grad.size for p in params) != base.size:
        return None
    return base if all(p.grad.base is base for p in params) else None
