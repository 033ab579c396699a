"""Every example runs as a Jupyter notebook, generated from its script (scripts/make_notebooks.py),
executed by a real kernel in its quick mode with torch and transformers impossible to import: a
learner's notebook needs neither. That run is each example's test: its figures and printed claims
(tests/docs/test_examples.py's table) and the figures shown inline. The committed notebooks are
exactly what the generator writes."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import make_notebooks  # noqa: E402
from test_examples import check_example  # noqa: E402

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

# Put first on the kernel's path: a sitecustomize that makes torch and transformers unimportable,
# as on a machine where they were never installed.
NO_TORCH = """import importlib.abc, sys
class _NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "transformers"):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked: notebooks run without torch)")
        return None
sys.meta_path.insert(0, _NotInstalled())
"""


def test_committed_notebooks_are_generated():
    assert make_notebooks.main(["--check"]) == 0, "run python scripts/make_notebooks.py"
    assert sorted(p.stem for p in (ROOT / "examples" / "notebooks").glob("*.ipynb")) == sorted(
        p.stem for p in make_notebooks.scripts()
    )


def test_notebook_cells_are_the_script():
    """Every code line of a script is in its notebook, in order (nothing dropped but the import
    of _common, whose code is pasted in)."""
    for script in make_notebooks.scripts():
        nb = make_notebooks.notebook(script)
        code = "\n".join("".join(c["source"]) for c in nb["cells"][3:])
        _, body = make_notebooks._split_docstring(script.read_text(encoding="utf-8"))
        expected = [s for s in body.splitlines() if s.strip() and not s.startswith("from _common import")]
        assert [s for s in code.splitlines() if s.strip()] == expected, script.name


def test_blocker_blocks_torch(tmp_path):
    (tmp_path / "sitecustomize.py").write_text(NO_TORCH)
    run = subprocess.run(
        [sys.executable, "-c", "import torch"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )
    assert run.returncode != 0 and "blocked" in run.stderr


@pytest.mark.parametrize("name", [p.stem for p in make_notebooks.scripts()])
def test_notebook_runs_without_torch(name, tmp_path):
    (tmp_path / "sitecustomize.py").write_text(NO_TORCH)
    nb = nbformat.reads(make_notebooks.render(make_notebooks.notebook(ROOT / "examples" / f"{name}.py")), 4)
    env = {
        **os.environ,
        "SCRATCHFORMER_QUICK": "1",
        "MPLBACKEND": "Agg",
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    client = nbclient.NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute(env=env)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    printed = "".join(o.text for o in outputs if o.output_type == "stream" and o.name == "stdout")
    check_example(name, printed, tmp_path / "out" / name)
    images = [o for o in outputs if o.output_type == "display_data" and "image/png" in o.get("data", {})]
    written = sorted((tmp_path / "out" / name).glob("*.png"))
    assert written and len(images) == len(written), (len(images), [p.name for p in written])
