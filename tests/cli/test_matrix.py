"""Every command on every model kind: the command x model-kind matrix (issue 25).

One table, `EXPECTED`, says what each cell does: "ok" (exit 0 and a cheap check of the output),
"refused: <text> -- <why>" (by design: exit 2 and exactly one line on stderr, containing <text>;
<why> explains it in the docs), or "bug: <what is broken>" (it should work but does not yet: the
cell runs as a strict xfail, so it turns into a failure, to be updated here, the day the fix
lands; a cell behind several bugs names them all, joined by " | "). "n/a: <why>" cells run
nothing. No cell may end in a traceback. docs/model-kinds.md is generated from the table:

    python tests/cli/test_matrix.py --markdown > docs/model-kinds.md

Each row's run is trained once per module (tiny models, a few steps); the commands run
in-process through `scratchformer.cli.main.main`. The subclass row has no command line (a
Python class cannot be named on it): its cells call the Python functions the commands call.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import traceback
from argparse import Namespace
from pathlib import Path

import pytest
from tiny_run import tiny

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

# -- the table --------------------------------------------------------------------------------------
ROWS = {  # id -> what the row is, as the docs table names it
    "gpt": "GPT, learned positions, LayerNorm, GELU (the default)",
    "gpt-sin": "GPT, sinusoidal positions",
    "llama": "Llama-style GPT: `--positional rope --normalization rmsnorm --activation swiglu --n-kv-head 1 "
    "--no-bias` (BPE)",
    "alibi": "GPT with `--positional alibi`",
    "subclass": "a subclass of GPT (`class MyGPT(GPT)`, Python API)",
    "bpe": "GPT on `--tokenizer bpe` text",
    "classifier": "classifier (`--task majority`)",
    "seq2seq": "encoder-decoder (`--task reverse`)",
    "finetune": "fine-tuned BERT classifier (`finetune`)",
    "init-gpt2": "`train --init-from` a GPT-2 directory",
    "init-llama": "`train --init-from` a Llama directory",
    "hf-gpt2": "a Hugging Face GPT-2 directory",
    "hf-llama": "a Hugging Face Llama directory",
}
COLUMNS = {  # id -> the command, as the docs table names it
    "train": "train",
    "resume": "train --resume",
    "sample": "sample / predict",
    "eval": "eval",
    "viz": "viz",
    "viz-all": "viz --all",
    "viz-init": "viz --compare-init",
    "lens": "lens",
    "lens-json": "lens --json",
    "export": "export --hf",
    "sample-hf": "sample --hf",
    "lens-hf": "lens --hf",
}

OK = "ok"
RUN_ROWS = [r for r in ROWS if not r.startswith("hf-")]
HF_ROWS = ["hf-gpt2", "hf-llama"]
TASK_ROWS = ("classifier", "seq2seq", "finetune")

# the reasons, each written once (a footnote of docs/model-kinds.md)
HF_ONLY = "n/a: --hf reads a Hugging Face directory, not a run"
NOT_A_RUN = "n/a: a Hugging Face directory is not a run: train from it with --init-from (the rows above)"
NO_HF_FORM = (
    "refused: no Hugging Face layout scratchformer writes holds this model -- export writes GPT-2's "
    "layout (learned positions, LayerNorm, biases) or Llama's (rotary positions, RMSNorm, SwiGLU, no biases)"
)
LM_ONLY = "refused: export writes language models -- only a language model has a Hugging Face causal-LM form"
GPT2_LAYOUT = (
    "refused: GPT-2 cannot represent this model -- export writes GPT-2's layout (learned positions, "
    "biases); train with --bias to export"
)
HF_DIR_IS_NO_RUN = (
    "refused: trainer_state.json is missing -- a Hugging Face directory is not a run: read it with "
    "--hf, or train from it with --init-from"
)
NOT_FROM_SCRATCH = (
    "refused: --compare-init needs a model trained from scratch -- a fine-tuned classifier starts "
    "from pretrained weights"
)
HF_LENS_NOT_A_RUN = "refused: is a Hugging Face model directory, not a run -- read it with lens --hf"
AND = " | "  # between the bugs of a cell that has several


def both(*bugs: str) -> str:
    return "bug: " + AND.join(b[len("bug: ") :] for b in bugs)


EXPECTED: dict[tuple[str, str], str] = {(r, c): OK for r in ROWS for c in COLUMNS}
EXPECTED.update({(r, c): HF_ONLY for r in RUN_ROWS for c in ("sample-hf", "lens-hf")})
EXPECTED.update({(r, c): NOT_A_RUN for r in HF_ROWS for c in ("train", "resume")})
EXPECTED.update(
    {
        (r, c): HF_DIR_IS_NO_RUN
        for r in HF_ROWS
        for c in ("sample", "eval", "viz", "viz-all", "viz-init", "lens", "lens-json", "export")
    }
)
EXPECTED.update({(r, c): HF_LENS_NOT_A_RUN for r in HF_ROWS for c in ("lens", "lens-json")})
EXPECTED.update({(r, "export"): NO_HF_FORM for r in ("gpt-sin", "alibi")})
EXPECTED.update({(r, "export"): LM_ONLY for r in TASK_ROWS})
EXPECTED.update(
    {
        ("bpe", "export"): GPT2_LAYOUT,  # no biases: neither GPT-2's layout nor Llama's
        ("finetune", "viz-init"): NOT_FROM_SCRATCH,
    }
)


# -- docs/model-kinds.md ---------------------------------------------------------------------------
DOC = Path(__file__).resolve().parents[2] / "docs" / "model-kinds.md"


def split(value: str) -> tuple[str, str, str]:
    """A cell's value -> (kind, what stderr must contain or the bug, the explanation for the docs):
    "refused: <text on stderr> -- <why, for the docs>" (the explanation is optional)."""
    kind, _, rest = value.partition(": ")
    match, _, why = rest.partition(" -- ")
    return kind, match, why


def markdown() -> str:
    """docs/model-kinds.md: the kinds x commands table, generated from EXPECTED."""
    lines = [
        "# Model kinds × commands",
        "",
        "Which command works on which kind of model. Generated from the table in tests/cli/test_matrix.py, "
        "which runs every cell on tiny models; after changing that table, "
        "`python tests/cli/test_matrix.py --markdown > docs/model-kinds.md` (a test fails when this file differs).",
        "",
        "**yes**: works. **no**: refused by design, in one line that says why (exit code 2). **not yet**: "
        "should work but does not today (a known bug; its test is a strict xfail, so it fails the day the fix "
        "lands and the table is updated). **–**: does not apply. `sample / predict`: `predict` for the tasks "
        "and the fine-tuned classifier. The subclass row runs the Python functions behind each command on "
        "a `MyGPT` instance (a class cannot be named on the command line).",
        "",
        "| model kind | " + " | ".join(f"`{c}`" for c in COLUMNS.values()) + " |",
        "|---|" + "---|" * len(COLUMNS),
    ]
    notes: dict[str, int] = {}
    footnotes: list[str] = []
    for row, name in ROWS.items():
        cells = []
        for column in COLUMNS:
            kind, match, why = split(EXPECTED[(row, column)])
            if kind in ("ok", "n/a"):
                cells.append("yes" if kind == "ok" else "–")
                continue
            numbers = []
            for part in match.split(AND) if kind == "bug" else [match]:
                key = f"{kind}: {part}"
                if key not in notes:
                    notes[key] = len(notes) + 1
                    said = f"{why} (the message: “{part}”)" if why else f"“{part}”"
                    line = f"Refused: {said}." if kind == "refused" else f"Bug: {part}."
                    footnotes.append(f"{notes[key]}. {line}")
                numbers.append(str(notes[key]))
            cells.append(f"{'no' if kind == 'refused' else 'not yet'} ({', '.join(numbers)})")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join([*lines, "", *footnotes, ""])


# -- the runs each row is made of -----------------------------------------------------------------
QUIET = ["--no-progress", "--quiet", "--workers", "1"]
TINY = [
    *tiny(batch_size=4, eval_batches=1),
    "--max-steps",
    "2",
    "--eval-interval",
    "2",
    "--num-samples",
    "0",
    "--workers",
    "1",
]
STORY = "the cat sat on the mat and the dog ran to the log. " * 40 + "a cat and a dog sat on the log. " * 8
TEXT = {"classifier": "2 0 2 1 2 0 2 1", "seq2seq": "3 1 4", "finetune": "sweet rose, love"}  # else below
BPE_ROWS = ("llama", "bpe", "init-gpt2", "init-llama", "hf-gpt2", "hf-llama")


def text_of(row: str) -> str:
    return TEXT.get(row, "the cat sat" if row in BPE_ROWS else "emma")


def alibi_is_built() -> bool:
    from scratchformer.models import GPTConfig

    return "alibi" in GPTConfig.spec("positional").choices


class Result:
    """What a command did: its exit code and what it printed (a traceback counts as printed);
    `init_model` is the model viz --compare-init drew as the run's initial weights."""

    def __init__(self, rc: int, out: str, err: str):
        self.rc, self.out, self.err = rc, out, err
        self.init_model = None

    def __repr__(self):
        return f"exit {self.rc}\n--- stdout\n{self.out[-3000:]}\n--- stderr\n{self.err[-3000:]}"


