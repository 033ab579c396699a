"""The README and the docs run as written: every ```python block of README.md and docs/*.md is
executed in a fresh process, in an empty folder."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
DOC_BLOCKS = [
    (doc.name, code)
    for doc in sorted((ROOT / "docs").glob("*.md"))
    for code in re.findall(r"```python\n(.*?)```", doc.read_text(encoding="utf-8"), re.S)
]


def test_readme_has_python_examples():
    assert len(BLOCKS) >= 2  # loading a run, the backward walk-through; the API tour is docs/api.md


@pytest.mark.parametrize("code", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_readme_python_block_runs(code, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "False" not in proc.stdout  # the blocks print checks that must hold (e.g. gradcheck < bar)


def test_docs_have_python_examples():
    assert {name for name, _ in DOC_BLOCKS} >= {"lens.md", "exercises.md", "api.md", "viz.md"}
    assert sum(name == "api.md" for name, _ in DOC_BLOCKS) >= 3


@pytest.mark.parametrize("name, code", DOC_BLOCKS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(DOC_BLOCKS)])
def test_docs_python_block_runs(name, code, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=300
    )
    assert proc.returncode == 0, f"{name}: {proc.stderr[-2000:]}"
    assert "False" not in proc.stdout
