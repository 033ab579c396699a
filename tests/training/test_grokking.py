"""Grokking modular addition (Nanda et al. 2023): normalization="none" (nn/layers.py NoNorm),
the modadd task (data/tasks.py, training/modadd.py) and its progress measures.

NoNorm is gradchecked inside a whole GPT in float64 in both lanes (bar 5e-8, as
tests/nn/test_layers_gradcheck.py); the model contract reports no final norm and the lens
attributes logits without one; the Fourier decomposition of the logits sums back exactly and
a planted error is caught; the CLI trains, resumes and evaluates a tiny modadd run.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from scratchformer.cli.main import main
from scratchformer.data.tasks import make_split, modadd_split
from scratchformer.errors import ConfigError
from scratchformer.gradcheck import numerical_gradient, relative_error
from scratchformer.lens import direct_logit_attribution
from scratchformer.models import GPT, GPTConfig
from scratchformer.nn import NoNorm
from scratchformer.ops import IGNORE_INDEX
from scratchformer.training import modadd

GRAD_TOL = 5e-8
NONE = dict(
    vocab_size=8,
    block_size=3,
    n_layer=1,
    n_head=2,
    n_embd=8,
    n_inner=16,
    activation="relu",
    normalization="none",
    tie_weights=False,
)


def test_no_norm_gpt_gradcheck_float64(lane):
    m = GPT(GPTConfig(**NONE, dtype="float64"), seed=0)
    assert isinstance(m.ln_f, NoNorm) and isinstance(m.h[0].attn_norm, NoNorm)
    rng = np.random.default_rng(0)
    for p in m.parameters():
        p.data[...] = rng.normal(0, 0.5, p.shape)
    idx = rng.integers(0, 8, (4, 3))
    tgt = np.full((4, 3), IGNORE_INDEX)
    tgt[:, -1] = rng.integers(0, 8, 4)  # the loss on the last position only, as modadd's
    m.zero_grad()
    m(idx, tgt)
    m.backward()
    errors = {
        name: relative_error(p.grad, numerical_gradient(lambda: m(idx, tgt)[1], p.data))
        for name, p in m.named_parameters()
    }
    worst = max(errors, key=errors.get)
    assert errors[worst] <= GRAD_TOL, f"{lane}: {worst}: {errors[worst]:.2e}"


def test_no_norm_contract_params_and_lens():
    m = GPT(GPTConfig(**NONE), seed=0)
    assert GPT.param_count(m.config) == m.num_parameters()
    assert not any("norm" in n or "ln_f" in n for n, _ in m.named_parameters())
    assert m.final_norm() is None and m.final_norm_kind() is None
    ids = np.array([[1, 2, 7]])
    dla = direct_logit_attribution(m, (ids,), token=3)
    assert dla.check.ok and dla.check.error < 1e-5
    with_norm = GPT(GPTConfig(**{**NONE, "normalization": "layernorm"}), seed=0)
    assert with_norm.num_parameters() - m.num_parameters() == 3 * 2 * 8  # 3 LayerNorms, weight and bias
    with pytest.raises(ConfigError, match="normalization"):
        GPTConfig(**{**NONE, "normalization": "batchnorm"})


def test_modadd_split_covers_every_pair_once_and_is_seeded():
    tr, te = modadd_split(7, 0.3, seed=1)
    assert len(tr) == 15 and len(tr) + len(te) == 49
    pairs = {tuple(r[:2]) for r in np.concatenate([tr.x, te.x])}
    assert len(pairs) == 49 and set(np.concatenate([tr.x, te.x])[:, 2]) == {7}
    assert np.array_equal(np.concatenate([tr.y, te.y]), np.concatenate([tr.x, te.x])[:, :2].sum(1) % 7)
    tr2, _ = modadd_split(7, 0.3, seed=1)
    tr3, _ = modadd_split(7, 0.3, seed=2)
    assert np.array_equal(tr.x, tr2.x) and not np.array_equal(tr.x, tr3.x)
    for bad in ((8, 0.3), (7, 1.0), (7, 0.0)):
        with pytest.raises(ConfigError):
            modadd_split(*bad, seed=0)
    train, test = make_split("modadd", 50, 20, seed=0)  # the registry's generic draw keeps them apart
    assert not {tuple(r) for r in train.x} & {tuple(r) for r in test.x}


def test_targets_ignore_all_but_the_last_position():
    tr, _ = modadd_split(7, 0.5, seed=0)
    t = modadd.targets_of(tr)
    assert (t[:, :2] == IGNORE_INDEX).all() and np.array_equal(t[:, 2], tr.y)
    m = GPT(GPTConfig(**{**NONE, "dtype": "float64"}), seed=0)
    logits, loss = m(tr.x % 8, t)
    z = logits[:, -1] - logits[:, -1].max(1, keepdims=True)
    manual = -(z[np.arange(len(t)), t[:, 2]] - np.log(np.exp(z).sum(1))).mean()
    assert abs(loss - manual) < 1e-12 and m.loss_terms(tr.x % 8, t) == len(t)


def test_fourier_decomposition_sums_back_and_a_planted_error_is_caught():
    rng = np.random.default_rng(0)
    p = 11
    F = modadd.fourier_basis(p)
    assert np.abs(F @ F.T - np.eye(p)).max() < 1e-12
    logits = rng.normal(size=(p, p, p + 1))
    coef = modadd.fourier_decompose(logits)
    assert np.abs(modadd.fourier_recompose(coef) - logits).max() < 1e-12
    coef[3, 4, 0] += 1e-6  # a lost component shows in the check
    assert np.abs(modadd.fourier_recompose(coef) - logits).max() > 1e-7
    # a pure cos(w_3 (a + b)) logit pattern is all key component, and has frequency 3 alone
    s = np.add.outer(np.arange(p), np.arange(p))
    pattern = np.cos(2 * np.pi * 3 * s / p)[:, :, None] * np.ones(p + 1)
    assert np.abs(modadd.key_components(pattern, [3]) - pattern).max() < 1e-12
    assert np.abs(modadd.key_components(pattern, [2, 4])).max() < 1e-12
    table = np.stack([np.cos(2 * np.pi * 2 * np.arange(p) / p), np.sin(2 * np.pi * 5 * np.arange(p) / p)], 1)
    norms = modadd.frequency_norms(table)
    assert norms.shape == ((p - 1) // 2,) and set(np.flatnonzero(norms > 1e-9) + 1) == {2, 5}


def test_progress_measures_of_a_model():
    p = 7
    tr, te = modadd_split(p, 0.5, seed=0)
    m = GPT(GPTConfig(**{**NONE, "vocab_size": p + 1}), seed=0)
    out = modadd.progress_measures(m, p, {"train": tr, "test": te})
    assert out["fourier_check"] < 1e-12 and len(out["freq_norms"]) == 3
    weights = np.sqrt(sum(float((q.data.astype(np.float64) ** 2).sum()) for q in m.parameters()))
    assert abs(out["weight_norm"] - weights) < 1e-9
    assert 0 <= out["test_accuracy"] <= 1 and out["restricted_loss"] > 0 and out["excluded_loss"] > 0
    assert 0 <= out["gini"] < 1 and 0 <= out["key_share"] <= 1
    if not out["key_freqs"]:  # nothing removed: the excluded loss is the train loss
        assert abs(out["excluded_loss"] - out["train_loss"]) < 1e-12


def test_progress_measures_check_their_logits_against_memory_first(monkeypatch):
    from scratchformer.errors import ResourceError
    from scratchformer.limits import memory

    p = 7
    tr, te = modadd_split(p, 0.5, seed=0)
    m = GPT(GPTConfig(**{**NONE, "vocab_size": p + 1}), seed=0)
    monkeypatch.setattr(
        memory, "memory_limits", lambda: {"the test's limit": modadd.PROGRESS_COPIES * 8 * p**3}
    )
    monkeypatch.setattr(m, "forward", lambda *a, **k: pytest.fail("the model ran before the check"))
    with pytest.raises(ResourceError, match="progress measures' logits of the 49 pairs.*--modulus"):
        modadd.progress_measures(m, p, {"train": tr, "test": te})


def test_a_max_len_other_than_the_pairs_is_refused_in_one_line():
    from scratchformer.training.jobs import build_job

    with pytest.raises(
        ConfigError, match=r"^--max-len does not apply to the modadd task: its inputs are 'a b ='"
    ):
        build_job("modadd", data={"max_len": 9, "modulus": 7})
    job, _ = build_job("modadd", data={"max_len": 3, "modulus": 7})  # the value it takes anyway
    assert job.config_dict()["data"]["max_len"] == 3


def test_gini_is_hurley_and_rickards_and_agrees_with_the_mean_difference_form():
    rng = np.random.default_rng(0)
    for x in (rng.random(9), rng.random(56) ** 8, np.array([0.0, 0.0, 3.0, 1.0])):
        witness = np.abs(x[:, None] - x[None, :]).sum() / (2 * len(x) * x.sum())  # Gini's own form
        assert abs(modadd.gini(x) - witness) < 1e-12
    assert modadd.gini(np.ones(15)) == 0 and modadd.gini(np.zeros(4)) == 0
    assert abs(modadd.gini(np.eye(15)[3]) - (1 - 1 / 15)) < 1e-12  # one frequency holds it all


def test_key_frequencies_follow_the_spectrum():
    rng = np.random.default_rng(1)
    flat = np.sqrt(rng.chisquare(256, 56) / 256)  # a random width-128 embedding's spectrum
    assert modadd.key_frequencies(flat) == []
    grown = flat.copy()
    grown[[13, 34, 51]] = 3.0  # k = 14, 35, 52 grow: each ~11% of the power against a flat 1.8%
    assert modadd.key_frequencies(grown) == [14, 35, 52]
    grown[40] = 2.0  # k = 41 at ~5% of the power: over twice a flat share, so it counts too
    assert modadd.key_frequencies(grown) == [14, 35, 41, 52]
    assert modadd.key_frequencies(np.zeros(5)) == []


def _planted(p: int, freqs, scale: float = 3.0) -> np.ndarray:
    """(p, p, p) logits sum_k scale cos(w_k (a + b - c)): the paper's generalising circuit."""
    a, b, c = np.meshgrid(np.arange(p), np.arange(p), np.arange(p), indexing="ij")
    return sum(scale * np.cos(2 * np.pi * k * (a + b - c) / p) for k in freqs)