def cli(*argv) -> Result:
    """`scratchformer ARGV` in this process; an exception escaping main() is a traceback."""
    from scratchformer.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main([str(a) for a in argv])
        except SystemExit as e:  # argparse's usage errors
            rc = e.code if isinstance(e.code, int) else 1
        except Exception:  # noqa: BLE001 -- a bug: reported as the traceback a user would see
            traceback.print_exc(file=err)
            rc = 1
    return Result(rc, out.getvalue(), err.getvalue())


def api(call) -> Result:
    """call() -> printed text, as a command would end: a ScratchformerError is the one-line
    refusal (exit 2), any other exception a traceback."""
    from scratchformer.errors import ScratchformerError

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            printed = call()
            rc = 0
        except ScratchformerError as e:
            print(f"error: {e}", file=sys.stderr)
            rc, printed = 2, ""
        except Exception:  # noqa: BLE001
            traceback.print_exc()
            rc, printed = 1, ""
    return Result(rc, out.getvalue() + (printed or ""), err.getvalue())


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """The data files and the tiny Hugging Face directories the rows start from."""
    from scratchformer.data import BPETokenizer
    from scratchformer.data.datasets import resolve_data

    root = tmp_path_factory.mktemp("matrix")
    names = root / "names.txt"
    names.write_text("\n".join(resolve_data("names").read_text().splitlines()[:300]) + "\n")
    story = root / "story.txt"
    story.write_text(STORY)
    return {"root": root, "names": names, "story": story, "bpe": BPETokenizer.train([STORY], 280)}


