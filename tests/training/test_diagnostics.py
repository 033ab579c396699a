"""Training diagnostics (training/diagnostics.py, viz/diagnostics.py): the recorded values equal
a direct computation on the model, a resumed run continues the file exactly, the file stays
bounded, --diag-interval 0 writes nothing, training is unchanged by them, and viz draws them."""

import json

import numpy as np
import pytest

from scratchformer.errors import ConfigError
from scratchformer.ops import ACTIVATIONS
from scratchformer.training import diagnostics as diagnostics_module
from scratchformer.training.checkpoint import load_checkpoint
from scratchformer.training.config import DIAG_RECORDS
from scratchformer.training.diagnostics import DIAG_FILE, SATURATED_SLOPE, Diagnostics, read_records
from scratchformer.training.lm import LMJob
from scratchformer.training.trainer import TrainConfig, train
from scratchformer.viz import trace as T

TINY = dict(n_layer=2, n_head=2, n_embd=16)


def tiny_job(**model):
    return LMJob.create("lines", {**TINY, **model}, {"split_seed": 1337, "tokenizer": "char"}, 0)


def tiny_cfg(**kw):
    base = dict(
        max_steps=8,
        batch_size=8,
        eval_interval=2,
        eval_batches=1,
        lr=5e-3,
        warmup_steps=0,
        log_interval=1,
        num_samples=0,
        seed=3,
        decay_steps=8,
        workers=1,
    )
    return TrainConfig(**{**base, **kw})


def run(job, cfg, out, **kw):
    return train(job, cfg, out, progress=False, verbose=False, **kw)


def without_timing(records):
    return [{k: v for k, v in r.items() if k != "ms"} for r in records]


@pytest.mark.parametrize("activation", ["gelu", "relu"])
def test_recorded_values_equal_a_direct_computation(tmp_path, activation):
    job = tiny_job(activation=activation)
    model = job.model
    diag = Diagnostics(job, interval=1, max_steps=10, seed=3, path=tmp_path / DIAG_FILE)
    job.model(*job.train_batch(np.random.default_rng(0), 8))
    job.model.backward()
    before = diag.snapshot()
    rng = np.random.default_rng(1)
    deltas = {}
    for name, p in model.named_parameters():  # a known update: the ratio is computable by hand
        deltas[name] = 1e-3 * rng.standard_normal(p.data.shape)
        p.data += deltas[name]
    rec = diag.record(1, 0.01, before)

    # activations: capture each fc1 output of one batched eval-mode forward of the whole probe
    captured = []
    for block in T.blocks(model):
        fc1 = block.ff.fc1
        fc1.forward = (lambda f: lambda x: captured.append(f(x)) or captured[-1])(fc1.forward)
    model.eval()
    model(diag.probe_rows)
    model.train()
    assert len(captured) == len(rec["layers"]) == 2
    f = ACTIVATIONS[activation][0]
    for pre, stats in zip(captured, rec["layers"]):
        pre = pre.reshape(-1, pre.shape[-1]).astype(np.float64)
        post = f(pre)
        slope = (f(pre + 1e-6) - f(pre - 1e-6)) / 2e-6  # the activation's slope, by central differences
        np.testing.assert_allclose(
            [stats["mean"], stats["std"]], [post.mean(), post.std()], rtol=1e-5, atol=1e-7
        )
        # values at the threshold, or at ReLU's kink (where the batched and the row-by-row forward may
        # differ in the last bits), may land either side
        near = (np.abs(np.abs(slope) - SATURATED_SLOPE) < 1e-3) | (np.abs(pre) < 1e-5)
        assert abs(stats["saturation"] - (np.abs(slope) < SATURATED_SLOPE).mean()) <= near.mean() + 1e-12
        dead = np.mean([not (pre[:, j] > 0).any() for j in range(pre.shape[1])])
        assert stats["dead"] == pytest.approx(dead)
        assert sum(stats["hist"]) == pre.size
    if activation == "relu":
        assert rec["layers"][0]["saturation"] == pytest.approx((captured[0] <= 0).mean())

    for name, p in model.named_parameters():
        r = rec["params"][name]
        assert r["grad_mean"] == pytest.approx(float(p.grad.mean()), abs=1e-12)
        assert r["grad_std"] == pytest.approx(float(p.grad.std()))
        if np.std(before[name]) == 0:  # a LayerNorm gain or a zero bias at init: no ratio
            assert r["update_ratio"] is None
        else:
            expect = np.log10(np.std(deltas[name]) / np.std(before[name]))
            assert r["update_ratio"] == pytest.approx(expect, abs=1e-3)

    ranges = set()
    for name, p in model.named_parameters():  # each matrix's histogram on its own range
        r = rec["params"][name]
        assert r["shape"] == list(p.data.shape)
        if p.data.ndim == 2:
            g_max = float(np.abs(p.grad).max())
            assert r["grad_range"] == [-g_max, g_max] and sum(r["grad_hist"]) == p.grad.size
            assert (
                max(r["grad_hist"][0], r["grad_hist"][-1]) >= 1
            )  # its largest |gradient| lies in an end bin
            ranges.add(g_max)
        else:
            assert "grad_hist" not in r
    assert len(ranges) == sum(p.data.ndim == 2 for p in model.parameters())  # not one shared range

    # the model's own eval-mode forward, read from each attention's weights (not through the
    # hooks the recorder reads): the same numbers, bit for bit
    model.eval()
    model(diag.probe_ids[None])
    model.train()
    maps = [b.self_attn.attn_weights[0].astype(np.float64).tolist() for b in T.blocks(model)]
    assert rec["probe"]["tokens"] == ["<eot>", "e", "m", "m", "a"]
    assert rec["probe"]["attention"] == maps
    header, records = read_records(tmp_path / DIAG_FILE)
    assert header["every"] == 1 and records == [json.loads(json.dumps(rec))]


