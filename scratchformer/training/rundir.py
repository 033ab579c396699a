"""The run directory beyond its checkpoints: one writer at a time, a fresh run that never
touches an existing one, a log that survives a full disk and a kill, and a fingerprint of the
data the run was trained on.

    out/.lock        holds the pid of the training writing here; the lock itself is on the
                     directory (deleting .lock cannot let a second writer in)
    out/log.jsonl    one JSON object per line; only complete lines are ever left behind
    out/diagnostics.jsonl  training diagnostics over time (training/diagnostics.py), bounded
    out/last, best   checkpoints (training/checkpoint.py), and `.last.old` / `.best.old`, the
                     backups an interrupted save leaves (restored by the next writer)

RunLock       `with RunLock(out): ...` -- a second writer fails at once (RunLockedError)
run_files / check_fresh / clear_run   what of a run a directory holds; a fresh run refuses it
              unless told to overwrite, and then removes only those entries (and the run's own
              temporary files), never another file of the directory, nor one a user left inside
              last/ or best/ (kept in .last.kept / .best.kept for the new run's first save)
recover_run   a writer (lock held) restores what an interrupted save left and deletes the
              temporary files a kill left (`.log.jsonl.tmp-PID-N`, `.diagnostics.jsonl.tmp-PID-N`)
check_checkpoint_paths   at the start of a training: last/ and best/ are paths a save can
              replace (a link to a directory is followed; anything else is one line)
LogWriter     appends whole rows; a failed write truncates the file back to its size before
read_log      the one reader of log.jsonl: strict, except a torn last line (a kill mid-write),
              which is dropped with a note
start_log / truncate_log   a fresh run starts an empty log; a resume keeps rows <= its step
start_run     a fresh run (lock held): --overwrite's clear_run, check_fresh, sweep_temporaries, start_log
fingerprint_file / check_data_unchanged   sha256 of a data file, compared on eval/resume
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
from pathlib import Path

import numpy as np

from scratchformer.errors import ConfigError, DataChangedError, DataError, RunFileError, RunLockedError
from scratchformer.runfiles import parse_json_line, read_regular_chunks, read_regular_file, write_atomic
from scratchformer.training.checkpoint import CHECKPOINT_FILES, check_checkpoint_path, kept_path, recover
from scratchformer.training.diagnostics import DIAG_FILE
from scratchformer.training.schema import LOG_ROW, check_json

LOCK_FILE = ".lock"
LOG_FILE = "log.jsonl"
CHECKPOINTS = ("last", "best")
BACKUPS = tuple(
    f".{name}.old" for name in CHECKPOINTS
)  # what an interrupted save leaves (checkpoint.backup_path)
MAX_LOG_BYTES = 1 << 30  # a row is ~200 bytes: 5 million rows; a bigger file is not our log
MAX_LOG_LINE = 1 << 16  # a row is ~200 bytes (a task's scores a few more); a longer line is not a row
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
            raise ConfigError(
                f"{directory} is a link to {os.readlink(directory)}, which does not exist: "
                "create that directory, or choose another --out"
            ) from None
        raise ConfigError(f"{directory} exists and is not a directory: choose another --out") from None


class RunLock:
    """An exclusive, non-blocking lock on the run directory itself (created if missing).

    With fcntl (Linux, macOS) the lock is flock on an open descriptor of the directory: it
    belongs to the directory's inode, so deleting or replacing `.lock` meanwhile cannot let a
    second writer in (a flock on a file only guards that file's inode: a new `.lock` is a new
    inode, free to lock). `.lock` only holds the pid of the last holder, for the message a
    second writer gets. Without fcntl (Windows), msvcrt locks a byte of `.lock`. The lock is
    released when the process dies, however it dies. Where neither exists, the run is not
    locked and `note` says so.

    `check_held()` (before each save) refuses to go on when the locked directory is no longer
    at its path (moved or deleted and made again), so a training never writes into a
    directory another writer may hold.
    """

    def __init__(self, directory: str | os.PathLike):
        self.directory = Path(directory)
        self._fd: int | None = None
        self._dir_fd: int | None = None
        self.note: str | None = None

    def _refuse(self, fd: int) -> RunLockedError:
        try:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
        except (OSError, AttributeError):
            holder = "unknown"
        return RunLockedError(
            f"{self.directory} is in use by another training (pid {holder}): "
            "wait for it to finish, or choose another --out"
        )

    def acquire(self) -> RunLock:
        _make_directory(self.directory)
        fd = os.open(self.directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            dir_fd = os.open(self.directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        except OSError:  # Windows cannot open a directory: the msvcrt lock on .lock does it
            dir_fd = None
        locked = _try_lock(dir_fd) if dir_fd is not None and _has_flock() else _try_lock(fd)
        if locked is False:
            error = self._refuse(fd)
            for f in (fd, dir_fd):
                if f is not None:
                    os.close(f)
            raise error
        if locked is None:
            self.note = (
                f"note: {self.directory} is not locked (this platform has neither fcntl nor msvcrt): "
                "do not start a second training into it"
            )
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd, self._dir_fd = fd, dir_fd
        return self

    def check_held(self) -> None:
        """RunLockedError when the run directory was moved or deleted since it was locked."""
        if self._dir_fd is None:
            return
        try:
            same = os.stat(self.directory).st_ino == os.fstat(self._dir_fd).st_ino
        except OSError:
            same = False
        if not same:
            raise RunLockedError(
                f"{self.directory} was moved or deleted during the training: stopped before "
                "writing into a directory another training may hold; restore it and --resume"
            )

    def release(self) -> None:
        for fd in (self._fd, self._dir_fd):
            if fd is not None:
                os.close(fd)  # closing the file releases flock and msvcrt locks alike
        self._fd = self._dir_fd = None

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def _has_flock() -> bool:
    try:
        import fcntl  # noqa: F401
    except ImportError:
        return False
    return True


# -- what a run directory holds --------------------------------------------------------------
def run_files(directory: str | os.PathLike) -> list[str]:
    """The entries of a run in `directory`: last/, best/, their backups (.NAME.old) and
    log.jsonl; [] when it holds none (a fresh run may start there)."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = [f"{name}/" for name in CHECKPOINTS if os.path.lexists(directory / name)]
    found += [name for name in BACKUPS if os.path.lexists(directory / name)]
    return found + [name for name in (LOG_FILE, DIAG_FILE) if (directory / name).exists()]


