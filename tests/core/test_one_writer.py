"""One atomic writer: outside scratchformer/runfiles.py the package replaces a file only through
`runfiles.write_atomic`. A direct write (`Path.write_text`, `open(..., "w")`, safetensors'
`save_file`, a `tempfile` of its own) is found by parsing every module; the renames of a save
that puts a whole new directory in place (a checkpoint, with a user's own files carried from the
old one into the new; an export) are the listed exceptions."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import scratchformer

PACKAGE = Path(scratchformer.__file__).parent
WRITE_METHODS = {"write_text", "write_bytes", "save_file", "mkstemp", "NamedTemporaryFile", "savefig"}
# a new directory renamed into place, or a user's file carried into it (file -> number of such calls):
# checkpoint.py's save, its backup, its recovery, and the user's entries carried from the old
# checkpoint and from what --overwrite kept; rundir.py's --overwrite keeping a user's entries
DIRECTORY_RENAMES = {"training/checkpoint.py": 5, "training/rundir.py": 1, "cli/main.py": 1}


def _writes(root: Path) -> dict[str, list[str]]:
    """file -> "line: call" for each call that writes or renames a file outside runfiles.py."""
    found: dict[str, list[str]] = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel == "runfiles.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            fn = node.func
            name = fn.attr if isinstance(fn, ast.Attribute) else fn.id if isinstance(fn, ast.Name) else None
            if name == "open" and isinstance(fn, ast.Name):  # the builtin: a write mode is a write
                mode = (
                    node.args[1]
                    if len(node.args) > 1
                    else next((k.value for k in node.keywords if k.arg == "mode"), None)
                )
                writes = isinstance(mode, ast.Constant) and any(c in str(mode.value) for c in "wax+")
            elif (
                name in ("replace", "rename")
                and isinstance(fn, ast.Attribute)
                and isinstance(fn.value, ast.Name)
                and fn.value.id == "os"
            ):
                writes = True
            else:
                writes = name in WRITE_METHODS and not (name == "savefig" and _to_buffer(node))
            if writes:
                found.setdefault(rel, []).append(f"{node.lineno}: {name}")
    return found


def _to_buffer(node: ast.Call) -> bool:
    """fig.savefig(buffer, ...) into an in-memory io.BytesIO named in the call's first argument."""
    first = node.args[0] if node.args else None
    return isinstance(first, ast.Name) and first.id in ("png", "buf", "buffer")


def _unexpected(root: Path) -> list[str]:
    bad = []
    for rel, calls in _writes(root).items():
        renames = [c for c in calls if c.endswith((": replace", ": rename"))]
        if len(renames) != len(calls) or len(renames) > DIRECTORY_RENAMES.get(rel, 0):
            bad += [f"{rel}:{c}" for c in calls]
    return bad


def test_files_are_written_through_write_atomic_only():
    assert _unexpected(PACKAGE) == []


def test_a_direct_write_is_found(tmp_path):
    """The check can fail: a module of a copy that writes its own file, or renames one more
    time than the listed directory renames, is reported."""
    root = tmp_path / "scratchformer"
    for source in PACKAGE.rglob("*.py"):
        (root / source.relative_to(PACKAGE)).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, root / source.relative_to(PACKAGE))
    assert _unexpected(root) == []
    (root / "viz" / "planted.py").write_text(
        "from pathlib import Path\n\ndef save(p, s):\n    Path(p).write_text(s)\n\n"
        "def save2(p, s):\n    with open(p, 'w') as f:\n        f.write(s)\n",
        encoding="utf-8",
    )
    main = root / "cli" / "main.py"
    planted = "\n\ndef planted(a, b):\n    os.replace(a, b)\n"
    main.write_text(main.read_text(encoding="utf-8") + planted, encoding="utf-8")
    bad = _unexpected(root)
    assert "viz/planted.py:4: write_text" in bad and "viz/planted.py:7: open" in bad
    assert any(b.startswith("cli/main.py:") and b.endswith(": replace") for b in bad)