def test_activation_gradients_are_the_probe_losss_gradient_at_each_activation(tmp_path):
    from scratchformer.lens.hooks import hooked, run_with_hooks

    job, plain = (
        tiny_job(dropout=0.1),
        tiny_job(dropout=0.0),
    )  # the same weights; the recorder turns dropout off
    for m in (job.model, plain.model):
        m.to("float64")  # finite differences below
    diag = Diagnostics(job, interval=1, max_steps=10, seed=3, path=tmp_path / DIAG_FILE)
    job.model(*job.train_batch(np.random.default_rng(0), 8))
    job.model.backward()
    step_grads = {n: p.grad.copy() for n, p in job.model.named_parameters()}
    rngs = [m.rng for m in job.model.modules() if hasattr(m, "rng")]
    rng_states = [r.bit_generator.state for r in rngs]
    rec = diag.record(0, 0.0, None)
    for n, p in job.model.named_parameters():  # the step's gradients are left as they were
        np.testing.assert_array_equal(p.grad, step_grads[n], err_msg=n)
    assert (
        rngs and [r.bit_generator.state for r in rngs] == rng_states
    )  # no dropout draw: the run's masks stay

    x, y = diag.probe_batch
    caught = {}
    with hooked(
        plain.model,
        grad_hooks={
            f"blocks.{i}.mlp.post": (lambda g, name: caught.__setitem__(name, g.copy())) for i in range(2)
        },
    ):
        plain.model(x, y)
        plain.model.backward()
    assert len(rec["layers"]) == len(caught) == 2
    rng = np.random.default_rng(5)
    for i, stats in enumerate(rec["layers"]):
        g = caught[f"blocks.{i}.mlp.post"]
        zero = (g == 0).all(axis=-1)  # the positions no loss depends on: the padding of the lines
        assert zero.any() and stats["grad_zero"] == (g == 0).sum() == zero.sum() * g.shape[-1]
        # the caught array is d(loss)/d(activation): a directional derivative by central differences
        delta, h = rng.standard_normal(g.shape), 1e-4
        losses = [
            run_with_hooks(
                plain.model, x, y, hooks={f"blocks.{i}.mlp.post": lambda a, _n, s=s: a + s * h * delta}
            )[1]
            for s in (1, -1)
        ]
        assert (losses[0] - losses[1]) / (2 * h) == pytest.approx(float((g * delta).sum()), rel=1e-5)
        g = g[~zero]  # the statistics and the histogram are of the others
        assert stats["grad_mean"] == pytest.approx(float(g.mean()), rel=1e-9, abs=1e-15)
        assert stats["grad_std"] == pytest.approx(float(g.std()), rel=1e-9)
        caught[f"blocks.{i}.mlp.post"] = g
    g_lim = 5 * max(float(g.std()) for g in caught.values())  # one range for every layer, the tails apart
    assert rec["act_grad_range"] == pytest.approx([-g_lim, g_lim], rel=1e-9)
    for i, stats in enumerate(rec["layers"]):
        g = caught[f"blocks.{i}.mlp.post"]
        assert stats["grad_outside"] == (np.abs(g) > g_lim).sum()
        assert sum(stats["grad_hist"]) + stats["grad_outside"] == g.size


