"""The contract every model family keeps: GPT, TransformerClassifier, Seq2SeqTransformer and
interop's BertEncoder. `Module` (nn/module.py) knows layers; this class adds what a *model* has
on top: a loss, and one meaning of `backward`.

    output, loss = model(inputs..., targets)   # loss: mean cross-entropy over the targets that
                                               # are not IGNORE_INDEX (-100); None without targets
    model.backward()                           # gradient of the loss, added into every .grad
    model.backward(dloss=0.5)                  # ... of 0.5 * loss (e.g. 1 / accumulation steps)
    model.backward(grad_output=g)              # g: d(something)/d(output), output's shape: the
                                               # gradient of that scalar instead of the loss's
                                               # (dloss scales it too); targets not needed

The BERT encoder has no loss (its output is the hidden states), so it always takes grad_output.
Every backward consumes the cache of one training-mode forward and returns None: the inputs are
integer ids. `loss_count()` says how many terms the last loss averaged (its valid targets); a
caller splitting a batch (training/parallel.py) weighs the slices' losses by it.
"""

from __future__ import annotations

import numpy as np

from scratchformer.checks import check_backward_args
from scratchformer.errors import BackwardError
from scratchformer.nn.module import Module
from scratchformer.ops.loss import IGNORE_INDEX, cross_entropy_backward

__all__ = ["IGNORE_INDEX", "Model"]


class Model(Module):
    """Base class of the model families: `backward(dloss=1.0, grad_output=None)` (see above)."""

    _targets_name: str | None = "targets"  # how forward calls its targets (None: it has no loss)

    def backward(self, dloss: float = 1.0, grad_output: np.ndarray | None = None) -> None:  # pragma: no cover
        raise NotImplementedError(f"{type(self).__name__} does not implement backward")

    def _note_loss(self, loss_cache: dict | None) -> None:
        """Forwards call this: how many terms the loss averaged (None: no loss)."""
        self._loss_terms = None if loss_cache is None else loss_cache["n_valid"]

    def loss_count(self) -> int:
        """How many terms the loss of the last forward averaged (its valid targets), in training
        or eval mode."""
        terms = getattr(self, "_loss_terms", None)
        if terms is None:
            raise BackwardError(f"{type(self).__name__}: no loss in the last forward (pass {self._targets_name})")
        return terms

    def _start_backward(self, dloss, grad_output) -> tuple[dict, np.ndarray]:
        """Where backward starts: (the cache of the last forward, consumed, and the gradient of
        dloss * its loss, or dloss * grad_output). The arguments are checked before the cache is
        consumed, so a refused call leaves the forward for a correct one. The cache holds "loss"
        (cross_entropy's cache or None) and "out_shape" (the output's shape)."""
        check_backward_args(dloss, grad_output, (getattr(self, "_cache", None) or {}).get("out_shape"), "grad_output")
        cache, dloss = self._pop_cache(), float(dloss)
        if grad_output is not None:
            grad = np.asarray(grad_output).astype(self.dtype, copy=False)
            return cache, (grad * dloss if dloss != 1.0 else grad)
        if cache.get("loss") is None and self._targets_name is None:
            raise BackwardError(f"{type(self).__name__}.backward() needs grad_output, the gradient of its output "
                                "(it has no loss of its own)")
        if cache.get("loss") is None:
            raise BackwardError(f"{type(self).__name__}.backward() needs a forward with {self._targets_name} (or "
                                "pass grad_output, the gradient of the output)")
        return cache, cross_entropy_backward(cache["loss"], dloss)
