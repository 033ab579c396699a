"""The induction task (data/induction.py, training/induction.py, viz/induction.py) and the
attention-only GPT the induction-heads papers train on it."""

import json

import numpy as np
import pytest

from scratchformer.cli.main import main
from scratchformer.data.induction import (
    check_induction_sizes,
    induction_tokenizer,
    inputs_targets,
    make_induction,
    make_induction_split,
    segment_lengths,
    target_masks,
)
from scratchformer.errors import ConfigError
from scratchformer.lens import head_scores, hook_names
from scratchformer.models import GPT, GPTConfig
from scratchformer.ops.loss import IGNORE_INDEX
from scratchformer.training.diagnostics import DIAG_FILE, read_records
from scratchformer.training.jobs import build_job, load_job
from scratchformer.viz import induction as IND


def test_sequences_repeat_a_segment_at_varying_distances():
    seqs = make_induction(200, 16, 24, 2, np.random.default_rng(0))
    seg = segment_lengths(seqs, 2)
    assert seqs.shape == (200, 24) and seqs.dtype == np.int64 and seqs.max() < 16
    assert set(seg) <= set(range(6, 13)) and len(set(seg)) > 3  # no fixed distance to copy from
    for row, s in zip(seqs, seg):
        np.testing.assert_array_equal(row[24 - s :], row[24 - 2 * s : 24 - s])
    first, rep = target_masks(seqs, 2)
    x, y = inputs_targets(seqs)
    assert (y[:, -1] == IGNORE_INDEX).all() and not (first & rep).any() and not rep[:, -1].any()
    for row, yy, f, r, s in zip(seqs, y, first, rep, seg):
        t = np.flatnonzero(r)
        np.testing.assert_array_equal(yy[t], row[t + 1 - s])  # a repeated target copies the token s back
        assert f.sum() == 24 - s - 1 and r.sum() == s - 1


def test_split_is_seeded_and_disjoint():
    a_train, a_test = make_induction_split(300, 50, 4, 8, 2, seed=1)
    b_train, b_test = make_induction_split(300, 50, 4, 8, 2, seed=1)
    np.testing.assert_array_equal(a_train, b_train)
    assert not {r.tobytes() for r in a_train} & {r.tobytes() for r in a_test}
    assert not np.array_equal(make_induction_split(300, 50, 4, 8, 2, seed=2)[0], a_train)


@pytest.mark.parametrize("symbols, length, repeats", [(1, 8, 2), (63, 8, 2), (8, 8, 1), (8, 3, 2)])
def test_bad_sizes_are_one_clear_error(symbols, length, repeats):
    with pytest.raises(ConfigError):
        check_induction_sizes(symbols, length, repeats)


def test_tokenizer_reads_sequences_as_characters():
    tok = induction_tokenizer(12)
    assert tok.vocab_size == 12 and tok.decode(np.arange(12)) == "0123456789AB"


def test_attention_only_gpt_has_no_feedforward_hook_points():
    m = GPT(GPTConfig(vocab_size=8, block_size=8, n_layer=2, n_head=2, n_embd=8, attn_only=True), seed=0)
    names = hook_names(m)
    assert not any(".mlp" in n for n in names) and "blocks.1.attn.pattern" in names
    assert all(m.block_parts(b).feedforward is None and "ff_norm" not in m.block_parts(b).norms for b in m.h)


def test_prefix_matching_score_is_attention_to_the_token_after_the_previous_occurrence(monkeypatch):
    """A planted attention: query 4 (token 'a', seen before at 1) puts 0.7 on key 2 (after the
    previous 'a') and 0.3 on key 0: its induction score is 0.7."""
    m = GPT(GPTConfig(vocab_size=8, block_size=8, n_layer=1, n_head=1, n_embd=8, attn_only=True), seed=0)
    ids = np.array([[3, 1, 5, 6, 1]])
    pattern = np.zeros((1, 1, 5, 5))
    pattern[0, 0, np.arange(5), 0] = 1.0
    pattern[0, 0, 4] = [0.3, 0, 0.7, 0, 0]

    from scratchformer.lens import analyses

    atts = analyses.attentions(m)
    scores = analyses._scores_of({atts[0][0]: pattern}, atts, ids)  # the scoring head_scores runs
    assert scores["induction"][0, 0] == pytest.approx(0.7)  # only query 4 has an earlier copy
    assert scores["same"][0, 0] == pytest.approx(0.0)
    assert head_scores(m, (ids,)).check.ok  # and the model's own patterns pass the planted-pattern check


def _train_tiny(tmp_path, *extra):
    out = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "--task",
                "induction",
                "--out",
                str(out),
                "--no-progress",
                "--quiet",
                "--symbols",
                "8",
                "--block-size",
                "12",
                "--n-embd",
                "16",
                "--n-head",
                "2",
                "--max-steps",
                "6",
                "--eval-interval",
                "3",
                "--diag-interval",
                "2",
                "--batch-size",
                "8",
                "--workers",
                "1",
                *extra,
            ]
        )
        == 0
    )
    return out