def _hf_dir(files, row: str) -> Path:
    """A tiny random GPT-2 or Llama (transformers' save_pretrained) with a BPE of its vocabulary
    (GPT-2's vocab.json + merges.txt)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    path = files["root"] / row
    if (path / "config.json").exists():
        return path
    path.mkdir()
    tok = files["bpe"]
    tok._tok.model.save(str(path))
    torch.manual_seed(0)
    if row == "hf-gpt2":
        cfg = transformers.GPT2Config(
            n_layer=1, n_head=2, n_embd=16, vocab_size=tok.vocab_size, n_positions=32
        )
        model = transformers.GPT2LMHeadModel(cfg)
    else:
        # a wide feed-forward: SwiGLU's third matrix is more than the 5% a size check lets pass
        cfg = transformers.LlamaConfig(
            hidden_size=16,
            num_attention_heads=2,
            num_key_value_heads=1,
            num_hidden_layers=2,
            intermediate_size=256,
            vocab_size=tok.vocab_size,
            max_position_embeddings=32,
        )
        model = transformers.LlamaForCausalLM(cfg)
    model.eval().save_pretrained(path, safe_serialization=True)
    return path


def _bert_files(files) -> dict:
    """A tiny random BERT directory (tests/tiny_bert.py) and labelled CSVs for the finetune row."""
    pytest.importorskip("transformers")
    from tiny_bert import make_bert_dir, make_csv

    root = files["root"]
    if not (root / "bert").exists():
        make_bert_dir(root / "bert")
        make_csv(root / "train.csv")
        make_csv(root / "test.csv", n=20)
    return {"bert": root / "bert", "train": root / "train.csv", "test": root / "test.csv"}


def train_argv(row: str, files, out: Path) -> list:
    """The command that makes the row's run."""
    names, story = files["names"], files["story"]
    text = ["--data", story, "--format", "text", "--block-size", "16"]
    if row == "gpt":
        return ["train", "--data", names, *TINY, "--out", out]
    if row == "gpt-sin":
        return ["train", "--data", names, "--positional", "sinusoidal", *TINY, "--out", out]
    if row == "alibi":
        return ["train", "--data", names, "--positional", "alibi", *TINY, "--out", out]
    if row == "llama":
        return [
            "train",
            *text,
            "--tokenizer",
            "bpe",
            "--vocab-size",
            "300",
            "--positional",
            "rope",
            "--normalization",
            "rmsnorm",
            "--activation",
            "swiglu",
            "--n-kv-head",
            "1",
            "--no-bias",
            *TINY,
            "--out",
            out,
        ]
    if row == "bpe":
        return ["train", *text, "--tokenizer", "bpe", "--vocab-size", "300", *TINY, "--out", out]
    if row == "classifier":
        return ["train", "--task", "majority", *TINY, "--out", out]
    if row == "seq2seq":
        return ["train", "--task", "reverse", *TINY, "--out", out]
    if row == "finetune":
        b = _bert_files(files)
        return [
            "finetune",
            "--model",
            b["bert"],
            "--data",
            b["train"],
            "--no-freeze-encoder",  # fine-tuned (a CSV this small would train the head alone)
            "--max-length",
            "16",
            "--batch-size",
            "8",
            "--max-steps",
            "2",
            "--eval-interval",
            "2",
            *QUIET,
            "--out",
            out,
        ]
    if row in ("init-gpt2", "init-llama"):
        hf = _hf_dir(files, "hf-gpt2" if row == "init-gpt2" else "hf-llama")
        return [
            "train",
            "--init-from",
            hf,
            *text,
            "--max-steps",
            "2",
            "--eval-interval",
            "2",
            "--batch-size",
            "4",
            "--eval-batches",
            "1",
            "--num-samples",
            "0",
            *QUIET,
            "--out",
            out,
        ]
    raise KeyError(row)


