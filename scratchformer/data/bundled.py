"""Data sets shipped inside the package, by name; anything else is a path.

    resolve_data("names")        -> .../scratchformer/data/names.txt            (makemore)
    resolve_data("shakespeare")  -> .../scratchformer/data/tinyshakespeare.txt  (char-rnn, nanoGPT)
    resolve_data("my.txt")       -> Path("my.txt"), if it is a readable file
    bundled_name("shakespeare")  -> "shakespeare"; bundled_name("my.txt") -> None

A bundled name wins over a file of the same name in the current directory; write ./names
to mean that file. Sources and licenses: data/README.md.
"""

from __future__ import annotations

import os
from pathlib import Path

from scratchformer.errors import DataError

DATA_DIR = Path(__file__).resolve().parent
BUNDLED = {
    "names": "names.txt",
    "shakespeare": "tinyshakespeare.txt",
    "tinyshakespeare": "tinyshakespeare.txt",
}
DEFAULT = "names"


def bundled_name(name_or_path: str | os.PathLike | None = None) -> str | None:
    """The bundled data set that `name_or_path` names (None: the default, names), or None for a
    path. Only a str names one: a Path is always a path."""
    if name_or_path is None:
        return DEFAULT
    return name_or_path if isinstance(name_or_path, str) and name_or_path in BUNDLED else None


def resolve_data(name_or_path: str | os.PathLike | None = None) -> Path:
    """The file behind a bundled data set's name, or `name_or_path` as a checked path.
    None means the default data set (names). Raises DataError (one line) for an empty
    name, a missing file or a directory."""
    name = bundled_name(name_or_path)
    if name is not None:
        return DATA_DIR / BUNDLED[name]
    path = Path(name_or_path)
    if str(name_or_path) == "":
        raise DataError(
            f"empty data path: pass a file, or one of the bundled data sets ({', '.join(BUNDLED)})"
        )
    if not path.exists():
        raise DataError(
            f"data file not found: {path}: check the path, or use a bundled data set ({', '.join(BUNDLED)})"
        )
    if not path.is_file():
        raise DataError(f"{path} is not a file: pass a UTF-8 text file")
    return path
