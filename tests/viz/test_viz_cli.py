"""`scratchformer viz` on every checkpoint kind (a tiny GPT, classifier and seq2seq run trained
for a few steps), on the installed all-MiniLM-L6-v2 (--bert), the training-curve PNG that
`train` leaves in the run directory, and bad input: one stderr line, exit code 2."""

import os
from pathlib import Path

import pytest
from tiny_run import TINY

from scratchformer.cli import viz as cli_viz
from scratchformer.cli.main import main
from scratchformer.training.jobs import build_job
from scratchformer.training.trainer import train
from scratchformer.viz.backward import THOROUGH

PNG = b"\x89PNG\r\n\x1a\n"

TINY_TASK = (
    {"n_layer": 1, "n_head": 2, "n_embd": 16, "n_inner": 32},
    {"max_steps": 4, "eval_interval": 2, "batch_size": 8, "warmup_steps": 1},
    {"n_train": 200, "n_test": 20},
)


@pytest.fixture(scope="module")
def gpt_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("viz") / "names"
    assert main(["train", "--max-steps", "4", "--eval-interval", "2", "--out", str(out), *TINY]) == 0
    return out


@pytest.fixture(scope="module")
def task_runs(tmp_path_factory):
    """{"majority": a classifier run, "reverse": a seq2seq run}, a few steps each."""
    runs = {}
    for task in ("majority", "reverse"):
        runs[task] = tmp_path_factory.mktemp("viz") / task
        job, cfg = build_job(task, *TINY_TASK)
        train(job, cfg, runs[task], progress=False, verbose=False)
    return runs


@pytest.fixture(params=["majority", "reverse"])
def task_run(request, task_runs):
    return task_runs[request.param]


def printed_paths(capsys) -> list[Path]:
    return [Path(line) for line in capsys.readouterr().out.split("\n") if line]


def check_pngs(paths):
    assert paths[-1].name == "report.html" and paths[-1].stat().st_size > 10_000
    pngs = [p for p in paths[:-1] if p.name != "backward.txt"]  # the walk-through's steps as text
    for p in pngs:
        assert p.suffix == ".png" and p.read_bytes().startswith(PNG) and p.stat().st_size > 5000, p
    html = paths[-1].read_text()
    walk = "backward" in {p.stem for p in pngs}  # shown in the page's interactive Backward part instead
    assert html.count('src="data:image/png;base64,') == len(pngs) - walk  # every other figure embedded
    assert ('id="sf-backward"' in html) == walk
    return html


def test_train_leaves_the_training_curves_in_the_run(gpt_run):
    assert (gpt_run / "training_curves.png").read_bytes().startswith(PNG)


def test_viz_gpt_run_defaults(gpt_run, capsys):
    assert main(["viz", str(gpt_run)]) == 0
    paths = printed_paths(capsys)
    assert all(p.parent == gpt_run / "viz" for p in paths)  # --out defaults to RUN_DIR/viz
    assert [p.stem for p in paths] == [
        "attention_grid",
        "attention_steps",
        "embedding_pca",
        "residual_norms",
        "training_curves",
        "report",
    ]
    html = check_pngs(paths)
    assert "best val loss" in html and "emma" in html  # the run's log; the default name


def test_viz_reads_a_checkpoint_directory(gpt_run, tmp_path, capsys):
    """A checkpoint directory (best/) draws as its run does: its training curves from the run's
    log beside it (every figure of --all: the matrix's viz-all cells, tests/cli/test_matrix.py)."""
    assert main(["viz", str(gpt_run / "best"), "--text", "ann", "--out", str(tmp_path)]) == 0
    paths = printed_paths(capsys)
    assert {"attention_grid", "embedding_pca", "residual_norms", "training_curves"} <= {p.stem for p in paths}
    check_pngs(paths)


def test_viz_task_runs(task_run, tmp_path, capsys):
    text = "2 0 2 1" if task_run.name == "majority" else "3 1 4 1 5"
    assert main(["viz", str(task_run), "--text", text, "--out", str(tmp_path)]) == 0
    paths = printed_paths(capsys)
    html = check_pngs(paths)
    assert f"{task_run.name}: {text} -&gt; " in html  # the title shows the model's answer
    kind_figure = "classifier_attention" if task_run.name == "majority" else "attention_seq2seq"
    assert kind_figure in {p.stem for p in paths}
    if task_run.name == "reverse":  # the explorer's three tabs; the decoder rows start at <bos>
        assert '"name": "cross"' in html and '"queries": ["<bos>"' in html


