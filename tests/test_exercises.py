"""The graded exercises: every reference solution passes, the stub does not, and each wrong
solution is caught with a message naming its fault (at least 5 per exercise)."""

import subprocess
import sys

import pytest

from scratchformer.cli.main import main
from scratchformer.exercises import EXERCISES, check, solution_source, stub_source

# Wrong solutions beyond the catalogue's known mistakes (which the grader itself knows):
# exercise -> [(old, new, words the report must contain)], edits of the reference solution
# caught by the generic checks (sign, factor, transpose, accumulation, contract).
GENERIC_FAULTS = {
    "softmax": [("return y * (", "return -y * (", "sign is flipped"),
                ("return y * (dy - (dy * y).sum(axis=-1, keepdims=True))",
                 "dy -= (dy * y).sum(axis=-1, keepdims=True)\n        return y * dy", "changed its argument in place"),
                ("return y * (dy - (dy * y).sum(axis=-1, keepdims=True))",
                 "return (y * (dy - (dy * y).sum(axis=-1, keepdims=True))).T", "transposed")],
    "cross_entropy": [("return dlogits * (dloss / N)", "return -dlogits * (dloss / N)", "sign is flipped")],
    "layernorm": [("self.weight.grad += (dy", "self.weight.grad[...] = (dy", "overwritten instead of accumulated")],
    "gelu": [("return dy * (cdf", "return -dy * (cdf", "sign is flipped"),
             ("return dy * (cdf", "return 2 * dy * (cdf", "counted twice")],
    "linear": [("self.bias.grad += dy2", "self.bias.grad = dy2", "overwritten instead of accumulated"),
               ("dy2.T @ x2", "dy[0].T @ self.x[0]", "only batch row 0 is counted")],
    "embedding": [("        np.add.at(", "        self.weight.grad[...] = 0\n        np.add.at(",
                   "overwritten instead of accumulated"),
                  ("dy.reshape(-1, C))", "-dy.reshape(-1, C))", "sign is flipped")],
    "attention": [("return dq, dk, dv", "return dk, dq, dv", "wrong order"),
                  ("return dq, dk, dv", "return dq", "must return the tuple (dq, dk, dv)")],
    "mha": [("self.out_proj_bias.grad +=", "self.out_proj_bias.grad =", "overwritten instead of accumulated")],
    "block": [("h = x + self.attn(self.ln1(x), causal=True)", "h = x + self.attn(x, causal=True)",
               "forward's output differs from the given forward")],
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
    assert not grade.passed and grade.cause == "the backward is not written yet"


@pytest.mark.parametrize("name", EXERCISES)
def test_every_wrong_solution_is_caught_and_named(name, tmp_path):
    source = solution_source(name)
    wrongs = [(m.old, m.new, m.cause) for m in EXERCISES[name].mistakes] + GENERIC_FAULTS[name]
    assert len(wrongs) >= 5
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


@pytest.mark.parametrize("content, words", [(None, "no such file"), ("def (", "line 1: syntax error"),
                                            ("import no_such_module_here", "does not load: ModuleNotFoundError"),
                                            ("x = 1", "defines no class Softmax")])
def test_cli_bad_input_is_one_line_exit_2(tmp_path, capsys, content, words):
    path = tmp_path / "f.py"
    if content is not None:
        path.write_text(content)
    assert main(["exercise", "softmax", "--check", str(path)]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1 and "Traceback" not in err


def test_grading_needs_no_torch(tmp_path):
    path = _write(tmp_path, "attention", solution_source("attention"))
    code = ("import sys; sys.modules['torch'] = None; from scratchformer.cli.main import main; "
            f"sys.exit(main(['exercise', 'attention', '--check', {str(path)!r}]))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
