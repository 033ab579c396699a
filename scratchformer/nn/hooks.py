"""`HookPoint`: an identity layer that lets a caller read or replace one activation.

Models place a HookPoint on every activation worth studying (the residual stream before and
after each sub-layer, each attention's pattern and per-head output, the feed-forward's hidden
activation, the embeddings, the final norm), as TransformerLens does. With no hook set a
HookPoint returns its input unchanged and costs one attribute test. `scratchformer.lens`
gives each one a stable name (``blocks.0.attn.pattern``) and sets and removes the hooks.

    hp.hook = fn        # fn(array, name) -> None (read only) or a replacement array
    hp.grad_hook = fn   # fn(grad, name) -> None, called by backward() (read only)

A hook is handed its own copy of the activation: what it returns replaces the activation, and
so does an edit it makes in place and returns None after (TransformerLens's `x[...] = ...`);
either way the model's own arrays (a positional table's rows, say) are never written to. The
forward then goes on with that array, cast to the activation's dtype.

The backward is the identity: a model's hand-written backward may skip HookPoints entirely
(the gradient through an identity is the gradient); a model calls `backward` only where it
wants a caller to see the gradient of that activation (the input embeddings, for saliency).
"""

from __future__ import annotations

import numpy as np

from scratchformer.errors import HookError
from scratchformer.nn.module import Module

__all__ = ["HookPoint"]


class HookPoint(Module):
    """x (any shape) -> x, or what `hook(x, name)` returns (same shape) when a hook is set."""

    def __init__(self) -> None:
        super().__init__()
        self._hook = None  # fn(array, name) -> array or None
        self._grad_hook = None  # fn(grad, name) -> None
        self._name = ""  # the stable name, set by scratchformer.lens when it hooks

    def __call__(self, x: np.ndarray) -> np.ndarray:  # no door: the identity checks nothing
        return x if self._hook is None else self._run_hook(x)

    forward = __call__

    @property
    def active(self) -> bool:
        return self._hook is not None

    def set_hooks(self, name: str, hook=None, grad_hook=None) -> None:
        self._name, self._hook, self._grad_hook = name, hook, grad_hook

    def remove_hooks(self) -> None:
        self._hook = self._grad_hook = None

    def _run_hook(self, x: np.ndarray) -> np.ndarray:
        own = np.array(x, copy=True)  # the hook's copy: an edit in place never reaches the model's arrays
        out = self._hook(own, self._name)
        if out is None:
            return own
        out = np.asarray(out)
        if out.shape != x.shape:
            raise HookError(
                f"the hook on {self._name} returned shape {out.shape}; it must keep "
                f"the activation's shape {x.shape}"
            )
        return out.astype(x.dtype, copy=False)

    def backward(self, grad: np.ndarray) -> np.ndarray:
        if self._grad_hook is not None:
            self._grad_hook(grad, self._name)
        return grad
