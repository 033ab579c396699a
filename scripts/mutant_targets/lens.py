"""Mutation target "lens": every single-point mutant of the lens's analyses, against the checks it prints.

Mutated: scratchformer/lens/analyses.py, parts.py and report.py: patching, ablation, attribution,
the logit lens, saliency, integrated gradients, head scores, the parts they ask the model for and
the one report. Not mutated: the checks themselves (lens/witnesses.py: a mutant of a check changes
no result, so by this target's definition it is equivalent; tests/lens/ tests them on correct and
planted-bug results), the hooks both sides read the model through (lens/hooks.py, as the model's
own forward; tests/lens/test_lens_hooks.py and the references test them), lens/trace.py and
lens/sae.py (no check of this set reads them), and cli/lens.py (the command prints what the
report returns; its tables are tested in tests/lens/test_lens_cli.py). Properties
(`LensReport.checks`) are left out: the harness swaps a function's code, and a property is no
function.

The output, on a broad set of inputs (`CASES`): every analysis and the report on every model
kind, float64 tiny models with every parameter moved by N(0, 0.3) (norms' gains and shifts away
from 1 and 0): GPT (learned positions, LayerNorm, GELU), Llama blocks (rotary, RMSNorm, SwiGLU,
grouped-query), ALiBi, attention-only, post-norm, sinusoidal, no norm, a GPT subclass, float32,
the classifier, seq2seq and BERT; options: k of 1 and of the whole vocabulary, mean ablation,
self- and cross-attention ablation, a batch of two, patching of equal inputs (undefined), a
target given, attribution at another position, integrated gradients from zero, the mean and
another text's embeddings. The output is every field of every result but its check.

A mutant runs only the cases whose unmutated run ran its line (traced once in `prepare`; a line
no line event names, such as a default's, counts as run by every case calling its function): a
line no case runs cannot change the output. Cases run cheapest first, and the first case whose
output changed and was caught ends the mutant. Caught: a check that held unmutated says FAILED,
or the lens stops with an error where it gave a result (the detail says which). An output that
does not finish is no catch.

    nice -n 10 python scripts/mutants.py lens               # every mutant
    python scripts/mutant_targets/lens.py --reach            # the functions no case runs
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mutants import ROOT, SAME_RTOL, Mutant, Target, raised  # noqa: E402
from mutants import same as same_values  # noqa: E402

LENS = ROOT / "scratchformer" / "lens"
FILES = [LENS / "analyses.py", LENS / "parts.py", LENS / "report.py"]
STEPS = 16  # integrated gradients' nodes (Gauss-Legendre: within the check's 1% on these smooth models)
IDS = np.array([[1, 4, 2, 7, 4, 2]])  # tokens 4 and 2 repeat: the same-token and induction scores apply
FLOAT32_RTOL = 1e-5  # about 100 times float32's rounding (6e-8), of a case's largest entry
CORRUPT = np.array([[1, 4, 9, 7, 4, 2]])


# -- the models ----------------------------------------------------------------------------------
def _moved(model, seed: int, scale: float = 0.3):
    """`model` with every parameter moved by N(0, scale): norms' gains and shifts away from 1
    and 0, biases away from 0, so a mistake in any of them shows."""
    rng = np.random.default_rng(seed)
    for p in model.parameters():
        p.data += (scale * rng.standard_normal(p.shape)).astype(p.data.dtype)
    return model


def _gpt(seed: int = 0, **options):
    from scratchformer.models import GPT, GPTConfig

    cls = options.pop("cls", GPT)
    size = dict(vocab_size=11, block_size=8, n_layer=2, n_head=2, n_embd=8, dtype="float64")
    return _moved(cls(GPTConfig(**{**size, **options}), seed=seed), seed + 1)


def _models() -> dict:
    from scratchformer.interop.bert import BertConfig, BertEncoder
    from scratchformer.models import GPT
    from scratchformer.models.classifier import ClassifierConfig, TransformerClassifier
    from scratchformer.models.seq2seq import Seq2SeqConfig, Seq2SeqTransformer

    class MyGPT(GPT):
        pass

    small = dict(n_head=2, n_embd=8)
    llama = dict(positional="rope", normalization="rmsnorm", activation="swiglu", bias=False, n_kv_head=1)
    return {
        "gpt": _gpt(),
        "llama": _gpt(2, **llama),
        "alibi": _gpt(4, n_layer=1, positional="alibi"),
        "attn-only": _gpt(6, attn_only=True),
        "post-norm": _gpt(8, n_layer=1, norm_first=False),
        "sinusoidal": _gpt(10, n_layer=1, positional="sinusoidal"),
        "no-norm": _gpt(12, n_layer=1, normalization="none"),
        "subclass": _gpt(14, n_layer=1, cls=MyGPT),
        "float32": _gpt(16, n_layer=1, dtype="float32"),
        "classifier": _moved(
            TransformerClassifier(
                ClassifierConfig(vocab_size=11, n_classes=3, n_layer=1, **small), seed=0
            ).to(np.float64),
            18,
            0.1,  # smooth enough for integrated gradients' 32 nodes (1e-14)
        ),
        "seq2seq": _moved(
            Seq2SeqTransformer(
                Seq2SeqConfig(src_vocab_size=11, tgt_vocab_size=11, n_layer=1, **small), seed=0
            ).to(np.float64),
            20,
        ),
        "bert": _moved(
            BertEncoder(
                BertConfig(
                    vocab_size=11,
                    hidden_size=8,
                    num_hidden_layers=1,
                    num_attention_heads=2,
                    intermediate_size=16,
                ),
                dtype=np.float64,
            ),
            22,
        ),
    }


# -- the cases -----------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    run: object  # () -> (output, the names of the checks that failed)


def _plain(value):
    """A result as an output: dataclasses as dicts of their fields but the check, arrays copied."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: _plain(getattr(value, f.name))
            for f in dataclasses.fields(value)
            if f.name not in ("check", "parts")
        }
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, np.generic):
        return value.item()
    return value


