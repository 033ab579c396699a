"""Mutation target "solutions": the exercises' reference solutions, against the grader.

Every single-point mutant of scratchformer/exercises/solutions/*.py (the forward the stub gives,
the backward, the helpers: every function of the file) is graded as a learner's file would be
(`exercises.check`). Its output, computed here without the grader's code:

    a backward exercise   on each of its cases and on RANDOM_CASES more (the exercise's own
                          random shapes, other seeds): the forward's output; what backward
                          returns; every parameter's .grad; a second forward and backward
                          from a prefilled .grad (what it returns, the .grad after); whether
                          the inputs, dy, the forward's output or what forward saved changed
    bpe_merge             merge_step on the graded text's words, merge after merge, and on
                          random word counts whose most frequent pair is unique
    diagnose_runs         diagnose()
    induction_head        find_induction_head on the shipped model, on it with its heads
                          reordered, and on other sequences of its task

The goal: every mutant whose output changes is graded wrong (a mutant the grader refuses as
bad input, exit code 2, is caught too).
"""

from __future__ import annotations

import sys
import tempfile
import types
import zlib
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mutants import ROOT, Mutant, Target, raised  # noqa: E402

SOLUTIONS = ROOT / "scratchformer" / "exercises" / "solutions"
RANDOM_CASES = 3  # random shapes per backward exercise, beyond its fixed cases
SEED = 20240  # of the random shapes, words and sequences (other than any the grader uses)
GRADER_TIME_LIMIT = 20.0  # seconds the grader gives one mutant (an endless loop is one)
GRADER_SEED = 7  # the grader's random shapes, the same for every mutant (their references computed once)


def _exercise_of(path: Path):
    from scratchformer.exercises import EXERCISES

    return EXERCISES[path.stem]


def _loaded(m: Mutant | None, path: Path):
    """What the (mutated) solution file defines under the exercise's name."""
    ex = _exercise_of(path if m is None else m.path)
    source = path.read_text(encoding="utf-8") if m is None else m.source
    module = types.ModuleType(f"solution_{ex.name}")
    module.__file__ = str(path if m is None else m.path)
    exec(compile(source, module.__file__, "exec"), module.__dict__)  # noqa: S102
    return ex, getattr(module, ex.class_name)


# -- a backward exercise's output ----------------------------------------------------------------
def _parameters(obj) -> list[tuple[str, object]]:
    from scratchformer.nn import Module, Parameter

    found = []
    for name, value in vars(obj).items():
        if isinstance(value, Parameter):
            found.append((name, value))
        elif isinstance(value, Module):
            found += [(f"{name}.{n}", p) for n, p in value.named_parameters()]
    return found


def _value(v):
    """What a call returned, as an output: arrays copied, anything else by its type."""
    if isinstance(v, np.ndarray):
        return np.array(v, copy=True)
    if isinstance(v, tuple):
        return tuple(_value(x) for x in v)
    if v is None or isinstance(v, (int, float, str)):
        return v
    return ("a", type(v).__name__)


def _arrays_of(obj) -> dict[str, np.ndarray]:
    """The arrays an object holds (what forward saved): name -> the array object itself."""
    return {k: v for k, v in vars(obj).items() if isinstance(v, np.ndarray)}


def _cases(ex) -> list:
    cases = list(ex.cases)
    random_case = getattr(ex, "random_case", None)
    if random_case is not None:
        rng = np.random.default_rng([SEED, zlib.crc32(ex.name.encode())])
        cases += [random_case(rng) for _ in range(RANDOM_CASES)]
    return cases


def _one_case(cls, case) -> dict:
    out: dict = {}
    phase = "constructor"
    try:
        obj = cls(*case.args)
        params = _parameters(obj)
        out["params"] = sorted(n for n, _ in params)
        for name, p in params:
            rng = np.random.default_rng([case.seed + 7, zlib.crc32(name.encode())])
            p.data = rng.standard_normal(np.shape(p.data)) * 0.5
            p.grad = np.zeros_like(p.data)
        inputs = case.inputs(np.random.default_rng(case.seed + 5))
        kept = [np.array(a, copy=True) for a in inputs]
        phase = "forward"
        y = obj.forward(*inputs)
        out["forward"] = _value(y)
        y_kept = _value(y)
        dy = (
            np.random.default_rng(case.seed + 6).standard_normal(y.shape)
            if isinstance(y, np.ndarray)
            else 0.7
        )
        dy_kept = _value(dy)
        saved = _arrays_of(obj)
        saved_kept = {k: v.copy() for k, v in saved.items()}
        phase = "backward"
        out["returned"] = _value(obj.backward(dy))
        out["grads"] = {n: _value(p.grad) for n, p in params}
        out["unchanged"] = {
            "inputs": all(np.array_equal(a, b, equal_nan=True) for a, b in zip(inputs, kept)),
            "dy": np.array_equal(dy, dy_kept, equal_nan=True),
            "forward output": isinstance(y, np.ndarray)
            and np.array_equal(y, y_kept, equal_nan=True)
            or not isinstance(y, np.ndarray),
            "saved": all(np.array_equal(saved[k], saved_kept[k], equal_nan=True) for k in saved),
        }
        phase = "second backward"
        prefill = np.random.default_rng(case.seed + 8)
        for _, p in params:
            p.grad = prefill.standard_normal(np.shape(p.data))
        obj.forward(*[np.array(a, copy=True) for a in kept])
        out["returned again"] = _value(obj.backward(_value(dy_kept)))
        out["grads again"] = {n: _value(p.grad) for n, p in params}
    except BaseException as e:  # noqa: BLE001 - raising is an output
        out["raised"] = (phase, raised(e))
    return out


