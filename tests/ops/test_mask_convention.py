"""attention_forward takes the ten-part NumPy series' mask convention (1 = hidden) by name."""

import numpy as np
import pytest

from scratchformer.errors import ConfigError, DTypeError
from scratchformer.ops import attention_forward


def _qkv():
    rng = np.random.default_rng(0)
    return (
        rng.standard_normal((2, 1, 3, 4)),
        rng.standard_normal((2, 1, 5, 4)),
        rng.standard_normal((2, 1, 5, 4)),
    )


def test_masked_convention_hides_the_ones():
    q, k, v = _qkv()
    hidden = np.zeros((2, 1, 3, 5), dtype=int)  # the series' example 2: 1 = this key is hidden
    hidden[0, 0, 1, 2] = hidden[1, 0, 0, 0] = 1
    out, cache = attention_forward(q, k, v, mask=hidden, mask_means="masked")
    assert cache["weights"][0, 0, 1, 2] == 0 and cache["weights"][1, 0, 0, 0] == 0
    same, _ = attention_forward(q, k, v, mask=hidden == 0)  # True = may attend
    np.testing.assert_array_equal(out, same)
    bool_out, _ = attention_forward(q, k, v, mask=hidden.astype(bool), mask_means="masked")
    np.testing.assert_array_equal(bool_out, same)
    # the same bool mask read with the default convention attends ONLY to the hidden keys
    _, inverted = attention_forward(q, k, v, mask=hidden.astype(bool))
    assert inverted["weights"][0, 0, 1, 2] == 1


def test_bad_mask_means_and_dtypes_are_refused():
    q, k, v = _qkv()
    with pytest.raises(ConfigError, match="mask_means"):
        attention_forward(q, k, v, mask_means="hidden")
    with pytest.raises(DTypeError, match="0/1"):
        attention_forward(q, k, v, mask=np.full((3, 5), 0.5), mask_means="masked")
    with pytest.raises(DTypeError, match="True = may attend"):
        attention_forward(q, k, v, mask=np.zeros((3, 5), dtype=int))  # the default stays bool only