def _by_2d_dft(logits: np.ndarray, freqs, keep: bool) -> np.ndarray:
    """The witness: the paper's route, a 2-D DFT of the logits over (a, b), the two directions
    (cos_a cos_b - sin_a sin_b) / sqrt 2 and (sin_a cos_b + cos_a sin_b) / sqrt 2 of each k kept
    (with the constant term) or zeroed, and the inverse."""
    coef = modadd.fourier_decompose(logits)
    part = np.zeros_like(coef)
    for k in freqs:
        c, s = 2 * k - 1, 2 * k
        u = (coef[c, c] - coef[s, s]) / 2  # the cos(w_k (a + b)) direction's weight, per answer
        v = (coef[s, c] + coef[c, s]) / 2
        part[c, c], part[s, s], part[s, c], part[c, s] = u, -u, v, v
    if keep:
        part[0, 0] = coef[0, 0]
        return modadd.fourier_recompose(part)
    return modadd.fourier_recompose(coef - part)


def test_restricted_and_excluded_loss_keep_and_remove_the_key_frequencies():
    p = 11
    tr, te = modadd_split(p, 0.4, seed=0)
    table = np.zeros((p, 4))
    for i, k in enumerate((2, 5)):  # an embedding whose spectrum holds k = 2 and 5
        table[:, 2 * i] = np.cos(2 * np.pi * k * np.arange(p) / p)
        table[:, 2 * i + 1] = np.sin(2 * np.pi * k * np.arange(p) / p)
    rng = np.random.default_rng(0)
    memorised = rng.normal(0, 1, (p, p, p))  # spread over every frequency, as a lookup table is
    logits = _planted(p, (2, 5)) + memorised
    out = modadd.logit_measures(logits, table, {"train": tr, "test": te})
    assert out["key_freqs"] == [2, 5] and out["key_share"] > 0.999 and out["gini"] > 0.5

    def loss(z, rows, answers):
        z = z[rows[:, 0], rows[:, 1]]
        z = z - z.max(1, keepdims=True)
        return float(-(z[np.arange(len(answers)), answers] - np.log(np.exp(z).sum(1))).mean())

    grid = modadd.all_pairs(p)
    every = (grid[:, 0] + grid[:, 1]) % p
    restricted = loss(_by_2d_dft(logits, (2, 5), keep=True), grid, every)
    excluded = loss(_by_2d_dft(logits, (2, 5), keep=False), tr.x, tr.y)
    assert abs(out["restricted_loss"] - restricted) < 1e-9 and abs(out["excluded_loss"] - excluded) < 1e-9
    # the circuit alone is what the restricted loss keeps; removing it leaves the lookup table
    assert abs(restricted - loss(_planted(p, (2, 5)), grid, every)) < 0.1 * restricted
    assert out["excluded_loss"] > out["train_loss"] + 1
    # a wrong key set (a planted bug: the neighbours of the real ones) is seen by both losses
    wrong = loss(_by_2d_dft(logits, (3, 4), keep=True), grid, every)
    assert wrong > restricted + 1