def test_cli_run_records_progress_measures_and_every_command_reads_it(tmp_path, capsys):
    out = _train_tiny(tmp_path)
    config = json.loads((out / "last" / "config.json").read_text())
    assert config["kind"] == "induction" and config["model"]["attn_only"] is True
    assert config["data"] == {
        "symbols": 8,
        "block_size": 12,
        "repeats": 2,
        "n_train": 20000,
        "n_test": 256,
        "seed": 1337,
    }
    _, records = read_records(out / DIAG_FILE)
    assert [r["step"] for r in records] == [0, 2, 4, 6]  # step 0: the initialisation
    rec = records[-1]
    assert np.asarray(rec["prefix_matching"]).shape == np.asarray(rec["previous_token"]).shape == (2, 2)
    for key in (
        "loss_first",
        "loss_repeat",
        "repeat_advantage",
        "ablate_best",
        "ablate_worst",
        "ablate_induction",
    ):
        assert np.isfinite(rec[key])
    assert rec["layers"] == []  # no feed-forward to measure
    job = load_job(out)
    assert set(job.evaluate("test")) == {"loss", "loss_first", "loss_repeat", "repeat_accuracy"}
    assert main(["eval", str(out), "--json"]) == 0
    assert main(["sample", str(out), "-n", "2"]) == 0
    assert main(["lens", str(out), "--json"]) == 0
    capsys.readouterr()
    assert main(["train", "--resume", "--out", str(out), "--max-steps", "8", "--no-progress", "--quiet"]) == 0
    assert [r["step"] for r in read_records(out / DIAG_FILE)[1]] == [0, 2, 4, 6, 8]


def test_options_of_other_tasks_are_refused(capsys):
    assert main(["train", "--task", "copy", "--symbols", "8", "--max-steps", "1"]) == 2
    assert "--symbols applies to --task induction only" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="--tokenizer does not apply"):
        build_job("induction", data={"tokenizer": "char"})


def _records(losses, prefix):
    return [
        {
            "step": 10 * (i + 1),
            "loss_first": 3.4,
            "loss_repeat": loss,
            "heads": ["L0", "L1"],
            "prefix_matching": p,
            "ablate_best": 1.0,
            "ablate_worst": 0.0,
            "ablate_induction": 2.0,
        }
        for i, (loss, p) in enumerate(zip(losses, prefix))
    ]


def test_figure_titles_follow_the_data():
    formed = _records([3.4, 3.3, 1.0, 0.5], [[[0.1, 0.1], [0.1, 0.1]]] * 3 + [[[0.1, 0.1], [0.1, 0.8]]])
    assert IND.phase_change(formed) == (20, 30, pytest.approx(2.3))
    claims = IND.induction_claims(formed)
    assert "between steps 20 and 30" in claims["loss"] and "L1H1 prefix-matches at 0.80" in claims["heads"]
    flat = _records([3.4, 3.3, 3.2, 3.1], [[[0.1, 0.2], [0.1, 0.1]]] * 4)
    assert IND.phase_change(flat) is None
    claims = IND.induction_claims(flat)
    assert "no phase change" in claims["loss"] and "no induction head" in claims["heads"]
    IND.progress_figure(formed)


# -- the bars, on the default model, shorter (about 13 s of CPU for both runs) --------------------
BAR_MODEL: dict = {}  # RUN_DEFAULTS["induction"]: 40K parameters (n_embd 32 formed no head in 600 steps)
# One record, at the end: the bars read the last record only, and measuring changes no training step
# (fixed probe sequences, no draw from the run's generators): records every 100 steps end in this same one.
BAR_TRAIN = dict(max_steps=700, diag_interval=700, eval_interval=700, workers=1, num_samples=0)
BAR_DATA = dict(n_test=64)


def _bar_run(tmp_path, n_layer):
    from scratchformer.training.trainer import train

    job, cfg = build_job("induction", model={**BAR_MODEL, "n_layer": n_layer}, train=BAR_TRAIN, data=BAR_DATA)
    train(job, cfg, tmp_path / f"l{n_layer}", progress=False, verbose=False)
    return read_records(tmp_path / f"l{n_layer}" / DIAG_FILE)[1]


