"""The adversary's classes closed, not only its cases (issue 38): each test walks every member the
class has today (every training setting, every command, every task, every read in the library),
so a new member that breaks the rule fails here.

- a resumed run with any changed training setting is refused, or says in one line what changes;
- --overwrite keeps what a user left inside last/ and best/, as every save does;
- every file the library reads is bounded: read through runfiles (a device or a pipe is refused,
  never read), and a JSON line is bounded before it is parsed;
- every generated task checks its data's size against memory before drawing any;
- a number typed by a user is read from ASCII digits only;
- a non-UTF-8 argument, a file where a folder belongs, a config value of the wrong type: one line.
"""

import ast
import dataclasses
import io
import json
import sys
from pathlib import Path

import pytest
from test_adversary import TINY, cli, copy, run2  # noqa: F401 (a fixture)

from scratchformer.cli.main import COMMANDS, build_parser, main
from scratchformer.errors import ConfigError, ResourceError, ScratchformerError
from scratchformer.training.config import TrainConfig
from scratchformer.training.trainer import RESUME_RECORD, RESUME_REFUSED, resume_config

ROOT = Path(__file__).resolve().parents[2]


# -- a resumed run: every changed setting refused or said -------------------------------------------
def _another(name: str, value, saved: dict):
    """A valid value of setting `name` other than `value`."""
    candidates = [not value] if isinstance(value, bool) else []
    if value is None:
        candidates += [1, 0.5, 3, 1e-4]
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        candidates += [value + 1, value / 2, value * 2, 1]
    for v in candidates:
        try:
            TrainConfig.from_dict({**saved, name: v})
        except ConfigError:
            continue
        if v != value:
            return v
    raise AssertionError(f"no other valid value for {name}")


def test_resume_with_any_changed_training_setting_is_refused_or_says_what_changes():
    saved = dataclasses.asdict(TrainConfig(max_steps=10, eval_interval=5, warmup_steps=2, workers=1))
    for field in dataclasses.fields(TrainConfig):
        new = _another(field.name, saved[field.name], saved)
        flag = "--" + field.name.replace("_", "-")
        try:
            cfg, note = resume_config(saved, {field.name: new}, step=4)
        except ConfigError as e:
            assert field.name in RESUME_REFUSED and flag in str(e) and "\n" not in str(e)
            continue
        assert getattr(cfg, field.name) == new, field.name  # taken, not recorded and ignored
        assert note, f"{flag} {new} changed a resumed run without a word"
        if field.name == "max_steps":
            assert "extending the run from 10 to 11 steps" in note
            continue
        line = next(line for line in note.splitlines() if flag in line)
        verdicts = ("will not repeat", "the steps repeat", "changes no step left", "changes no learning rate")
        assert any(v in line for v in verdicts), line
        if field.name in RESUME_RECORD:
            assert "the steps repeat" in line, line
        else:  # the steps change, or a rate that changes none of the steps left says so
            assert "will not repeat" in line or "changes no" in line, line


def test_a_changed_rate_past_the_cosine_says_it_changes_nothing():
    saved = dataclasses.asdict(TrainConfig(max_steps=4, lr=2e-3, min_lr=1e-4, warmup_steps=1, workers=1))
    _, note = resume_config(saved, {"max_steps": 8, "lr": 0.5}, step=4)
    assert "--lr 0.5 instead of the run's 0.002 changes no step left" in note
    _, note = resume_config(saved, {"lr": 0.5}, step=2)
    assert "--lr 0.5 instead of the run's 0.002: the steps from here will not repeat" in note


def test_resume_cli_says_what_a_changed_batch_size_does(run2, tmp_path, capsys):  # noqa: F811
    out = copy(run2, tmp_path / "run")
    code, stdout, err = cli(
        capsys,
        "train",
        "--resume",
        "--out",
        out,
        "--max-steps",
        "3",
        "--batch-size",
        "4",
        "--grad-accum",
        "2",
    )
    assert code == 0, err
    line = next(line for line in stdout.splitlines() if "--batch-size 4" in line)
    assert "--grad-accum 2 instead of the run's 1" in line and "will not repeat" in line
    assert (
        json.loads((out / "last" / "trainer_state.json").read_text())["extra"]["train_config"]["batch_size"]
        == 4
    )