def test_cli_trains_resumes_and_evaluates_modadd(tmp_path, capsys):
    out = tmp_path / "run"
    args = [
        "train",
        "--task",
        "modadd",
        "--modulus",
        "7",
        "--n-embd",
        "16",
        "--max-steps",
        "4",
        "--eval-interval",
        "2",
        "--diag-interval",
        "2",
        "--workers",
        "1",
        "--no-progress",
        "--out",
        str(out),
    ]
    assert main(args) == 0
    config = json.loads((out / "last" / "config.json").read_text())
    assert config["kind"] == "modadd" and config["data"]["modulus"] == 7
    assert config["model"]["normalization"] == "none" and config["model"]["vocab_size"] == 8
    rows = [json.loads(line) for line in (out / "diagnostics.jsonl").read_text().splitlines()[1:]]
    assert [r["step"] for r in rows] == [0, 2, 4] and rows[-1]["modadd"][
        "fourier_check"
    ] < 1e-9  # 0: the init
    assert main(["train", "--resume", "--max-steps", "6", "--out", str(out), "--no-progress"]) == 0
    rows = [json.loads(line) for line in (out / "diagnostics.jsonl").read_text().splitlines()[1:]]
    assert [r["step"] for r in rows] == [0, 2, 4, 6]
    capsys.readouterr()
    assert main(["eval", str(out)]) == 0
    assert "accuracy" in capsys.readouterr().out
    assert main(["predict", str(out), "3 5"]) == 0
    assert int(capsys.readouterr().out.strip()) in range(8)
    for bad in (["--modulus", "8"], ["--train-fraction", "1.5"]):
        assert _exit_code(["train", "--task", "modadd", *bad, "--out", str(tmp_path / "x")]) == 2
    assert _exit_code(["train", "--task", "copy", "--modulus", "7", "--out", str(tmp_path / "y")]) == 2
    assert "--modulus applies to --task modadd only" in capsys.readouterr().err


