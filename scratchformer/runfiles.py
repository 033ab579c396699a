"""Reading and writing the files of a run, once for the whole library: one atomic writer, one
bounded reader of regular files, one JSON parser whose every failure is a one-line RunFileError.

    write_atomic(path, data)    readers see the old file or the new one, never a part of either
    new_temp_dir(next_to)       a fresh directory beside `next_to`, for a directory written atomically
    write_file(path, data)      write and fsync one file (not atomic by itself)
    read_regular_file(path)     the bytes of a regular file of bounded size: a FIFO, a device
                                (a link to /dev/zero) or a huge file is refused, never read;
                                every file the library reads goes through it (or its chunked
                                form, read_regular_chunks), tests/core/test_runfiles.py says so
    parse_json_line(line, where, limit)   one bounded line of a JSON-lines file
    read_json_file(path)        read_regular_file + UTF-8 + JSON, each failure one line
    read_optional_json(path)    a JSON file another program may have written (a Hugging Face
                                model directory's config.json, ...): None when absent, typed,
                                each failure one line of the reader's own error class
    read_optional_jsons(dir, errors)  several such files of one directory, each read once
    parse_json(text, where)     json.loads with syntax errors, 4,300-digit ints and deep nesting
                                as RunFileError

Files and directories are created with the modes the process's umask gives (0644 / 0755 under
the usual 022), so a teammate can read a shared run. A failed write (a full disk) raises an
OSError that names the file being written, not a temporary name. Imports only `errors`, so
`training` and `viz` both use it.
"""

from __future__ import annotations

import errno
import itertools
import json
import os
import stat
from pathlib import Path

from scratchformer.errors import ConfigError, RunFileError

MAX_JSON_BYTES = 64 * 2**20  # a run's JSON files are kilobytes; refuse to parse a huge one
_names = itertools.count()


def _temp_name(next_to: Path, kind: str) -> Path:
    """`.NAME.tmp-PID-N` beside `next_to`: unique within this process, and the pid keeps two
    processes apart; the `.NAME.tmp-` prefix is what a later save sweeps."""
    return next_to.parent / f".{next_to.name}.tmp-{os.getpid()}-{next(_names)}{kind}"


def naming(e: OSError, path: Path) -> OSError:
    """The same error, naming `path` (what the user knows) instead of a temporary file."""
    return e if e.errno is None else OSError(e.errno, e.strerror, str(path))


def fsync_dir(path: Path) -> None:
    """Make renames and creations inside `path` durable (no-op where directories can't be opened)."""
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


def write_file(path: str | os.PathLike, data: bytes) -> None:
    """Write and fsync one file, created with the umask's mode (not atomic by itself)."""
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def write_atomic(path: str | os.PathLike, data: bytes) -> Path:
    """Replace the file at `path` with `data` atomically: a temporary file in the same directory
    (same filesystem), fsynced, then os.replace. Returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temp_name(path, "")
    try:
        write_file(tmp, data)
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise naming(e, path) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)
    return path


def new_temp_dir(next_to: Path) -> Path:
    """A new, empty directory `.NAME.tmp-...` beside `next_to` (mode from the umask)."""
    tmp = _temp_name(next_to, "")
    os.mkdir(tmp)
    return tmp


def read_regular_file(
    path: str | os.PathLike,
    max_bytes: int | None = MAX_JSON_BYTES,
    *,
    dir_fd: int | None = None,
    where: str | os.PathLike | None = None,
    hint: str = "restore the file or train again",
) -> bytes:
    """The bytes of the regular file at `path` (relative to `dir_fd` when given; `where` names
    it in messages, default: path).

    Opened without blocking and checked with fstat before anything is read: a FIFO (which would
    wait for a writer forever), a device (a link to /dev/zero, which never ends) or a file over
    `max_bytes` is a RunFileError. A missing file raises FileNotFoundError, for the caller to word.
    """
    return b"".join(read_regular_chunks(path, max_bytes, dir_fd=dir_fd, where=where, hint=hint))


def read_regular_chunks(
    path: str | os.PathLike,
    max_bytes: int | None = MAX_JSON_BYTES,
    *,
    dir_fd: int | None = None,
    where: str | os.PathLike | None = None,
    hint: str = "restore the file or train again",
):
    """read_regular_file's bytes as they are read, a MiB at a time (a sha256 of a large data
    file without holding it): the same checks, made before the first chunk."""
    where = path if where is None else where
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags, dir_fd=dir_fd) if dir_fd is not None else os.open(path, flags)
    except FileNotFoundError:
        raise
    except OSError as e:
        raise RunFileError(f"cannot read {where}: {e.strerror}; {hint}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            what = (
                "a directory"
                if stat.S_ISDIR(info.st_mode)
                else "not a regular file (a pipe, device or socket)"
            )
            raise RunFileError(f"{where} is {what}; {hint}")
        if max_bytes is not None and info.st_size > max_bytes:
            raise RunFileError(
                f"{where}: {info.st_size:,} bytes is too large for this file (at most {max_bytes:,}); {hint}"
            )
        size = 0
        while True:  # read to the end, but never more than max_bytes (the file may grow meanwhile)
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            size += len(chunk)
            if max_bytes is not None and size > max_bytes:
                raise RunFileError(f"{where} grew past {max_bytes:,} bytes while being read; {hint}")
            yield chunk
    except OSError as e:
        if e.errno == errno.ENOENT:
            raise
        raise RunFileError(f"cannot read {where}: {e.strerror}; {hint}") from None
    finally:
        os.close(fd)


def parse_json(text: str, where: str | os.PathLike, hint: str = "restore the file or train again"):
    """json.loads with every failure (syntax, 4,300-digit ints, deep nesting) as RunFileError."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise RunFileError(
            f"{where}: invalid JSON, corrupt or truncated ({e.msg} at line {e.lineno} column "
            f"{e.colno}); {hint}"
        ) from None
    except ValueError as e:  # "Exceeds the limit (4300 digits) for integer string conversion"
        raise RunFileError(
            f"{where}: a number is too large to read ({str(e).split(';')[0]}); {hint}"
        ) from None
    except RecursionError:
        raise RunFileError(f"{where}: nested too deeply to read; {hint}") from None


