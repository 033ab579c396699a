"""The graded exercises: every reference solution passes, the stub does not, each wrong
solution is caught with a message naming its fault (at least 5 per exercise), every file of the
learner-bug corpus (tests/data/learner_bugs/) is graded wrong with its cause, and a file that
returns NaN, exits, loops, allocates without bound, adds a parameter or only handles one shape
gets a one-line verdict."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from scratchformer.cli.main import main
from scratchformer.errors import DataError
from scratchformer.exercises import EXERCISES, check, solution_source, stub_source
from scratchformer.exercises.catalogue import DIAGONAL_ONLY
from scratchformer.exercises.grading import RANDOM_CASES, TOLERANCE

BACKWARD = [
    name for name, e in EXERCISES.items() if e.kind == "backward"
]  # the others: test_exercises_more.py
CORPUS = sorted((Path(__file__).parents[1] / "data" / "learner_bugs").glob("*.py"))

# Wrong solutions beyond the catalogue's known mistakes (which the grader itself knows):
# exercise -> [(old, new, words the report must contain)], edits of the reference solution
# caught by the generic checks (sign, factor, transpose, accumulation, contract).
GENERIC_FAULTS = {
    "softmax": [
        ("return y * (", "return -y * (", "sign is flipped"),
        (
            "return y * (dy - (dy * y).sum(axis=-1, keepdims=True))",
            "dy -= (dy * y).sum(axis=-1, keepdims=True)\n        return y * dy",
            "changed its argument in place",
        ),
        (
            "return y * (dy - (dy * y).sum(axis=-1, keepdims=True))",
            "return (y * (dy - (dy * y).sum(axis=-1, keepdims=True))).T",
            "transposed",
        ),
    ],
    "cross_entropy": [("return dlogits * (dloss / N)", "return -dlogits * (dloss / N)", "sign is flipped")],
    "layernorm": [
        ("self.weight.grad += (dy", "self.weight.grad[...] = (dy", "overwritten instead of accumulated")
    ],
    "gelu": [
        ("return dy * (cdf", "return -dy * (cdf", "sign is flipped"),
        ("return dy * (cdf", "return 2 * dy * (cdf", "counted twice"),
    ],
    "linear": [
        ("self.bias.grad += dy2", "self.bias.grad = dy2", "overwritten instead of accumulated"),
        ("dy2.T @ x2", "dy[0].T @ self.x[0]", "only batch row 0 is counted"),
    ],
    "embedding": [
        (
            "        np.add.at(",
            "        self.weight.grad[...] = 0\n        np.add.at(",
            "overwritten instead of accumulated",
        ),
        ("dy.reshape(-1, C))", "-dy.reshape(-1, C))", "sign is flipped"),
    ],
    "attention": [
        ("return dq, dk, dv", "return dk, dq, dv", "wrong order"),
        ("return dq, dk, dv", "return dq", "must return the tuple (dq, dk, dv)"),
    ],
    "mha": [
        ("self.out_proj_bias.grad +=", "self.out_proj_bias.grad =", "overwritten instead of accumulated")
    ],
    "block": [
        (
            "h = x + self.attn(self.ln1(x), causal=True)",
            "h = x + self.attn(x, causal=True)",
            "forward's output differs from the given forward",
        )
    ],
    "rmsnorm": [
        ("self.weight.grad += (dy", "self.weight.grad[...] = (dy", "overwritten instead of accumulated"),
        ("return rstd * (", "return -rstd * (", "sign is flipped"),
    ],
    "swiglu": [
        ("return np.concatenate(", "return -np.concatenate(", "sign is flipped"),
        (
            "return np.concatenate([dgate, dup], axis=-1)",
            "return np.concatenate([dgate, dup], axis=-1)[..., :-1]",
            "dh has shape",
        ),
    ],
    "rope": [
        (
            "return dy * cos - rotate_half(dy) * sin",
            "return 2 * (dy * cos - rotate_half(dy) * sin)",
            "counted twice",
        ),
        (
            "return dy * cos - rotate_half(dy) * sin",
            "return rotate_half(dy) * sin - dy * cos",
            "sign is flipped",
        ),
    ],
    "gqa": [
        ("return dq, dk, dv", "return dk, dq, dv", "wrong order"),
        ("return dq, dk, dv", "return dq, dk", "must return the tuple (dq, dk, dv)"),
    ],
}


def _write(tmp_path, name, source):
    path = tmp_path / f"{name}.py"
    path.write_text(source, encoding="utf-8")
    return path


@pytest.mark.parametrize("name", EXERCISES)
def test_reference_solution_passes(name, tmp_path):
    grade = check(name, _write(tmp_path, name, solution_source(name)))
    assert grade.passed, grade.report()
    assert grade.report().startswith(f"right: {name}")


@pytest.mark.parametrize("name", EXERCISES)
def test_stub_is_not_a_solution(name, tmp_path):
    stub = stub_source(name, "x.py")
    assert "# BEGIN SOLUTION" not in stub and "--check x.py" in stub
    grade = check(name, _write(tmp_path, name, stub))
    todo = "the backward" if EXERCISES[name].kind == "backward" else EXERCISES[name].class_name
    assert not grade.passed and grade.cause == f"{todo} is not written yet"


@pytest.mark.parametrize("name", EXERCISES)
def test_every_wrong_solution_is_caught_and_named(name, tmp_path):
    source = solution_source(name)
    wrongs = [(m.old, m.new, m.cause) for m in EXERCISES[name].mistakes] + GENERIC_FAULTS.get(name, [])
    assert len(wrongs) >= (5 if name in BACKWARD else 1)
    for old, new, words in wrongs:
        assert source.count(old) == 1, old
        grade = check(name, _write(tmp_path, name, source.replace(old, new)))
        assert not grade.passed, f"{name}: {new!r} passed"
        assert words in grade.report(), f"{name}: {new!r}:\n{grade.report()}"
        assert grade.report().startswith(f"wrong: {name}: ")


def test_first_wrong_element_is_named(tmp_path):
    source = solution_source("gelu").replace("dy * (cdf + x * pdf)", "dy * cdf")
    report = check("gelu", _write(tmp_path, "gelu", source)).report()
    assert "dx[0, 0, 0] is " in report and "finite differences give" in report


def test_cli_lists_writes_and_grades(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["exercise"]) == 0
    listed = capsys.readouterr().out
    assert all(name in listed for name in EXERCISES)
    assert main(["exercise", "linear"]) == 0
    assert (tmp_path / "linear.py").read_text() == stub_source("linear", "linear.py")
    assert main(["exercise", "linear"]) == 2  # never overwrites the learner's work
    assert "linear.py exists" in capsys.readouterr().err
    assert main(["exercise", "linear", "--check", "linear.py"]) == 1
    assert "not written yet" in capsys.readouterr().out
    _write(tmp_path, "mine", solution_source("linear"))
    assert main(["exercise", "linear", "--check", "mine.py"]) == 0
    assert capsys.readouterr().out.startswith("right: linear")


@pytest.mark.parametrize(
    "content, words",
    [
        (None, "no such file"),
        ("def (", "line 1: syntax error"),
        ("import no_such_module_here", "does not load: ModuleNotFoundError"),
        ("x = 1", "defines no class Softmax"),
    ],
)
def test_cli_bad_input_is_one_line_exit_2(tmp_path, capsys, content, words):
    path = tmp_path / "f.py"
    if content is not None:
        path.write_text(content)
    assert main(["exercise", "softmax", "--check", str(path)]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1 and "Traceback" not in err


def test_grading_needs_no_torch(tmp_path):
    path = _write(tmp_path, "attention", solution_source("attention"))
    code = (
        "import sys; sys.modules['torch'] = None; from scratchformer.cli.main import main; "
        f"sys.exit(main(['exercise', 'attention', '--check', {str(path)!r}]))"
    )
    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert run.returncode == 0, run.stderr


@pytest.mark.parametrize("name", BACKWARD)
def test_graded_on_several_shapes_and_seeds(name, tmp_path):
    ex = EXERCISES[name]
    assert len(ex.cases) >= 2 and len({c.seed for c in ex.cases}) == len(ex.cases)
    shapes = [[a.shape for a in c.inputs(__import__("numpy").random.default_rng(c.seed))] for c in ex.cases]
    assert len({tuple(s) for s in shapes}) == len(shapes)  # no two cases of the same shapes
    if "(..., " in solution_source(name):  # the stub allows any leading axes: 2-D and 3-D are both graded
        assert {len(s[0]) for s in shapes} >= {2, 3}, shapes
    grade = check(name, _write(tmp_path, name, solution_source(name)))
    assert (
        f"on {len(ex.cases) + RANDOM_CASES} inputs" in grade.report() and "of random shapes" in grade.report()
    )


def test_the_catalogue_names_the_common_mistakes():
    causes = [m.cause for e in EXERCISES.values() for m in e.mistakes]
    assert len(causes) >= 97
    for words in [
        "treated as constants",
        "Bessel",
        DIAGONAL_ONLY,
        "merged with a reshape alone",
        "log-softmax's backward",
        "tanh approximation",
        "never -inf",
        "positional embedding",
        "the rms is treated as a constant",
        "SiLU's derivative is taken as sigmoid(g) alone",
        "the inverse rotation by -angle",
        "that share a key/value head are not summed",
    ]:
        assert any(words in c for c in causes), words


def test_the_corpus_is_large_and_covers_every_exercise():
    assert len(CORPUS) >= 108
    assert {p.name.split("__")[0] for p in CORPUS} == set(EXERCISES)


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.stem)
def test_every_learner_bug_is_graded_wrong_with_its_cause(path):
    name = path.name.split("__")[0]
    expect = re.search(r"^# expect: (.*)$", path.read_text(encoding="utf-8"), re.M).group(1)
    # a timeout is a verdict whatever the machine's speed: the endless loop never ends
    grade = check(name, path, time_limit=3 if "endless loop" in expect else 60)
    report = grade.report()
    assert not grade.passed and report.startswith(f"wrong: {name}: ") and len(grade.lines) == 2, report
    if expect == "wrong, no cause named":
        assert "not one this checker knows" in report
    else:
        assert expect in report, report
    assert "Traceback" not in report


def _edited(tmp_path, name, old, new):
    source = solution_source(name)
    assert source.count(old) == 1, old
    return _write(tmp_path, name, source.replace(old, new))


def test_one_nan_entry_is_named(tmp_path):
    path = _edited(
        tmp_path,
        "softmax",
        "        return y * (dy - (dy * y).sum(axis=-1, keepdims=True))\n",
        "        dx = y * (dy - (dy * y).sum(axis=-1, keepdims=True))\n        dx[1, 2, 3] = np.inf\n"
        "        return dx\n",
    )
    report = check("softmax", path).report()
    assert "dx[1, 2, 3] is inf: every gradient must be finite (1 of 30" in report


def test_nan_in_a_parameter_gradient_is_wrong(tmp_path):
    path = _edited(
        tmp_path, "linear", "self.bias.grad += dy2.sum(axis=0)", "self.bias.grad += dy2.sum(axis=0) * np.nan"
    )
    assert "bias.grad[0] is nan" in check("linear", path).report()


@pytest.mark.parametrize(
    "line, words",
    [
        ("exit()", "SystemExit: exit() or sys.exit() was called"),
        ("import sys; sys.exit(0)", "SystemExit: exit() or sys.exit() was called (code 0)"),
        ("raise SystemExit", "SystemExit"),
        ("import os; os._exit(0)", "your code ended the grading process (exit status 0)"),
        ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", "killed by SIGKILL"),
        ("input()", "EOFError"),
    ],
)
def test_a_backward_that_ends_its_process_is_one_line(tmp_path, line, words):
    path = _edited(tmp_path, "gelu", "        x = self.x\n", f"        x = self.x\n        {line}\n")
    grade = check("gelu", path)
    assert not grade.passed and words in grade.report() and len(grade.lines) == 2, grade.report()


def test_an_endless_loop_is_stopped_and_named(tmp_path):
    path = _edited(
        tmp_path,
        "mha",
        "        B, T, C = dy.shape\n",
        "        B, T, C = dy.shape\n        while B:\n            pass\n",
    )
    grade = check("mha", path, time_limit=2)
    assert not grade.passed
    assert (
        "did not finish within 2 s: it was stopped in your backward on MultiHeadAttention(6, 2)"
        in grade.report()
    )
    assert "endless loop" in grade.cause


def test_a_huge_allocation_is_a_memory_error(tmp_path):
    pytest.importorskip("resource")
    if not Path("/proc/self/statm").exists():
        pytest.skip("RLIMIT_AS needs the starting address space from /proc (Linux)")
    path = _edited(
        tmp_path, "gelu", "        x = self.x\n", "        x = self.x\n        big = np.ones(64 << 20)\n"
    )
    grade = check("gelu", path, memory_limit=128 << 20)  # 512 MiB asked, 128 MiB allowed
    assert "backward raised MemoryError" in grade.report() and "far larger" in grade.cause


def test_a_file_that_exits_while_loading_is_bad_input(tmp_path):
    path = _write(tmp_path, "softmax", "import sys\nsys.exit(3)\n")
    with pytest.raises(DataError, match="does not load: SystemExit"):
        check("softmax", path)


def test_the_learner_code_runs_in_another_process(tmp_path):
    # what the file changes at import (here the grader's own tolerance) stays in the child: this
    # process grades the next file as before
    changes = "import scratchformer.exercises.grading as g\ng.TOLERANCE = 1e9\n" + solution_source("gelu")
    assert check("gelu", _write(tmp_path, "gelu", changes)).passed
    from scratchformer.exercises import grading

    assert grading.TOLERANCE == TOLERANCE
    assert not check("gelu", _edited(tmp_path, "gelu", "dy * (cdf + x * pdf)", "dy * cdf")).passed


def test_an_extra_or_missing_parameter_is_refused_in_one_line(tmp_path):
    extra = _edited(
        tmp_path,
        "linear",
        "        self.bias = Parameter(np.zeros(out_features))\n",
        "        self.scale = Parameter(np.ones(1))\n        self.bias = Parameter(np.zeros(out_features))\n",
    )
    report = check("linear", extra).report()
    assert "your class has parameter(s) the stub's has not: scale" in report
    missing = _edited(
        tmp_path,
        "layernorm",
        "        self.bias = Parameter(np.zeros(C))\n",
        "        self.shift = Parameter(np.zeros(C))\n",
    )
    report = check("layernorm", missing).report()
    assert "has not: shift; it lacks the stub's parameter(s) bias" in report and "Traceback" not in report


def test_a_backward_for_one_shape_only_fails_on_another(tmp_path):
    path = _edited(tmp_path, "layernorm", "C = xhat.shape[-1]", "C = 5")  # the first case's size, written in
    grade = check("layernorm", path)
    assert grade.report().startswith("wrong: layernorm: on LayerNorm(6) on x (7, 6): ")
    assert (
        "right on LayerNorm(5) on x (2, 3, 5) (two draws), wrong on LayerNorm(6) on x (7, 6)" in grade.cause
    )


@pytest.mark.parametrize("bug", ["softmax__calls_exit", "softmax__log_space_nan", "linear__os_exit"])
def test_cli_grades_a_file_that_exits_or_returns_nan_wrong(bug, capsys):
    path = Path(__file__).parents[1] / "data" / "learner_bugs" / f"{bug}.py"
    assert main(["exercise", bug.split("__")[0], "--check", str(path)]) == 1
    out = capsys.readouterr().out
    assert "wrong: " in out and "likely cause: " in out and "Traceback" not in out


@pytest.mark.parametrize(
    "kwargs", [{"time_limit": 0}, {"time_limit": "60"}, {"memory_limit": 1 << 20}, {"memory_limit": 2.5e9}]
)
def test_limits_out_of_range_are_a_typed_error(kwargs, tmp_path):
    from scratchformer.errors import ConfigError

    with pytest.raises(ConfigError, match="time_limit|memory_limit"):
        check("softmax", _write(tmp_path, "softmax", solution_source("softmax")), **kwargs)


def test_no_process_to_be_had_is_one_typed_error(tmp_path, monkeypatch):
    from scratchformer.errors import ResourceError
    from scratchformer.exercises import isolation

    def no_pipe():
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(isolation.os, "pipe", no_pipe)
    with pytest.raises(ResourceError, match="cannot start the process that grades .*Too many open files"):
        check("softmax", _write(tmp_path, "softmax", solution_source("softmax")))


def test_a_passed_exercise_is_recorded_and_listed(tmp_path, capsys, monkeypatch):
    from scratchformer.exercises.progress import PROGRESS_FILE, passed

    monkeypatch.chdir(tmp_path)
    assert main(["exercise"]) == 0
    assert f"0 of {len(EXERCISES)} passed here" in capsys.readouterr().out and passed() == set()
    _write(tmp_path, "mine", solution_source("rope"))
    assert main(["exercise", "rope", "--check", "mine.py"]) == 0
    assert "recorded as passed" in capsys.readouterr().out
    assert passed() == {"rope"}
    bug = Path(__file__).parents[1] / "data" / "learner_bugs" / "rope__cos_only.py"
    assert main(["exercise", "rope", "--check", str(bug)]) == 1  # a later wrong check keeps the pass
    capsys.readouterr()
    assert main(["exercise"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [ln.split()[1] for ln in lines if ln.startswith("passed")] == ["rope"]
    assert f"1 of {len(EXERCISES)} passed here" in lines[-2]
    # a failed write leaves the old record whole (written atomically), and the grade stands
    import scratchformer.runfiles as runfiles

    def fail(*_):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(runfiles.os, "replace", fail)
    _write(tmp_path, "sw", solution_source("swiglu"))
    assert main(["exercise", "swiglu", "--check", "sw.py"]) == 0
    assert "not recorded as passed" in capsys.readouterr().err
    assert passed() == {"rope"} and [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == [
        PROGRESS_FILE
    ]
    (tmp_path / PROGRESS_FILE).write_text('{"passed": 3}')
    assert main(["exercise"]) == 2
    err = capsys.readouterr().err
    assert "not a record of passed exercises" in err and err.count("\n") == 1


def test_a_hint_comes_before_the_likely_cause(tmp_path, capsys):
    from scratchformer.exercises.catalogue import HINTS

    assert set(HINTS) == set(EXERCISES)
    assert main(["exercise", "gqa", "--hint"]) == 0
    assert capsys.readouterr().out == f"hint: {HINTS['gqa']}\n"
    bug = Path(__file__).parents[1] / "data" / "learner_bugs" / "gqa__first_head_only.py"
    assert main(["exercise", "gqa", "--check", str(bug), "--hint"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("wrong: gqa: dk[") and f"hint: {HINTS['gqa']}" in out
    assert "likely cause:" not in out and "only the first query head" not in out
    assert main(["exercise", "gqa", "--check", str(bug)]) == 1
    assert "likely cause: only the first query head of each group" in capsys.readouterr().out


def _reference_class(name):
    from scratchformer.exercises.grading import _class_from_source

    return _class_from_source(solution_source(name), EXERCISES[name].class_name, f"<{name}>")


def test_the_new_solutions_are_the_library_s_own_ops():
    # each formula has one home, ops/ and nn/: the exercises' references must compute the same
    import numpy as np

    from scratchformer.nn.attention import MultiHeadAttention
    from scratchformer.ops.rmsnorm import rmsnorm_backward, rmsnorm_forward
    from scratchformer.ops.rope import rope_backward, rope_forward, rope_tables
    from scratchformer.ops.swiglu import swiglu_backward, swiglu_forward

    rng = np.random.default_rng(0)
    x, dy = rng.standard_normal((2, 3, 6)), rng.standard_normal((2, 3, 6))
    norm = _reference_class("rmsnorm")(6)
    norm.weight.data = rng.standard_normal(6)
    y, xhat, rstd = rmsnorm_forward(x, norm.weight.data)
    assert np.allclose(norm.forward(x), y, rtol=1e-12, atol=1e-12)
    dx, dweight = rmsnorm_backward(dy, xhat, rstd, norm.weight.data)
    assert np.allclose(norm.backward(dy), dx, rtol=1e-12, atol=1e-12)
    assert np.allclose(norm.weight.grad, dweight, rtol=1e-12, atol=1e-12)

    glu, h = _reference_class("swiglu")(), rng.standard_normal((2, 3, 8))
    assert np.allclose(glu.forward(h), swiglu_forward(h), rtol=1e-12, atol=1e-12)
    assert np.allclose(glu.backward(dy[..., :4]), swiglu_backward(dy[..., :4], h), rtol=1e-12, atol=1e-12)

    rope, q = _reference_class("rope")(500.0), rng.standard_normal((2, 3, 5, 6))
    cos, sin = rope_tables(0, 5, 6, 500.0)
    dq = rng.standard_normal(q.shape)
    assert np.allclose(rope.forward(q), rope_forward(q, cos, sin), rtol=1e-12, atol=1e-12)
    assert np.allclose(rope.backward(dq), rope_backward(dq, cos, sin), rtol=1e-12, atol=1e-12)

    gqa, lib = _reference_class("gqa")(), MultiHeadAttention(12, 6, n_kv_head=2, rng=np.random.default_rng(0))
    q, k, v = (rng.standard_normal((2, h, 4, 2)) for h in (6, 2, 2))
    gqa.forward(q, k, v)
    assert np.array_equal(gqa.k, lib.expand_kv(k)) and np.array_equal(gqa.v, lib.expand_kv(v))
    dout = rng.standard_normal(q.shape)
    _, dk, dv = gqa.backward(dout)
    dv_all = gqa.weights.swapaxes(-1, -2) @ dout  # per query head, before the sum over the group
    assert np.allclose(dv, lib._sum_groups(dv_all), rtol=1e-12, atol=1e-12)