# -- --overwrite keeps a user's files inside the checkpoints -------------------------------------
def test_overwrite_keeps_what_a_user_left_in_last_and_best(run2, tmp_path, capsys):  # noqa: F811
    out = copy(run2, tmp_path / "run")
    (out / "last" / "notes.txt").write_text("mine")
    (out / "best" / "figs").mkdir()
    (out / "best" / "figs" / "loss.png").write_bytes(b"png")
    code, stdout, err = cli(capsys, "train", *TINY, "--max-steps", "2", "--out", out, "--overwrite")
    assert code == 0, err
    assert "--overwrite kept what you left inside the old checkpoints" in stdout
    assert (out / "last" / "notes.txt").read_text() == "mine"
    assert (out / "best" / "figs" / "loss.png").read_bytes() == b"png"
    assert not list(out.glob(".*.kept"))


def test_an_overwrite_that_fails_before_its_first_save_loses_nothing(run2, tmp_path, capsys):  # noqa: F811
    out = copy(run2, tmp_path / "run")
    (out / "last" / "notes.txt").write_text("mine")
    code, _, err = cli(
        capsys, "train", *TINY, "--max-steps", "5", "--lr", "1e30", "--out", out, "--overwrite"
    )
    assert code == 2 and len(err) == 1, err  # diverged before any save
    assert (out / ".last.kept" / "notes.txt").read_text() == "mine"
    assert cli(capsys, "train", *TINY, "--max-steps", "2", "--out", out, "--overwrite")[0] == 0
    assert (out / "last" / "notes.txt").read_text() == "mine" and not (out / ".last.kept").exists()


# -- every read bounded --------------------------------------------------------------------------------
READ_CALLS = {
    "open",
    "read_bytes",
    "read_text",
    "fromfile",
    "load",
    "loadtxt",
    "genfromtxt",
    "memmap",
    "readlines",
}
# (file, call) -> why it may read without runfiles
ALLOWED_READS = {
    ("scratchformer/runfiles.py", "open"): "the one bounded reader itself (os.open, fstat)",
    ("scratchformer/limits/memory.py", "open"): "a /proc or cgroup file, read(4096) at most",
    ("scratchformer/fast/reductions.py", "open"): "/proc/cpuinfo, line by line until the vendor line",
    ("scratchformer/exercises/isolation.py", "open"): "/proc/self/statm and os.devnull in the child",
    ("scratchformer/exercises/grading.py", "read_text"): "the package's own solution files",
    ("scratchformer/exercises/induction.py", "read_text"): "the package's own model config",
    ("scratchformer/data/datasets.py", "read_bytes"): "the package's own names.txt (importlib.resources)",
    ("scratchformer/interop/hf_files.py", "open"): "safetensors: an 8-byte length, a bounded header",
    ("scratchformer/interop/hf_files.py", "memmap"): "a safetensors file's tensors, within its size",
    ("scratchformer/interop/gpt2.py", "load"): "GPT2.load: the layout's reader, through hf_files",
    ("scratchformer/interop/llama.py", "load"): "LLAMA.load: the layout's reader, through hf_files",
    ("scratchformer/interop/hf_lm.py", "read_bytes"): "vocab.json, merges.txt the tokenizers library wrote",
    ("scratchformer/training/checkpoint.py", "open"): "a checkpoint directory (read_regular_file(dir_fd=))",
    ("scratchformer/training/checkpoint.py", "load"): "safetensors' load of the bytes runfiles read",
    ("scratchformer/training/rundir.py", "open"): "the run directory's descriptor, for its lock",
    ("scratchformer/viz/bundle.py", "read_bytes"): "the PNG figures it has just drawn",
    ("scratchformer/viz/html.py", "read_text"): "the report page a notebook shows, written by viz",
    ("scratchformer/cli/viz.py", "read_text"): "the backward.txt viz has just written",
}


