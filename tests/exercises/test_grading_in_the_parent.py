"""The grader grades in its own process (issue 38): the child only runs the learner's code on the
inputs it is sent and sends arrays back; it runs in a scratch directory and a process group of its
own, with the reference solutions and the expected arrays out of its reach. The corpus's cheats
(tests/data/learner_bugs/*__cheat_*.py) each fail, leave no process behind and write nothing; every
malformed message is one line; the tolerance is float64's own error; the random shapes avoid every
size the fixed cases use."""

import os
import re
from pathlib import Path

import numpy as np
import pytest

from scratchformer.exercises import EXERCISES, check, grading, isolation, solution_source
from scratchformer.gradcheck import relative_error

CORPUS = Path(__file__).parents[1] / "data" / "learner_bugs"
CHEATS = sorted(CORPUS.glob("*__cheat_*.py"))
BACKWARD = [name for name, e in EXERCISES.items() if e.kind == "backward"]


def _processes_with(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


def test_the_corpus_holds_the_eleven_cheats():
    assert len(CHEATS) == 11


@pytest.mark.parametrize("path", CHEATS, ids=lambda p: p.stem)
def test_a_cheat_fails_leaves_no_process_and_writes_nothing(path, tmp_path):
    name = path.name.split("__")[0]
    copy = tmp_path / path.name  # graded from a folder of its own: whatever it writes beside itself shows
    copy.write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    grade = check(name, copy)
    expect = re.search(r"^# expect: (.*)$", path.read_text(encoding="utf-8"), re.M).group(1)
    assert not grade.passed and len(grade.lines) == 2 and expect in grade.report(), grade.report()
    assert "Traceback" not in grade.report()
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]  # no record, no file
    if Path("/proc").is_dir():
        assert _processes_with("98765") == []  # the sleeps the process cheats try to leave behind


def _raising(tmp_path, code: str) -> str:
    """The verdict on a softmax whose backward raises RuntimeError(<code evaluated in the child>)."""
    source = solution_source("softmax").replace(
        "        y = self.y\n", f"        import os, sys\n        raise RuntimeError(repr({code}))\n"
    )
    path = tmp_path / "softmax.py"
    path.write_text(source)
    return check("softmax", path).lines[0]


@pytest.mark.skipif(not hasattr(os, "getpgid"), reason="process groups: POSIX")
def test_the_child_runs_in_a_scratch_directory_and_a_process_group_of_its_own(tmp_path):
    line = _raising(
        tmp_path, "(os.getcwd(), os.getpid() == os.getpgid(0), os.getpgid(0) != " + str(os.getpgid(0)) + ")"
    )
    scratch, leader, other = re.search(r"RuntimeError: \('([^']*)', (\w+), (\w+)\)", line).groups()
    assert Path(scratch).name.startswith("scratchformer-grading-") and not Path(scratch).exists()
    assert (leader, other) == ("True", "True")


def test_nothing_of_the_grader_is_in_the_childs_memory(tmp_path):
    # the references this process computed (a forked child would inherit them) are not there
    grading.reference(EXERCISES["softmax"], EXERCISES["softmax"].cases[0])
    line = _raising(
        tmp_path,
        "len(getattr(sys.modules.get('scratchformer.exercises.grading'), '_REFERENCES', {}))",
    )
    assert "RuntimeError: 0" in line


def test_the_verdict_does_not_depend_on_what_the_child_patches(tmp_path):
    # the child patches the grader module and NumPy in its own memory: this process is untouched
    patch = (
        "import numpy\nimport scratchformer.exercises.grading as g\n"
        "g.TOLERANCE = 1e9\nnumpy.allclose = lambda *a, **k: True\n"
    )
    path = tmp_path / "gelu.py"
    path.write_text(patch + solution_source("gelu").replace("dy * (cdf + x * pdf)", "dy * cdf"))
    assert not check("gelu", path).passed
    assert grading.TOLERANCE == 1e-9 and not np.allclose(1.0, 2.0)


