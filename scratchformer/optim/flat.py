"""The fast lane's AdamW: the reference update (`AdamW`, optimizers.py) on one flat buffer.

A NumPy step is bound by per-call overhead on small models: the per-parameter update makes a
dozen NumPy calls and temporaries per parameter. `FlatAdamW` keeps every parameter, gradient and
moment in one flat array each and updates a parameter group's contiguous range in cache-sized,
in-place pieces (`fast/optim.py`'s `adamw_update`), bit-identical to `AdamW`;
`clip_grad_norm` and `zero_grad` are then one pass over the gradients' buffer.

Its parameters must live in its buffers, and they get there in one explicit step:

    opt = FlatAdamW(param_groups(model, 0.1), lr=1e-3)   # checks its arguments; touches nothing
    opt.bind()      # allocates data, grad, m, v (N,) and makes each Parameter's .data and .grad
                    # a view of its slice, values unchanged (parameter i: [offsets[i], offsets[i+1]))

Backward passes add into `.grad` in place, and `model.load_state_dict` copies into `.data`, so the
views stay valid. Anything that replaces a parameter's arrays (`model.to(dtype)`, binding another
FlatAdamW over the same parameters) unbinds it: the next `step` refuses with one line, and
`bind()` again copies the current values in (the moments kept, in the new dtype).

`make_adamw` is where the lane's optimiser is chosen: a bound FlatAdamW in the fast lane (the
default), the per-parameter AdamW in the reference lane. The trainer builds its optimiser there.
"""

from __future__ import annotations

import operator

import numpy as np

from scratchformer import fast
from scratchformer.errors import ConfigError
from scratchformer.fast import optim as fast_optim
from scratchformer.optim.optimizers import AdamW, _check_adopted

_DATA, _GRAD = operator.attrgetter("data"), operator.attrgetter("grad")

__all__ = ["FlatAdamW", "make_adamw"]