def _reads() -> list[tuple[str, str, int]]:
    found = []
    for path in sorted((ROOT / "scratchformer").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                f = node.func
                name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
                if name in READ_CALLS and not _opens_to_write(node):  # json.load, np.load read files too
                    found.append((path.relative_to(ROOT).as_posix(), name, node.lineno))
    return found


def _opens_to_write(call: ast.Call) -> bool:
    """os.open(path, O_WRONLY | ...) or O_RDWR: a writer, a lock or os.devnull, no read."""
    names = {n.attr for n in ast.walk(call) if isinstance(n, ast.Attribute)}
    return bool(names & {"O_WRONLY", "O_RDWR"})


def test_every_read_in_the_library_goes_through_the_bounded_reader():
    unknown = [f"{p}:{line}: {name}()" for p, name, line in _reads() if (p, name) not in ALLOWED_READS]
    assert not unknown, "read through runfiles.read_regular_file (or add a reason here):\n" + "\n".join(
        unknown
    )
    used = {(p, name) for p, name, _ in _reads()}
    assert set(ALLOWED_READS) <= used, set(ALLOWED_READS) - used  # no stale reason


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="a device to read")
@pytest.mark.parametrize(
    "argv",
    [
        ["train", "--data", "/dev/zero", "--max-steps", "1"],
        ["finetune", "--data", "/dev/zero", "--max-steps", "1"],
        ["sample", "@run", "--prompt-file", "/dev/zero", "-n", "1"],
        ["eval", "@run", "--data", "/dev/zero"],
    ],
    ids=lambda a: f"{a[0]}-{a[2].lstrip('-') if a[1] == '@run' else a[1].lstrip('-')}",
)
def test_a_device_where_a_file_belongs_is_one_line_never_read(run2, tmp_path, capsys, argv):  # noqa: F811
    argv = [str(run2) if a == "@run" else a for a in argv]
    if argv[0] in ("train", "finetune"):
        argv += ["--out", str(tmp_path / "out")]
    code, _, err = cli(capsys, *argv)
    assert code == 2 and len(err) == 1 and "/dev/zero" in err[0], err


def test_a_huge_log_line_is_refused_before_it_is_parsed(run2, tmp_path, capsys):  # noqa: F811
    out = copy(run2, tmp_path / "run")
    rows = (out / "log.jsonl").read_text().splitlines()
    huge = json.dumps({"step": 1, "numbers": [1] * 2_000_000})  # 6 MB: some 2 GB as Python objects
    (out / "log.jsonl").write_text("\n".join([rows[0], huge, *rows[1:]]) + "\n")
    code, _, err = cli(capsys, "train", "--resume", "--out", out, "--max-steps", "3")
    assert code == 2 and len(err) == 1 and "log.jsonl line 2 is" in err[0] and "bytes" in err[0], err


def test_a_huge_diagnostics_record_is_refused_before_it_is_parsed(run2, tmp_path, monkeypatch):  # noqa: F811
    from scratchformer.errors import RunFileError
    from scratchformer.training import diagnostics

    out = copy(run2, tmp_path / "run")
    monkeypatch.setattr(diagnostics, "MAX_RECORD_BYTES", 1000)
    with pytest.raises(RunFileError, match=r"diagnostics.jsonl line 2 is [\d,]+ bytes"):
        diagnostics.read_records(out / "diagnostics.jsonl")


# -- every task's size checked against memory first --------------------------------------------------
def _generated_tasks() -> list[tuple[str, str]]:
    from scratchformer.data.tasks import TASKS
    from scratchformer.training.jobs import LM_TASKS, RUN_DEFAULTS

    sizes = []
    for task in [*TASKS, *LM_TASKS]:
        for key, value in RUN_DEFAULTS[task]["data"].items():
            if isinstance(value, int) and not isinstance(value, bool):
                sizes.append((task, key))
    return sizes


@pytest.mark.parametrize("task, key", _generated_tasks(), ids=lambda v: str(v))
def test_every_task_size_is_checked_against_memory_before_its_data_is_drawn(task, key, monkeypatch):
    from scratchformer.limits import memory
    from scratchformer.training.jobs import RUN_DEFAULTS, build_job

    monkeypatch.setattr(memory, "memory_limits", lambda: {"the test's limit": 60 << 20})
    huge = RUN_DEFAULTS[task]["data"][key] * 10**6  # unchecked, the first draw asks for terabytes
    try:
        job, _ = build_job(task, data={key: huge})
    except (ResourceError, ConfigError) as e:
        assert "\n" not in str(e)
    else:  # a setting the task does not draw with (modadd's max_len: its rows are `a b =`)
        assert huge not in job.config_dict()["data"].values(), f"{task} took {key}={huge} unchecked"


# -- digits are ASCII digits --------------------------------------------------------------------------
OTHER_DIGITS = ["٣", "３", "³", "٣.٥", "१०"]  # Arabic-Indic, fullwidth, superscript, Devanagari


