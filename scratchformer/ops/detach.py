"""detach: a value as a constant of the derivative, PyTorch's `.detach()`.

An op whose loss reads a value that depends on the parameters, but whose backward treats that
value as a constant (SAELens's AuxK: the residual x - x_hat it fits), says so with `detach`: the
backward adds no gradient through it, and the model's record marks the call, so that a finite
difference of the recorded forward holds it at its recorded value, as the backward does
(`record.detached`). It has no backward op: nothing flows through it.
"""

from __future__ import annotations

import numpy as np

from scratchformer import fast, record

__all__ = ["detach"]


@fast.lane()
def detach(x: np.ndarray) -> np.ndarray:
    """A copy of x (any shape), a constant to every derivative taken through it."""
    return record.detached(x)