def test_two_layers_form_an_induction_head_and_one_layer_does_not(tmp_path, one_blas_thread):
    """Olsson et al.'s bars: a 2-layer attention-only model's best head prefix-matches above
    0.5, the repeat's loss falls well below the first copy's, zeroing that head alone brings
    most of it back (the default model has one head per layer; with two, both heads of layer 1
    share the work: docs/results.md); 1 layer fails. The weakest other head is layer 0's
    previous-token head, which the induction head reads: its ablation costs as much. The run is
    seeded (the default seed), so this is one fixed trajectory, not a race against the clock."""
    last = _bar_run(tmp_path, 2)[-1]
    best = np.asarray(last["prefix_matching"])[tuple(last["best_head"])]
    advantage = last["loss_first"] - last["loss_repeat"]
    assert best > 0.5, last["prefix_matching"]
    assert last["loss_repeat"] < 0.5 * last["loss_first"], (last["loss_repeat"], last["loss_first"])
    assert last["best_head"] == [1, 0] and last["best_head"] in last["induction_heads"]
    assert last["ablate_best"] > 0.5 * advantage, (last["ablate_best"], advantage)  # one head does it
    worst = last["worst_head"]
    pt = np.asarray(last["previous_token"])  # 0.35 for L0H0 at 700 steps, 0.03 for L1H0
    assert worst == [0, 0] and pt[0, 0] == pt.max() > 0.25  # the previous-token head it reads
    assert last["ablate_worst"] > 0.5 * advantage, (last["ablate_worst"], advantage)  # no bystander
    one = _bar_run(tmp_path, 1)[-1]
    assert np.max(one["prefix_matching"]) < 0.5 and one["loss_repeat"] > 2 * last["loss_repeat"]


def test_the_weakest_head_is_the_lowest_of_the_others(tmp_path):
    """worst_head: the lowest prefix-matching head other than the best, over the whole model
    (with two heads per layer it may sit in either layer)."""
    job, cfg = build_job(
        "induction",
        model={"n_head": 2, "n_embd": 16},
        train={"max_steps": 1, "workers": 1, "num_samples": 0},
        data={"n_test": 64, "n_train": 100},
    )
    rec = job.progress_measures()
    scores = np.asarray(rec["prefix_matching"])
    others = [
        (scores[layer, head], [layer, head])
        for layer in range(2)
        for head in range(2)
        if [layer, head] != rec["best_head"]
    ]
    assert rec["worst_head"] == min(others)[1] and scores[tuple(rec["best_head"])] == scores.max()


def test_icl_score_is_olssons_late_token_loss_minus_early_token_loss():
    """Olsson et al. 2022: the loss on the 500th token minus the loss on the 50th, averaged over
    windows; here on a tiny GPT with the token indices scaled down (8th and 3rd), against the
    loss computed by hand from the model's logits."""
    from scratchformer.errors import DataError
    from scratchformer.training.induction import icl_score

    m = GPT(GPTConfig(vocab_size=5, block_size=9, n_layer=1, n_head=1, n_embd=8), seed=0)
    windows = np.random.default_rng(0).integers(0, 5, (6, 10))
    out = icl_score(m, windows, early=3, late=8)
    logits = m(windows[:, :-1])[0].astype(np.float64)
    logp = logits - logits.max(-1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(-1, keepdims=True))
    by_hand = {i: -logp[np.arange(6), i - 2, windows[:, i - 1]] for i in (3, 8)}  # token i, from 1
    assert (
        abs(out["loss_late"] - by_hand[8].mean()) < 1e-5 and abs(out["loss_early"] - by_hand[3].mean()) < 1e-5
    )
    assert abs(out["icl_score"] - (by_hand[8] - by_hand[3]).mean()) < 1e-5 and out["windows"] == 6
    with pytest.raises(DataError, match="token 8"):
        icl_score(m, windows[:, :8], early=3, late=8)


def test_icl_score_of_a_known_loss_curve():
    """A stand-in model whose loss at each position is known in closed form: on windows that count
    up mod V it puts a logit of 0.1 * position on the right next token and 0 on the others, so the
    loss on token i (read at position i - 2) is log(1 + (V - 1) exp(-0.1 (i - 2))); Olsson et al.'s
    score is the loss on the late token minus the loss on the early one, and it changes with the
    positions read (an off-by-one in the indexing moves it)."""
    from scratchformer.nn import Module
    from scratchformer.training.induction import icl_score

    V = 7

    class KnownCurve(Module):
        def forward(self, idx):
            B, T = idx.shape
            logits = np.zeros((B, T, V), np.float32)
            np.put_along_axis(logits, ((idx + 1) % V)[..., None], 0.1 * np.arange(T)[None, :, None], -1)
            return logits, None

    windows = (np.arange(40)[None, :] + np.arange(5)[:, None]) % V  # each next token is the token + 1
    loss = lambda i: np.log1p((V - 1) * np.exp(-0.1 * (i - 2)))  # noqa: E731 (token i, from 1)
    out = icl_score(KnownCurve(), windows, early=5, late=30)
    assert abs(out["loss_early"] - loss(5)) < 1e-6 and abs(out["loss_late"] - loss(30)) < 1e-6
    assert abs(out["icl_score"] - (loss(30) - loss(5))) < 1e-6 and out["icl_score"] < -1
