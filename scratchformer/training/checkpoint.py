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
    (2b. entries a user left in the old checkpoint -- an editor's swap file, figures written
         into it -- are moved from the backup into the new one, so a save neither fails on
         them nor deletes them; so are those `--overwrite` kept of the run it deleted, from
         `.NAME.kept`)
Each rename is atomic, so a crash at any point leaves either the old or the new complete
checkpoint on disk: before 1 the old one is the target; between 1 and 2 the old one is the
backup, which every reader reads when the target is missing and which the next writer
(`recover`, under the run's lock) moves back; after 2 the new one is the target (and `recover`
finishes step 2b). Leftover temp directories are swept by the next save. One writer per
directory at a time.

A checkpoint path that is a link to a directory (checkpoints kept on another disk) is
followed: the save happens beside the link's target, and the link stays. A path no save can
replace (a file, a link to a file or to nowhere reachable, a directory of other files) is
refused by `check_checkpoint_path`, which a training calls at its start.

Readers never see a save half done: `load_checkpoint` reads every file through one open
descriptor of the directory, and starts again if a save renamed it away meanwhile.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from scratchformer.errors import CheckpointError
from scratchformer.runfiles import (
    fsync_dir,
    naming,
    new_temp_dir,
    read_json_file,
    read_regular_file,
    write_file,
)
from scratchformer.training.schema import CONFIG, TOKENIZER, TRAINER_STATE, check_json, upgrade_run_files

FORMAT_NAME = "scratchformer-checkpoint"
FORMAT_VERSION = 1
MODEL_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
TOKENIZER_FILE = "tokenizer.json"
OPTIMIZER_FILE = "optimizer.safetensors"
TRAINER_STATE_FILE = "trainer_state.json"
CHECKPOINT_FILES = (MODEL_FILE, CONFIG_FILE, TOKENIZER_FILE, OPTIMIZER_FILE, TRAINER_STATE_FILE)
_READ_ATTEMPTS = 20  # a load retried while saves keep renaming the directory under it


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


# -- writing a directory atomically -----------------------------------------------------------
def backup_path(directory: Path) -> Path:
    """Where a save keeps the previous checkpoint between its two renames: `.NAME.old`."""
    return directory.parent / f".{directory.name}.old"


def _located(directory: str | os.PathLike) -> Path:
    """The absolute checkpoint path, a link in its last component followed (the save and its
    backup then live beside the link's target, on its filesystem)."""
    path = os.path.abspath(directory)
    return Path(os.path.realpath(path) if os.path.islink(path) else path)


def _foreign(directory: Path) -> list[str]:
    """Entries of a checkpoint directory that no save writes."""
    return sorted(p.name for p in directory.iterdir() if p.name not in CHECKPOINT_FILES)


def _carry_foreign(backup: Path, directory: Path) -> None:
    """Step 2b: move what a user left in the old checkpoint into the new one (a name the new
    one already holds stays in the backup, which is then deleted: only checkpoint files are)."""
    for name in _foreign(backup):
        if not os.path.lexists(directory / name):
            os.replace(backup / name, directory / name)


def kept_path(directory: Path) -> Path:
    """Where `--overwrite` keeps what a user left in the deleted run's checkpoint `directory`
    (`.NAME.kept`), for the new run's first save of it to take in."""
    return directory.parent / f".{directory.name}.kept"


def _take_kept(directory: Path) -> None:
    """Move the entries `--overwrite` kept (kept_path) into the checkpoint just written; the
    holder goes once empty (an entry whose name the checkpoint holds stays in it, never lost)."""
    kept = kept_path(directory)
    if kept.is_dir() and not kept.is_symlink():
        for entry in kept.iterdir():
            if not os.path.lexists(directory / entry.name):
                os.replace(entry, directory / entry.name)
        try:
            kept.rmdir()
        except OSError:
            pass


def check_checkpoint_path(directory: str | os.PathLike) -> None:
    """Refuse, in one line (CheckpointError), a path no save can replace: a file, a link that
    loops or whose target's folder is missing, a link to a file, or a directory holding other
    files but no checkpoint. A link to a directory, and a checkpoint holding extra entries,
    are fine (module doc)."""
    path = Path(os.path.abspath(directory))
    if os.path.islink(path):
        try:
            os.stat(path)
        except FileNotFoundError:
            target = _located(path)
            if not target.parent.is_dir():
                raise CheckpointError(
                    f"{path} is a link to {os.readlink(path)}, whose folder does not exist: "
                    "create it, or delete the link"
                ) from None
            return
        except OSError as e:
            raise CheckpointError(
                f"{path} is a link that cannot be followed ({e.strerror}): delete the link, or "
                "point it at a directory"
            ) from None
    if not os.path.exists(path):
        return
    if not path.is_dir():
        raise CheckpointError(
            f"checkpoint path {path} is {'a link to ' if path.is_symlink() else ''}a file, not a "
            "directory: move it away, or choose another --out"
        )
    target = _located(path)
    try:
        foreign = _foreign(target)
    except OSError as e:
        raise CheckpointError(f"cannot read checkpoint directory {path}: {e.strerror}") from None
    if foreign and not (target / TRAINER_STATE_FILE).exists():
        raise CheckpointError(
            f"{path} holds files that are not part of a checkpoint ({', '.join(foreign[:3])}) and "
            "no checkpoint: move them away, or choose another --out"
        )