def _exit_code(args) -> int:
    try:
        return main(args)
    except SystemExit as e:  # argparse's refusals
        return e.code


def _records(steps, test_loss, train_loss, excluded, train_acc=None, test_acc=None, p=7):
    norms = [1.0] * ((p - 1) // 2)
    n = len(steps)
    train_acc = train_acc or [1.0] * n
    test_acc = test_acc or [1.0 if t < 0.05 else 0.0 for t in test_loss]
    return [
        {
            "step": s,
            "modadd": {
                "train_loss": a,
                "test_loss": t,
                "train_accuracy": ta,
                "test_accuracy": va,
                "restricted_loss": 1.0,
                "excluded_loss": e,
                "weight_norm": 1.0,
                "gini": 0.1,
                "fourier_check": 1e-14,
                "freq_norms": norms,
                "key_freqs": [1, 2],
            },
        }
        for s, t, a, e, ta, va in zip(steps, test_loss, train_loss, excluded, train_acc, test_acc)
    ]


def test_grokking_summary_reads_the_steps_and_phases_from_the_data(tmp_path):
    from scratchformer.errors import DataError
    from scratchformer.viz.grokking import grokking_figure, grokking_summary, phases

    steps = [0, 100, 200, 300, 400, 500, 600, 700]
    recs = _records(
        steps,
        test_loss=[5, 20, 15, 8, 4, 0.5, 0.005, 0.001],
        train_loss=[4, 0.01, 0.005, 0.005, 0.004, 0.002, 0.001, 0.001],
        excluded=[4, 0.02, 0.01, 1.0, 2.0, 2.95, 3.0, 2.9],  # lowest at 200, 90% of its rise at 500
        train_acc=[0.0, 1.0, 1, 1, 1, 1, 1, 1],
        test_acc=[0.0, 0.2, 0.2, 0.3, 0.4, 0.8, 1.0, 1.0],
    )
    assert phases(recs) == {"memorisation": (0, 200), "circuit formation": (200, 500), "cleanup": (500, 600)}
    s = grokking_summary(recs)
    assert (s["memorised_step"], s["test_accuracy_when_memorised"], s["grokked_step"]) == (100, 0.2, 600)
    assert s["delayed"] is True and s["phases"] == phases(recs)
    assert (s["train_below_0.04"], s["test_below_1"], s["test_below_0.01"]) == (100, 500, 600)
    assert (s["test_peak"], s["test_peak_step"]) == (20, 100)
    early = _records(steps[:3], [5, 1, 0.001], [4, 0.01, 0.001], [4, 0.1, 0.1], [0, 1, 1], [0, 0.2, 1.0])
    assert grokking_summary(early)["delayed"] is False  # grokked at 200, not 3 x 100 or later
    immediate = _records(steps[:3], [5, 1, 0.001], [4, 0.01, 0.001], [4, 0.1, 0.1], [0, 1, 1], [0, 0.6, 1.0])
    assert grokking_summary(immediate)["delayed"] is False  # 60% of the test set right when memorised
    # the excluded loss never rises, or the test loss never reaches the end of the cleanup: no phases
    assert phases(_records(steps[:3], [5, 1, 0.001], [4, 0.01, 0.001], [4, 0.1, 0.05])) is None
    assert phases(recs[:6]) is None
    fig = grokking_figure(recs, tmp_path / "g.png")
    assert "step 600" in fig.axes[0].get_title() and "circuit formation 200-500" in fig.axes[1].get_title()
    assert (tmp_path / "g.png").stat().st_size > 5000
    with pytest.raises(DataError, match="modadd"):
        grokking_summary([{"step": 1}])


def test_the_default_is_the_paper_s_preset():
    """Nanda et al. 2023 (the grokking paper's code and the TransformerLens demo): the settings a
    plain `train --task modadd` takes, its two numerical details included (their init and the
    loss's log-softmax in float64: without them a 16,000-step run memorised and did not grok,
    docs/results.md)."""
    from scratchformer.training.jobs import RUN_DEFAULTS

    d = RUN_DEFAULTS["modadd"]
    model = dict(n_layer=1, n_head=4, n_embd=128, n_inner=512, activation="relu", normalization="none")
    assert {k: d["model"][k] for k in model} == model and d["model"]["tie_weights"] is False
    assert (d["model"]["init"], d["model"]["loss_dtype"]) == ("grokking", "float64")
    t = d["train"]
    assert (t["lr"], t["min_lr"], t["weight_decay"], t["beta1"], t["beta2"], t["max_steps"]) == (
        1e-3,
        1e-3,
        1.0,
        0.9,
        0.98,
        16000,
    )
    assert t["batch_size"] >= 113 * 113 and (d["data"]["modulus"], d["data"]["train_fraction"]) == (113, 0.3)


def test_the_fast_preset_is_one_flag_and_options_given_beside_it_win(tmp_path, capsys):
    from scratchformer.training.modadd import PRESETS, preset_flags

    fast = PRESETS["fast"]
    out = tmp_path / "fast"
    tiny = ["--n-embd", "16", "--max-steps", "2", "--eval-interval", "2", "--no-progress"]
    assert (
        main(["train", "--task", "modadd", "--preset", "fast", "--workers", "1", *tiny, "--out", str(out)])
        == 0
    )
    config = json.loads((out / "last" / "config.json").read_text())
    state = json.loads((out / "last" / "trainer_state.json").read_text())["extra"]["train_config"]
    assert {k: config["data"][k] for k in fast["data"]} == fast["data"]
    given = {"max_steps": 2, "eval_interval": 2}  # given beside the preset: they win
    assert {k: state[k] for k in fast["train"]} == {**fast["train"], **given}
    assert config["model"]["n_embd"] == 16
    assert f"--modulus {fast['data']['modulus']} " in preset_flags("fast") + " "
    capsys.readouterr()
    assert _exit_code(["train", "--preset", "fast", "--out", str(tmp_path / "x")]) == 2
    assert "--preset applies to --task modadd only" in capsys.readouterr().err
    assert _exit_code(["train", "--task", "modadd", "--preset", "fast", "--resume", "--out", str(out)]) == 2
    assert "drop --preset" in capsys.readouterr().err