def test_a_resumed_run_continues_the_file_exactly(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    run(tiny_job(dropout=0.1), tiny_cfg(diag_interval=2), a)
    run(tiny_job(dropout=0.1), tiny_cfg(max_steps=4, diag_interval=2), b)
    assert [r["step"] for r in read_records(b / DIAG_FILE)[1]] == [0, 2, 4]
    ck = load_checkpoint(b / "last")
    run(LMJob.from_checkpoint(ck), tiny_cfg(diag_interval=2), b, resume=True, checkpoint=ck)
    ra, rb = read_records(a / DIAG_FILE)[1], read_records(b / DIAG_FILE)[1]
    assert [r["step"] for r in ra] == [0, 2, 4, 6, 8]  # step 0 once: a resume does not record it again
    assert without_timing(ra) == without_timing(rb)


def test_a_resume_drops_records_past_its_checkpoint(tmp_path):
    out = tmp_path / "r"
    run(tiny_job(), tiny_cfg(max_steps=4, diag_interval=2), out)
    path = out / DIAG_FILE
    lines = path.read_text().splitlines()
    stray = json.loads(lines[-1])
    stray["step"] = 5  # a record written after the checkpoint, before a kill
    path.write_text("\n".join(lines + [json.dumps(stray)]) + "\n")
    ck = load_checkpoint(out / "last")
    run(LMJob.from_checkpoint(ck), tiny_cfg(max_steps=6, diag_interval=2), out, resume=True, checkpoint=ck)
    assert [r["step"] for r in read_records(path)[1]] == [0, 2, 4, 6]


def test_the_file_is_bounded_and_thinned_evenly(tmp_path, monkeypatch):
    monkeypatch.setattr(diagnostics_module, "MAX_RECORDS", 4)
    out = tmp_path / "t"
    run(tiny_job(), tiny_cfg(max_steps=13, decay_steps=13, diag_interval=1, eval_interval=13), out)
    header, records = read_records(out / DIAG_FILE)
    steps = [r["step"] for r in records]
    assert len(records) <= 4
    # 0,1,2,3 | 4: halved to 0,2,4 | 8: to 0,4,8 | 13 (the last step, kept): to 0,8,13
    assert steps == [0, 8, 13] and header["every"] == 8


def test_interval_zero_writes_nothing_and_diagnostics_do_not_change_training(tmp_path):
    off, on = tmp_path / "off", tmp_path / "on"
    job_off, job_on = tiny_job(dropout=0.1), tiny_job(dropout=0.1)
    run(job_off, tiny_cfg(max_steps=4, diag_interval=0), off)
    run(job_on, tiny_cfg(max_steps=4, diag_interval=1), on)
    assert not (off / DIAG_FILE).exists()
    assert [r["step"] for r in read_records(on / DIAG_FILE)[1]] == [0, 1, 2, 3, 4]
    for k, v in job_off.model.state_dict().items():
        np.testing.assert_array_equal(v, job_on.model.state_dict()[k], err_msg=k)


@pytest.mark.parametrize("max_steps", [1, 7, 40, 49, 600, 2000, 10**6])
def test_the_default_interval_gives_every_run_length_enough_records(tmp_path, max_steps):
    cfg = tiny_cfg(max_steps=max_steps, eval_interval=1000)  # the eval interval plays no part
    diag = Diagnostics(tiny_job(), cfg.diagnostics_every, max_steps, 3, tmp_path / DIAG_FILE)
    steps = [0] + [s for s in range(1, max_steps + 1) if diag.due(s)]  # what the trainer records
    assert len(steps) >= min(max_steps + 1, 20) and len(steps) <= 2 * DIAG_RECORDS + 2
    assert steps[-1] == max_steps and diag.header["every"] == max(1, max_steps // DIAG_RECORDS)


def test_train_40_steps_records_step_0_and_at_least_20_records_over_time(tmp_path):
    out = tmp_path / "r"
    job = tiny_job()
    untrained = tiny_job()  # the same seed: the initial weights
    run(job, tiny_cfg(max_steps=40, decay_steps=40, eval_interval=1000, log_interval=10), out)
    records = read_records(out / DIAG_FILE)[1]
    assert [r["step"] for r in records] == list(range(41))
    first = records[0]
    assert all(p["update_ratio"] is None for p in first["params"].values())  # no update yet
    assert all(p["update_ratio"] is not None for p in records[1]["params"].values() if len(p["shape"]) == 2)
    # step 0 measures the initial weights: the same as a recorder on the untrained model, not the
    # record after the first update
    direct = Diagnostics(untrained, 1, 40, 3, tmp_path / "direct.jsonl")
    untrained.model(*untrained.train_batch(np.random.default_rng(0), 8))
    untrained.model.backward()
    init_layers = direct.record(0, 0.0, None)["layers"]
    for got, want, after in zip(first["layers"], init_layers, records[1]["layers"]):
        assert got["mean"] == pytest.approx(want["mean"], rel=1e-6) and got["hist"] == want["hist"]
        assert got["mean"] != pytest.approx(after["mean"], rel=1e-6)


def test_a_negative_interval_is_refused():
    with pytest.raises(ConfigError, match="diag_interval"):
        tiny_cfg(diag_interval=-1)


def test_the_cli_option_is_declared_with_its_default(capsys):
    from scratchformer.cli.main import main

    with pytest.raises(SystemExit):
        main(["train", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--diag-interval N" in text and f"default: max steps // {DIAG_RECORDS}, at least 1" in text


def test_a_negative_interval_on_the_command_line_is_one_line(capsys):
    from scratchformer.cli.main import main

    with pytest.raises(SystemExit) as e:
        main(["train", "--diag-interval", "-1"])
    assert e.value.code == 2
    assert "expected an integer >= 0" in capsys.readouterr().err


def test_viz_draws_the_diagnostics_figures(tmp_path):
    from scratchformer.viz import diagnostics as D
    from scratchformer.viz import report

    out = tmp_path / "v"
    job = tiny_job()
    run(job, tiny_cfg(max_steps=4), out)
    records = D.diag_records(out)
    for draw in (
        D.activation_histograms,
        D.activation_gradients,
        D.gradient_histograms,
        D.update_ratios,
        D.saturation_dead,
    ):
        fig = draw(records)
        assert fig.axes and any(ax.lines for ax in fig.axes)
    params = records[-1]["params"]
    matrices = [n for n, p in params.items() if len(p["shape"]) == 2]
    vectors = [n for n, p in params.items() if len(p["shape"]) == 1]
    assert (
        matrices == [n for n, p in job.model.named_parameters() if p.data.ndim == 2] and len(matrices) >= 10
    )
    assert vectors == [n for n, p in job.model.named_parameters() if p.data.ndim == 1] and vectors
    # update:data: the matrices alone in the first panel, each line labelled, and makemore's guide
    weights, others = D.update_ratios(records).axes
    labels = [line.get_label() for line in weights.get_lines()]
    assert labels == matrices + ["1e-3 guide"]
    assert {t.get_text() for t in weights.get_legend().get_texts()} == set(matrices) | {"1e-3 guide"}
    assert np.allclose(weights.get_lines()[-1].get_ydata(), -3)
    assert len(others.get_lines()) == len(vectors) + 1  # biases and norm gains apart
    first = weights.get_lines()[0]
    np.testing.assert_allclose(
        first.get_ydata()[1:], [r["params"][matrices[0]]["update_ratio"] for r in records[1:]]
    )
    assert np.isnan(first.get_ydata()[0])  # step 0: no update yet
    # one gradient panel per matrix, each on its own range
    panels = [ax for ax in D.gradient_histograms(records).axes if ax.get_visible() and ax.lines]
    assert [ax.get_title().split("\n")[0] for ax in panels] == matrices
    for ax, name in zip(panels, matrices):
        lo, hi = params[name]["grad_range"]
        x = ax.lines[0].get_xdata()
        assert x[0] == pytest.approx(lo + (hi - lo) / 80) and x[-1] == pytest.approx(hi - (hi - lo) / 80)
    assert len({round(ax.lines[0].get_xdata()[-1], 12) for ax in panels}) == len(matrices)
    paths = report(
        job.model,
        tmp_path / "fig",
        text="emma",
        tokenizer=job.tokenizer,
        log=out / "log.jsonl",
        only=[
            "diag_activations",
            "diag_activation_gradients",
            "diag_gradients",
            "diag_update_ratio",
            "diag_saturation",
        ],
    )
    assert sorted(p.name for p in paths) == [
        "diag_activation_gradients.png",
        "diag_activations.png",
        "diag_gradients.png",
        "diag_saturation.png",
        "diag_update_ratio.png",
        "report.html",
    ]
    assert D.diag_records(tmp_path / "nothing") is None


def test_report_replays_the_probe_attention_over_training(tmp_path):
    from test_viz_report import _canvas, opened

    from scratchformer.viz import decode_attention, report

    out = tmp_path / "run"
    job = tiny_job()
    run(job, tiny_cfg(max_steps=6, lr=3e-2, diag_interval=2), out)
    records = read_records(out / DIAG_FILE)[1]
    path = report(job.model, tmp_path / "fig", text="emma", tokenizer=job.tokenizer, log=out, only=[])[-1]
    page_text = path.read_text()
    data = json.loads(page_text.split('id="sf-data">')[1].split("</script>")[0])
    tab = data["tabs"][-1]
    assert tab["name"].startswith("probe over training") and tab["steps"] == [0, 2, 4, 6]
    for frame, rec in zip(tab["frames"], records):
        np.testing.assert_allclose(
            decode_attention(frame, (2, 2, 5, 5)), rec["probe"]["attention"], atol=0.5 / 255
        )
    with opened(path) as page:
        assert page.locator("#sf-steps").is_hidden()  # the model's own tab has no slider
        page.click("#sf-tabs button >> text=probe over training")
        assert page.locator("#sf-steps").is_visible()
        assert page.inner_text("#sf-step-label").startswith("6 ")
        last = _canvas(page, "sf-matrix")["png"]
        page.fill("#sf-step", "0")
        page.dispatch_event("#sf-step", "input")
        assert page.inner_text("#sf-step-label").startswith("0 ")
        assert _canvas(page, "sf-matrix")["png"] != last, "another step, same pixels"


@pytest.mark.parametrize("run_kind, model", [("majority", {"pooling": "cls"}), ("reverse", {})])
def test_every_model_family_records_its_probe(tmp_path, run_kind, model):
    from scratchformer.training.jobs import build_job

    job, cfg = build_job(
        run_kind,
        {"n_layer": 1, "n_embd": 16, **model},
        {
            "max_steps": 4,
            "eval_batches": 1,
            "eval_interval": 2,
            "workers": 1,
            "num_samples": 0,
            "diag_interval": 2,
        },
    )
    run(job, cfg, tmp_path / run_kind)
    records = read_records(tmp_path / run_kind / DIAG_FILE)[1]
    assert [r["step"] for r in records] == [0, 2, 4]
    for r in records:  # one label per attended position ([CLS] first for a cls-pooling classifier)
        tokens, att = r["probe"]["tokens"], np.array(r["probe"]["attention"])
        assert att.shape[-1] == att.shape[-2] == len(tokens)
        np.testing.assert_allclose(att.sum(-1), 1, rtol=1e-5)
    assert (records[0]["probe"]["tokens"][0] == "[CLS]") == (run_kind == "majority")
    # the last record holds the trained model's own attention on the probe, bit for bit (read from
    # the attentions' weights after a plain forward of the main stack, not through the hooks)
    model = job.model.eval()
    probe = np.asarray(job.viz_inputs(None)["ids"])[None]
    model.encode(probe) if model.decodes else model(probe)
    own = [b.self_attn.attn_weights[0].astype(np.float64).tolist() for b in T.blocks(model)]
    assert records[-1]["probe"]["attention"] == own


def test_a_fine_tuned_classifiers_padding_is_left_out_of_the_statistics(tmp_path):
    """A batch of sentences is padded to its longest; the [PAD] positions' activations are
    computed but mean nothing (the attention mask hides them): the record's statistics are
    those of the real tokens alone."""
    from tiny_bert import make_bert_dir, make_csv

    from scratchformer.training.jobs import build_job
    from scratchformer.training.sentence import SentenceClassifierJob

    job, _ = build_job(
        "finetune",
        {"max_length": 32, "freeze_encoder": False},
        {"max_steps": 1},
        {"path": str(make_csv(tmp_path / "t.csv", n=40)), "base": str(make_bert_dir(tmp_path / "b"))},
    )
    assert isinstance(job, SentenceClassifierJob)
    diag = Diagnostics(job, interval=1, max_steps=1, seed=3, path=tmp_path / DIAG_FILE)
    real = job.real_tokens(diag.probe_batch)
    assert 0 < real.mean() < 1  # the probe batch holds padding
    ff = diag.traced.block_parts(diag.traced.stacks()[diag.traced.main_prefix()][0]).feedforward
    seen = []
    ff.hook_pre.set_hooks("test", lambda h, _n: seen.append(np.array(h, np.float64)))
    try:
        job.model.eval()
        job.model(*diag.probe_batch[:2])
    finally:
        ff.hook_pre.remove_hooks()
    post = ff.activate(seen[0])[real]  # (real tokens, n_inner)
    rec = diag.record(0, 0.0, None)
    assert rec["layers"][0]["mean"] == pytest.approx(float(post.mean()), rel=1e-6)
    assert abs(float(ff.activate(seen[0]).mean()) - float(post.mean())) > 1e-6  # the padding would change it
