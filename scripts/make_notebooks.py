"""Write examples/notebooks/NAME.ipynb from each examples/NAME.py: the script is the one source.

    python scripts/make_notebooks.py            # (re)write every notebook, outputs empty
    python scripts/make_notebooks.py --check    # exit 1 if a committed notebook differs

A notebook is the script cut at its `# %%` markers, with three cells in front:
  1. the script's docstring as text (what it shows, where it comes from);
  2. an install cell: scratchformer is installed with pip where it is missing (Colab, a fresh
     Jupyter); where it is installed the cell does nothing;
  3. examples/_common.py, which the script imports, pasted in (a notebook opened alone has no
     folder beside it), followed by a hook that shows, under each cell, every figure the cell
     wrote into the figure folder.
A notebook has no command line: `setup()` then reads the defaults (the full run), or the quick
run where SCRATCHFORMER_QUICK=1 (the tests set it).
Standard library only (a notebook file is JSON; nbformat is not needed to write one).
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
NOTEBOOKS = EXAMPLES / "notebooks"

INSTALL = """# Install scratchformer where it is missing (Colab, a fresh Jupyter); installed: nothing happens.
# SOURCE: the package name, a path to a checkout of the repository, or a git URL of it.
import importlib.util
import subprocess
import sys

SOURCE = "scratchformer"
if importlib.util.find_spec("scratchformer") is None:
    subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", SOURCE])"""

SHOW_FIGURES = """# Show under each cell every figure it wrote into the figure folder (`out`, set by setup()).
from IPython import get_ipython
from IPython.display import Image, display

_shown: dict = {}


def _show_new_figures(result=None):
    folder = get_ipython().user_ns.get("out")
    if not isinstance(folder, Path) or not folder.is_dir():
        return
    for png in sorted(folder.glob("*.png")):
        stamp = png.stat().st_mtime_ns
        if _shown.get(png) != stamp:
            _shown[png] = stamp
            display(Image(filename=str(png)))


get_ipython().events.register("post_run_cell", _show_new_figures)"""


def _cells_of(source: str) -> list[str]:
    """The script's code cut at its `# %%` lines (each marker line starts its cell)."""
    cells, current = [], []
    for line in source.splitlines():
        if line.startswith("# %%") and any(s.strip() for s in current):
            cells.append("\n".join(current).strip("\n"))
            current = []
        current.append(line)
    if any(s.strip() for s in current):
        cells.append("\n".join(current).strip("\n"))
    return cells


def _split_docstring(source: str) -> tuple[str, str]:
    """(the module docstring, the code after it)."""
    module = ast.parse(source)
    doc = ast.get_docstring(module, clean=False) or ""
    first = module.body[0]
    if isinstance(first, ast.Expr) and isinstance(getattr(first, "value", None), ast.Constant):
        rest = "\n".join(source.splitlines()[first.end_lineno :])
    else:
        rest = source
    return doc, rest


def _common_cell() -> str:
    """examples/_common.py without its docstring and `from __future__` line, with the figure hook."""
    _, code = _split_docstring((EXAMPLES / "_common.py").read_text(encoding="utf-8"))
    lines = [s for s in code.splitlines() if s.strip() != "from __future__ import annotations"]
    body = "\n".join(lines).strip("\n")
    return "# %% The helpers every example shares (examples/_common.py)\n" + body + "\n\n\n" + SHOW_FIGURES


def _cell(kind: str, text: str) -> dict:
    cell = {"cell_type": kind, "metadata": {}, "source": text.splitlines(keepends=True)}
    if kind == "code":
        cell.update(execution_count=None, outputs=[])
    return cell


def notebook(script: Path) -> dict:
    """The notebook (nbformat 4 JSON) of one example script."""
    doc, code = _split_docstring(script.read_text(encoding="utf-8"))
    code = "\n".join(s for s in code.splitlines() if not s.startswith("from _common import"))
    title = (
        f"# {script.stem}\n\nGenerated from `examples/{script.name}` by `scripts/make_notebooks.py`; "
        "edit the script, not this notebook.\n\n"
    )
    cells = [
        _cell("markdown", title + "```text\n" + doc.strip("\n") + "\n```"),
        _cell("code", INSTALL),
        _cell("code", _common_cell()),
    ]
    cells += [_cell("code", c) for c in _cells_of(code)]
    for i, cell in enumerate(cells):  # nbformat 4.5 cells carry an id; stable ones keep diffs small
        cell["id"] = f"cell-{i}"
    return {
        "cells": cells,
        "metadata": {
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
            "language_info": {"name": "python"},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def render(nb: dict) -> str:
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"


def scripts() -> list[Path]:
    return sorted(EXAMPLES.glob("[a-z]_*.py"))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="only compare; exit 1 if a notebook differs")
    args = p.parse_args(argv)
    stale = []
    NOTEBOOKS.mkdir(exist_ok=True)
    for script in scripts():
        path, text = NOTEBOOKS / f"{script.stem}.ipynb", render(notebook(script))
        if path.exists() and path.read_text(encoding="utf-8") == text:
            continue
        stale.append(path)
        if not args.check:
            path.write_text(text, encoding="utf-8")
    if args.check and stale:
        print(f"out of date: {', '.join(p.name for p in stale)}; run python scripts/make_notebooks.py")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
