"""The layering of docs/architecture.md, enforced: every import in the package (at the top of a
module or inside a function) points from a higher layer to a lower one, or stays inside its own
package. A late import inside a function hides a cycle from Python but not from this test."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import scratchformer

PACKAGE = Path(scratchformer.__file__).parent
ARCHITECTURE = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"

# Lowest first. A package may import from the layers before its own, never from its own layer's
# other members or from a later one. "scratchformer" is the package's __init__.py (imported
# before any submodule, so it may import only what sits below it).
LAYERS: list[tuple[str, ...]] = [
    ("errors",),
    ("checks",),
    ("specs",),
    ("settings",),
    ("limits", "runfiles", "allocator", "record"),
    ("fast",),
    ("scratchformer",),
    ("ops",),
    ("nn",),
    ("gradcheck", "inference"),
    ("models",),
    ("optim", "data"),
    ("interop",),
    ("lens",),
    ("training",),
    ("viz",),
    ("exercises",),
    ("cli",),
    ("__main__",),
]
LEVEL = {name: i for i, layer in enumerate(LAYERS) for name in layer}


def _unit(root: Path, path: Path) -> tuple[str, list[str]]:
    """The top-level unit a file belongs to ("viz", "checks", or "scratchformer" for the
    package's own __init__.py) and the dotted package the file sits in (for relative imports)."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    unit = "scratchformer" if parts == ["__init__"] else parts[0]
    package = ["scratchformer"] + (parts[:-1])
    return unit, package


def _target(dotted: str, root: Path) -> str | None:
    """The top-level unit a dotted module name inside the package lands in (None outside it)."""
    names = dotted.split(".")
    if names[0] != "scratchformer":
        return None
    if len(names) == 1:
        return "scratchformer"
    if (root / names[1]).is_dir() or (root / f"{names[1]}.py").exists():
        return names[1]
    return "scratchformer"  # an attribute of the package itself: `from scratchformer import __version__`


def imports(root: Path) -> list[tuple[str, str, str]]:
    """Every import edge between top-level units of the package under `root`, as (from unit,
    to unit, "file:line"), including imports inside functions and relative imports."""
    edges = []
    for path in sorted(root.rglob("*.py")):
        unit, package = _unit(root, path)
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
                # `from scratchformer import lens` imports the subpackage, not the package's __init__ alone
                names = [base]
                if base == "scratchformer":
                    names = [f"{base}.{alias.name}" for alias in node.names]
            else:
                continue
            for name in names:
                target = _target(name, root)
                if target is not None and target != unit:
                    edges.append((unit, target, f"{path.relative_to(root)}:{node.lineno}"))
    return edges


def upward_edges(root: Path) -> list[str]:
    """One line per import that breaks LAYERS (or involves a unit LAYERS does not place)."""
    bad = []
    for src, dst, where in imports(root):
        for unit in (src, dst):
            if unit not in LEVEL:
                bad.append(
                    f"{where}: scratchformer.{unit} is in no layer: add it to LAYERS and docs/architecture.md"
                )
        if src in LEVEL and dst in LEVEL and LEVEL[dst] >= LEVEL[src]:
            bad.append(f"{where}: {src} imports {dst}, which is not below it")
    return sorted(set(bad))


def test_every_import_points_down_the_layers():
    assert upward_edges(PACKAGE) == []


def test_every_top_level_module_has_a_layer():
    units = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__"} | {
        p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()
    }
    assert sorted(units - set(LEVEL)) == []


def test_the_checker_sees_imports_anywhere(tmp_path):
    """The check can fail: an upward import planted in a copy of the package, inside a function
    (where Python would not notice a cycle), as a relative import and through `from scratchformer
    import`, is reported with its file and line; so is a new module no layer places."""
    root = tmp_path / "scratchformer"
    for source in PACKAGE.rglob("*.py"):  # the package's modules only: data files do not import
        (root / source.relative_to(PACKAGE)).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, root / source.relative_to(PACKAGE))
    assert upward_edges(root) == []
    diag = root / "training" / "diagnostics.py"
    planted = "\n\ndef planted():\n    from scratchformer.viz import trace\n"
    diag.write_text(diag.read_text(encoding="utf-8") + planted, encoding="utf-8")
    lines = len(diag.read_text(encoding="utf-8").splitlines())
    (root / "ops" / "planted.py").write_text("from ..nn import Linear\n", encoding="utf-8")
    (root / "models" / "planted.py").write_text("from scratchformer import training\n", encoding="utf-8")
    (root / "errors_extra.py").write_text("from scratchformer.errors import ConfigError\n", encoding="utf-8")
    assert upward_edges(root) == sorted(
        [
            f"training/diagnostics.py:{lines}: training imports viz, which is not below it",
            "ops/planted.py:1: ops imports nn, which is not below it",
            "models/planted.py:1: models imports training, which is not below it",
            "errors_extra.py:1: scratchformer.errors_extra is in no layer: "
            "add it to LAYERS and docs/architecture.md",
        ]
    )


def test_a_layer_does_not_import_its_neighbour(tmp_path):
    """Units in one layer stand side by side: neither may import the other."""
    root = tmp_path / "scratchformer"
    (root / "optim").mkdir(parents=True)
    (root / "data").mkdir()
    (root / "optim" / "__init__.py").write_text("import scratchformer.data.bpe\n", encoding="utf-8")
    (root / "data" / "__init__.py").write_text("", encoding="utf-8")
    assert upward_edges(root) == ["optim/__init__.py:1: optim imports data, which is not below it"]


def test_architecture_md_lists_the_same_order():
    """docs/architecture.md's table names every unit in the order LAYERS enforces, with its layer
    number (the package's own __init__.py and __main__.py aside)."""
    lines = ARCHITECTURE.read_text(encoding="utf-8").splitlines()
    rows = [
        [cell.strip() for cell in line.split("|")[1:3]]
        for line in lines
        if line.startswith("| `scratchformer")
    ]
    documented = [(name.strip("`").removeprefix("scratchformer."), int(layer)) for name, layer in rows]
    layers = [layer for layer in LAYERS if layer not in (("scratchformer",), ("__main__",))]
    assert documented == [(unit, number) for number, layer in enumerate(layers, 1) for unit in layer]