@pytest.mark.parametrize("which", ["gpt", "majority"])
def test_viz_backward_prints_and_draws_the_walk_through_alone(which, gpt_run, task_runs, tmp_path, capsys):
    run = gpt_run if which == "gpt" else task_runs[which]
    text = ["--text", "2 0 2 1"] if which == "majority" else []
    assert main(["viz", str(run), "--backward", "--out", str(tmp_path), *text]) == 0
    out = capsys.readouterr().out.splitlines()
    table, paths = out[:-3], [Path(line) for line in out[-3:]]
    assert [p.name for p in paths] == ["backward.png", "backward.txt", "report.html"]
    check_pngs(paths)
    assert "\n".join(table) + "\n" == paths[1].read_text()  # what was printed is what was written
    assert table[-1].startswith("all ") and "steps agree with finite differences" in table[-1]
    assert table[-2] == f"checked: {THOROUGH.describe()}"  # alone: the API's default, not the report's QUICK
    names = [line.split()[1] for line in table[:-2]]
    attention = "h.0.self_attn" if which == "gpt" else "blocks.0.self_attn"
    own = [n.removeprefix(attention + ".") for n in names if n.startswith(attention + ".")]
    inside = [n for n in own if "." not in n and n != "dropout_backward"]  # its own ops and layers, in order
    assert inside[1:5] == [
        "attention_backward",
        "weighted_sum_backward",
        "softmax_backward",
        "scores_backward",
    ]
    assert ("pool_backward" in names) == (which == "majority")
    assert all((" [reference]" in line) != (" [module]" in line) for line in table[:-2])


def test_viz_task_default_text(task_run, capsys):
    assert main(["viz", str(task_run)]) == 0
    assert printed_paths(capsys)[-1] == task_run / "viz" / "report.html"


def test_viz_bert(tmp_path, capsys):
    from scratchformer.errors import CheckpointError
    from scratchformer.interop.sentence import default_model_dir

    try:
        default_model_dir()
    except CheckpointError as e:
        if os.environ.get("CI") == "true":
            raise
        pytest.skip(f"all-MiniLM-L6-v2 package not installed: {e}")
    assert main(["viz", "--bert", "--text", "The cat sat on the mat.", "--out", str(tmp_path)]) == 0
    paths = printed_paths(capsys)
    html = check_pngs(paths)
    assert "attention_grid" in {p.stem for p in paths} and "[CLS]" in html.split("sf-data")[1]


def test_viz_bert_says_when_it_cuts_a_long_text(tmp_path):
    from scratchformer.errors import CheckpointError
    from scratchformer.interop.sentence import default_model_dir
    from scratchformer.interop.wordpiece import WordPieceTokenizer
    from scratchformer.viz.bundle import report_bert

    try:
        path = default_model_dir()
    except CheckpointError as e:
        if os.environ.get("CI") == "true":
            raise
        pytest.skip(f"all-MiniLM-L6-v2 package not installed: {e}")
    text = "the cat sat on the mat. " * 100
    total = WordPieceTokenizer.from_dir(path).count_tokens(text)
    notes = []
    paths = report_bert(tmp_path, text, only=[], on_note=notes.append)  # the page alone: no figure to draw
    assert total > 256 and notes == [f"{total} tokens, first 256 shown"]
    assert f"({notes[0]})" in (tmp_path / "report.html").read_text() and paths
    notes.clear()
    report_bert(tmp_path / "short", "The cat sat on the mat.", only=[], on_note=notes.append)
    assert notes == []  # a text that fits: nothing cut, nothing said