def _failed(value) -> list[str]:
    """The names of the failed checks anywhere in a result."""
    from scratchformer.lens.witnesses import Check

    if isinstance(value, Check):
        return [] if value.ok else [value.name]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [n for f in dataclasses.fields(value) for n in _failed(getattr(value, f.name))]
    if isinstance(value, (list, tuple)):
        return [n for v in value for n in _failed(v)]
    return []


def _api(build):
    def run():
        result = build()
        return _plain(result), _failed(result)

    return run


def _api_cases() -> list[Case]:
    from scratchformer.lens import analyses as A
    from scratchformer.lens.report import lens_report

    m = _models()
    cases = []

    def add(name, build):
        cases.append(Case(name, _api(build)))

    for kind, model in m.items():
        if kind == "bert":
            add(f"report {kind}", lambda model=model: lens_report(model, model.example(IDS[0])))
            continue
        corrupt = CORRUPT if kind not in ("post-norm", "no-norm") else None
        add(
            f"report {kind}",
            lambda model=model, corrupt=corrupt: lens_report(
                model, model.example(IDS[0]), k=3, steps=STEPS, corrupt=corrupt
            ),
        )
    gpt, s2s, bert = m["gpt"], m["seq2seq"], m["bert"]
    loss = (IDS[:, :-1], IDS[:, 1:])
    add("report gpt, target given", lambda: lens_report(gpt, gpt.example(IDS[0], target=3), steps=STEPS))
    add(
        "report gpt, baseline mean",
        lambda: lens_report(gpt, gpt.example(IDS[0]), steps=STEPS, baseline="mean"),
    )
    add(
        "report llama, baseline text",
        lambda: lens_report(m["llama"], m["llama"].example(IDS[0]), steps=STEPS, baseline_inputs=(CORRUPT,)),
    )
    add("logit lens k=1", lambda: A.logit_lens(gpt, (IDS,), k=1))
    add("logit lens k=V", lambda: A.logit_lens(gpt, (IDS,), k=11))
    add("logit lens seq2seq", lambda: A.logit_lens(s2s, (IDS[:, :5], IDS[:, :4])))
    add("attribution position 2", lambda: A.direct_logit_attribution(gpt, (IDS,), token=5, position=2))
    add("attribution seq2seq", lambda: A.direct_logit_attribution(s2s, (IDS[:, :5], IDS[:, :4]), token=3))
    add("ablation mean", lambda: A.head_ablation(gpt, loss, mode="mean"))
    batch = (np.concatenate([IDS, CORRUPT])[:, :-1], np.concatenate([IDS, CORRUPT])[:, 1:])
    add("ablation batch of 2", lambda: A.head_ablation(m["llama"], batch, mode="mean"))
    s2s_loss = (IDS[:, :5], IDS[:, :4], IDS[:, 1:5])
    add("ablation cross", lambda: A.head_ablation(s2s, s2s_loss, which="cross"))
    add("ablation self", lambda: A.head_ablation(s2s, s2s_loss, which="self", mode="mean"))
    add("scores batch of 2", lambda: A.head_scores(gpt, (np.concatenate([IDS, IDS[:, ::-1]]),)))
    add("scores seq2seq", lambda: A.head_scores(s2s, (IDS[:, :5], IDS)))
    add("patching equal inputs", lambda: A.activation_patching(gpt, (IDS,), (IDS,), A.logit_metric(-1, 3, 4)))
    add(
        "patching seq2seq",
        lambda: A.activation_patching(
            s2s, (IDS[:, :5], IDS[:, :4]), (CORRUPT[:, :5], IDS[:, :4]), A.logit_metric(-1, 3, 4)
        ),
    )
    add(
        "patching loss",
        lambda: A.activation_patching(gpt, loss, (CORRUPT[:, :-1], IDS[:, 1:]), A.loss_metric),
    )
    add("saliency loss", lambda: A.saliency(gpt, loss, A.loss_objective))
    add(
        "ig zero, alibi",
        lambda: A.integrated_gradients(m["alibi"], (IDS,), A.logit_objective(-1, 3), steps=2 * STEPS),
    )
    other = np.linspace(-1.0, 1.0, 8)
    sim = A.similarity_objective(other)
    add("saliency bert", lambda: A.saliency(bert, (IDS,), sim))
    add("ig bert", lambda: A.integrated_gradients(bert, (IDS,), sim, steps=STEPS, baseline="mean"))
    add("ablation bert", lambda: A.head_ablation(bert, (IDS,), metric=lambda out: sim(out)[0]))
    add(
        "ig seq2seq, text",
        lambda: A.integrated_gradients(
            s2s,
            (IDS[:, :5], IDS[:, :4]),
            A.logit_objective(-1, 3),
            steps=STEPS,
            baseline_inputs=(CORRUPT[:, :5], IDS[:, :4]),
        ),
    )
    return cases


