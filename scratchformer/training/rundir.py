"""The run directory beyond its checkpoints: one writer at a time, a fresh run that never
touches an existing one, a log that survives a full disk and a kill, and a fingerprint of the
data the run was trained on.

    out/.lock        locked while a training writes here (holds the pid)
    out/log.jsonl    one JSON object per line; only complete lines are ever left behind
    out/diagnostics.jsonl  training diagnostics over time (training/diagnostics.py), bounded
    out/last, best   checkpoints (training/checkpoint.py), and `.last.old` / `.best.old`, the
                     backups an interrupted save leaves (restored by the next writer)

RunLock       `with RunLock(out): ...` -- a second writer fails at once (RunLockedError)
run_files / check_fresh / clear_run   what of a run a directory holds; a fresh run refuses it
              unless told to overwrite, and then removes only those entries
recover_run   a writer (lock held) restores what an interrupted save left
LogWriter     appends whole rows; a failed write truncates the file back to its size before
read_log      the one reader of log.jsonl: strict, except a torn last line (a kill mid-write),
              which is dropped with a note
start_log / truncate_log   a fresh run starts an empty log; a resume keeps rows <= its step
fingerprint_file / check_data_unchanged   sha256 of a data file, compared on eval/resume
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
from pathlib import Path

import numpy as np

from scratchformer.errors import ConfigError, DataChangedError, DataError, RunFileError, RunLockedError
from scratchformer.runfiles import parse_json, read_regular_file, write_atomic
from scratchformer.training.checkpoint import backup_path, recover
from scratchformer.training.diagnostics import DIAG_FILE
from scratchformer.training.schema import LOG_ROW, check_json

LOCK_FILE = ".lock"
LOG_FILE = "log.jsonl"
CHECKPOINTS = ("last", "best")
MAX_LOG_BYTES = 1 << 30  # a row is ~200 bytes: 5 million rows; a bigger file is not our log
_LOCK_OFFSET = 1024  # msvcrt locks a byte here, past the pid, which other processes still read


# -- one writer per run directory ------------------------------------------------------------
def _try_lock(fd: int) -> bool | None:
    """Lock the open file without waiting: True when locked, False when another process holds
    it, None where the platform has no lock (neither fcntl nor msvcrt)."""
    try:
        import fcntl
    except ImportError:
        fcntl = None
    if fcntl is not None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except OSError as e:
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                return False
            raise
    try:
        import msvcrt
    except ImportError:
        return None
    os.lseek(fd, _LOCK_OFFSET, os.SEEK_SET)
    try:
        msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        return True
    except OSError:
        return False
    finally:
        os.lseek(fd, 0, os.SEEK_SET)


def _make_directory(directory: Path) -> None:
    """mkdir -p, with one clear line for a path that is a file or a link to nowhere."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        if directory.is_symlink() and not directory.exists():
            raise ConfigError(f"{directory} is a link to {os.readlink(directory)}, which does not exist: "
                              "create that directory, or choose another --out") from None
        raise ConfigError(f"{directory} exists and is not a directory: choose another --out") from None


