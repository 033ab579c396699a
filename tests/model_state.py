"""Test helper: compare two models' initial state (parameters and dropout generators)."""

import numpy as np


def seeded_state(model):
    """The parameters (name -> array) and the state of every dropout generator of a model."""
    params = {n: p.data for n, p in model.named_parameters()}
    rngs = [m.rng.bit_generator.state for m in model.modules()
            if isinstance(getattr(m, "rng", None), np.random.Generator)]
    return params, rngs


def assert_same_init(a, b):
    """Bit-identical parameters, in the same order, and the same generator states (at least one)."""
    (pa, ra), (pb, rb) = seeded_state(a), seeded_state(b)
    assert list(pa) == list(pb)
    for name in pa:
        assert np.array_equal(pa[name], pb[name]), name
    assert ra and ra == rb