def _numeric_options():
    parser = build_parser()
    commands = next(a for a in parser._actions if a.dest == "command").choices
    for name, sub in commands.items():
        for action in sub._actions:
            if action.type is not None and action.type not in (str, Path) and action.option_strings:
                yield name, action


def test_every_numeric_option_reads_ascii_digits_only():
    options = list(_numeric_options())
    assert len(options) > 20
    for command, action in options:
        for text in OTHER_DIGITS:
            with pytest.raises(Exception) as e:  # argparse's ArgumentTypeError, or ValueError
                value = action.type(text)
                pytest.fail(f"{command} {action.option_strings[0]} read {text!r} as {value!r}")
            assert type(e.value).__name__ in ("ArgumentTypeError", "ValueError"), (command, action.dest)


def test_no_code_takes_other_scripts_digits_for_digits():
    found = []
    for path in sorted((ROOT / "scratchformer").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr in ("isdigit", "isdecimal", "isnumeric"):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: .{node.attr}()")
    assert not found, "use checks.ascii_digits (str.isdigit takes '٣' and '²'):\n" + "\n".join(found)


@pytest.mark.parametrize("task", ["majority", "copy", "modadd"])
def test_a_task_model_refuses_other_scripts_digits(task):
    from scratchformer.errors import DataError
    from scratchformer.training.jobs import build_job

    model = {"n_layer": 1, "n_head": 2, "n_embd": 8}
    data = {"modulus": 7} if task == "modadd" else {"n_train": 40, "n_test": 10}
    job, _ = build_job(task, model=model, data=data)
    assert job.predict(job.example_input)  # ASCII reads
    for text in ("٣ ١", "３ １", "2 ٣"):
        with pytest.raises(DataError):
            job.predict(text)


# -- one line instead of a traceback -------------------------------------------------------------------
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_non_utf8_argument_is_one_line_for_every_command(command, monkeypatch):
    # a real UTF-8 stderr (a test's capture would accept the surrogate the terminal cannot)
    err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict")
    monkeypatch.setattr(sys, "stderr", err)
    for argv in ([command, "caf\udce9"], [command, "--out", "x\udcff"], [command, "--out=x\udcff"]):
        err.seek(0)
        err.truncate()
        assert main(argv) == 2
        err.flush()
        text = err.buffer.getvalue().decode("utf-8")
        assert text.count("\n") == 1 and "is not valid UTF-8 text" in text, text


def test_every_example_refuses_a_file_as_its_out_folder_in_one_line(tmp_path, monkeypatch, capsys):
    sys.path.insert(0, str(ROOT / "examples"))
    import _common

    scripts = sorted((ROOT / "examples").glob("[a-z]_*.py"))
    assert scripts and all("= setup(" in p.read_text(encoding="utf-8") for p in scripts)  # each uses it
    (tmp_path / "afile").write_text("x")
    monkeypatch.delitem(sys.modules, "ipykernel", raising=False)  # as a script, not a notebook's kernel
    for out in (tmp_path / "afile", tmp_path / "afile" / "below"):
        monkeypatch.setattr(sys, "argv", ["x.py", "--out", str(out)])
        with pytest.raises(SystemExit) as e:
            _common.setup("x", "doc")
        err = capsys.readouterr().err
        assert e.value.code == 2 and err.count("\n") == 1 and str(out) in err, err


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_a_bad_value_of_any_key_in_a_hf_config_json_is_one_line(family, tmp_path):
    from test_adversary import GPT2_HF, LLAMA_HF

    from scratchformer.interop.hf_lm import load_hf_causal_lm

    config = GPT2_HF if family == "gpt2" else LLAMA_HF
    for key in config:  # model_type included: a list there was a TypeError
        for bad in ("abc", None, [1], {"a": 1}, True, -1, float("nan"), 10**30):
            d = tmp_path / f"{key}-{type(bad).__name__}"
            d.mkdir(exist_ok=True)
            (d / "config.json").write_text(json.dumps({**config, key: bad}))
            try:
                load_hf_causal_lm(d)
            except ScratchformerError as e:
                assert "\n" not in str(e)
            except Exception as e:  # noqa: BLE001
                pytest.fail(f"{key}={bad!r}: {type(e).__name__}: {e}")