def check_fresh(directory: str | os.PathLike) -> None:
    """Refuse to start a fresh run in a directory that holds one (ConfigError, one line)."""
    found = run_files(directory)
    if found:
        raise ConfigError(
            f"{directory} already holds a run ({', '.join(found)}): pass --resume to continue it, "
            "choose another --out, or pass --overwrite to delete it and start again"
        )


def _own_temporaries(directory: Path) -> list[Path]:
    """The temporary entries this library's writers leave when killed: `.NAME.tmp-PID-N` for
    NAME a checkpoint (a directory), log.jsonl or diagnostics.jsonl (runfiles._temp_name).
    Only names of exactly that form: a user's `.last.tmp-notes` stays."""
    names = "|".join(re.escape(n) for n in (*CHECKPOINTS, LOG_FILE, DIAG_FILE))
    pattern = re.compile(rf"\.({names})\.tmp-\d+-\d+")
    try:
        entries = list(directory.iterdir())
    except OSError:
        return []
    return sorted(p for p in entries if pattern.fullmatch(p.name))


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        path.unlink()


def clear_run(directory: str | os.PathLike) -> list[str]:
    """--overwrite: delete the run's entries (run_files: last/, best/, .last.old, .best.old,
    log.jsonl, diagnostics.jsonl) and the temporaries its writers leave; every other entry of
    the directory stays (a user's `.bashrc.old` included). What a user left inside last/ or
    best/ (or their backups) stays too, as every save carries it forward: it is moved to
    `.last.kept` (`.best.kept`), which the new run's first save of that checkpoint takes in.
    A link named last/ or best/ is removed, never what it points to. Returns what was kept
    ("last/figs", ...)."""
    directory = Path(directory)
    kept = []
    for name in CHECKPOINTS:
        for holder in (directory / name, directory / f".{name}.old"):
            if holder.is_dir() and not holder.is_symlink():
                kept += [f"{name}/{entry}" for entry in _keep_foreign(holder, kept_path(directory / name))]
    for path in [
        *(directory / n for n in (*CHECKPOINTS, *BACKUPS, LOG_FILE, DIAG_FILE)),
        *_own_temporaries(directory),
    ]:
        _remove(path)
    return kept


