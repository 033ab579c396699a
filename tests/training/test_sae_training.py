"""An autoencoder run is a run: `scratchformer sae` trains both kinds on a tiny names GPT and
writes checkpoints, SAELens's measures in the log and SAELens's layout; a run killed between
two checkpoints resumes to the uninterrupted run bit for bit; bad input is one line (exit 2)."""

import json
import os

import numpy as np
import pytest

from scratchformer.cli.main import main
from scratchformer.training.checkpoint import load_checkpoint
from scratchformer.training.lm import LMJob
from scratchformer.training.sae import SAEJob, build_sae_job
from scratchformer.training.trainer import TrainConfig, train

SITE = "blocks.0.resid_post"
SMALL = ["--d-sae", "32", "--k", "4", "--batch-size", "32", "--pool", "2", "--eval-batches", "1"]


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A 1-layer names GPT trained for 4 steps: its run directory."""
    out = tmp_path_factory.mktemp("base") / "names"
    job = LMJob.create("lines", dict(n_layer=1, n_head=2, n_embd=16), {"split_seed": 1337}, 0)
    cfg = TrainConfig(max_steps=4, batch_size=16, eval_interval=4, eval_batches=1, num_samples=0, workers=1)
    train(job, cfg, out, progress=False, verbose=False)
    return out


def read_log(path):
    return [json.loads(line) for line in (path / "log.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("kind", ["topk", "relu"])
def test_the_command_trains_both_kinds(base, tmp_path, capsys, kind):
    out = tmp_path / kind
    argv = [
        "sae",
        str(base),
        "--site",
        SITE,
        "--kind",
        kind,
        *SMALL,
        "--max-steps",
        "4",
        "--eval-interval",
        "2",
    ]
    assert main([*argv, "--out", str(out), "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "training SparseAutoencoder" in printed and f"{out / 'saelens'}" in printed
    for which in ("best", "last"):
        assert (out / which / "model.safetensors").is_file()
    evals = [r for r in read_log(out) if "val_loss" in r]
    assert [r["step"] for r in evals] == [2, 4]
    for key in ("l0", "l1", "mse", "explained_variance", "l2_ratio", "ce_loss_score", "kl_div_score"):
        assert np.isfinite(evals[-1][f"val_{key}"]), key
    assert {"val_dead_in_eval", "val_dense_in_eval", "val_dead_features"} <= set(evals[-1])
    if kind == "topk":
        assert evals[-1]["val_l0"] <= 4
    cfg = json.loads((out / "saelens" / "cfg.json").read_text())
    assert cfg["architecture"] == {"topk": "topk", "relu": "standard"}[kind]
    assert cfg["metadata"]["hook_name"] == SITE and (cfg["d_in"], cfg["d_sae"]) == (16, 32)
    assert (out / "training_curves.png").is_file() and (out / "sae_measures.png").is_file()


def test_a_killed_run_resumes_to_the_uninterrupted_one_bit_for_bit(base, tmp_path, monkeypatch):
    """Killed at step 6 (its last checkpoint: step 4), resumed: the same weights, firing counts
    and log as a run never stopped. AuxK is on from step 2 (dead_window 1)."""
    model = {"kind": "topk", "d_sae": 32, "k": 2, "dead_window": 1, "aux_coefficient": 0.5}
    train_cfg = {"max_steps": 8, "batch_size": 32, "eval_interval": 4, "eval_batches": 1, "log_interval": 1}

    def run(out, killed_at=None):
        job, cfg = build_sae_job(base, SITE, model, train_cfg, pool=2)
        if killed_at is not None:
            calls = []
            real = SAEJob.train_batch

            def dies(self, rng, n):
                calls.append(1)
                if len(calls) == killed_at:
                    raise RuntimeError("killed")
                return real(self, rng, n)

            monkeypatch.setattr(SAEJob, "train_batch", dies)
            with pytest.raises(RuntimeError, match="killed"):
                train(job, cfg, out, progress=False, verbose=False)
            monkeypatch.undo()
            ck = load_checkpoint(out / "last")
            assert ck.step == 4
            job = SAEJob.from_checkpoint(ck)
            train(job, cfg, out, resume=True, checkpoint=ck, progress=False, verbose=False)
        else:
            train(job, cfg, out, progress=False, verbose=False)
        return job

    a, b = run(tmp_path / "a"), run(tmp_path / "b", killed_at=6)
    assert a.model.dead_features().any()  # the auxiliary loss ran
    sa, sb = a.model.state_dict(), b.model.state_dict()
    for k in sa:
        np.testing.assert_array_equal(sa[k], sb[k], err_msg=k)

    def strip(rows):
        return [{k: v for k, v in r.items() if k not in ("tokens_per_s", "ms_per_step", "mfu")} for r in rows]

    assert strip(read_log(tmp_path / "a")) == strip(read_log(tmp_path / "b"))


def _one_line_error(capsys, argv, *needles):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    for n in needles:
        assert n in err, err


def test_bad_input_is_one_line(base, tmp_path, capsys):
    out = str(tmp_path / "sae")
    _one_line_error(capsys, ["sae", str(base), "--site", "blocks.0.resid_pots", "--out", out], "did you mean")
    _one_line_error(capsys, ["sae", str(base), "--out", out], "needs --site")
    _one_line_error(
        capsys, ["sae", str(tmp_path / "nowhere"), "--site", SITE, "--out", out], "checkpoint not found"
    )
    _one_line_error(
        capsys, ["sae", str(base), "--site", "pos_embed", "--out", out], "one vector per position"
    )
    for site in ("blocks.0.attn.scores", "blocks.0.attn.pattern"):  # one row over the keys per query
        _one_line_error(capsys, ["sae", str(base), "--site", site, "--out", out], "grow with the input")
    _one_line_error(
        capsys,
        ["sae", str(base), "--site", SITE, "--kind", "topk", "--k", "99", "--d-sae", "32", "--out", out],
        "k",
    )
    _one_line_error(capsys, ["sae", "--resume", "--out", out], "nothing to resume")


def test_a_changed_base_run_is_refused(base, tmp_path, capsys):
    import shutil

    moved = tmp_path / "names"
    shutil.copytree(base, moved)
    out = tmp_path / "sae"
    argv = ["sae", str(moved), "--site", SITE, *SMALL, "--max-steps", "2", "--eval-interval", "2"]
    assert main([*argv, "--out", str(out), "--no-progress", "--quiet"]) == 0
    capsys.readouterr()
    _one_line_error(capsys, ["sample", str(out)], "an autoencoder generates nothing")
    weights = moved / "best" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1  # one bit of the last weight
    weights.write_bytes(bytes(data))
    _one_line_error(capsys, ["eval", str(out)], "changed since the autoencoder was trained")
    os.remove(weights)
    _one_line_error(capsys, ["sae", "--resume", "--out", str(out), "--max-steps", "4"], "not there any more")


def test_lens_splits_the_logit_into_the_features(base, tmp_path, capsys):
    """`lens RUN --sae DIR` (the lens report of the run, and the autoencoder's part): the parts
    add up to the logit and the check line passes; an autoencoder of another run is one line."""
    import shutil

    out = tmp_path / "sae"
    argv = ["sae", str(base), "--site", SITE, *SMALL, "--max-steps", "2", "--eval-interval", "2"]
    assert main([*argv, "--out", str(out), "--no-progress", "--quiet"]) == 0
    capsys.readouterr()
    lens = ["lens", str(base), "--sae", str(out), "--text", "emma", "--steps", "2"]
    assert main([*lens, "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    s = r["sae"]
    assert r["tokens"] == ["<eot>", "e", "m", "m", "a"]
    assert s["site"] == SITE and s["position"] == 4 and 1 <= s["active"] <= 4  # --k 4
    parts = s["features_sum"] + s["b_dec"] + s["error"] + s["rest"] + s["bias"]
    assert parts == pytest.approx(s["logit"], abs=1e-5)
    assert sum(c for _, _, c in s["features"]) == pytest.approx(s["features_sum"], abs=1e-4)
    checks = [c for c in r["checks"] if c.startswith("check feature attribution")]
    assert len(checks) == 1 and checks[0].endswith(" ok"), r["checks"]
    assert "logit_lens" in r and "ablation" in r  # the run's own lens report beside it
    assert main(lens) == 0
    assert f"autoencoder features at {SITE}, position 4" in capsys.readouterr().out
    other = tmp_path / "other"
    shutil.copytree(base, other)
    _one_line_error(capsys, ["lens", str(other), "--sae", str(out)], "trained on the run in")
    _one_line_error(capsys, ["lens", "--hf", str(other), "--sae", str(out)], "--sae applies to a run")