@pytest.mark.parametrize(
    "sent, words",
    [
        (b"not json at all\n", "a line that is not JSON"),
        (b'{"kind": "grade", "passed": true}\n', "where ran was due"),
        (b'{"kind": "ran", "outcome": 3}\n', "an outcome that is not an object"),
        (b'{"kind": "ran", "outcome": {"params": {"array": [1]}}}\n', "an outcome that is not the runner's"),
        (b'{"kind": "ran", "outcome": {"out": {"array": ["<f8", [2], "AAAA"]}}}\n', "bytes do not fit"),
        (b"[" * 100_000 + b"\n", "a line that is not JSON"),
    ],
    ids=["not JSON", "a verdict", "no outcome", "a bad array", "short bytes", "deep nesting"],
)
def test_every_malformed_message_is_one_line(tmp_path, sent, words):
    # the learner's backward writes `sent` into the grader's pipe and then waits to be killed
    source = solution_source("linear").replace(
        "        W = self.weight.data\n",
        "        import os, time\n"
        f"        data = {sent!r}\n"
        "        for fd in range(3, 64):\n"
        "            try:\n"
        "                os.write(fd, data)\n"
        "            except OSError:\n"
        "                pass\n"
        "        time.sleep(60)\n",
    )
    path = tmp_path / "linear.py"
    path.write_text(source)
    grade = check("linear", path, time_limit=20)
    assert not grade.passed and len(grade.lines) == 2 and words in grade.lines[0], grade.report()
    assert "Traceback" not in grade.report() and "\n" not in grade.lines[0]


def test_a_message_over_the_limit_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(isolation, "MAX_LINE", 1000)
    source = solution_source("linear").replace(
        "        W = self.weight.data\n", "        return np.zeros((200, 200))\n"
    )
    path = tmp_path / "linear.py"
    path.write_text(source)
    grade = check("linear", path)
    assert not grade.passed and "a message over" in grade.lines[0], grade.report()


def test_arrays_travel_exactly_and_only_numeric_ones():
    value = (np.arange(6.0).reshape(2, 3), {("a", "b"): 2}, [np.float32(1.5), None, float("nan")], "x")
    back = isolation.decode(isolation.encode(value))
    assert np.array_equal(back[0], value[0]) and back[0].dtype == np.float64
    assert back[1] == {("a", "b"): 2} and back[2][0] == np.float32(1.5) and np.isnan(back[2][2])
    assert isinstance(isolation.decode(isolation.encode(np.array([object()]))), isolation.Foreign)
    with pytest.raises(isolation.WireError):
        isolation.decode({"array": ["|O", [1], ""]})


# -- the tolerance and the random shapes ------------------------------------------------------------
@pytest.mark.parametrize("name", BACKWARD)
def test_the_references_agree_with_five_point_differences_far_below_the_tolerance(name):
    ex = EXERCISES[name]
    names = grading._input_names(grading.reference_class(ex))
    draws = [*ex.cases, *(ex.random_case(np.random.default_rng([7, i])) for i in range(2))]
    for case in draws:
        ref = grading.reference(ex, case)
        got = grading._gradients(ref.outcome, ref, names)
        worst = max(relative_error(got[n], want) for n, want in ref.expected.items())
        assert worst <= grading.TOLERANCE / 20, (grading.describe_case(ex, case, names), worst)


@pytest.mark.parametrize("name", BACKWARD)
def test_random_shapes_use_no_size_of_a_fixed_case(name):
    ex = EXERCISES[name]

    def first_input(case):
        return np.shape(case.inputs(np.random.default_rng(case.seed))[0])

    fixed_last = {first_input(c)[-1] for c in ex.cases}
    fixed_args = {c.args for c in ex.cases}
    rng = np.random.default_rng(0)
    for _ in range(40):
        case = ex.random_case(rng)
        assert first_input(case)[-1] not in fixed_last and (not case.args or case.args not in fixed_args)
    assert len({first_input(ex.random_case(rng)) for _ in range(40)}) > 5  # shapes do vary


def test_the_random_shapes_are_fresh_on_every_check_and_fixed_by_a_seed(tmp_path, monkeypatch):
    monkeypatch.setattr(grading, "RANDOM_SEED", None)  # as a learner's check draws (conftest fixes it)
    path = tmp_path / "linear.py"
    path.write_text(solution_source("linear"))
    reports = {check("linear", path).report() for _ in range(3)}
    assert len(reports) > 1  # fresh draws
    assert check("linear", path, seed=5).report() == check("linear", path, seed=5).report()


def test_where_no_fork_server_runs_the_child_is_a_fresh_interpreter(tmp_path, monkeypatch):
    # Windows and macOS: no server to fork from; the same child, started as `python -c`
    monkeypatch.setattr(isolation, "_server", lambda: None)
    path = tmp_path / "softmax.py"
    path.write_text(solution_source("softmax"))
    assert check("softmax", path).passed
    cheat = CORPUS / "softmax__cheat_reads_the_solution_file.py"
    assert "read the reference solutions" in check("softmax", cheat).report()