def parse_json_line(line: bytes, where: str, limit: int, hint: str = "restore the file or train again"):
    """One line of a JSON-lines file (log.jsonl, diagnostics.jsonl): at most `limit` bytes (a
    longer line is refused before it is parsed: parsing a huge array takes far more memory than
    its bytes), UTF-8, JSON; each failure one RunFileError line."""
    if len(line) > limit:
        raise RunFileError(
            f"{where} is {len(line):,} bytes, longer than any line this file holds ({limit:,}); {hint}"
        )
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        raise RunFileError(f"{where}: not UTF-8 text; {hint}") from None
    return parse_json(text, where, hint)


def read_json_file(
    path: str | os.PathLike,
    *,
    dir_fd: int | None = None,
    where: str | os.PathLike | None = None,
    hint: str = "restore the file or train again",
):
    """The JSON value in a regular file of at most MAX_JSON_BYTES. `where` names the file in
    messages (default: path). A missing file raises FileNotFoundError; every other failure
    is one RunFileError line."""
    where = path if where is None else where
    data = read_regular_file(path, MAX_JSON_BYTES, dir_fd=dir_fd, where=where, hint=hint)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise RunFileError(f"{where}: not UTF-8 text (byte {e.start}); {hint}") from None
    return parse_json(text, where, hint)


def read_optional_json(
    path: str | os.PathLike,
    expect: type = dict,
    error: type[Exception] = ConfigError,
    hint: str = "is it a Hugging Face model directory?",
):
    """The JSON value in `path`, a file another program may or may not have written (a Hugging
    Face model directory's config.json, tokenizer_config.json, ...), which must be an `expect`
    (dict or list); None when there is no such file. A file that cannot be read or parsed, or
    holds another type, is one `error` line naming it (the reader's own class: ConfigError,
    CheckpointError, DataError)."""
    try:
        value = read_json_file(path, hint=hint)
    except FileNotFoundError:
        return None
    except RunFileError as e:  # a FIFO, a device, a huge or invalid file: one line
        raise error(str(e)) from None
    if not isinstance(value, expect):
        raise error(f"{path} must hold a JSON {'object' if expect is dict else expect.__name__}")
    return value


def read_optional_jsons(directory: str | os.PathLike, errors: dict[str, type[Exception]]) -> dict:
    """{name: the JSON object in directory/name, or None where there is no such file} for each
    name of `errors`, each file read once (`read_optional_json`, failing with its error class)."""
    directory = Path(directory)
    return {name: read_optional_json(directory / name, error=error) for name, error in errors.items()}