class RunLock:
    """An exclusive, non-blocking lock on `directory/.lock` (created with the directory):
    fcntl.flock on Linux and macOS, msvcrt.locking on Windows.

    The lock belongs to the open file, so it is released when the process dies, however it
    dies; the file itself stays (deleting it would race with the next writer) and holds the
    pid of the last holder, for the message a second writer gets. Where neither exists, the
    run is not locked and `note` says so.
    """

    def __init__(self, directory: str | os.PathLike):
        self.directory = Path(directory)
        self._fd: int | None = None
        self.note: str | None = None

    def acquire(self) -> RunLock:
        _make_directory(self.directory)
        fd = os.open(self.directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        locked = _try_lock(fd)
        if locked is False:
            holder = os.read(fd, 32).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            raise RunLockedError(f"{self.directory} is in use by another training (pid {holder}): "
                                 "wait for it to finish, or choose another --out")
        if locked is None:
            self.note = (f"note: {self.directory} is not locked (this platform has neither fcntl nor msvcrt): "
                         "do not start a second training into it")
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the file releases flock and msvcrt locks alike
            self._fd = None

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


# -- what a run directory holds --------------------------------------------------------------
def run_files(directory: str | os.PathLike) -> list[str]:
    """The entries of a run in `directory`: last/, best/, their backups (.NAME.old) and
    log.jsonl; [] when it holds none (a fresh run may start there)."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = [f"{name}/" for name in CHECKPOINTS if (directory / name).exists()]
    found += sorted(p.name for p in directory.glob(".*.old"))
    return found + [name for name in (LOG_FILE, DIAG_FILE) if (directory / name).exists()]


def check_fresh(directory: str | os.PathLike) -> None:
    """Refuse to start a fresh run in a directory that holds one (ConfigError, one line)."""
    found = run_files(directory)
    if found:
        raise ConfigError(f"{directory} already holds a run ({', '.join(found)}): pass --resume to continue it, "
                          "choose another --out, or pass --overwrite to delete it and start again")


def clear_run(directory: str | os.PathLike) -> None:
    """--overwrite: delete the run's entries (run_files) and temporary directories of saves;
    everything else in the directory stays."""
    directory = Path(directory)
    doomed = [directory / name for name in CHECKPOINTS]
    doomed += [*directory.glob(".*.old"), *(p for name in CHECKPOINTS for p in directory.glob(f".{name}.tmp-*"))]
    for path in doomed:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.is_symlink() or path.exists():
            path.unlink()
    (directory / LOG_FILE).unlink(missing_ok=True)
    (directory / DIAG_FILE).unlink(missing_ok=True)


def recover_run(directory: str | os.PathLike) -> None:
    """A writer, its lock held: restore the backups an interrupted save left (checkpoint.recover)."""
    for name in CHECKPOINTS:
        recover(Path(directory) / name)


# -- log.jsonl -------------------------------------------------------------------------------
def _row_line(row: dict) -> bytes:
    """One row as one line of JSON (numpy scalars become Python numbers)."""
    plain = {k: (v.item() if isinstance(v, np.generic) else v) for k, v in row.items()}
    return (json.dumps(plain) + "\n").encode("utf-8")


class LogWriter:
    """Appends rows to log.jsonl, each as one complete line.

    A write that fails part-way (ENOSPC, EIO) truncates the file back to its size before the
    row, so the log never holds half a row, and re-raises as OSError naming the file. A kill
    mid-write can still leave a torn line; `read_log` drops it.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def append(self, row: dict) -> None:
        data = _row_line(row)
        size = os.fstat(self._fd).st_size
        try:
            written = 0
            while written < len(data):
                written += os.write(self._fd, data[written:])
        except OSError as e:
            os.ftruncate(self._fd, size)
            raise OSError(e.errno, e.strerror, str(self.path)) from None

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> LogWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def read_log(path: str | os.PathLike) -> tuple[list[dict], str | None]:
    """Rows of a log.jsonl (or of a run directory's) and a note (or None). A torn last line --
    no newline at the end, or not valid JSON, as a kill mid-write leaves it -- is dropped and
    named in the note; a bad line anywhere else is a RunFileError naming its line number.
    A missing log has no rows; a FIFO, a device or a file over MAX_LOG_BYTES is refused."""
    path = Path(path)
    if path.is_dir():
        path = path / LOG_FILE
    hint = "restore the log or delete it"
    try:
        data = read_regular_file(path, MAX_LOG_BYTES, hint=hint)
    except FileNotFoundError:
        return [], None
    lines = data.split(b"\n")
    tail = lines.pop()  # b"" when the file ends with a newline, as every complete log does
    note, rows = None, []
    if tail.strip():
        note = f"{path}: dropped a torn last line ({len(tail)} bytes) left by an interrupted write"
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path} line {number}"
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError:
            raise RunFileError(f"{where}: not UTF-8 text; {hint}") from None
        try:
            row = parse_json(text, where, hint)
        except RunFileError:
            if number == len(lines) and note is None:  # the last line: a torn write
                note = f"{path}: dropped a torn last line ({len(line)} bytes) left by an interrupted write"
                continue
            raise
        check_json(row, LOG_ROW, where, hint)
        rows.append(row)
    return rows, note


def _write_rows(path: Path, rows: list[dict]) -> None:
    write_atomic(path, b"".join(_row_line(r) for r in rows))


def start_log(path: str | os.PathLike) -> None:
    """A fresh run starts an empty log (a run killed before its first checkpoint may have
    left rows that belong to no checkpoint)."""
    _write_rows(Path(path), [])


def truncate_log(path: str | os.PathLike, step: int) -> str | None:
    """On resume: keep the rows up to `step` (later ones will be redone), drop a torn last
    line; returns read_log's note."""
    rows, note = read_log(path)
    _write_rows(Path(path), [r for r in rows if r["step"] <= step])
    return note


# -- the data a run was trained on -----------------------------------------------------------
def fingerprint_file(path: str | os.PathLike) -> str:
    """sha256 of a file's bytes, as hex."""
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    except OSError as e:
        raise DataError(f"cannot read data file {path}: {e.strerror}") from None
    return h.hexdigest()


def check_data_unchanged(path: str | os.PathLike, recorded_sha256: str | None,
                         option: str = "--allow-changed-data") -> None:
    """Raise DataChangedError when the file's sha256 differs from the one recorded at
    training time (nothing recorded: older runs, nothing to compare)."""
    if recorded_sha256 is None:
        return
    now = fingerprint_file(path)
    if now != recorded_sha256:
        raise DataChangedError(
            f"{path} changed since training (sha256 {recorded_sha256[:12]}... then, {now[:12]}... now): "
            f"restore it, or pass {option} to use it as it is"
        )