def _subclass_run(files, out: Path) -> tuple[Result, object]:
    """A subclass of GPT trained through the Python API into a run directory the CLI reads."""
    from scratchformer.models import GPT
    from scratchformer.training.jobs import build_job
    from scratchformer.training.trainer import train

    class MyGPT(GPT):
        pass

    job, cfg = build_job(
        "lines",
        model={"n_layer": 1, "n_head": 2, "n_embd": 16},
        train={
            "max_steps": 2,
            "eval_interval": 2,
            "batch_size": 4,
            "eval_batches": 1,
            "workers": 1,
            "num_samples": 0,
        },
        data={"path": str(files["names"])},
    )
    job.model = MyGPT(job.model.config, seed=cfg.seed)
    state = {"job": job, "cfg": cfg, "cls": MyGPT}

    def run():
        train(job, cfg, out, progress=False, verbose=False)
        return ""

    return api(run), state


class Runs:
    """Each row's run, trained on first use and kept for the module."""

    def __init__(self, files, root: Path):
        self.files, self.root, self.done = files, root, {}

    def get(self, row: str):
        if row not in self.done:
            if row.startswith("hf-"):
                self.done[row] = (_hf_dir(self.files, row), None, None)
            elif row == "subclass":
                out = self.root / row
                result, state = _subclass_run(self.files, out)
                self.done[row] = (out, result, state)
            else:
                out = self.root / row
                self.done[row] = (out, cli(*train_argv(row, self.files, out)), None)
        return self.done[row]


@pytest.fixture(scope="module")
def runs(files, tmp_path_factory):
    return Runs(files, tmp_path_factory.mktemp("runs"))


# -- the cells ---------------------------------------------------------------------------------------
def _lens_args(text: str) -> Namespace:
    """`lens --text TEXT` as the command's own parser reads it (every other option at its default)."""
    from scratchformer.cli.main import build_parser

    return build_parser().parse_args(["lens", "--text", text])


def _subclass_cell(column: str, run: Path, state: dict, out: Path) -> Result:
    """The subclass row: the Python functions behind each command, on the MyGPT instance."""
    from scratchformer.cli import lens as lens_cli
    from scratchformer.cli.viz import DEFAULT_FIGURES
    from scratchformer.training.trainer import train
    from scratchformer.viz import report

    job, cfg, cls = state["job"], state["cfg"], state["cls"]
    text = text_of("subclass")

    def viz(only=DEFAULT_FIGURES, init=False):
        inputs = job.viz_inputs(text)
        init_model = (
            cls(type(job.model.config).from_dict(job.model.config.to_dict()), seed=cfg.seed) if init else None
        )
        paths = report(job.model, out, log=run / "log.jsonl", only=only, init_model=init_model, **inputs)
        return "\n".join(str(p) for p in paths)

    def resume():
        from dataclasses import replace

        train(job, replace(cfg, max_steps=3), run, resume=True, progress=False, verbose=False)
        return ""

    def sample():
        ids = job.tokenizer.encode("em")[None]
        return job.tokenizer.decode(job.model.generate(ids, 5, rng=0)[0]) + "\n"

    cells = {
        "resume": resume,
        "sample": sample,
        "eval": lambda: json.dumps(job.evaluate("test")) + "\n",
        "viz": viz,
        "viz-all": lambda: viz(only=None),
        "viz-init": lambda: viz(init=True),
        "lens": lambda: lens_cli._text(lens_cli._run_report(job, _lens_args(text))),
        "lens-json": lambda: json.dumps(lens_cli._run_report(job, _lens_args(text))),
    }
    if column in cells:
        assert isinstance(job.model, cls)
        return api(cells[column])
    if column == "export":  # the checkpoint, read by the command line
        return cli("export", run, "--hf", out / "hf")
    raise KeyError(column)