def _backward_output(cls, ex) -> list[dict]:
    with np.errstate(all="ignore"):
        return [_one_case(cls, case) for case in _cases(ex)]


# -- the other kinds -----------------------------------------------------------------------------
def _word_sets() -> list[dict]:
    """The graded text's words after each of 10 merges, and 20 random word counts, each with
    one most frequent pair (the exercise leaves ties unspecified)."""
    from scratchformer.exercises import bpe

    sets, words = [], bpe.text_words()
    for _ in range(10):
        sets.append(dict(words))
        counts = bpe.pair_counts(words)
        words = bpe.merged(words, max(counts, key=counts.get))
    rng = np.random.default_rng(SEED)
    while len(sets) < 30:
        words = {}
        for _ in range(int(rng.integers(1, 8))):
            word = tuple(str(c) for c in rng.choice(list("abcab"), size=int(rng.integers(1, 7))))
            words[word] = words.get(word, 0) + int(rng.integers(1, 5))
        counts = bpe.pair_counts(words)
        top = sorted(counts.values())[-2:]
        if counts and (len(top) == 1 or top[0] != top[1]):
            sets.append(words)
    return sets


def _call(f, *args):
    try:
        with np.errstate(all="ignore"):
            return _plain(f(*args))
    except BaseException as e:  # noqa: BLE001
        return raised(e)


def _plain(v):
    if isinstance(v, dict):
        return (
            {"dict": sorted((_plain(k), _plain(x)) for k, x in v.items())}
            if _sortable(v)
            else ("dict", repr(v))
        )
    if isinstance(v, (tuple, list)):
        return (type(v).__name__, tuple(_plain(x) for x in v))
    if isinstance(v, np.ndarray):
        return v.copy()
    if isinstance(v, np.generic):
        return (type(v).__name__, v.item())
    if v is None or isinstance(v, (int, float, str, bool)):
        return (type(v).__name__, v)
    return ("a", type(v).__name__)


def _sortable(d: dict) -> bool:
    try:
        sorted((repr(k), repr(v)) for k, v in d.items())
        return all(isinstance(k, (tuple, str, int)) for k in d)
    except Exception:  # noqa: BLE001
        return False


def _other_output(f, ex):
    if ex.name == "bpe_merge":
        return [_call(f, dict(words)) for words in _word_sets()]
    if ex.name == "diagnose_runs":
        return _call(f)
    from scratchformer.exercises import induction

    model, data = induction.load_model()
    tokens = induction.probe_tokens(data, 256)
    models = [model, induction.permuted_heads(model, [1, 0])]
    return [_call(f, m, t) for m in models for t in (tokens[:64].copy(), tokens[128:].copy())]


# -- the target ----------------------------------------------------------------------------------
def sources():
    return [(p, None) for p in sorted(SOLUTIONS.glob("*.py")) if p.stem != "__init__"]


def output(m: Mutant | None):
    paths = [p for p, _ in sources()] if m is None else [m.path]
    result = {}
    for path in paths:
        try:
            ex, defined = _loaded(m if m is not None and m.path == path else None, path)
        except BaseException as e:  # noqa: BLE001
            result[path.stem] = raised(e)
            continue
        result[path.stem] = (
            _backward_output(defined, ex) if ex.kind == "backward" else _other_output(defined, ex)
        )
    return result


def same(a, b) -> bool:
    """Only the mutated file's exercise is compared (the baseline holds every exercise)."""
    from mutants import same as same_values

    if set(a) <= set(b):
        b = {k: b[k] for k in a}
    elif set(b) <= set(a):
        a = {k: a[k] for k in b}
    return same_values(a, b)


def check(m: Mutant) -> tuple[bool, str]:
    from scratchformer.errors import ScratchformerError
    from scratchformer.exercises import check as grade

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / m.path.name
        path.write_text(m.source, encoding="utf-8")
        try:
            g = grade(m.path.stem, path, time_limit=GRADER_TIME_LIMIT, seed=GRADER_SEED)
        except ScratchformerError as e:  # refused as bad input (exit 2): not graded right
            return True, f"refused: {e}"
        return not g.passed, g.lines[0]


def prepare(mutants: list[Mutant]) -> None:
    """What the graded mutants need, computed once: the references of their exercises, the
    trainer's merges, the ablations (the forked children inherit them)."""
    from scratchformer.exercises import EXERCISES, bpe, grading, induction, isolation

    needed = {m.path.stem for m in mutants}
    for name in needed:
        ex = EXERCISES[name]
        if ex.kind == "backward":
            for case in grading.graded_cases(ex, GRADER_SEED):
                grading.reference(ex, case)
    if "bpe_merge" in needed:
        bpe.prepare()
    if "induction_head" in needed:
        induction.prepare()
    isolation.share_server_with_forks()  # one clean server forks every mutant's learner process


TARGET = Target(
    name="solutions",
    sources=sources,
    output=output,
    check=check,
    prepare=prepare,
    same=same,
    goal=1.0,
    time_limit=90.0,
    sample=30,
    description="the exercises' reference solutions, graded as a learner's file",
)
