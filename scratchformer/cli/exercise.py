"""`scratchformer exercise`: graded exercises, write a layer's backward (or a BPE merge step, a
diagnosis of recorded runs, an induction-head finder) and have it checked.

    scratchformer exercise                          # list them, the passed ones marked
    scratchformer exercise NAME [--out FILE]        # write the stub (default: NAME.py)
    scratchformer exercise NAME --check FILE        # grade it: exit 0 right, 1 wrong, 2 bad input
    scratchformer exercise NAME --hint              # a first hint, before writing or checking
    scratchformer exercise NAME --check FILE --hint # if wrong: what is wrong and a hint, the cause held back

A right --check is recorded in ./.scratchformer-exercises.json (`exercises/progress.py`).
"""

from __future__ import annotations

import sys
from pathlib import Path

from scratchformer.errors import CLIError, ScratchformerError
from scratchformer.runfiles import write_atomic

EXIT_WRONG = 1


def add_options(e) -> None:
    """The `exercise` command's options, added to its parser (cli/main.py makes it)."""
    from scratchformer.exercises import EXERCISES

    e.add_argument(
        "name",
        nargs="?",
        choices=list(EXERCISES),
        metavar="NAME",
        help=f"one of: {', '.join(EXERCISES)} (default: list them)",
    )
    what = e.add_mutually_exclusive_group()
    what.add_argument(
        "--out", metavar="FILE", help="where to write the stub (default: NAME.py); never overwrites"
    )
    what.add_argument(
        "--check",
        metavar="FILE",
        help="grade this file: exit 0 right, 1 wrong, 2 bad input (default: write a stub)",
    )
    e.add_argument(
        "--hint",
        action="store_true",
        help="alone: print a first hint for NAME; with --check: if wrong, print what is wrong and the "
        "hint, holding back the likely cause (check again without --hint for it)",
    )


def cmd_exercise(args) -> int:
    from scratchformer.exercises import EXERCISES, check, list_exercises, stub_source
    from scratchformer.exercises.catalogue import HINTS
    from scratchformer.exercises.progress import PROGRESS_FILE, passed, record_pass

    if args.name is None:
        if args.out or args.check or args.hint:
            raise CLIError(
                "--out, --check and --hint need an exercise NAME (run 'scratchformer exercise' for the list)"
            )
        rows = list_exercises()
        done = passed()
        width = max(len(n) for n, _ in rows)
        for name, title in rows:
            print(f"{'passed' if name in done else '':<6}  {name:<{width}}  {title}")
        print(
            f"\n{len(done & {n for n, _ in rows})} of {len(rows)} passed here (recorded in ./{PROGRESS_FILE})"
        )
        print(
            "scratchformer exercise NAME writes NAME.py; scratchformer exercise NAME --check NAME.py grades it; "
            "--hint gives a first hint"
        )
        return 0
    if args.check is not None:
        grade = check(args.name, args.check)
        if grade.passed:
            print(grade.report())
            try:
                print(f"recorded as passed in {record_pass(args.name).name}")
            except (OSError, ScratchformerError) as e:  # the grade stands; only its record is missing
                print(f"not recorded as passed: {e}", file=sys.stderr)
            return 0
        if args.hint:
            print(grade.lines[0])
            print(f"hint: {HINTS[args.name]}")
            print("(check again without --hint for the likely cause)")
        else:
            print(grade.report())
        return EXIT_WRONG
    if args.hint:
        if args.out:
            raise CLIError("--hint prints a hint and writes nothing: leave out --out")
        print(f"hint: {HINTS[args.name]}")
        return 0
    out = Path(args.out or f"{args.name}.py")
    if out.exists():
        raise CLIError(f"{out} exists (your work?): pass --out ANOTHER.py, or --check {out} to grade it")
    write_atomic(out, stub_source(args.name, str(out)).encode("utf-8"))
    from scratchformer.exercises.grading import setup

    made = setup(args.name, out)  # what the exercise needs beside the stub (diagnose_runs: its runs)
    print(
        f"wrote {out}: {EXERCISES[args.name].todo}, then run: scratchformer exercise {args.name} --check {out}"
    )
    if made:
        print(made)
    return 0
