"""Smoke tests of the side-by-side benchmark suite (benchmarks/suite.py): it runs, and what it
writes has the fields docs/performance.md reads. No timing is asserted (speed belongs in the
suite's own output, not in tests)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="the suite compares against PyTorch")
pytest.importorskip("threadpoolctl", reason="the suite reports the BLAS kernel with threadpoolctl")

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
import suite  # noqa: E402


def test_quick_training_run_prints_the_table_and_writes_json(tmp_path):
    out = tmp_path / "suite.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "suite.py"),
            "--quick",
            "--only",
            "train,long",
            "--configs",
            "tiny",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "train tiny" in proc.stdout and "ratio" in proc.stdout and "OPENBLAS_CORETYPE=" in proc.stdout
    res = json.loads(out.read_text())
    tiny = res["train"]["tiny"]
    assert res["quick"] and res["pairs"] == 1 and len(tiny["ratios"]) == 1
    ours, theirs = tiny["scratchformer_summary"], tiny["reference_summary"]
    for side in (ours, theirs):
        assert side["tokens_per_s"] > 0 and side["peak_rss_mib"] > 0 and 0 < side["mfu"]
        assert min(side["forward_ms"], side["backward_ms"], side["optimiser_ms"]) > 0 < side["step_ms"]
    assert tiny["ratio"] == pytest.approx(ours["tokens_per_s"] / theirs["tokens_per_s"])
    assert (
        tiny["gemm_gflops"] > 0 and tiny["torch_gemm_gflops"] > 0
    )  # NumPy's BLAS and PyTorch's, same shapes
    env = res["environment"]
    assert env["blas"] and "OPENBLAS_CORETYPE" in env["env"]
    assert isinstance(env["cpu_flags"], list) and set(env["cpu_flags"]) <= set(suite.CPU_FLAGS)
    assert env["torch_blas"]["blas_info"] and "mkldnn" in env["torch_blas"]
    # both sides' GEMM rate at each measured config's own step shapes, in the header and the JSON
    assert set(env["gemm_gflops"]) == {"numpy", "torch"}
    for lib in ("numpy", "torch"):
        assert set(env["gemm_gflops"][lib]) == {"tiny", "long-1024-quick"}
        assert all(rate > 0 for rate in env["gemm_gflops"][lib].values())
    assert "float32 GEMM GFLOP/s at each step's shapes" in proc.stdout and "tiny " in proc.stdout
    # long context: the library alone (one process) against PyTorch, at T = 1024
    long = res["long"]["long-1024-quick"]
    assert "long long-1024-quick" in proc.stdout and long["workers"] == 1
    assert suite.LONG_QUICK["long-1024-quick"][4] == suite.LONG_CONFIGS["long-1024"][4] == 1024
    for side in (long["scratchformer_summary"], long["reference_summary"]):
        assert side["tokens_per_s"] > 0 and side["peak_rss_mib"] > 0 and side["peak_rss_above_start_mib"] >= 0
    table = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "suite.py"), "--markdown", str(out)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert table.returncode == 0 and "| tiny (16, 1, 2, 32, 16, 8) |" in table.stdout
    assert "| long-1024-quick (65, 1, 2, 32, 1024, 1) |" in table.stdout


def test_a_fresh_clone_without_the_data_still_runs(tmp_path, monkeypatch):
    """No ../shared/data/tinyshakespeare.txt (a fresh clone): --quick embeds README.md's lines,
    a full run leaves embed out with a note, and only an explicit request fails, in one line."""
    monkeypatch.setattr(suite, "DEFAULT_DATA", tmp_path / "missing.txt")
    sections = {"train", "embed"}
    path, note = suite.resolve_data(None, sections, named=False, quick=True, e2e=False)
    assert (
        path.endswith("README.md") and Path(path).is_file() and "missing.txt" in note and "embed" in sections
    )
    path, note = suite.resolve_data(None, sections, named=False, quick=False, e2e=False)
    assert path is None and sections == {"train"} and "embed left out" in note
    for kwargs in (dict(named=True, quick=False, e2e=False), dict(named=False, quick=True, e2e=True)):
        with pytest.raises(SystemExit, match="not found: pass --data"):
            suite.resolve_data(None, {"embed"}, **kwargs)
    with pytest.raises(SystemExit, match="nowhere.txt not found"):
        suite.resolve_data(str(tmp_path / "nowhere.txt"), {"embed"}, named=False, quick=True, e2e=False)
    given = tmp_path / "text.txt"
    given.write_text("a line\n")
    assert suite.resolve_data(str(given), {"embed"}, named=False, quick=False, e2e=False) == (str(given), "")


def test_pairs_alternate_and_the_ratio_is_the_median_of_pair_ratios(monkeypatch):
    calls = []
    speeds = iter([3.0, 1.0, 2.0, 1.0, 10.0, 1.0])  # ours, theirs, ours, theirs, ...

    def fake_worker(args):
        calls.append(args[0])
        return {"tokens_per_s": next(speeds)}

    monkeypatch.setattr(suite, "run_worker", fake_worker)
    res = suite.paired(lambda lib: [lib], pairs=3, metric="tokens_per_s")
    assert calls == ["scratchformer", "reference"] * 3
    assert res["ratios"] == [3.0, 2.0, 10.0] and res["ratio"] == 3.0


def test_unknown_section_or_config_is_one_clear_line(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "suite.py"),
            "--configs",
            "huge",
            "--json",
            str(tmp_path / "x.json"),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert proc.returncode != 0 and "configs are tiny, names" in proc.stderr and "long" in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "x.json").exists()


def test_ab_step_prints_one_json_line_and_refuses_unknown_configs():
    script = str(REPO / "benchmarks" / "ab_step.py")
    proc = subprocess.run(
        [sys.executable, script, "names", "--steps", "3", "--warmup", "1"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    row = json.loads(proc.stdout.strip().splitlines()[-1])
    assert row["config"] == "names" and row["ms"] > 0
    bad = subprocess.run(
        [sys.executable, script, "huge"], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert bad.returncode == 2 and bad.stderr.startswith("usage:")


def test_ab_step_compares_two_commits_in_alternating_processes(tmp_path):
    script = str(REPO / "benchmarks" / "ab_step.py")
    out = tmp_path / "ab.json"
    configs = ["names", "shakespeare-cpu"]  # both sizes in one command, on the same two trees
    args = [
        *configs,
        "--against",
        "HEAD",
        "--pairs",
        "2",
        "--steps",
        "2",
        "--warmup",
        "1",
        "--json",
        str(out),
    ]
    proc = subprocess.run(
        [sys.executable, script, *args], capture_output=True, text=True, cwd=REPO, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = json.loads(out.read_text())
    assert [r["config"] for r in results] == configs
    for result in results:
        assert (
            result["old"] != "working tree" and result["new"] == "working tree" and len(result["pairs"]) == 2
        )
        for pair in result["pairs"]:
            assert pair["ratio"] == pytest.approx(pair["old"]["ms"] / pair["new"]["ms"])
            assert pair["old"]["blas"] and pair["new"]["blas"]  # the kernel each process ran, named
        assert f"median old/new {result['median_ratio']:.3f}" in proc.stdout
    assert proc.stdout.count("CPU: ") == 2
    bad = subprocess.run(
        [sys.executable, script, "names", "--against", "no-such-commit"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert bad.returncode == 2 and bad.stderr.strip().splitlines()[-1].endswith(
        "give a commit, branch or tag"
    )
    no_valgrind = subprocess.run(
        [sys.executable, script, "names", "--against", "HEAD", "--instructions"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PATH": str(tmp_path)},  # nothing to run there
    )
    assert no_valgrind.returncode == 2 and "--instructions needs valgrind" in no_valgrind.stderr


def test_gemm_floor_runs_every_product_of_a_slice_and_prints_json():
    import gemm_floor

    V, L, H, C, T, B = suite.TRAIN_CONFIGS["names"]
    rows, bh, hd = (B // 2) * T, (B // 2) * H, C // H
    linear = 2 * rows * (L * (C * 3 * C + C * C + 2 * C * 4 * C) + C * V)  # forward FLOPs of the linears
    attention = L * 6 * 2 * bh * T * T * hd  # scores, output, and their four backward products
    flops = 0
    for a, b in gemm_floor.step_products("names", workers=2):
        assert a.dtype == b.dtype == "float32" and a.shape[:-2] == b.shape[:-2] and a.shape[-1] == b.shape[-2]
        flops += 2 * a[..., 0].size * a.shape[-1] * b.shape[-1]
    assert flops == 3 * linear + attention  # forward, dx and dW of each linear
    script = str(REPO / "benchmarks" / "gemm_floor.py")
    proc = subprocess.run(
        [sys.executable, script, "tiny", "--reps", "2"], capture_output=True, text=True, cwd=REPO, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    row = json.loads(proc.stdout.strip().splitlines()[-1])
    assert row["config"] == "tiny" and row["products_ms_alone"] > 0 and row["step_ms_alone"] > 0
    assert len(row["products_ms_together"]) == len(row["step_ms_together"]) == 2
    bad = subprocess.run(
        [sys.executable, script, "huge"], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert bad.returncode == 2 and "configs are tiny" in bad.stderr and "Traceback" not in bad.stderr


def test_memory_sees_the_peak_of_the_processes_while_extra_steps_run():
    import mmap
    import time

    def step():  # 64 MiB of fresh pages (a mapping of its own, not reused heap) touched, held 60 ms, freed
        pages = mmap.mmap(-1, 64 << 20)
        pages.write(b"\1" * (64 << 20))
        time.sleep(0.06)
        pages.close()

    result = {}
    suite._memory(result, ["self"], [("step", step)], steps=2)
    assert result["peak_rss_mib"] >= result["pss_mib"] > 0
    assert result["peak_pss_mib"] >= result["pss_mib"] + 48  # the 64 MiB a step holds were seen


def test_fast_pieces_save_the_big_temporaries(monkeypatch):
    import fast_pieces

    from scratchformer.fast import attention as fast_attention
    from scratchformer.fast import linear as fast_linear

    monkeypatch.setattr(fast_linear, "BLOCK_BYTES", 64 * 32 * 4)  # a (1000, 32) weight in blocks of 64 rows
    monkeypatch.setattr(
        fast_attention, "CHUNK_BYTES", 2 * 256 * 4 * 16
    )  # (1, 2, 256, 8) in blocks of 16 queries
    rows = {
        row["piece"].split()[0]: row
        for row in fast_pieces.pieces(
            tokens=16, vocab=1000, width=32, gelu_shape=(300, 500), attn_shape=(1, 2, 256, 8), repeats=1
        )
    }
    assert set(rows) == {
        "log_softmax_forward",
        "linear_backward_into",
        "attention_forward+backward",
        "gelu_forward",
        "gelu_with_grad",
    }
    for row in rows.values():
        (_, before), (_, after) = row["before"], row["after"]
        assert after < before, row  # each fast form holds less at its peak than the form it replaces


def test_modadd_step_quick_runs_both_sides_on_the_same_model(tmp_path):
    """benchmarks/modadd_step.py --quick: the modadd step in scratchformer and in PyTorch (the same
    weights: the same loss at init) and its GEMM floor, with the CPU and the BLAS kernel printed.
    No timing is asserted."""
    out = tmp_path / "modadd.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "modadd_step.py"),
            "--quick",
            "--threads",
            "1",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (
        "OPENBLAS_CORETYPE=" in proc.stdout and "openblas" in proc.stdout.lower()
    )  # the kernel, threadpoolctl
    assert "GEMM floor" in proc.stdout and "scratchformer / PyTorch step time" in proc.stdout
    res = json.loads(out.read_text())
    assert (
        res["quick"]
        and res["data"]["modulus"] == 13
        and res["environment"]["cpu"]
        and res["environment"]["blas"]
    )
    ours, theirs = res["scratchformer"][0], res["torch"][0]
    assert ours["pairs"] == theirs["pairs"] == round(0.3 * 13**2) and ours["positions"] == 3
    assert (ours["n_embd"], ours["n_head"], ours["n_inner"], ours["dtype"]) == (128, 4, 512, "float32")
    assert ours["loss_at_init"] == pytest.approx(
        theirs["loss_at_init"], rel=1e-5
    )  # the same model and weights
    for side in (ours, theirs):
        assert min(side["forward_ms"], side["backward_ms"], side["optimiser_ms"], side["floor_ms"]) > 0
        assert side["step_gflop"] > 0 and side["gemm_gflops"] > 0


def test_gelu_ab_times_this_checkouts_gelu_against_a_commits():
    script = str(REPO / "benchmarks" / "gelu_ab.py")
    args = ["--against", "HEAD", "--rounds", "1", "--calls", "1"]
    proc = subprocess.run(
        [sys.executable, script, *args], capture_output=True, text=True, cwd=REPO, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == [
        "gelu_with_grad (512, 256)",
        "gelu_with_grad (768, 512)",
    ]
    assert all("old/new" in line for line in lines)
    bad = subprocess.run(
        [sys.executable, script, "--against", "no-such-commit"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert bad.returncode != 0 and "no fast/activations.py at 'no-such-commit'" in bad.stderr