CASES: list[Case] = []
REACH: dict[str, set] = {}  # case -> {(file, top-level function)} its unmutated run calls
LINES: dict[str, set] = {}  # case -> {(file, line)} its unmutated run runs
CODE_LINES: dict[str, dict] = {}  # file -> {line: the function whose code is on it}
BASELINE: dict = {}
VERDICTS: dict = {}  # in a mutant's child: case -> what its checks said
_MUTATED = {str(p.resolve()) for p in FILES}


def _top_level(code) -> str:
    return code.co_qualname.split(".<locals>")[0]


def _traced(run) -> tuple[object, set, set]:
    """run()'s result, the functions of the mutated files it called, and the lines of those files
    it ran (a trace of Python frames in those files only)."""
    seen: set = set()
    lines: set = set()

    def local(frame, event, _arg):
        if event == "line":
            lines.add((frame.f_code.co_filename, frame.f_lineno))
        return local

    def trace(frame, _event, _arg):
        code = frame.f_code
        if code.co_filename in _MUTATED:
            seen.add((code.co_filename, _top_level(code)))
            lines.add((code.co_filename, frame.f_lineno))
            return local
        return None

    sys.settrace(trace)
    try:
        result = _run_case(run)
    finally:
        sys.settrace(None)
    return result, seen, lines


def _code_lines(path: Path) -> dict[int, str]:
    """line -> the top-level function whose own code (or a lambda's or comprehension's in it) has
    an instruction on that line, for the lines a line event can report (the def line is left out:
    its defaults run when the module does)."""
    found: dict[int, str] = {}

    def walk(code, top):
        for const in code.co_consts:
            if hasattr(const, "co_code"):
                inner = top or const.co_qualname.split(".<locals>")[0]
                walk(const, inner)
        if top is not None:
            for _, _, line in code.co_lines():
                if line is not None and line != code.co_firstlineno:
                    found.setdefault(line, top)

    walk(compile(path.read_text(encoding="utf-8"), str(path), "exec"), None)
    return found


def _run_case(run):
    try:
        with np.errstate(all="ignore"):
            return run()
    except BaseException as e:  # noqa: BLE001 - raising is an output
        return raised(e), "raised"


def prepare() -> None:
    """Build the cases, run each unmutated (traced: which functions and lines it runs)."""
    from threadpoolctl import threadpool_limits

    CASES.extend(_api_cases())
    seconds = {}  # each case's traced run: the order mutants run them in, cheapest first
    with threadpool_limits(1):
        for case in CASES:
            start = time.process_time()
            (BASELINE[case.name], VERDICTS[case.name]), REACH[case.name], LINES[case.name] = _traced(case.run)
            seconds[case.name] = time.process_time() - start
    CASES.sort(key=lambda c: seconds[c.name])