class FlatAdamW(AdamW):
    """AdamW on one flat buffer (see the module docstring); the same arguments as AdamW.

    After `bind()`: data, grad, m, v are (N,) arrays, N the parameters' total size; `offsets`
    the N+1 bounds of the parameters in them; `m` and `v` per parameter are views (`self.m`).
    """

    kind = "AdamW"  # the same state_dict as AdamW's: a run saved in one lane resumes in the other
    data = grad = flat_m = flat_v = None  # the flat buffers, allocated by bind()

    def _new_moments(self):
        return None, None  # bind() allocates them, flat

    # -- the explicit step --------------------------------------------------------------------
    def bind(self) -> FlatAdamW:
        """Allocate the flat buffers and make every parameter's .data and .grad a view of its
        slice (values unchanged); the moments so far are kept (zeros before the first step).
        Call it once after building, and again after replacing the parameters' arrays. Returns
        self (`opt = FlatAdamW(...).bind()`)."""
        dtypes = {p.data.dtype for p in self.params}
        if len(dtypes) != 1:
            raise ConfigError(
                f"FlatAdamW needs parameters of one dtype, got {sorted(map(str, dtypes))}: "
                "convert the model first, e.g. model.to(np.float32)"
            )
        dtype = dtypes.pop()
        offsets = np.concatenate([[0], np.cumsum([p.data.size for p in self.params])]).tolist()
        data, grad = np.empty(offsets[-1], dtype=dtype), np.empty(offsets[-1], dtype=dtype)
        if self.flat_m is None:
            flat_m, flat_v = np.zeros_like(data), np.zeros_like(data)
        else:  # bound before: the moments carry over
            flat_m, flat_v = self.flat_m.astype(dtype), self.flat_v.astype(dtype)
        for p, lo, hi in zip(self.params, offsets, offsets[1:]):
            data[lo:hi] = p.data.ravel()
            grad[lo:hi] = p.grad.ravel()
        self._adopt(data, grad, flat_m, flat_v, offsets)
        return self

    def _adopt(self, data, grad, flat_m, flat_v, offsets=None) -> None:
        """Hold these flat arrays and point the parameters (and the per-parameter moments) at
        views of them."""
        self.offsets = self.offsets if offsets is None else offsets
        self.data, self.grad, self.flat_m, self.flat_v = data, grad, flat_m, flat_v
        bounds = list(zip(self.params, self.offsets, self.offsets[1:]))
        for p, lo, hi in bounds:
            p.data, p.grad = data[lo:hi].reshape(p.data.shape), grad[lo:hi].reshape(p.grad.shape)
        self.m = [flat_m[lo:hi].reshape(p.data.shape) for p, lo, hi in bounds]
        self.v = [flat_v[lo:hi].reshape(p.data.shape) for p, lo, hi in bounds]
        self.tmp = np.empty(min(fast_optim.UPDATE_CHUNK, data.size), dtype=data.dtype)
        self._datas, self._grads = [p.data for p in self.params], [p.grad for p in self.params]
        self._groups, i = [], 0
        for g in self.param_groups:  # groups are contiguous in the flat buffer
            n = len(g["params"])
            self._groups.append((self.offsets[i], self.offsets[i + n], g["weight_decay"]))
            i += n

    def _check_bound(self) -> None:
        if self.data is None:
            raise ConfigError(
                "FlatAdamW is not bound to its parameters yet: call opt.bind() once after "
                "building it (or use make_adamw, which does)"
            )
        params = self.params  # each step asks: the comparison runs in C (map), not a Python loop
        if any(map(operator.is_not, map(_DATA, params), self._datas)) or any(
            map(operator.is_not, map(_GRAD, params), self._grads)
        ):
            raise ConfigError(
                "FlatAdamW: a parameter's arrays were replaced after bind() (model.to(), or "
                "another FlatAdamW bound to them): call opt.bind() again"
            )

    # -- the optimiser ------------------------------------------------------------------------
    def zero_grad(self) -> None:
        self._check_bound()
        self.grad[...] = 0

    def step(self) -> None:
        self._check_bound()
        rates, bc2_sqrt = self._bias_corrections()
        for group, (lr, step_size) in zip(self._groups, rates):  # each group at its own rate
            fast_optim.adamw_update(
                self.data,
                self.grad,
                self.flat_m,
                self.flat_v,
                self.tmp,
                [group],
                lr,
                self.betas,
                self.eps,
                step_size,
                bc2_sqrt,
            )

    def state_dict(self) -> dict:
        self._check_bound()
        return super().state_dict()

    def _load_buffers(self, buffers):
        self._check_bound()
        for name, flat in (("m", self.flat_m), ("v", self.flat_v)):
            for arr, lo, hi in zip(buffers[name], self.offsets, self.offsets[1:]):
                flat[lo:hi] = arr.ravel()

    # -- declared state -----------------------------------------------------------------------
    def state_arrays(self) -> dict[str, np.ndarray]:
        """The four flat buffers: "data" and "grad" (which the parameters view), "m", "v"."""
        self._check_bound()
        return {"data": self.data, "grad": self.grad, "m": self.flat_m, "v": self.flat_v}

    def adopt_state_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        """Use `arrays` (copies of some of the four buffers) instead, the parameters' views and
        the per-parameter moments following."""
        own = self.state_arrays()
        for name, a in arrays.items():
            _check_adopted("FlatAdamW", name, own.get(name), a)
        new = {**own, **arrays}
        self._adopt(new["data"], new["grad"], new["m"], new["v"])


def make_adamw(
    params,
    lr: float = 1e-3,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
    weight_decay: float = 0.01,
) -> AdamW:
    """The lane's AdamW (chosen by `fast.chosen`, where every lane is): in the fast lane (the
    default) a FlatAdamW, bound (its parameters' arrays now view its buffers); in the reference
    lane the per-parameter AdamW. Both update the weights bit for bit alike."""
    adamw = fast.chosen(FlatAdamW, AdamW)(params, lr, betas, eps, weight_decay)
    return adamw.bind() if isinstance(adamw, FlatAdamW) else adamw