def _keep_foreign(checkpoint: Path, kept: Path) -> list[str]:
    """Move the entries of `checkpoint` that no save writes into `kept` (made if needed); a name
    `kept` already holds stays where it is, and the overwrite is refused rather than lose it."""
    names = [p.name for p in checkpoint.iterdir() if p.name not in CHECKPOINT_FILES]
    if not names:
        return []
    clash = [n for n in names if os.path.lexists(kept / n)]
    if clash:
        raise ConfigError(
            f"{kept} already holds {clash[0]}, kept from a run deleted before, and {checkpoint} holds another: "
            f"move one of them away, then --overwrite again"
        )
    kept.mkdir(exist_ok=True)
    for n in names:
        os.replace(checkpoint / n, kept / n)
    return names


def sweep_temporaries(directory: str | os.PathLike) -> None:
    """A writer, its lock held: delete the temporaries a killed writer left (_own_temporaries)."""
    for path in _own_temporaries(Path(directory)):
        if path.name.startswith(tuple(f".{n}.tmp-" for n in CHECKPOINTS)):
            shutil.rmtree(
                path, ignore_errors=True
            ) if path.is_dir() and not path.is_symlink() else path.unlink()
        elif path.is_file() or path.is_symlink():
            path.unlink()


def recover_run(directory: str | os.PathLike) -> None:
    """A writer, its lock held: restore the backups an interrupted save left (checkpoint.recover)
    and delete the temporaries a kill left (sweep_temporaries)."""
    for name in CHECKPOINTS:
        recover(Path(directory) / name)
    sweep_temporaries(directory)


def start_run(directory: str | os.PathLike, overwrite: bool = False) -> list[str]:
    """A fresh run, its lock held: the old run deleted first with `overwrite` (clear_run), else
    refused when there is one (check_fresh); a kill's temporaries swept; an empty log started.
    Returns what the overwrite kept of the user's entries inside the old checkpoints."""
    kept = clear_run(directory) if overwrite else []
    check_fresh(directory)
    sweep_temporaries(directory)
    start_log(Path(directory) / LOG_FILE)
    return kept


def check_checkpoint_paths(directory: str | os.PathLike) -> None:
    """At the start of a training: refuse, in one line (ConfigError), a last/ or best/ that no
    save can replace (checkpoint.check_checkpoint_path), rather than failing at the first save."""
    for name in CHECKPOINTS:
        check_checkpoint_path(Path(directory) / name)


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
            row = parse_json_line(line, where, MAX_LOG_LINE, hint)
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
    """sha256 of a regular file's bytes, as hex (a pipe or a device is refused, never read)."""
    h = hashlib.sha256()
    try:
        for block in read_regular_chunks(path, None, hint="give a data file"):
            h.update(block)
    except FileNotFoundError:
        raise DataError(f"cannot read data file {path}: no such file") from None
    except RunFileError as e:  # a pipe or a device (a link to /dev/zero) would never end
        raise DataError(str(e)) from None
    return h.hexdigest()


def check_data_unchanged(
    path: str | os.PathLike,
    recorded_sha256: str | None,
    option: str = "--allow-changed-data",
    sha256: str | None = None,
) -> None:
    """Raise DataChangedError when the file's sha256 (`sha256` when the caller has read the file
    already, else read now) differs from the one recorded at training time (nothing recorded:
    older runs, nothing to compare)."""
    if recorded_sha256 is None:
        return
    now = sha256 if sha256 is not None else fingerprint_file(path)
    if now != recorded_sha256:
        raise DataChangedError(
            f"{path} changed since training (sha256 {recorded_sha256[:12]}... then, {now[:12]}... now): "
            f"restore it, or pass {option} to use it as it is"
        )
