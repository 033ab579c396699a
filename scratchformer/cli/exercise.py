"""`scratchformer exercise`: graded exercises, write a layer's backward and have it checked.

    scratchformer exercise                          # list them
    scratchformer exercise NAME [--out FILE]        # write the stub (default: NAME.py)
    scratchformer exercise NAME --check FILE        # grade it: exit 0 right, 1 wrong, 2 bad input
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from scratchformer.errors import CLIError

EXIT_WRONG = 1


def add_parser(sub) -> None:
    """The `exercise` subcommand, added to the main parser's subparsers."""
    from scratchformer.exercises import EXERCISES
    from scratchformer.exercises.grading import MEMORY_LIMIT, TIME_LIMIT

    e = sub.add_parser(
        "exercise", help="graded exercises: write a layer's backward, have it checked",
        description="Graded exercises. Without NAME: the list. With NAME: write a stub file whose forward is "
                    "given and whose backward is yours to write; then --check FILE grades it by finite "
                    "differences (float64, on inputs of several shapes) and the layer contract (returned shapes and "
                    "types, finite gradients ADDED into .grad), naming the first wrong element and the likely "
                    f"cause; the file runs in a child process limited to {TIME_LIMIT:g} s and {MEMORY_LIMIT >> 30} GiB. "
                    "Exit codes of --check: "
                    "0 right, 1 wrong, 2 bad input (a missing file, a file that does not load).")
    e.add_argument("name", nargs="?", choices=list(EXERCISES), metavar="NAME",
                   help=f"one of: {', '.join(EXERCISES)} (default: list them)")
    what = e.add_mutually_exclusive_group()
    what.add_argument("--out", metavar="FILE", help="where to write the stub (default: NAME.py); never overwrites")
    what.add_argument("--check", metavar="FILE", help="grade this file: exit 0 right, 1 wrong, 2 bad input (default: write a stub)")


def cmd_exercise(args) -> int:
    from scratchformer.exercises import check, list_exercises, stub_source

    if args.name is None:
        if args.out or args.check:
            raise CLIError("--out and --check need an exercise NAME (run 'scratchformer exercise' for the list)")
        rows = list_exercises()
        width = max(len(n) for n, _ in rows)
        for name, title in rows:
            print(f"{name:<{width}}  {title}")
        print("\nscratchformer exercise NAME writes NAME.py; scratchformer exercise NAME --check NAME.py grades it")
        return 0
    if args.check is not None:
        grade = check(args.name, args.check)
        print(grade.report())
        return 0 if grade.passed else EXIT_WRONG
    out = Path(args.out or f"{args.name}.py")
    if out.exists():
        raise CLIError(f"{out} exists (your work?): pass --out ANOTHER.py, or --check {out} to grade it")
    _write_atomic(out, stub_source(args.name, str(out)))
    print(f"wrote {out}: write the backward, then run: scratchformer exercise {args.name} --check {out}")
    return 0


def _write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent if str(path.parent) else ".", prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o644)  # mkstemp's 0600 is for secrets; this is the learner's own file
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
