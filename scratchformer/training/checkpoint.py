"""Checkpoints: a directory of safetensors + JSON files, written atomically. No pickle.

Layout of a checkpoint directory:

    model.safetensors       model.state_dict(): name -> array
    config.json             the model config (plain JSON)
    tokenizer.json          tokenizer.to_json()                     (only if given)
    optimizer.safetensors   the optimizer state's arrays ("m.0", ...) (only if given)
    trainer_state.json      {"format", "version", "step", "rng_state", "extra",
                             "optimizer": the optimizer state's scalars or null,
                             "files": the files above that this checkpoint has}

Atomicity: every file is written into a fresh temp directory next to the target (same
parent, so renames stay on one filesystem) and fsynced; then
    1. target -> backup    (".<name>.old", only if the target exists)
    2. temp   -> target
    3. backup is deleted
Each rename is atomic, so a crash at any point leaves either the old or the new complete
checkpoint on disk: before 1 the old one is the target; between 1 and 2 the old one is the
backup, which `load_checkpoint` reads when the target is missing (and the next save moves it
back); after 2 the new one is the target. Leftover temp directories are swept by the next
save. One writer per directory at a time.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from scratchformer.errors import CheckpointError, RunFileError
from scratchformer.training.schema import CONFIG, TOKENIZER, TRAINER_STATE, check_json

FORMAT_NAME = "scratchformer-checkpoint"
FORMAT_VERSION = 1
MODEL_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
TOKENIZER_FILE = "tokenizer.json"
OPTIMIZER_FILE = "optimizer.safetensors"
TRAINER_STATE_FILE = "trainer_state.json"
CHECKPOINT_FILES = (MODEL_FILE, CONFIG_FILE, TOKENIZER_FILE, OPTIMIZER_FILE, TRAINER_STATE_FILE)


@dataclass
class Checkpoint:
    """Everything `save_checkpoint` stored. `optimizer_state` is the flat dict that
    `optimizer.load_state_dict` takes (arrays and scalars merged again)."""

    path: Path
    model_state: dict[str, np.ndarray]
    config: dict
    tokenizer: dict | None = None
    optimizer_state: dict | None = None
    rng_state: dict | None = None
    step: int = 0
    extra: dict = field(default_factory=dict)


# -- low-level atomic writes -----------------------------------------------------------------
def _fsync_dir(path: Path) -> None:
    """Make renames/creations inside `path` durable (no-op where directories can't be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _write_file(path: Path, data: bytes) -> None:
    """Write and fsync one file (not atomic by itself)."""
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Replace the file at `path` with `data` atomically: readers see the old or the new
    content, never a partial file (temp file in the same directory, fsync, os.replace)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.tmp-", dir=path.parent)
    os.close(fd)
    try:
        _write_file(Path(tmp), data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def _backup_path(directory: Path) -> Path:
    return directory.parent / f".{directory.name}.old"


def _recover(directory: Path) -> None:
    """Settle what an interrupted save left: restore a lone backup, drop a stale one,
    sweep temp directories."""
    backup = _backup_path(directory)
    if backup.exists():
        if directory.exists():
            shutil.rmtree(backup)  # crash after step 2: the target is the new, complete one
        else:
            os.replace(backup, directory)  # crash between steps 1 and 2: the backup is it
    for tmp in directory.parent.glob(f".{directory.name}.tmp-*"):
        shutil.rmtree(tmp, ignore_errors=True)


def write_directory_atomic(directory: str | os.PathLike, files: dict[str, bytes]) -> Path:
    """Make `directory` hold exactly `files` (name -> bytes), atomically (see module doc).

    Refuses to replace an existing directory that holds anything but checkpoint files, so a
    wrong path cannot delete unrelated data.
    """
    directory = Path(os.path.abspath(directory))
    directory.parent.mkdir(parents=True, exist_ok=True)
    _recover(directory)
    if directory.exists():
        if not directory.is_dir():
            raise CheckpointError(f"checkpoint path {directory} is a file: choose a directory path")
        foreign = sorted(p.name for p in directory.iterdir() if p.name not in CHECKPOINT_FILES)
        if foreign:
            raise CheckpointError(
                f"{directory} holds files that are not part of a checkpoint ({', '.join(foreign[:3])}): "
                "choose another checkpoint directory, or move them away"
            )

    tmp = Path(tempfile.mkdtemp(prefix=f".{directory.name}.tmp-", dir=directory.parent))
    try:
        for name, data in files.items():
            _write_file(tmp / name, data)
        _fsync_dir(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise

    backup = _backup_path(directory)
    if directory.exists():
        os.replace(directory, backup)  # 1
    os.replace(tmp, directory)  # 2
    _fsync_dir(directory.parent)
    if backup.exists():
        shutil.rmtree(backup)  # 3
    return directory


# -- encoding --------------------------------------------------------------------------------
def _json_default(obj):
    """Let numpy scalars/arrays (e.g. from configs or rng states) pass through JSON."""
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    raise TypeError(f"{type(obj).__name__} is not JSON-serialisable")


def _json_bytes(obj, what: str) -> bytes:
    try:
        return json.dumps(obj, indent=2, ensure_ascii=False, default=_json_default).encode("utf-8")
    except (TypeError, ValueError) as e:
        raise CheckpointError(
            f"cannot save {what}: {e}: use plain numbers, strings, lists and dicts"
        ) from None


def _safetensors_bytes(arrays: dict, what: str) -> bytes:
    from safetensors.numpy import save

    bad = sorted(k for k, v in arrays.items() if not isinstance(v, np.ndarray))
    if bad:
        raise CheckpointError(f"cannot save {what}: values of {bad[:3]} are not numpy arrays")
    try:
        return save({k: np.ascontiguousarray(v) for k, v in arrays.items()})
    except Exception as e:  # e.g. an unsupported dtype
        raise CheckpointError(f"cannot save {what} as safetensors: {e}") from None


# -- public API ------------------------------------------------------------------------------
def save_checkpoint(
    directory: str | os.PathLike,
    *,
    model_state: dict[str, np.ndarray],
    config: dict,
    tokenizer: dict | None = None,
    optimizer_state: dict | None = None,
    rng_state: dict | None = None,
    step: int | None = None,
    extra: dict | None = None,
) -> Path:
    """Write a checkpoint directory atomically; returns its absolute path.

    Args:
        model_state: model.state_dict(), name -> array.
        config: the model config as a plain dict.
        tokenizer: tokenizer.to_json() (an object with `to_json()` is accepted too).
        optimizer_state: optimizer.state_dict(): arrays go to optimizer.safetensors, the
            other values (step, kind, ...) to trainer_state.json.
        rng_state: JSON-able dict, e.g. {"data": rng.bit_generator.state, ...} (PCG64 states
            hold 128-bit ints; JSON keeps them exactly).
        step: the training step; defaults to optimizer_state["step"], else 0.
        extra: anything else JSON-able (best val loss, data seed, ...).
    """
    files: dict[str, bytes] = {
        MODEL_FILE: _safetensors_bytes(model_state, "model_state"),
        CONFIG_FILE: _json_bytes(config, "config"),
    }
    if tokenizer is not None:
        if hasattr(tokenizer, "to_json"):
            tokenizer = tokenizer.to_json()
        files[TOKENIZER_FILE] = _json_bytes(tokenizer, "tokenizer")
    opt_scalars = None
    if optimizer_state is not None:
        arrays = {k: v for k, v in optimizer_state.items() if isinstance(v, np.ndarray)}
        opt_scalars = {k: v for k, v in optimizer_state.items() if not isinstance(v, np.ndarray)}
        files[OPTIMIZER_FILE] = _safetensors_bytes(arrays, "optimizer_state")
    if step is None:
        step = (opt_scalars or {}).get("step", 0)
    trainer_state = {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "step": int(step),
        "rng_state": rng_state,
        "extra": extra or {},
        "optimizer": opt_scalars,
        "files": sorted([*files, TRAINER_STATE_FILE]),
    }
    files[TRAINER_STATE_FILE] = _json_bytes(trainer_state, "trainer state (rng_state / extra)")
    return write_directory_atomic(directory, files)


def _read(directory: Path, name: str) -> bytes:
    try:
        return (directory / name).read_bytes()
    except FileNotFoundError:
        raise CheckpointError(
            f"{directory / name} is missing: the checkpoint is incomplete; re-save it or use another"
        ) from None
    except OSError as e:
        raise CheckpointError(f"cannot read {directory / name}: {e.strerror}") from None


def _read_json(directory: Path, name: str):
    data = _read(directory, name)
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(
            f"{directory / name} is corrupt or truncated (invalid JSON: {e}): re-save the checkpoint"
        ) from None
    except ValueError as e:  # "Exceeds the limit (4300 digits) for integer string conversion"
        raise RunFileError(f"{directory / name}: a number is too large to read ({str(e).split(';')[0]}); "
                           "restore the file or train again") from None
    except RecursionError:
        raise RunFileError(f"{directory / name}: nested too deeply to read; restore the file or train again") from None


def _read_safetensors(directory: Path, name: str) -> dict[str, np.ndarray]:
    from safetensors.numpy import load

    data = _read(directory, name)
    try:
        return load(data)
    except Exception as e:  # SafetensorError is not importable under a stable name
        raise CheckpointError(
            f"{directory / name} is corrupt or truncated ({e}): re-save the checkpoint"
        ) from None


def checkpoint_exists(directory: str | os.PathLike) -> bool:
    """True if `load_checkpoint(directory)` has something to read (the directory, or the backup
    an interrupted save left)."""
    directory = Path(os.path.abspath(directory))
    return directory.is_dir() or _backup_path(directory).is_dir()


def _check_finite(arrays: dict[str, np.ndarray], path: Path) -> None:
    """Refuse weights holding NaN or infinity (a diverged run), naming the first few tensors."""
    bad = [k for k, v in arrays.items() if v.dtype.kind == "f" and not np.isfinite(v).all()]
    if bad:
        more = f" and {len(bad) - 3} more" if len(bad) > 3 else ""
        raise CheckpointError(f"{path} holds NaN or infinite weights ({', '.join(bad[:3])}{more}): the run "
                              "diverged; use an earlier checkpoint or train again with a lower --lr")


def load_checkpoint(directory: str | os.PathLike, run_files: bool = True) -> Checkpoint:
    """Read a checkpoint directory written by `save_checkpoint`.

    If the directory is missing but the backup of an interrupted save exists, the backup
    (the previous complete checkpoint) is read instead. Raises CheckpointError (one line,
    naming the file) for a missing directory or file and for corrupt or truncated files.

    run_files: the checkpoint is one a training run wrote (the default): config.json,
    trainer_state.json and tokenizer.json are checked against their schemas
    (training/schema.py; RunFileError names the file and the field) and the weights must be
    finite. run_files=False reads any checkpoint `save_checkpoint` wrote (free-form config).
    """
    directory = Path(os.path.abspath(directory))
    if not directory.exists() and _backup_path(directory).is_dir():
        directory = _backup_path(directory)  # a save was interrupted between its renames
    if not directory.exists():
        raise CheckpointError(f"checkpoint directory not found: {directory}: check the path")
    if not directory.is_dir():
        raise CheckpointError(f"checkpoint path {directory} is not a directory: pass the checkpoint directory")

    state = _read_json(directory, TRAINER_STATE_FILE)
    if not isinstance(state, dict) or state.get("format") != FORMAT_NAME:
        raise CheckpointError(
            f"{directory / TRAINER_STATE_FILE} is not a scratchformer trainer state: "
            "is this a checkpoint written by scratchformer?"
        )
    if state.get("version", 0) > FORMAT_VERSION:
        raise CheckpointError(
            f"{directory / TRAINER_STATE_FILE} has format version {state['version']}, newer than "
            f"{FORMAT_VERSION}: upgrade scratchformer"
        )
    if run_files:
        check_json(state, TRAINER_STATE, directory / TRAINER_STATE_FILE)
    listed = set(state.get("files") or CHECKPOINT_FILES)
    config = _read_json(directory, CONFIG_FILE)
    if run_files:
        check_json(config, CONFIG, directory / CONFIG_FILE)
    tokenizer = _read_json(directory, TOKENIZER_FILE) if TOKENIZER_FILE in listed else None
    if run_files and tokenizer is not None:
        check_json(tokenizer, TOKENIZER, directory / TOKENIZER_FILE)
    model_state = _read_safetensors(directory, MODEL_FILE)
    if run_files:
        _check_finite(model_state, directory / MODEL_FILE)
    optimizer_state = None
    if OPTIMIZER_FILE in listed:
        optimizer_state = {**(state.get("optimizer") or {}), **_read_safetensors(directory, OPTIMIZER_FILE)}
    return Checkpoint(
        path=directory,
        model_state=model_state,
        config=config,
        tokenizer=tokenizer,
        optimizer_state=optimizer_state,
        rng_state=state.get("rng_state"),
        step=int(state.get("step", 0)),
        extra=state.get("extra") or {},
    )
