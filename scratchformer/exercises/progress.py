"""Which exercises a learner has passed: a small JSON file in the directory they work in.

    .scratchformer-exercises.json      {"format": 1, "passed": ["linear", "softmax"]}

It lives in the current directory, beside the stubs `scratchformer exercise NAME` writes there
by default: one course directory, one record, nothing hidden in the home directory, and a
fresh directory starts from none passed. `scratchformer exercise NAME --check FILE` adds NAME
when FILE is right (a later wrong check does not take it away: the exercise was passed);
`scratchformer exercise` marks the passed ones in its list. Written atomically
(`runfiles.write_atomic`), so an interrupted write leaves the old record or the new one.
"""

from __future__ import annotations

import json
from pathlib import Path

from scratchformer.errors import RunFileError
from scratchformer.runfiles import read_json_file, write_atomic

PROGRESS_FILE = ".scratchformer-exercises.json"
FORMAT = 1


def progress_path(directory: str | Path | None = None) -> Path:
    return Path.cwd() / PROGRESS_FILE if directory is None else Path(directory) / PROGRESS_FILE


def passed(directory: str | Path | None = None) -> set[str]:
    """The names of the exercises passed in `directory` (default: the current one)."""
    path = progress_path(directory)
    hint = f"delete {path} to start the record afresh"
    try:
        record = read_json_file(path, hint=hint)
    except FileNotFoundError:
        return set()
    names = record.get("passed") if isinstance(record, dict) else None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise RunFileError(f'{path}: not a record of passed exercises (no list "passed" of names); {hint}')
    return set(names)


def record_pass(name: str, directory: str | Path | None = None) -> Path:
    """Add `name` to the record of passed exercises; returns the record's path."""
    done = passed(directory) | {name}
    text = json.dumps({"format": FORMAT, "passed": sorted(done)}, indent=1) + "\n"
    return write_atomic(progress_path(directory), text.encode("utf-8"))