def _cases_of(m: Mutant | None) -> list[Case]:
    if m is None:
        return CASES
    path = str(m.path.resolve())
    reached = [c for c in CASES if (path, m.function) in REACH[c.name]]
    if CODE_LINES.setdefault(path, _code_lines(m.path)).get(m.line) != m.function:
        return reached  # a line no line event names (a default, a continuation): every case that calls it
    return [c for c in reached if (path, m.line) in LINES[c.name]]


def output(m: Mutant | None):
    if not CASES:
        prepare()
    if m is None:
        return {name: BASELINE[name] for name in BASELINE}
    result = {}
    cases = _cases_of(m)
    for case in cases:
        VERDICTS[case.name] = None  # no verdict unless the case runs
    _home_for_mutants(m)
    with m.patched():
        for case in cases:  # cheapest first; the first case whose output changed and is caught ends it
            result[case.name], VERDICTS[case.name] = _run_case(case.run)
            caught = _caught_in(case)
            if STOP_AT_ERROR or "FAILED" in caught:
                if not _same_case(case.name, result[case.name], BASELINE[case.name]) and caught:
                    break
    return result


def _home_for_mutants(m: Mutant) -> None:
    """A module in sys.modules under the name the harness runs a mutated file as (its module's
    name + "__mutant"): `dataclasses` looks a class's module up there while it builds the
    dataclasses of the file (with `from __future__ import annotations`), and fails on none."""
    import types

    name = ".".join(m.path.resolve().relative_to(ROOT).with_suffix("").parts) + "__mutant"
    sys.modules.setdefault(name, types.ModuleType(name))


def _same_case(name: str, a, b) -> bool:
    """One case's outputs: within float64's rounding (mutants.same), a float32 model's within
    float32's (FLOAT32_RTOL: a softmax shifted by another constant is the same softmax)."""
    return same_values(a, b, FLOAT32_RTOL if "float32" in name else SAME_RTOL)


def same(a, b) -> bool:
    """Only the cases the mutant ran are compared (the baseline holds every case)."""
    if not isinstance(a, dict) or not isinstance(b, dict) or not set(a) <= set(b):
        return same_values(a, b)
    return all(_same_case(k, a[k], b[k]) for k in a)


_BASE_FAILED: dict = {}
STOP_AT_ERROR = True  # a case where the lens stops with an error ends the mutant (_lens_checks: no)


def _caught_in(case: Case) -> str:
    """What caught the mutant in `case` ("" if nothing): a check that held unmutated FAILED, or
    the lens stopped with an error where it gave a result."""
    now, before = VERDICTS.get(case.name), _BASE_FAILED.get(case.name, [])
    if now == "raised" and before != "raised":
        return f"{case.name}: stopped with an error"
    if now is not None and now != "raised" and set(now) - set(before):
        return f"{case.name}: check {', '.join(sorted(set(now) - set(before)))} FAILED"
    return ""


def check(m: Mutant) -> tuple[bool, str]:
    """Caught: a check that held unmutated fails (or the lens stops with an error where it gave a
    result), in a case the mutant ran (its verdicts kept by `output`)."""
    said = [s for case in _cases_of(m) if (s := _caught_in(case))]
    checks = [s for s in said if "FAILED" in s]
    if checks:
        return True, "; ".join(checks[:3])
    if said:
        return True, "; ".join(said[:3])
    return False, "every check held"


def _keep_base_verdicts() -> None:
    _BASE_FAILED.update(VERDICTS)


def _prepare_all(mutants=None) -> None:
    """`prepare`, whichever mutants follow (every case is traced: which one a mutant needs is
    known only then)."""
    prepare()
    _keep_base_verdicts()


def sources():
    def accept(qualname: str) -> bool:
        return qualname not in _PROPERTIES

    return [(p, accept) for p in FILES]


_PROPERTIES = {"LensReport.all_checks", "LensReport.checks", "LensReport.failed"}


TARGET = Target(
    name="lens",
    sources=sources,
    output=output,
    check=check,
    prepare=_prepare_all,
    same=same,
    goal=0.95,
    time_limit=240.0,
    sample=30,
    description="the lens (analyses, parts, report), against the checks it prints",
)


if __name__ == "__main__" and "--reach" in sys.argv:  # the functions no case runs
    _prepare_all()
    reached = set().union(*REACH.values())
    for path, accept in sources():
        for m_name in sorted({m.function for m in __import__("mutants").mutants_of(path, accept)}):
            if (str(path.resolve()), m_name) not in reached:
                print(f"{path.relative_to(ROOT)}: {m_name}")