def recover(directory: str | os.PathLike) -> None:
    """Settle what an interrupted save of `directory` left (the writer's lock held): a lone
    backup is moved back, a backup beside a complete new checkpoint gives up the user's entries
    to it (step 2b) and is deleted, temporary directories are swept."""
    directory = _located(directory)
    backup = backup_path(directory)
    if backup.is_dir():
        if directory.is_dir():  # crash after step 2: the target is the new, complete one
            _carry_foreign(backup, directory)
            shutil.rmtree(backup)
        elif os.path.lexists(directory):  # a file or a broken link: check_checkpoint_path refuses it
            pass
        else:
            os.replace(backup, directory)  # crash between steps 1 and 2: the backup is it
            fsync_dir(directory.parent)
    own = re.compile(rf"\.{re.escape(directory.name)}\.tmp-\d+-\d+")  # runfiles._temp_name's, nothing else
    for tmp in directory.parent.glob(f".{directory.name}.tmp-*"):
        if own.fullmatch(tmp.name) and tmp.is_dir() and not tmp.is_symlink():
            shutil.rmtree(tmp, ignore_errors=True)


def write_directory_atomic(directory: str | os.PathLike, files: dict[str, bytes]) -> Path:
    """Make `directory` hold `files` (name -> bytes) and the entries a user left in the checkpoint
    it replaces, atomically (see module doc).

    Refuses (check_checkpoint_path) a directory that holds other files but no checkpoint, so a
    wrong path cannot delete unrelated data. A failed write (a full disk) leaves the previous
    checkpoint in place and raises an OSError naming the file.
    """
    check_checkpoint_path(directory)
    directory = _located(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    recover(directory)

    tmp = new_temp_dir(directory)
    try:
        for name, data in files.items():
            try:
                write_file(tmp / name, data)
            except OSError as e:
                raise naming(e, directory / name) from None
        fsync_dir(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise

    backup = backup_path(directory)
    if directory.exists():
        os.replace(directory, backup)  # 1
    os.replace(tmp, directory)  # 2
    fsync_dir(directory.parent)
    if backup.exists():
        _carry_foreign(backup, directory)  # 2b
        shutil.rmtree(backup)  # 3
    _take_kept(directory)  # what --overwrite kept of the deleted run's checkpoint
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
    run_files: bool = True,
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
        run_files: check config.json, trainer_state.json and tokenizer.json against the
            schemas `load_checkpoint` reads them with (training/schema.py), before anything
            is written: a checkpoint the readers would refuse is never saved. False saves a
            free-form config (read back with `load_checkpoint(run_files=False)`).
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
    if run_files:  # what is written, checked as load_checkpoint will read it
        for name, schema in (
            (CONFIG_FILE, CONFIG),
            (TRAINER_STATE_FILE, TRAINER_STATE),
            (TOKENIZER_FILE, TOKENIZER),
        ):
            if name in files:
                check_json(
                    json.loads(files[name]),
                    schema,
                    Path(directory) / name,
                    hint="not saved: this is a bug in the code that built the checkpoint",
                )
    return write_directory_atomic(directory, files)


class _SaveInProgress(Exception):
    """Internal: the directory being read was renamed away or deleted by a save meanwhile."""


def _open_directory(directory: Path) -> tuple[Path, int | None]:
    """(the checkpoint directory to read, an fd of it or None where the OS has no dir_fd).

    A save renames the target to its backup, then the new one into place, then deletes the
    backup (module doc); so the target, then the backup, then the target again are tried,
    and a reader never falls into the gap between two renames. Reading through one open fd
    keeps every file of one checkpoint, even if the directory is renamed meanwhile.
    """
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0)
    use_fd = os.open in os.supports_dir_fd
    for path in (directory, backup_path(directory), directory):
        if not use_fd:
            if path.is_dir():
                return path, None
            continue
        try:
            return path, os.open(path, flags)
        except FileNotFoundError:
            continue
        except NotADirectoryError:
            break
        except OSError as e:
            raise CheckpointError(f"cannot read checkpoint directory {path}: {e.strerror}") from None
    if directory.exists() and not directory.is_dir():
        raise CheckpointError(
            f"checkpoint path {directory} is not a directory: pass the checkpoint directory"
        )
    raise CheckpointError(f"checkpoint directory not found: {directory}: check the path")


class _Reader:
    """The files of one checkpoint directory, read through one fd (see `_open_directory`)."""

    def __init__(self, path: Path, fd: int | None):
        self.path, self.fd = path, fd

    def _missing(self, name: str) -> Exception:
        """A file is missing: a save moved the directory meanwhile (read again), or the
        checkpoint is incomplete."""
        if self.path.name.endswith(".old"):  # a backup is complete until a save deletes it
            return _SaveInProgress()
        try:
            if self.fd is None:  # no dir_fd here: only a directory that vanished was moved
                moved = not self.path.is_dir()
            else:
                here = os.fstat(self.fd)
                moved = here.st_nlink == 0 or os.stat(self.path).st_ino != here.st_ino
        except OSError:
            moved = True
        if moved:
            return _SaveInProgress()
        return CheckpointError(
            f"{self.path / name} is missing: the checkpoint is incomplete; re-save it or use another"
        )

    def bytes(self, name: str) -> bytes:
        try:
            if self.fd is None:
                return read_regular_file(self.path / name, None)
            return read_regular_file(name, None, dir_fd=self.fd, where=self.path / name)
        except FileNotFoundError:
            raise self._missing(name) from None

    def json(self, name: str):
        try:
            if self.fd is None:
                return read_json_file(self.path / name)
            return read_json_file(name, dir_fd=self.fd, where=self.path / name)
        except FileNotFoundError:
            raise self._missing(name) from None

    def safetensors(self, name: str) -> dict[str, np.ndarray]:
        from safetensors.numpy import load

        data = self.bytes(name)
        try:
            return load(data)
        except Exception as e:  # SafetensorError is not importable under a stable name
            raise CheckpointError(
                f"{self.path / name}: corrupt or truncated ({e}); re-save the checkpoint"
            ) from None


def checkpoint_exists(directory: str | os.PathLike) -> bool:
    """True if `load_checkpoint(directory)` has something to read: a model file in the directory
    or in the backup an interrupted save left (looked at twice, as `_open_directory` does)."""
    directory = _located(directory)
    return any((path / MODEL_FILE).is_file() for path in (directory, backup_path(directory), directory))


def _check_finite(arrays: dict[str, np.ndarray], path: Path) -> None:
    """Refuse weights holding NaN or infinity (a diverged run), naming the first few tensors."""
    bad = [k for k, v in arrays.items() if v.dtype.kind == "f" and not np.isfinite(v).all()]
    if bad:
        more = f" and {len(bad) - 3} more" if len(bad) > 3 else ""
        raise CheckpointError(
            f"{path} holds NaN or infinite weights ({', '.join(bad[:3])}{more}): the run "
            "diverged; use an earlier checkpoint or train again with a lower --lr"
        )


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
    directory = _located(directory)
    for attempt in range(_READ_ATTEMPTS):
        path, fd = _open_directory(directory)
        try:
            return _load(_Reader(path, fd), run_files)
        except _SaveInProgress:
            time.sleep(0.005 * attempt)  # a save is renaming it: read the new one
        finally:
            if fd is not None:
                os.close(fd)
    raise CheckpointError(
        f"{directory} changed {_READ_ATTEMPTS} times while being read: is a training "
        "saving it faster than it can be read? Try again"
    )


def _load(read: _Reader, run_files: bool) -> Checkpoint:
    directory = read.path
    state = read.json(TRAINER_STATE_FILE)
    if not isinstance(state, dict) or state.get("format") != FORMAT_NAME:
        raise CheckpointError(
            f"{directory / TRAINER_STATE_FILE} is not a scratchformer trainer state: "
            "is this a checkpoint written by scratchformer?"
        )
    version = state.get("version", 0)
    if isinstance(version, int) and version > FORMAT_VERSION:
        raise CheckpointError(
            f"{directory / TRAINER_STATE_FILE} has format version {version}, newer than "
            f"{FORMAT_VERSION}: upgrade scratchformer"
        )
    config = read.json(CONFIG_FILE)
    if run_files:
        config, state = upgrade_run_files(config, state)  # what older versions wrote, in today's form
        check_json(state, TRAINER_STATE, directory / TRAINER_STATE_FILE)
        check_json(config, CONFIG, directory / CONFIG_FILE)
    listed = set(state.get("files") or CHECKPOINT_FILES)
    tokenizer = read.json(TOKENIZER_FILE) if TOKENIZER_FILE in listed else None
    if run_files and tokenizer is not None:
        check_json(tokenizer, TOKENIZER, directory / TOKENIZER_FILE)
    model_state = read.safetensors(MODEL_FILE)
    if run_files:
        _check_finite(model_state, directory / MODEL_FILE)
    optimizer_state = None
    if OPTIMIZER_FILE in listed:
        optimizer_state = {**(state.get("optimizer") or {}), **read.safetensors(OPTIMIZER_FILE)}
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
