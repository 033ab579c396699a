"""The shell commands of README.md and docs/*.md run as written: every line of every ```bash
block is either run here, in one empty folder in the order the docs give them (README first,
then docs/ by name; each distinct command once), or matched by a SKIP rule that says why not:
a long training, a download, a placeholder path, a measurement. A new command in the docs is
run by this test until a rule names why it cannot be.

Trainings run with TINY settings appended (the command's own flags stay, and argparse's last
value wins), as the docs' own short runs do: a few steps of a tiny model, so the runs the later
commands read (out/names, out/reverse, out/quick) exist. The commands run in this process
through `scratchformer.cli.main.main`, the `scratchformer` entry point itself, so no interpreter
starts per command; the walk takes about 35 s on a loaded 2-core machine, most of it the two
trainings (reading names.txt, drawing the loss curve)."""

import re
import shlex
from pathlib import Path

from tiny_run import tiny

from scratchformer.cli.main import main
from scratchformer.exercises import solution_source

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))

# whole documents whose commands are measurements, not instructions to try
SKIP_DOCS = {
    "results.md": "the measured runs behind docs/results.md: full-length trainings, minutes to an hour each",
    "mutants.md": "mutation runs, minutes each; tests/mutants/test_mutants.py runs each target's sample",
    "performance.md": "benchmarks: timings that mean something on a quiet machine only; OLD and NEW are placeholders",
}
SKIP = [  # (a regular expression a command matches, why it is not run here)
    (r"^pip install", "installs packages: a download"),
    (r"scripts/mutants\.py", "a mutation run, 18 minutes; tests/mutants/test_mutants.py runs the sample"),
    (r"^ruff ", "the style check over the repository: .ci/run runs it"),
    (r"python -m pytest", "the test suite itself"),
    (
        r"^python examples/",
        "a whole example, 1-7 minutes; tests/docs/test_notebooks.py runs each in its quick mode",
    ),
    (r"^python scripts/make_plays_csv\.py", "writes a data set into data/plays for the finetune commands"),
    (r"^printf ", "samples from out/tinyshakespeare, a full tinyshakespeare training"),
    (
        r"--data shakespeare|--data data/|--data mytext",
        "a training on another data set: minutes at its settings, or a file the reader brings",
    ),
    (
        r"--hf |--init-from |--bert|--from minilm|^scratchformer embed|^scratchformer export",
        "reads a Hugging Face model directory (a placeholder path) or the all-MiniLM-L6-v2 package",
    ),
    (r"out/plays|out/majority|out/tinyshakespeare", "reads a run the commands above do not make here"),
    (r"--task (induction|modadd)", "a circuit training of minutes (examples f and g show it shorter)"),
    (r"--resume", "continues a stopped full-length run"),
    (r"--positional|--activation", "another names architecture: a full training of minutes"),
    (
        r"--out out/quick",
        "a second names training like `scratchformer train` here (each about 5 s at TINY "
        "settings, most of it drawing the loss curve)",
    ),
    (
        r"exercise diagnose_runs$",
        "trains four small runs (10-20 s); tests/exercises/test_exercises_more.py runs this command",
    ),
    (
        r"^scratchformer sae|--sae ",
        "trains a sparse autoencoder (minutes) or reads one; tests/training/test_sae_training.py runs "
        "the command on a tiny run, tests/lens/test_lens_sae.py the attribution",
    ),
    (
        r"^scratchformer viz",
        "draws figures: 8-40 s each even on a tiny run; tests/viz/test_viz_cli.py runs viz on "
        "tiny runs (a GPT with --all, the toy tasks, --bert)",
    ),
]
# the shared tiny options (tests/tiny_run.py), one evaluation batch, 12 steps, one process
TINY = [
    *tiny(eval_batches=1),
    "--max-steps",
    "12",
    "--eval-interval",
    "12",
    "--workers",
    "1",
    "--num-samples",
    "2",
]


def _commands() -> list[tuple[str, str]]:
    """(document name, command) of every bash block line, continuations joined, in order."""
    found = []
    for doc in DOCS:
        for block in re.findall(r"```(?:bash|sh|shell)\n(.*?)```", doc.read_text(encoding="utf-8"), re.S):
            for line in block.replace("\\\n", " ").splitlines():
                part: list[str] = []
                for word in shlex.split(line, comments=True) + ["&&"]:  # "a && b": two commands
                    if word != "&&":
                        part.append(word)
                    elif part:
                        found.append((doc.name, shlex.join(part)))
                        part = []
    return found


COMMANDS = _commands()


def why_skipped(doc: str, command: str) -> str | None:
    if doc in SKIP_DOCS:
        return SKIP_DOCS[doc]
    return next((why for pattern, why in SKIP if re.search(pattern, command)), None)


def _argv(command: str) -> list[str]:
    words = shlex.split(command)
    assert words[0] == "scratchformer", f"{command!r}: only scratchformer commands run here; add a SKIP rule"
    return words[1:] + (TINY if words[1] == "train" else [])


def _exit_code(argv: list[str]) -> int:
    # the untouched stub is graded wrong: exit 1, as the docs' comment beside --check says
    return 1 if argv[:1] == ["exercise"] and "--check" in argv else 0


def test_every_command_is_run_or_skipped_with_a_reason():
    assert len(COMMANDS) > 60
    ran = [c for d, c in COMMANDS if why_skipped(d, c) is None]
    assert len(set(ran)) >= 20, ran
    for _, command in COMMANDS:
        if command in ran:
            assert shlex.split(command)[0] == "scratchformer", f"{command!r} is neither run here nor skipped"
    # every rule is still needed (a rule no command matches hides nothing and goes)
    for pattern, why in SKIP:
        assert any(re.search(pattern, c) for d, c in COMMANDS if d not in SKIP_DOCS), (pattern, why)


def _walk(commands, capsys) -> list[str]:
    """Run each command not skipped, once, in order, in the current folder; the failures."""
    done, failed = set(), []
    for doc, command in commands:
        if why_skipped(doc, command) is not None or command in done:
            continue
        done.add(command)
        argv = _argv(command)
        try:
            code = main(argv)
        except SystemExit as e:  # argparse's own errors
            code = e.code
        out = capsys.readouterr()
        if code != _exit_code(argv):
            failed.append(f"{doc}: {command} -> exit {code}: {out.err.strip()[-300:]}")
    return failed


def test_the_docs_commands_run(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    failed = _walk(COMMANDS, capsys)
    assert not failed, "\n".join(failed)
    assert (tmp_path / "out" / "names").is_dir() and (tmp_path / "attn.py").is_file()


def test_a_command_that_fails_is_reported(tmp_path, monkeypatch, capsys):
    # a run the docs name but nothing made, a flag that does not exist, a stub graded right
    monkeypatch.chdir(tmp_path)
    planted = [
        ("x.md", "scratchformer eval out/nowhere --json"),
        ("x.md", "scratchformer sample --no-such-flag"),
        ("x.md", "scratchformer exercise gelu --check gelu.py"),
    ]
    (tmp_path / "gelu.py").write_text(solution_source("gelu"))
    failed = _walk(planted, capsys)
    assert [f.split(" -> ")[0] for f in failed] == [f"x.md: {c}" for _, c in planted]
    assert "exit 0" in failed[2]  # graded right where the docs say the untouched stub is wrong
