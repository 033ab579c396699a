"""Where initial weights come from: one seeded generator, like `torch.manual_seed`.

Layers draw their initial weights from `get_rng()` unless given an explicit `rng`, so
`manual_seed(s)` followed by building a model gives the same weights, bit for bit.
"""

from __future__ import annotations

import numpy as np

from scratchformer.checks import check_seed

_rng = np.random.default_rng(0)


def manual_seed(seed: int) -> np.random.Generator:
    """Reseed the generator layers draw their initial weights from; returns it."""
    global _rng
    check_seed("seed", seed)
    _rng = np.random.default_rng(seed)
    return _rng


def get_rng(rng: np.random.Generator | None = None) -> np.random.Generator:
    return _rng if rng is None else rng


def uniform(shape, bound: float, dtype, rng=None) -> np.ndarray:
    return get_rng(rng).uniform(-bound, bound, size=shape).astype(dtype)


def normal(shape, std: float, dtype, rng=None) -> np.ndarray:
    return (get_rng(rng).standard_normal(size=shape) * std).astype(dtype)