@pytest.mark.parametrize(
    "argv, message",
    [
        (["viz", "{missing}"], "checkpoint not found"),
        (["viz", "{gpt}", "--text", "Emma!"], "not in the vocabulary"),
        (["viz", "{gpt}", "--text", "abcdefghijklmnopqrstuvwxyz"], "give a shorter text"),
        (["viz", "{majority}", "--text", "3 a"], "bad token"),
        (["viz", "{majority}", "--text", "5 5 5"], "only the digits 0, 1 and 2"),
        (["viz", "{reverse}", "--text", "1 2 3 4 5 6 7 8 9 0 1 2 3 4 5"], "at most"),
        (["viz", "--bert"], "--bert needs --text"),
        (["viz", "{gpt}", "--bert", "x", "--text", "a"], "not both"),
        (["viz", "{gpt}", "--out", "{file}/sub"], "cannot create --out"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv, message, gpt_run, task_runs, tmp_path, capsys):
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    names = {
        "missing": "/nonexistent/run",
        "gpt": str(gpt_run),
        "file": str(a_file),
        **{k: str(v) for k, v in task_runs.items()},
    }
    argv = [a.format(**names) for a in argv]
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("scratchformer viz: error: ") and message in err, err


def test_training_curves_failure_is_one_warning(tmp_path, monkeypatch, capsys):
    import scratchformer.viz as viz

    def broken(*a, **k):
        raise RuntimeError("no renderer")

    monkeypatch.setattr(viz, "training_curves", broken)
    assert cli_viz.write_training_curves(tmp_path) is None
    err = capsys.readouterr().err
    assert err == "warning: training curves not drawn (RuntimeError: no renderer)\n"


def test_text_run_needs_text_and_reads_its_prompt(tmp_path, capsys):
    data = tmp_path / "text.txt"
    data.write_text("to be or not to be, that is the question. " * 40)
    run = tmp_path / "text"
    assert (
        main(
            [
                "train",
                "--data",
                str(data),
                "--format",
                "text",
                "--block-size",
                "16",
                "--max-steps",
                "2",
                "--eval-interval",
                "2",
                "--out",
                str(run),
                *TINY,
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert main(["viz", str(run)]) == 2
    assert "needs an input: --text" in capsys.readouterr().err
    assert main(["viz", str(run), "--text", "to be or not"]) == 0
    assert printed_paths(capsys)[-1] == run / "viz" / "report.html"


# -- one-token inputs and tiny models (issue 18 item 19) ---------------------------------------
@pytest.mark.parametrize("which, text", [("gpt", ""), ("gpt", "a"), ("majority", "1"), ("reverse", "1")])
def test_one_token_input_draws_every_figure(which, text, gpt_run, task_runs, tmp_path, capsys):
    run = gpt_run if which == "gpt" else task_runs[which]
    assert main(["viz", str(run), "--text", text, "--all", "--out", str(tmp_path / "v")]) == 0
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err and "Glyph" not in captured.err, captured.err
    check_pngs(printed_paths_from(captured.out))


def printed_paths_from(out: str) -> list[Path]:
    return [Path(line) for line in out.split("\n") if line]


@pytest.mark.parametrize(
    "sizes",
    [
        ["--n-embd", "1", "--n-head", "1"],
        ["--block-size", "1", "--format", "text", "--n-embd", "8", "--n-head", "2"],
    ],
)
def test_width_1_and_block_size_1_models_draw(sizes, tmp_path, capsys):
    data = tmp_path / "text.txt"
    data.write_text("to be or not to be, that is the question. " * 40)
    run = tmp_path / "run"
    tiny = ["--n-layer", "1", "--batch-size", "8", "--eval-batches", "2", "--no-progress", "--quiet"]
    assert (
        main(
            [
                "train",
                "--data",
                str(data),
                "--max-steps",
                "2",
                "--eval-interval",
                "2",
                "--out",
                str(run),
                *tiny,
                *sizes,
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert main(["viz", str(run), "--text", "t", "--all", "--out", str(tmp_path / "v")]) == 0
    check_pngs(printed_paths(capsys))


def test_failed_viz_leaves_no_empty_output_directory(gpt_run, tmp_path, capsys):
    out = tmp_path / "new" / "figures"
    assert main(["viz", str(gpt_run), "--text", "Emma!", "--out", str(out)]) == 2  # '!' not in the names
    assert not (tmp_path / "new").exists()


def test_missing_glyphs_draw_without_warnings(tmp_path, recwarn):
    from scratchformer.viz._plot import finish, new_figure

    fig = new_figure(2, 2)
    fig.subplots().set_title("\u16a0\u16c7 \U0001f642")  # runes and an emoji: not in DejaVu Sans
    finish(fig, tmp_path / "x.png")
    assert not [w for w in recwarn if "Glyph" in str(w.message)]
    assert (tmp_path / "x.png").read_bytes().startswith(PNG)
