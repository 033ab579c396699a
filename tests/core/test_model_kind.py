"""Comparisons on the model kind stay inside models/ and interop/ (TEAM.md, issue 37): the tools
ask the model's contract (models/base.py) instead of testing which family it is, so a subclass,
a new family or a new block option needs no change in them. The test reads the package's source:
a comparison with a family's name or its class's (`== "gpt"`, `in ("seq2seq", ...)`,
`type(m).__name__ == "GPT"`), a test of the `family` attribute or of a family's class
(`isinstance(m, GPT)`, `type(m) is GPT`) fails it."""

from __future__ import annotations

import re
from pathlib import Path

import scratchformer

PACKAGE = Path(scratchformer.__file__).parent
OWNERS = ("models", "interop")  # where a family may name itself

FAMILIES = "gpt|classifier|seq2seq|bert|sentence_classifier"
CLASSES = "GPT|TransformerClassifier|Seq2SeqTransformer|BertEncoder|BertClassifier"
NAMES = rf"""["'](?:{FAMILIES}|{CLASSES})["']"""  # a family, or its class's name, as a string


def _compared(value: str) -> str:
    """`value` on either side of == or !=, or inside the collection `in` tests."""
    return rf"(?:==|!=)\s*{value}|{value}\s*(?:==|!=)|\bin\s*[(\[{{][^)\]}}]*{value}"


PATTERNS = {
    "a comparison with a family's name": re.compile(_compared(NAMES)),
    "a test of the family attribute": re.compile(r"\bfamily\b\s*(?:==|!=|\bin\b)|(?:==|!=)\s*\S*\bfamily\b"),
    "a test of a family's class": re.compile(
        rf"\b(?:isinstance|issubclass)\([^)]*\b(?:{CLASSES})\b|\btype\([^)]*\)\s*(?:is|==|!=)\s*(?:{CLASSES})\b"
    ),
}
# lines that read a kind out of a file's own format, not a model: (file, text on the line, why)
READERS = [
    ("data/tasks.py", 'task.kind == "classifier"', "a task's data layout (data/ sits below models/)"),
    ("training/schema.py", 'config.get("kind") in ("classifier", "seq2seq")', "an old run file's fields"),
    ("training/sentence.py", 'model_type != "bert"', "a Hugging Face config.json's model_type"),
    # export's refusal of other runs, by the run's kind: the export layouts' own declarations of
    # what they hold replace it (issue 37, item 3)
    ("cli/main.py", 'job.kind != "gpt"', "a run's kind (config.json), export's check"),
]


def _findings(root: Path) -> list[str]:
    out = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.split("/")[0] in OWNERS:
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            for what, pattern in PATTERNS.items():
                if pattern.search(line) and not any(rel == f and text in line for f, text, _ in READERS):
                    out.append(f"{rel}:{number}: {what}: {line.strip()}")
    return out


def test_no_comparison_on_the_model_kind_outside_models_and_interop():
    assert _findings(PACKAGE) == []


def test_the_readers_it_lets_pass_are_still_there():
    """An entry of READERS whose line is gone is removed from the list, not left to excuse another."""
    for rel, text, _ in READERS:
        assert text in (PACKAGE / rel).read_text(encoding="utf-8"), rel


def test_it_sees_each_kind_of_comparison(tmp_path):
    """Planted lines, one per pattern, outside models/ and interop/: each is found; inside them, none."""
    planted = [
        'if kind == "gpt":',
        'elif kind in ("seq2seq", "bert"):',
        "if model.family != target:",
        "if isinstance(model, (GPT, Seq2SeqTransformer)):",
        'if type(model).__name__ == "GPT":',
        "if type(model) is BertEncoder:",
    ]
    (tmp_path / "viz").mkdir()
    (tmp_path / "viz" / "figure.py").write_text("\n".join(planted) + "\n")
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "family.py").write_text("\n".join(planted) + "\n")
    found = _findings(tmp_path)
    assert [f.split(":")[1] for f in found] == ["1", "2", "3", "4", "5", "6"], found
