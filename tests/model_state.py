"""Test helper: compare two models' initial state (parameters and dropout generators)."""

import numpy as np


def seeded_state(model):
    """The parameters (name -> array) and the state of every dropout generator of a model."""
    params = {n: p.data for n, p in model.named_parameters()}
    rngs = [
        m.rng.bit_generator.state
        for m in model.modules()
        if isinstance(getattr(m, "rng", None), np.random.Generator)
    ]
    return params, rngs


def assert_same_init(a, b):
    """Bit-identical parameters, in the same order, and the same generator states (at least one)."""
    (pa, ra), (pb, rb) = seeded_state(a), seeded_state(b)
    assert list(pa) == list(pb)
    for name in pa:
        assert np.array_equal(pa[name], pb[name]), name
    assert ra and ra == rb


def assert_seed_equals_manual_seed(build, first_param: str):
    """build(seed) makes a model. seed=3 gives what manual_seed(3) and then build(None) give, whatever
    state the global generator was in; seed=None leaves the generator alone (it draws on)."""
    from scratchformer.nn import manual_seed

    manual_seed(3)
    reference = build(None)
    manual_seed(99)  # the generator's state before the call does not matter
    assert_same_init(build(3), reference)
    manual_seed(3)
    assert_same_init(build(None), reference)
    later = dict(build(None).named_parameters())[first_param].data
    assert not np.array_equal(later, dict(reference.named_parameters())[first_param].data)