def run_cell(row: str, column: str, runs: Runs, out: Path) -> Result:
    """Run one cell; `out` is a fresh directory for what it writes."""
    run, trained, state = runs.get(row)
    if column == "train":
        return trained
    if row == "subclass":
        return _subclass_cell(column, run, state, out)
    text = text_of(row)
    task = row in ("classifier", "seq2seq", "finetune")
    if column == "resume":
        command = "finetune" if row == "finetune" else "train"
        return cli(command, "--resume", "--out", run, "--max-steps", "3", *QUIET)
    if column == "sample":
        if task:
            return cli("predict", run, text)
        return cli("sample", run, "-n", "2", "--seed", "0", "--max-new-tokens", "4", "--prompt", text[:2])
    if column == "eval":
        extra = ["--data", _bert_files(runs.files)["test"]] if row == "finetune" else []
        return cli("eval", run, "--json", "--workers", "1", *extra)
    if column in ("viz", "viz-all", "viz-init"):
        extra = {"viz": [], "viz-all": ["--all"], "viz-init": ["--compare-init"]}[column]
        return _viz_keeping_init_model("viz", run, "--text", text, "--out", out / "viz", *extra)
    if column in ("lens", "lens-json"):
        return cli("lens", run, "--text", text, *(["--json"] if column == "lens-json" else []))
    if column == "export":
        return cli("export", run, "--hf", out / "hf")
    if column == "sample-hf":
        return cli(
            "sample",
            "--hf",
            run,
            "--prompt",
            "the cat",
            "-n",
            "1",
            "--max-new-tokens",
            "4",
            "--temperature",
            "0",
            "--seed",
            "0",
        )
    if column == "lens-hf":
        return cli("lens", "--hf", run, "--text", text)
    raise KeyError(column)


def _viz_keeping_init_model(*argv) -> Result:
    """`scratchformer viz ...`, keeping the init_model the command hands to viz.report."""
    import scratchformer.viz

    seen, report = {}, scratchformer.viz.report

    def spy(model, out_dir, *args, **kwargs):
        seen["init_model"] = kwargs.get("init_model")
        return report(model, out_dir, *args, **kwargs)

    scratchformer.viz.report = spy
    try:
        r = cli(*argv)
    finally:
        scratchformer.viz.report = report
    r.init_model = seen.get("init_model")
    return r


def check_output(row: str, column: str, r: Result, runs: Runs, out: Path) -> None:
    """A cheap check that a cell that worked did what its command says."""
    import numpy as np

    from scratchformer.training.checkpoint import load_checkpoint

    run = runs.get(row)[0]
    if column == "train":
        assert load_checkpoint(run / "last").step == 2
        if row == "subclass":  # the command line reads what the API wrote
            assert cli("eval", run, "--json", "--workers", "1").rc == 0
    elif column == "resume":
        assert load_checkpoint(run / "last").step == 3
    elif column == "sample":
        assert r.out, "printed nothing"  # a seq2seq answer of 2 steps' training may be empty
        if row not in TASK_ROWS:
            assert text_of(row)[:2] in r.out
    elif column == "eval":
        result = json.loads(r.out.strip().splitlines()[-1])
        assert result["loss"] == result["loss"] and result["loss"] >= 0  # a number, not NaN
    elif column in ("viz", "viz-all", "viz-init"):
        html = [line for line in r.out.splitlines() if line.endswith("report.html")]
        assert html and Path(html[-1]).is_file()
        pngs = {p.name for p in Path(html[-1]).parent.glob("*.png")}
        if column == "viz-init":
            assert any(name.endswith("_init.png") for name in pngs), pngs
            start = r.init_model.state_dict() if r.init_model is not None else None
            if row.startswith("init-"):  # the run's initial weights are the directory's
                from scratchformer.interop.hf_lm import load_hf_causal_lm

                hf = load_hf_causal_lm(runs.get("hf-" + row[len("init-") :])[0])[0].state_dict()
                assert start is not None and set(start) == set(hf)
                assert all(np.array_equal(start[k], hf[k]) for k in hf), "not the directory's weights"
            elif row != "subclass":
                trained = load_checkpoint(run / "best").model_state
                assert start is not None and any(not np.array_equal(start[k], v) for k, v in trained.items())
        if column == "viz-all":  # every figure, and the Lens part: its figures and check lines
            assert len(pngs) > 5 and any(name.startswith("lens_") for name in pngs), pngs
            page = Path(html[-1]).read_text(encoding="utf-8")
            checks = page.split('<pre id="sf-checks">')[1].split("</pre>")[0].splitlines()
            assert checks and all(c.startswith("check ") and c.endswith(" ok") for c in checks), checks
    elif column in ("lens", "lens-hf"):
        checks = [line for line in r.out.splitlines() if line.startswith("check ")]
        assert checks and all(line.endswith(" ok") for line in checks), r.out
    elif column == "lens-json":
        report = json.loads(r.out)
        assert report["checks"] and all(c.endswith(" ok") for c in report["checks"]), report["checks"]
    elif column == "export":
        assert json.loads((out / "hf" / "config.json").read_text())["model_type"] in ("gpt2", "llama")
    elif column == "sample-hf":
        assert "the cat" in r.out


