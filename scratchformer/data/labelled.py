"""Labelled texts from a CSV file: the input of `scratchformer finetune`.

    text,label                       a header row naming (at least) the columns text and label
    "A speech, with a comma.",Romeo  one example a row; the csv module's quoting rules

The file is UTF-8 (a byte-order mark is allowed, as spreadsheet programs write one). Labels are
strings; a run maps them to class ids in sorted order and records the names. Every problem is
one DataError naming the file, the row and the fix.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from scratchformer.errors import DataError, RunFileError
from scratchformer.runfiles import read_regular_file

__all__ = ["COLUMNS", "read_labelled_csv"]

COLUMNS = ("text", "label")  # the columns a labelled CSV must have
MAX_CSV_BYTES = 512 * 2**20  # far beyond a data set that fine-tunes on a CPU


def read_labelled_csv(path: str | Path) -> tuple[list[str], list[str]]:
    """(texts, labels) of a CSV with the columns text and label, in file order; texts are
    stripped of surrounding whitespace (as sentence-transformers does before tokenising)."""
    path = Path(path)
    fix = f"give a UTF-8 CSV whose header row names the columns {','.join(COLUMNS)}"
    try:
        if path.stat().st_size > MAX_CSV_BYTES:
            raise DataError(f"{path}: larger than {MAX_CSV_BYTES // 2**20} MiB; {fix} of a smaller data set")
        raw = read_regular_file(path, MAX_CSV_BYTES, hint=fix)
    except FileNotFoundError:
        raise DataError(f"{path}: no such file; {fix}") from None
    except RunFileError as e:  # a directory, a pipe, a device (/dev/zero would never end)
        raise DataError(str(e)) from None
    except OSError as e:
        raise DataError(f"cannot read {path}: {e.strerror}") from None
    try:
        text = raw.decode("utf-8-sig")  # a leading byte-order mark is dropped
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not UTF-8 text (byte {e.start}); {fix}") from None
    if not text.strip():
        raise DataError(f"{path} is empty; {fix} and one example a row")
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = [h.strip() for h in next(reader)]
        missing = [c for c in COLUMNS if c not in header]
        if missing:
            raise DataError(
                f"{path}: the header row {','.join(header)[:80]!r} lacks the column"
                f"{'s' if len(missing) > 1 else ''} {' and '.join(missing)}; {fix}"
            )
        col = {c: header.index(c) for c in COLUMNS}
        texts, labels = [], []
        for row in reader:
            if not any(cell.strip() for cell in row):
                continue  # blank lines
            if len(row) < len(header):
                raise DataError(
                    f"{path} line {reader.line_num}: {len(row)} fields where the header has "
                    f"{len(header)}; quote texts that contain commas"
                )
            t, y = row[col["text"]].strip(), row[col["label"]].strip()
            if not y:
                raise DataError(f"{path} line {reader.line_num}: the label is empty; every row needs one")
            if not t:  # refused up front: an empty text is no example (and would be the probe's input)
                raise DataError(
                    f"{path} line {reader.line_num}: the text is empty; fill it in or delete the row"
                )
            texts.append(t)
            labels.append(y)
    except csv.Error as e:
        raise DataError(f"{path} line {reader.line_num}: not valid CSV ({e})") from None
    if not texts:
        raise DataError(f"{path} has a header but no examples; add one row per example")
    return texts, labels
