"""Input checks: the typed one-line errors every door raises for a bad argument, written once.

nanoGPT checks its input once, at the model's entry; so do we.

A *door* is a public entry point: a model's `forward` / `generate` / `encode` / `decode`, a
layer called directly by a user, a config's constructor. Doors call these helpers and raise
the typed errors of `scratchformer.errors`, naming the argument and the allowed values.
Calls made from inside a model trust their caller and check nothing (see
`scratchformer.nn.module.Module.__call__`).

The value specs a config field is declared with are `scratchformer.specs`; the config base
class is `scratchformer.settings`.
"""

from __future__ import annotations

import math

import numpy as np

from scratchformer.errors import ConfigError, DataError, DTypeError, ShapeError

FLOAT_DTYPES = ("float32", "float64")  # the dtypes a model computes in (and a config may name)


# -- arrays --------------------------------------------------------------------------------------
def check_token_ids(
    ids, name: str, vocab_size: int, max_len: int | None = None, batched: bool = True
) -> np.ndarray:
    """ids as an integer array with every id in [0, vocab_size). batched: a non-empty (B, T)
    array with T <= max_len (when given); otherwise any shape (an Embedding's input)."""
    try:
        ids = np.asarray(ids)
    except (ValueError, TypeError):  # a ragged nested list
        raise DataError(
            f"{name} must be an integer array (a rectangular batch of token ids), got a ragged "
            f"{type(ids).__name__}"
        ) from None
    if not np.issubdtype(ids.dtype, np.integer):
        raise DataError(f"{name} must hold integer token ids, got dtype {ids.dtype}")
    if batched and (ids.ndim != 2 or ids.size == 0):
        raise ShapeError(f"{name} must be a non-empty 2-D (batch, time) array, got shape {ids.shape}")
    if max_len is not None and ids.shape[-1] > max_len:
        raise ShapeError(
            f"{name} has {ids.shape[-1]} tokens but the model takes at most {max_len}: "
            "crop the sequence (or build the model with a larger block_size/max_len)"
        )
    if ids.size:
        lo, hi = ids.min(), ids.max()
        if lo < 0 or hi >= vocab_size:
            raise DataError(f"{name}: token ids must be in [0, {vocab_size}), got min {lo} max {hi}")
    return ids


def as_array(value, name: str) -> np.ndarray:
    """np.asarray(value), a ragged nested list or an object NumPy cannot hold being a DataError."""
    try:
        return np.asarray(value)
    except (ValueError, TypeError):
        raise DataError(f"{name} must be a rectangular array, got a ragged {type(value).__name__}") from None


def check_id_sequence(name: str, ids) -> np.ndarray:
    """ids (a sequence or array of integer token ids, any shape) as a flat int64 array; floats,
    bools, strings, None and ragged lists are a DataError (a cast would silently truncate 1.7 to 1)."""
    try:
        a = np.asarray(ids)
    except (ValueError, TypeError):
        raise DataError(f"{name} must be integer token ids, got a ragged {type(ids).__name__}") from None
    if a.size and not np.issubdtype(a.dtype, np.integer):
        raise DataError(f"{name} must be integer token ids, got {type(ids).__name__} of dtype {a.dtype}")
    return a.astype(np.int64, copy=False).ravel()


def check_grad(dy, name: str, shape: tuple) -> None:
    """A backward's incoming gradient: a float ndarray of the forward output's `shape`."""
    if not isinstance(dy, np.ndarray) or dy.dtype.kind != "f":
        raise DTypeError(
            f"{name} must be a float numpy array (the gradient of the forward's output), got "
            f"{type(dy).__name__}{f' of dtype {dy.dtype}' if isinstance(dy, np.ndarray) else ''}"
        )
    if dy.shape != tuple(shape):
        raise ShapeError(f"{name} must have the forward output's shape {tuple(shape)}, got {dy.shape}")


def check_eps(name: str, value) -> None:
    """A normalisation's eps: a finite number >= 0 (0 is the bare formula)."""
    if not is_number(value) or not (value >= 0 and math.isfinite(value)):
        raise ConfigError(f"{name} must be a finite number >= 0, got {value!r}")


class _Door:
    """`inside` is True while a door's forward runs (nn.module): the layers and ops called
    from it trust their caller, which checked its input once."""

    inside = False


DOOR = _Door()