def _cases():
    for row in ROWS:
        for column in COLUMNS:
            value = EXPECTED[(row, column)]
            marks = []
            if value.startswith("bug: "):
                marks.append(pytest.mark.xfail(strict=True, reason=value[len("bug: ") :]))
            if value.startswith("n/a"):
                continue
            if row == "alibi":
                marks.append(
                    pytest.mark.skipif(
                        not alibi_is_built(),
                        reason="'alibi' is not among "
                        "GPTConfig.positional's choices yet: the row runs once it is",
                    )
                )
            yield pytest.param(row, column, marks=marks, id=f"{row}-{column}")


@pytest.mark.parametrize("row, column", list(_cases()))
def test_cell(row, column, runs, tmp_path):
    """One cell of the matrix: it works, or it is refused in one line; never a traceback."""
    kind, match, _ = split(EXPECTED[(row, column)])
    r = run_cell(row, column, runs, tmp_path)
    assert "Traceback" not in r.out + r.err, r
    if kind == "refused":
        lines = r.err.strip().splitlines()
        assert r.rc == 2 and len(lines) == 1, r
        assert match in lines[0], r
        return
    assert r.rc == 0, r
    check_output(row, column, r, runs, tmp_path)


def test_the_cells_see_a_traceback_and_a_long_refusal(monkeypatch):
    """The harness itself: a command that raises is a traceback; one that exits 2 is a refusal."""
    from scratchformer.cli import main as cli_main
    from scratchformer.errors import DataError

    def boom(args):
        raise KeyError("pos_embed")

    monkeypatch.setitem(cli_main.COMMANDS, "eval", boom)
    r = cli("eval", "somewhere")
    assert r.rc == 1 and "Traceback" in r.err and "KeyError: 'pos_embed'" in r.err

    def refuse(args):
        raise DataError("no such thing: give another")

    monkeypatch.setitem(cli_main.COMMANDS, "eval", refuse)
    r = cli("eval", "somewhere")
    assert r.rc == 2 and r.err == "scratchformer eval: error: no such thing: give another\n"
    crashed = api(lambda: {}["pos_embed"])
    assert crashed.rc == 1 and "Traceback" in crashed.err
    refused = api(lambda: refuse(None))
    assert refused.rc == 2 and refused.err == "error: no such thing: give another\n"
    assert api(lambda: "printed\n").out == "printed\n"


def test_every_cell_has_one_outcome():
    assert set(EXPECTED) == {(r, c) for r in ROWS for c in COLUMNS}
    for value in EXPECTED.values():
        kind, match, _ = split(value)
        assert kind in ("ok", "refused", "bug", "n/a") and (kind == "ok") == (match == ""), value


def test_the_docs_table_is_generated_from_this_one():
    assert DOC.read_text(encoding="utf-8") == markdown(), (
        "docs/model-kinds.md is stale: python tests/cli/test_matrix.py --markdown > docs/model-kinds.md"
    )


if __name__ == "__main__" and "--markdown" in sys.argv:
    sys.stdout.write(markdown())
    sys.exit(0)
