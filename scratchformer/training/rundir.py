"""The run directory beyond its checkpoints: one writer at a time, a log that survives a full
disk and a kill, and a fingerprint of the data the run was trained on.

    out/.lock        held with fcntl.flock while a training writes here (holds the pid)
    out/log.jsonl    one JSON object per line; only complete lines are ever left behind
    out/last, best   checkpoints (training/checkpoint.py)

RunLock       `with RunLock(out): ...` -- a second writer fails at once (RunLockedError)
LogWriter     appends whole rows; a failed write truncates the file back to its size before
read_log      rows + a note when a torn last line (a kill mid-write) was dropped
start_log / truncate_log   a fresh run starts an empty log; a resume keeps rows <= its step
fingerprint_file / check_data_unchanged   sha256 of a data file, compared on eval/resume
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
from pathlib import Path

import numpy as np

from scratchformer.errors import DataChangedError, DataError, RunFileError, RunLockedError
from scratchformer.training.checkpoint import atomic_write_bytes
from scratchformer.training.schema import LOG_ROW, check_json, parse_json_text

LOCK_FILE = ".lock"


# -- one writer per run directory ------------------------------------------------------------
class RunLock:
    """An exclusive, non-blocking flock on `directory/.lock` (created with the directory).

    The lock belongs to the open file, so it is released when the process dies, however it
    dies; the file itself stays (deleting it would race with the next writer) and holds the
    pid of the last holder, for the message a second writer gets.
    """

    def __init__(self, directory: str | os.PathLike):
        self.directory = Path(directory)
        self._fd: int | None = None

    def acquire(self) -> RunLock:
        self.directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            holder = os.read(fd, 32).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            raise RunLockedError(f"{self.directory} is in use by another training (pid {holder}): "
                                 "wait for it to finish, or choose another --out") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


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
            raise OSError(e.errno, f"cannot append to {self.path}: {e.strerror}") from None

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> LogWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def read_log(path: str | os.PathLike) -> tuple[list[dict], str | None]:
    """Rows of a log.jsonl and a note (or None). A torn last line -- no newline at the end,
    or not valid JSON, as a kill mid-write leaves it -- is dropped and named in the note; a
    bad line anywhere else is a RunFileError naming its line number."""
    path = Path(path)
    if not path.exists():
        return [], None
    lines = path.read_bytes().split(b"\n")
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
            raise RunFileError(f"{where}: not UTF-8 text; restore the log or delete it") from None
        try:
            row = parse_json_text(text, where, "restore the log or delete it")
        except RunFileError:
            if number == len(lines) and note is None:  # the last line: a torn write
                note = f"{path}: dropped a torn last line ({len(line)} bytes) left by an interrupted write"
                continue
            raise
        check_json(row, LOG_ROW, where, "restore the log or delete it")
        rows.append(row)
    return rows, note


def _write_rows(path: Path, rows: list[dict]) -> None:
    atomic_write_bytes(path, b"".join(_row_line(r) for r in rows))


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
