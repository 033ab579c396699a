"""Rotary position embeddings (RoPE; Su et al. 2021, "RoFormer", section 3.4.2).

Each head's query and key vectors are rotated by an angle proportional to their position, so
the score q_m . k_n depends on the positions only through m - n. The head's `hs` channels form
`hs / 2` planes, and plane i turns at frequency theta^(-2i / hs):

    angle[p, i] = p * theta^(-2i / hs)                       p: position, i < hs / 2
    x = [x1 | x2]   (the two halves of the head's channels: plane i is (x1[i], x2[i]))
    y = [x1 * cos - x2 * sin  |  x2 * cos + x1 * sin]  =  x * cos + rotate_half(x) * sin

Pairing the halves (not neighbouring channels) is GPT-NeoX's and Hugging Face Llama's
convention; a checkpoint trained with one pairing gives wrong scores under the other.
`cos` and `sin` are stored at full width (hs,), each plane's value repeated in both halves.
"""

from __future__ import annotations

import functools

import numpy as np

from scratchformer import fast
from scratchformer.checks import (
    DOOR,
    check_int_in_range,
    check_positive_int,
    check_positive_number,
    op_fits,
    op_float,
)
from scratchformer.errors import ConfigError

__all__ = ["rope_tables", "rotate_half", "rope_forward", "rope_backward"]


def rope_tables(start: int, length: int, head_size: int, theta: float = 10000.0, dtype=np.float64):
    """cos, sin (length, head_size) for the positions start .. start + length - 1.

    Computed in float64 and then cast, so a float32 model rotates by the correctly rounded angle.
    Made once per arguments (read-only): every layer's forward and backward asks for the same ones,
    and a backward is handed the very tables its forward used (the record pairs them by that).
    """
    if not DOOR.inside:  # a direct call: check the arguments (a layer's call was checked at its door)
        check_int_in_range("start", start, 0, 2**62)
        check_int_in_range("length", length, 0, 2**31)
        check_positive_int("head_size", head_size)
        if head_size % 2:
            raise ConfigError(
                f"rope_tables: head_size must be even (channels turn in pairs), got {head_size}"
            )
        check_positive_number("theta", theta)
    return _rope_tables(int(start), int(length), int(head_size), float(theta), np.dtype(dtype).name)


@functools.lru_cache(maxsize=64)
def _rope_tables(start: int, length: int, head_size: int, theta: float, dtype_name: str):
    inv_freq = theta ** (-np.arange(0, head_size, 2, dtype=np.float64) / head_size)  # (hs/2,)
    angles = np.arange(start, start + length, dtype=np.float64)[:, None] * inv_freq  # (T, hs/2)
    angles = np.concatenate([angles, angles], axis=-1)  # (T, hs): plane i in channels i and i + hs/2
    cos, sin = np.cos(angles).astype(dtype_name), np.sin(angles).astype(dtype_name)
    cos.flags.writeable = sin.flags.writeable = False
    return cos, sin


def rotate_half(x: np.ndarray) -> np.ndarray:
    """[x1 | x2] -> [-x2 | x1] over the last axis: each plane turned by 90 degrees."""
    x1, x2 = np.split(x, 2, axis=-1)
    return np.concatenate([-x2, x1], axis=-1)


@fast.lane()
def rope_forward(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """x (..., T, hs), cos / sin (T, hs) -> x rotated plane by plane, (..., T, hs)."""
    if not DOOR.inside:  # a direct call: check the arguments (a layer's call was checked at its door)
        op_float("rope_forward", "x", x, min_ndim=2)
        op_float("rope_forward", "cos", cos, ndim=2)
        op_float("rope_forward", "sin", sin, ndim=2)
        op_fits("rope_forward", cos.shape == sin.shape == x.shape[-2:], x=x, cos=cos, sin=sin)
    return x * cos + rotate_half(x) * sin


@fast.lane(derivative_of=rope_forward, grads=("x",))
def rope_backward(dy: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """dx for dy (..., T, hs). A rotation's inverse is its transpose, the rotation by -angle:
    y1 = x1 c - x2 s, y2 = x2 c + x1 s  =>  dx1 = dy1 c + dy2 s, dx2 = dy2 c - dy1 s."""
    if not DOOR.inside:  # a direct call: check the arguments (a layer's call was checked at its door)
        op_float("rope_backward", "dy", dy, min_ndim=2)
        op_float("rope_backward", "cos", cos, ndim=2)
        op_float("rope_backward", "sin", sin, ndim=2)
        op_fits("rope_backward", cos.shape == sin.shape == dy.shape[-2:], dy=dy, cos=cos, sin=sin)
    return dy * cos - rotate_half(dy) * sin