def op_float(fn: str, name: str, x, ndim: int | None = None, min_ndim: int = 1) -> None:
    """An op's array argument: a float ndarray of rank ndim (or at least min_ndim)."""
    if not isinstance(x, np.ndarray) or x.dtype.kind != "f":
        raise DTypeError(
            f"{fn}: {name} must be a float numpy array, got "
            f"{type(x).__name__}{f' of dtype {x.dtype}' if isinstance(x, np.ndarray) else ''}"
        )
    if (ndim is not None and x.ndim != ndim) or x.ndim < min_ndim:
        raise ShapeError(
            f"{fn}: {name} must have {ndim if ndim is not None else f'at least {min_ndim}'} "
            f"dimensions, got shape {x.shape}"
        )


def op_fits(fn: str, fits: bool, **arrays) -> None:
    """ShapeError naming the shapes of `arrays` unless `fits`."""
    if not fits:
        shapes = ", ".join(f"{k} {getattr(v, 'shape', None)}" for k, v in arrays.items())
        raise ShapeError(f"{fn}: the shapes do not fit together ({shapes})")


def check_module(name: str, value) -> None:
    """value must be a scratchformer Module (a model or a layer): what has its parameters and
    modes (checks sits below nn, so the class itself is not imported here)."""
    if not all(
        callable(getattr(value, m, None)) for m in ("named_parameters", "named_modules", "train", "eval")
    ):
        raise DTypeError(
            f"{name} must be a scratchformer Module (a model or a layer), got {type(value).__name__}"
        )


def check_generator(name: str, value) -> None:
    if not isinstance(value, np.random.Generator):
        raise DTypeError(
            f"{name} must be a numpy Generator (np.random.default_rng(seed)), got {type(value).__name__}"
        )


def check_float_array(x, name: str, ndim: int | None = None, last_dim: int | None = None) -> None:
    """x must be a float ndarray (of rank ndim, with last axis last_dim, when given)."""
    if not isinstance(x, np.ndarray):
        raise DTypeError(f"{name} must be a numpy array, got {type(x).__name__}")
    if not np.issubdtype(x.dtype, np.floating):
        raise DTypeError(f"{name} must be a float array, got dtype {x.dtype}")
    if ndim is not None and x.ndim != ndim:
        raise ShapeError(f"{name} must have {ndim} dims, got shape {x.shape}")
    if last_dim is not None and (x.ndim == 0 or x.shape[-1] != last_dim):
        raise ShapeError(f"{name} must have last dim {last_dim}, got shape {x.shape}")


# -- scalars (config fields and arguments) ---------------------------------------------------------
# -- numbers written as text ---------------------------------------------------------------------
# Python reads other scripts' digits as digits: int("٣") is 3, float("３.５") is 3.5, and
# "²".isdigit() is True. A number a user types (an option, a model input) is read here, from
# ASCII alone, so "٣" is refused in one line instead of taken for a 3.
ASCII_NUMBER = frozenset("0123456789+-._eEiInNfFtTyYaA")  # digits, signs, exponents; inf, infinity, nan


def ascii_digits(text: str) -> bool:
    """Whether `text` is one or more ASCII digits 0-9 (str.isdigit also takes '٣', '²', '３')."""
    return isinstance(text, str) and text != "" and all("0" <= c <= "9" for c in text)


def ascii_int(text: str) -> int:
    """int(text) of ASCII text only (spaces around allowed); ValueError for anything else, as
    int() raises it."""
    return int(_ascii(text))


def ascii_float(text: str) -> float:
    """float(text) of ASCII text only; ValueError for anything else ('٣.٥', '３')."""
    return float(_ascii(text))


def _ascii(text: str) -> str:
    stripped = text.strip() if isinstance(text, str) else text
    if not isinstance(stripped, str) or not all(c in ASCII_NUMBER for c in stripped):
        raise ValueError(f"not a number in ASCII digits: {text!r}")
    return stripped


