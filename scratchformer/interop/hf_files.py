"""Reading the files of a Hugging Face model directory: JSON configs and safetensors weights.

Every failure is one of the library's errors naming the file (never a raw JSON or safetensors
traceback); which error class depends on what the caller is reading (a config or a checkpoint).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from scratchformer.errors import CheckpointError, ConfigError, RunFileError
from scratchformer.runfiles import read_json_file


def read_json(path: str | Path, expect: type = dict, error: type[Exception] = ConfigError):
    """The JSON value in `path` (which must be an `expect`: dict or list); None when the file
    does not exist. A file that cannot be read or parsed, or holds another type, raises `error`."""
    path = Path(path)
    try:
        value = read_json_file(path, hint="is it a Hugging Face model directory?")
    except FileNotFoundError:
        return None
    except RunFileError as e:  # a FIFO, a device, a huge or invalid file: one line
        raise error(str(e)) from None
    if not isinstance(value, expect):
        raise error(f"{path} must hold a JSON {'object' if expect is dict else expect.__name__}")
    return value


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """Every tensor of one safetensors file, as numpy arrays."""
    from safetensors.numpy import load_file

    try:
        return load_file(str(path))
    except Exception as e:  # truncated file, unknown dtype (e.g. bf16), not safetensors
        raise CheckpointError(f"cannot read {path}: {e}") from None


def read_checkpoint(path: str | Path, family: str) -> tuple[dict, dict[str, np.ndarray], Path]:
    """(config.json's object, every tensor of model.safetensors, that file's path) of a Hugging
    Face model directory; a missing file is a CheckpointError naming it and the `family`
    ("GPT-2", "Llama")."""
    path = Path(path)
    cfg_file, weights_file = path / "config.json", path / "model.safetensors"
    for f in (cfg_file, weights_file):
        if not f.is_file():
            raise CheckpointError(f"{family} checkpoint: {f} not found (need config.json and model.safetensors)")
    return read_json(cfg_file, error=CheckpointError), read_safetensors(weights_file), weights_file