def is_int(value) -> bool:
    """An integer, NumPy's included, and not a bool (True is an int to Python, never a size)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def is_number(value) -> bool:
    """A real number (int or float, NumPy's included), not a bool."""
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(
        value, (bool, np.bool_)
    )


def check_positive_int(name: str, value) -> None:
    if not is_int(value) or value <= 0:
        raise ConfigError(f"{name} must be a positive integer, got {value!r}")


def check_int_in_range(name: str, value, low: int, high: int) -> None:
    """value must be an integer in [low, high)."""
    if not is_int(value) or not low <= value < high:
        raise ConfigError(f"{name} must be an integer in [{low}, {high}), got {value!r}")


def check_probability(name: str, value) -> None:
    """A dropout rate or a label-smoothing weight: a number in [0, 1)."""
    if not is_number(value) or not 0.0 <= value < 1.0:
        raise ConfigError(f"{name} must be a number in [0, 1), got {value!r}")


def check_positive_number(name: str, value) -> None:
    """A finite number > 0 (LayerNorm's eps)."""
    if not is_number(value) or not (value > 0 and math.isfinite(value)):
        raise ConfigError(f"{name} must be a finite number > 0, got {value!r}")


def check_seed(name: str, value) -> None:
    """A seed: None (fresh entropy) or an integer in SEED's range."""
    if value is not None and not (is_int(value) and 0 <= value <= 2**63 - 1):
        raise ConfigError(f"{name} must be None or an integer in [0, 2**63 - 1], got {value!r}")


def check_backward_args(dloss, grad=None, out_shape=None, grad_name: str = "grad") -> None:
    """A model's backward: `dloss` a finite real scalar (it scales the loss gradient); `grad`,
    when given, a float array of the forward output's shape `out_shape` (when known)."""
    if not is_number(dloss) and not (
        isinstance(dloss, np.ndarray) and dloss.ndim == 0 and is_number(dloss.item())
    ):
        shape = f" of shape {dloss.shape}" if isinstance(dloss, np.ndarray) else ""
        raise DTypeError(f"dloss must be a real number (a scalar), got {type(dloss).__name__}{shape}")
    if not math.isfinite(float(dloss)):
        raise ConfigError(f"dloss must be finite, got {float(dloss)}")
    if grad is not None:
        check_float_array(grad, grad_name)
        if out_shape is not None and tuple(grad.shape) != tuple(out_shape):
            raise ShapeError(
                f"{grad_name} must have the forward output's shape {tuple(out_shape)}, got {grad.shape}"
            )


def _config_field(config: dict, key: str, default, where: str, fits, what: str, convert):
    """config[key] (default when absent or null) passed through `convert`; a value `fits`
    refuses (a string, list or bool where a number belongs) is one ConfigError line naming the
    field and what it must be."""
    value = config.get(key)
    if value is None:
        return default
    if not fits(value):
        raise ConfigError(f"{where}: {key} must be {what}, got {value!r}: fix the file")
    return convert(value)


def config_number(config: dict, key: str, default, where: str = "config.json"):
    """config[key] (default when absent or null) as a float."""
    return _config_field(config, key, default, where, is_number, "a number", float)


def config_int(config: dict, key: str, default=None, where: str = "config.json"):
    """config[key] (default when absent or null), which must be an integer."""
    return _config_field(config, key, default, where, is_int, "an integer", int)


def config_flag(config: dict, key: str, default: bool, where: str = "config.json") -> bool:
    """config[key] (default when absent or null), which must be true or false (bool("false")
    would read the string as true)."""
    is_flag = lambda value: isinstance(value, (bool, np.bool_))
    return _config_field(config, key, default, where, is_flag, "true or false", bool)


def check_text(name: str, value) -> str:
    """value must be a str that is valid Unicode (a lone surrogate is what Python makes of
    invalid UTF-8 bytes in argv or a file read with surrogateescape); returns it."""
    if not isinstance(value, str):
        raise DTypeError(f"{name} must be a string, got {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        code = ord(value[e.start])
        what = f"byte {code - 0xDC00:#04x}" if 0xDC80 <= code <= 0xDCFF else f"a lone surrogate U+{code:04X}"
        raise DataError(
            f"{name} is not valid UTF-8 text ({what} at character {e.start}): give UTF-8 text"
        ) from None
    return value


def check_choice(name: str, value, choices) -> None:
    try:
        known = value in choices
    except (TypeError, ValueError):  # an array or another unhashable value
        known = False
    if not known:
        raise ConfigError(f"{name} must be one of {sorted(choices)}, got {value!r}")


def check_bool(name: str, value) -> None:
    if not isinstance(value, (bool, np.bool_)):
        raise ConfigError(f"{name} must be a bool, got {value!r}")


def check_config_type(model: str, config, config_class: type) -> None:
    """A model's constructor takes its own config dataclass (a dict or another config would fail
    later, far from the cause)."""
    if not isinstance(config, config_class):
        raise ConfigError(f"{model} needs a {config_class.__name__}, got {type(config).__name__}")


def check_heads(n_embd, n_head) -> None:
    """Attention splits n_embd into n_head heads of n_embd // n_head channels each."""
    check_positive_int("n_embd", n_embd)
    check_positive_int("n_head", n_head)
    if n_embd % n_head:
        raise ConfigError(f"n_embd ({n_embd}) must be divisible by n_head ({n_head})")
