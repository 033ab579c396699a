"""training.parallel.DataParallel: worker processes on slices of the batch give the whole batch's loss and
gradients (up to float rounding), for every model family; deterministic; eval mode, small
batches and forwards without targets are the model alone; a dead worker is one clear error."""

import os
import signal

import numpy as np
import pytest

from scratchformer.errors import BackwardError, ConfigError, DataError, ParallelWorkerError
from scratchformer.models import (
    GPT,
    ClassifierConfig,
    GPTConfig,
    Seq2SeqConfig,
    Seq2SeqTransformer,
    TransformerClassifier,
)
from scratchformer.nn import Parameter, eval_mode, manual_seed, set_dropout_rng
from scratchformer.ops import IGNORE_INDEX
from scratchformer.optim import AdamW, FlatAdamW, make_adamw, param_groups
from scratchformer.training.parallel import DataParallel
from scratchformer.training.trainer import TrainConfig, resume_config

RNG = np.random.default_rng(0)
GPT_CFG = GPTConfig(vocab_size=11, block_size=8, n_layer=2, n_head=2, n_embd=16)


def gpt_batch(B=7):
    x, y = RNG.integers(0, 11, (B, 8)), RNG.integers(0, 11, (B, 8))
    y[0, :6] = IGNORE_INDEX  # ignored targets: the first slice has fewer loss terms, so weighting matters
    return x, y


def seeded(model_class, config):
    manual_seed(1)
    return model_class(config)


def cases():
    """(name, make_model, batch): one per model family."""
    src, tgt = RNG.integers(3, 9, (5, 6)), RNG.integers(3, 9, (5, 7))
    tgt_out = tgt.copy()
    tgt_out[1, 3:] = 0  # padding (pad_id 0) is ignored by the loss
    yield "gpt", lambda: GPT(GPT_CFG, seed=1), gpt_batch()
    yield (
        "classifier",
        lambda: seeded(
            TransformerClassifier, ClassifierConfig(vocab_size=9, n_classes=3, n_layer=1, n_embd=16, n_head=2)
        ),
        (RNG.integers(0, 9, (6, 5)), RNG.integers(0, 3, 6)),
    )
    yield (
        "seq2seq",
        lambda: seeded(
            Seq2SeqTransformer,
            Seq2SeqConfig(src_vocab_size=9, tgt_vocab_size=9, n_layer=1, n_embd=16, n_head=2),
        ),
        (src, tgt, tgt_out),
    )
    ids, mask = RNG.integers(1, 20, (6, 7)), np.ones((6, 7), dtype=np.int64)
    mask[2, 4:] = mask[5, 2:] = 0  # padded texts, as a fine-tuning batch trimmed to its longest
    ids[mask == 0] = 0
    yield "bert-classifier", bert_classifier, (ids, mask, RNG.integers(0, 3, 6))


def bert_classifier():
    """`scratchformer finetune`'s model: a (random, small) BERT encoder, mean pooling, a linear head."""
    from scratchformer.interop.bert import BertConfig, BertEncoder
    from scratchformer.interop.bert_classifier import BertClassifier

    manual_seed(1)
    encoder = BertEncoder(
        BertConfig(
            vocab_size=20,
            hidden_size=16,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=32,
            max_position_embeddings=16,
        )
    )
    return BertClassifier(encoder, 3, seed=0).train()


@pytest.mark.parametrize("name,make,batch", list(cases()), ids=[c[0] for c in cases()])
@pytest.mark.parametrize("workers", [2, 3])
def test_loss_and_gradients_equal_the_whole_batch(name, make, batch, workers):
    alone, parallel = make(), DataParallel(make(), workers, min_tokens=1)
    out_a, loss_a = alone(*batch)
    alone.backward()
    out_p, loss_p = parallel(*batch)
    parallel.backward()
    np.testing.assert_allclose(out_p, out_a, rtol=1e-5, atol=1e-6)
    assert loss_p == pytest.approx(loss_a, rel=1e-6)
    for (n, p), q in zip(alone.named_parameters(), parallel.module.parameters()):
        np.testing.assert_allclose(q.grad, p.grad, rtol=1e-4, atol=1e-6, err_msg=n)
    parallel.close()


def test_train_outputs_false_gives_the_loss_alone_in_training_mode_and_outputs_in_eval_mode():
    """The trainer's runner: no logits come back from a training step (None, however the batch
    runs), the same loss and gradients; evaluation still returns the outputs."""
    x, y = gpt_batch(8)
    full = DataParallel(GPT(GPT_CFG, seed=2), min_tokens=1)
    lean = DataParallel(GPT(GPT_CFG, seed=2), min_tokens=1, train_outputs=False)
    alone = DataParallel(GPT(GPT_CFG, seed=2), train_outputs=False)  # 64 tokens < min_tokens: the GPT alone
    out_full, loss_full = full(x, y)
    full.backward()
    for runner in (lean, alone):
        out, loss = runner(x, y)
        runner.backward()
        assert out is None and loss == pytest.approx(loss_full, rel=1e-6)
        for (n, p), q in zip(full.module.named_parameters(), runner.module.parameters()):
            np.testing.assert_allclose(q.grad, p.grad, rtol=1e-4, atol=1e-6, err_msg=n)
    assert lean.worker_pids() and not alone.worker_pids()
    with eval_mode(lean.module):
        out, loss = lean(x, y)
    np.testing.assert_allclose(out, out_full, rtol=1e-5, atol=1e-6)
    assert out.shape == (8, 8, 11) and loss == pytest.approx(loss_full, rel=1e-6)
    full.close()
    lean.close()


def test_replicas_follow_the_optimiser_and_dloss_scales():
    """After the lane's AdamW took the weights into its flat buffer and updated them, the replicas
    see the new weights; dloss scales every gradient."""
    x, y = gpt_batch(8)
    alone, parallel = GPT(GPT_CFG, seed=2), DataParallel(GPT(GPT_CFG, seed=2), min_tokens=1)
    for model in (alone, parallel.module):
        opt = make_adamw(param_groups(model, 0.1), lr=1e-2)
        runner = parallel if model is parallel.module else model
        parallel.optimizer = opt if runner is parallel else None
        for _ in range(3):
            opt.zero_grad()
            runner(x, y)
            runner.backward(dloss=0.5)
            opt.step()
    for (n, p), q in zip(alone.named_parameters(), parallel.module.parameters()):
        np.testing.assert_allclose(q.data, p.data, rtol=1e-4, atol=2e-5, err_msg=n)
    assert (
        parallel._pool.copied == []
    )  # AdamW's weights were moved to shared memory: the workers read them in place
    # AdamW hides the scale of a gradient, so check dloss on the gradients themselves
    for model in (alone, parallel.module):
        model.zero_grad()
    alone(x, y)
    alone.backward()
    parallel(x, y)
    parallel.backward(dloss=0.5)
    for (n, p), q in zip(alone.named_parameters(), parallel.module.parameters()):
        np.testing.assert_allclose(q.grad, 0.5 * p.grad, rtol=1e-3, atol=1e-6, err_msg=n)
    parallel.close()


def test_dropout_is_deterministic_and_differs_between_replicas():
    cfg = GPTConfig(vocab_size=11, block_size=8, n_layer=1, n_head=2, n_embd=16, dropout=0.5)
    x = np.tile(RNG.integers(0, 11, (1, 8)), (4, 1))  # four identical rows: two per replica
    y = np.tile(RNG.integers(0, 11, (1, 8)), (4, 1))
    grads = []
    for _ in range(2):
        model = DataParallel(GPT(cfg, seed=3), min_tokens=1)
        set_dropout_rng(model.module, np.random.default_rng(7))
        logits, _ = model(x, y)
        model.backward()
        grads.append([p.grad.copy() for p in model.parameters()])
        assert not np.allclose(logits[0], logits[2])  # replica 1 draws other masks than replica 0
    for a, b in zip(*grads):
        np.testing.assert_array_equal(a, b)  # same seed, same result, bit for bit


def test_workers_get_the_states_of_the_generators_that_draw_only():
    from scratchformer.nn import Dropout

    x, y = gpt_batch(4)
    for dropout in (0.0, 0.5):
        cfg = GPTConfig(vocab_size=11, block_size=8, n_layer=2, n_head=2, n_embd=16, dropout=dropout)
        model = DataParallel(GPT(cfg, seed=3), min_tokens=1)  # a generator per dropout module
        model(x, y)
        pool, modules = model._pool, [m for m in model.module.modules() if hasattr(m, "rng")]
        assert len(modules) > 2
        assert len(pool.jumped_states(1, training=True)) == (len(modules) if dropout else 0)
        assert pool.jumped_states(1, training=False) == []  # eval mode draws nothing
        if dropout:
            first = next(m for m in modules if isinstance(m, Dropout))
            first.p = 0.0  # changed after the fork: it stops drawing, here and in the worker
            assert len(pool.jumped_states(1, training=True)) == len(modules) - 1
            logits, _ = model(x, y)
            again = DataParallel(GPT(cfg, seed=3), min_tokens=1)  # the same two forwards
            again(x, y)
            next(m for m in again.module.modules() if isinstance(m, Dropout)).p = 0.0
            np.testing.assert_array_equal(logits, again(x, y)[0])  # deterministic all the same
            again.close()
        model.close()


def test_eval_mode_splits_too_and_no_targets_give_outputs_only():
    x, y = gpt_batch(6)
    model = DataParallel(GPT(GPT_CFG, seed=4), min_tokens=1)
    logits, loss = model(x)
    assert loss is None and logits.shape == (6, 8, 11)
    with eval_mode(model.module):  # the workers follow the model's own mode
        logits, loss = model(x, y)
        want_logits, want_loss = model.module(x, y)
    assert model.worker_pids()  # it was split
    np.testing.assert_allclose(logits, want_logits, rtol=1e-5, atol=1e-6)
    assert loss == pytest.approx(want_loss, rel=1e-6)
    with pytest.raises(BackwardError):  # nothing to backward after an eval-mode forward
        model.backward()
    _, loss = model(x, y)  # training again: the workers switch back (dropout 0: same loss)
    model.backward()
    assert loss == pytest.approx(want_loss, rel=1e-6)
    model.close()


def test_job_evaluation_through_the_runner_equals_the_model_alone():
    from scratchformer.training.evaluation import run_evaluation
    from scratchformer.training.lm import LMJob

    job = LMJob.create("lines", dict(n_layer=1, n_head=2, n_embd=16), {"split_seed": 1337}, 0)
    runner = DataParallel(job.model)
    alone, split = job.evaluate("val"), run_evaluation(job.evaluation("val"), job.model, runner)
    assert runner.worker_pids() and job.model.training  # split over the workers, mode restored
    assert split["loss"] == pytest.approx(alone["loss"], rel=1e-6)
    runner.close()


@pytest.mark.parametrize(
    "run_kind,data",
    [
        ("reverse", {"n_train": 40, "n_test": 24}),
        ("induction", {"n_train": 40, "n_test": 24}),
        ("modadd", {"modulus": 13}),
    ],
)
def test_every_kinds_evaluation_runs_through_the_runner_as_alone(run_kind, data):
    """A job never sees how its batches run: seq2seq (its scores decode with the model itself),
    and the kinds whose forwards take no targets (their outputs come back joined)."""
    from scratchformer.training.evaluation import run_evaluation
    from scratchformer.training.jobs import build_job

    job, _ = build_job(run_kind, model={"n_layer": 1}, data=data)
    runner = DataParallel(job.model, min_tokens=1)
    try:
        split = run_evaluation(job.evaluation("val"), job.model, runner)
        assert runner.worker_pids() and job.model.training  # split over the workers, mode restored
    finally:
        runner.close()
    alone = job.evaluate("val")
    assert split.keys() == alone.keys()
    for k, v in alone.items():
        assert split[k] == pytest.approx(v, rel=1e-5, abs=1e-7), k


def test_small_batches_run_the_model_alone_and_bad_workers():
    for rows, min_tokens in ((1, 1), (6, 25)):  # one row; or 6 x 8 = 48 tokens, under 2 x 25
        x, y = gpt_batch(rows)
        model = DataParallel(GPT(GPT_CFG, seed=5), workers=4, min_tokens=min_tokens)
        _, loss = model(x, y)
        assert model._weights is None  # ran alone
        model.backward()
        assert np.isfinite(loss)
    model = DataParallel(GPT(GPT_CFG, seed=5), workers=4, min_tokens=16)
    model(*gpt_batch(6))  # 48 tokens: 3 slices of 16
    assert len(model._weights) == 3
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ConfigError, match="workers"):
            DataParallel(GPT(GPT_CFG, seed=5), workers=bad)


def test_checks_its_input_at_the_door_before_any_slice_runs():
    model = DataParallel(GPT(GPT_CFG, seed=6), min_tokens=1)
    with pytest.raises(DataError, match="token ids must be in"):
        model(np.full((4, 8), 99), np.zeros((4, 8), dtype=int))
    assert model.worker_pids() == []  # refused before a worker was forked


def test_train_config_workers_default_and_runs_saved_before_workers_resume_in_one_process():
    assert TrainConfig().workers == 2
    with pytest.raises(ConfigError, match="workers"):
        TrainConfig(workers=0)
    from scratchformer.training.schema import upgrade_run_files  # reads what older versions saved

    _, state = upgrade_run_files({}, {"extra": {"train_config": {"max_steps": 10}}})
    cfg, _ = resume_config(state["extra"]["train_config"], {})
    assert cfg.workers == 1
    cfg, _ = resume_config({"max_steps": 10, "workers": 2}, {})
    assert cfg.workers == 2


def test_a_dead_worker_is_one_clear_error_and_close_stops_the_workers():
    x, y = gpt_batch(6)
    model = DataParallel(GPT(GPT_CFG, seed=7), min_tokens=1)
    model(x, y)
    model.backward()
    proc = model._pool.procs[1]
    os.kill(proc.pid, signal.SIGKILL)
    proc.join(5)
    with pytest.raises(ParallelWorkerError, match="worker 1 stopped"):
        model(x, y)
    assert model._pool is None  # stopped; the next forward forks fresh workers
    _, loss = model(x, y)
    assert loss == pytest.approx(model.module(x, y)[1], rel=1e-5)
    procs = list(model._pool.procs.values())
    assert model.worker_pids() == [p.pid for p in procs]
    model.close()
    assert procs and not any(p.is_alive() for p in procs) and model.worker_pids() == []


def test_workers_restart_when_the_parameters_change_dtype():
    x, y = gpt_batch(6)
    model = DataParallel(GPT(GPT_CFG, seed=8), min_tokens=1)
    model(x, y)
    model.backward()
    model.module.to(np.float64)
    _, loss = model(x, y)  # a float32 replica would be off by ~1e-7
    assert loss == pytest.approx(model.module(x, y)[1], rel=1e-13)
    model.close()


def test_weights_are_copied_or_read_in_place_and_a_rebuilt_buffer_forks_fresh_workers():
    x, y = gpt_batch(8)
    for optimiser_first in (False, True):
        alone, parallel = GPT(GPT_CFG, seed=2), DataParallel(GPT(GPT_CFG, seed=2), min_tokens=1)
        opts = [make_adamw(param_groups(alone, 0.1), lr=1e-2), None]
        if optimiser_first:
            opts[1] = parallel.optimizer = make_adamw(param_groups(parallel.module, 0.1), lr=1e-2)
        parallel(x, y)
        pool, n_params = parallel._pool, len(parallel.module.parameters())
        # forked before any optimiser: copies; after AdamW: its shared flat buffer, read in place
        assert len(pool.copied) == (0 if optimiser_first else n_params)
        parallel.module.zero_grad()
        opts[1] = opts[1] or make_adamw(param_groups(parallel.module, 0.1), lr=1e-2)
        for step in range(4):
            if step == 2:  # new optimisers: a new flat buffer, which workers reading in place do not map
                pids = parallel.worker_pids()
                opts = [make_adamw(param_groups(m, 0.1), lr=1e-2) for m in (alone, parallel.module)]
                parallel.optimizer = opts[1] if optimiser_first else None
            for opt, runner in zip(opts, (alone, parallel)):
                opt.zero_grad()
                runner(x, y)
                runner.backward()
                opt.step()
        # copied weights may move (the copy follows them); weights read in place may not
        assert (parallel._pool is pool) == (not optimiser_first)
        assert (parallel.worker_pids() == pids) == (not optimiser_first)
        # AdamW divides by sqrt(v): an entry whose gradient is near 0 turns the split batch's float32
        # rounding into a step of up to ~lr * 1e-3 (2.6e-5 seen on a bias). The keys' bias has a
        # gradient of exactly 0 (softmax ignores a shift shared by a query's scores), so both runs
        # step it by float noise alone: it is held to Adam's largest steps, 4 of at most lr each.
        C = GPT_CFG.n_embd
        for (n, p), q in zip(alone.named_parameters(), parallel.module.parameters()):
            want, got = p.data.copy(), q.data.copy()
            if n.endswith("self_attn.in_proj_bias"):
                np.testing.assert_allclose(got[C : 2 * C], want[C : 2 * C], rtol=0, atol=4 * 1e-2, err_msg=n)
                got[C : 2 * C] = want[C : 2 * C]
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=5e-5, err_msg=n)
        parallel.close()


def _fill_with_ones(arrays):
    for a in arrays:
        a[...] = 1


@pytest.mark.parametrize("kind", ["FlatAdamW", "AdamW", "SGD", "SGD-resumed"])
def test_share_memory_puts_the_declared_state_where_a_forked_worker_shares_it(kind):
    import multiprocessing

    from scratchformer.optim import SGD
    from scratchformer.training.parallel import can_fork_workers, is_shared, share_memory

    if not can_fork_workers():
        pytest.skip("fork is Linux-only here")
    params = [
        Parameter(np.arange(12, dtype=np.float32).reshape(3, 4)),
        Parameter(np.ones(5, dtype=np.float32)),
    ]
    twins = [Parameter(p.data.copy()) for p in params]
    if kind == "FlatAdamW":
        opt, twin = FlatAdamW(params, lr=0.1).bind(), FlatAdamW(twins, lr=0.1).bind()
    elif kind == "AdamW":
        opt, twin = AdamW(params, lr=0.1), AdamW(twins, lr=0.1)
    else:
        opt, twin = SGD(params, lr=0.1, momentum=0.9), SGD(twins, lr=0.1, momentum=0.9)
        for o, ps in ((opt, params), (twin, twins)):
            for p in ps:
                p.grad[...] = 0.5
            o.step()  # the momentum buffers exist from the first step on
            if kind == "SGD-resumed":
                o.load_state_dict(o.state_dict())
    assert share_memory(opt, params) > 0
    assert share_memory(opt, params) == 0  # already there: nothing moves twice
    # the same values; what the optimiser declares and every parameter array now in shared memory
    for p, q in zip(params, twins):
        np.testing.assert_array_equal(p.data, q.data)
    assert all(is_shared(a) for a in opt.state_arrays().values())
    assert all(is_shared(p.data) and is_shared(p.grad) for p in params)
    if kind == "FlatAdamW":  # and the parameters still view the optimiser's flat buffers
        assert all(p.grad.base is opt.grad and p.data.base is opt.data for p in params)
    # a step after the move is the step without it, bit for bit
    for o, ps in ((opt, params), (twin, twins)):
        for p in ps:
            p.grad[...] = 0.25
        o.step()
    for p, q in zip(params, twins):
        np.testing.assert_array_equal(p.data, q.data)
    if kind == "AdamW":
        return  # the per-parameter update replaces its moments at each step: nothing to write through
    state = list(opt.state_arrays().values())
    child = multiprocessing.get_context("fork").Process(target=_fill_with_ones, args=(state,))
    child.start()
    child.join(10)
    assert child.exitcode == 0
    # the child's writes are ours: shared pages, not copy-on-write copies (which a worker would
    # otherwise keep, stale, once this process writes the state at each step)
    assert all((a == 1).all() for a in state)


def test_share_memory_reads_what_the_optimiser_declares_and_nothing_else():
    """Only state_arrays() moves: an array the optimiser keeps elsewhere stays where it is."""
    from scratchformer.training.parallel import is_shared, share_memory

    params = [Parameter(np.ones(3, dtype=np.float32))]
    opt = FlatAdamW(params).bind()
    opt.undeclared = np.zeros(4)
    share_memory(opt, params)
    assert not is_shared(opt.undeclared) and is_shared(opt.flat_m)
    with pytest.raises(ConfigError, match="shape"):
        opt.adopt_state_arrays({"m": np.zeros(2, dtype=np.float32)})


def test_three_processes_draw_three_dropout_streams():
    # TEST-GAPS row 1: worker i draws from the model's generators jumped i * 2^127 draws ahead, so
    # workers 1 and 2 differ (a shared stream, jumped() instead of jumped(i), would make them equal)
    cfg = GPTConfig(vocab_size=11, block_size=8, n_layer=1, n_head=2, n_embd=16, dropout=0.5)
    x = np.tile(RNG.integers(0, 11, (1, 8)), (6, 1))  # six identical rows: two per process
    y = np.tile(RNG.integers(0, 11, (1, 8)), (6, 1))
    model = DataParallel(GPT(cfg, seed=3), workers=3, min_tokens=1)
    set_dropout_rng(model.module, np.random.default_rng(7))
    logits, _ = model(x, y)
    assert len(model._weights) == 3
    assert not np.allclose(logits[0], logits[2]) and not np.allclose(logits[0], logits[4])
    assert not np.allclose(logits[2], logits[4])  # worker 1's slice differs from worker 2's
    rng = model._pool.rng_modules[0].rng
    for i in (1, 2):
        assert model._pool.jumped_states(i, training=True)[0][1] == rng.bit_generator.jumped(i).state
    model.backward()
    model.close()


def test_only_as_many_workers_as_slices_are_forked():
    model = DataParallel(GPT(GPT_CFG, seed=5), workers=4, min_tokens=16)
    x, y = gpt_batch(4)  # 32 tokens: 2 slices of 16
    model(x, y)
    assert len(model.worker_pids()) == 1
    model.backward()
    x, y = gpt_batch(6)  # 48 tokens: 3 slices, so a third process
    _, loss = model(x, y)
    assert len(model.worker_pids()) == 2
    assert loss == pytest.approx(model.module(x, y)[1], rel=1e-5)
    model.close()


def test_workers_beyond_reason_are_refused_naming_the_option():
    from scratchformer.training.parallel import check_workers, max_workers

    check_workers(max_workers())
    for bad in (0, max_workers() + 1, 1500, 2.0):
        with pytest.raises(ConfigError, match="--workers must be an integer from 1 to"):
            check_workers(bad)


def test_the_cli_refuses_unreasonable_workers_in_one_line(tmp_path, capsys):
    from scratchformer.cli.main import main

    assert (
        main(
            [
                "train",
                "--workers",
                "1500",
                "--max-steps",
                "1",
                "--out",
                str(tmp_path / "run"),
                "--no-progress",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert (
        err.startswith("scratchformer train: error: --workers must be an integer from 1 to")
        and err.count("\n") == 1
    )
    assert not (tmp_path / "run" / "last").exists()


def test_a_refused_fork_is_one_line(monkeypatch):
    import multiprocessing.process

    def refuse(self):
        raise BlockingIOError(11, "Resource temporarily unavailable")

    model = DataParallel(GPT(GPT_CFG, seed=5), workers=3, min_tokens=1)
    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", refuse)
    with pytest.raises(ParallelWorkerError) as info:
        model(*gpt_batch(6))
    assert str(info.value).startswith(
        "could not start worker process 1 of 2 (Resource temporarily unavailable)"
    )
    assert "lower --workers" in str(info.value) and "\n" not in str(info.value)
    assert model._pool is None


def test_where_processes_cannot_fork_training_runs_one_records_it_and_resumes_exactly(
    tmp_path, monkeypatch, capsys
):
    from scratchformer.training import parallel
    from scratchformer.training.checkpoint import load_checkpoint
    from scratchformer.training.lm import LMJob
    from scratchformer.training.trainer import train

    def job():
        return LMJob.create(
            "lines", dict(n_layer=1, n_head=2, n_embd=16, dropout=0.1), {"split_seed": 1337}, 0
        )

    def cfg(**kw):
        return TrainConfig(
            **{
                **dict(
                    max_steps=6,
                    decay_steps=6,
                    batch_size=64,
                    eval_interval=3,
                    eval_batches=1,
                    warmup_steps=1,
                    num_samples=0,
                    seed=3,
                    workers=2,
                ),
                **kw,
            }
        )

    monkeypatch.delattr(os, "fork")  # as on Windows (macOS: sys.platform is not linux)
    assert not parallel.can_fork_workers()
    train(job(), cfg(max_steps=3), tmp_path / "run", progress=False, verbose=False)
    lines = [line for line in capsys.readouterr().out.splitlines() if "fork" in line]
    assert lines == [
        "this platform cannot fork worker processes: training in one process (--workers 1 instead of 2)"
    ]
    ck = load_checkpoint(tmp_path / "run" / "last")
    assert ck.extra["train_config"]["workers"] == 1  # what ran, not what was asked
    monkeypatch.undo()
    assert parallel.can_fork_workers()
    saved, _ = resume_config(ck.extra["train_config"], {"max_steps": 6})
    resumed = LMJob.from_checkpoint(ck)
    train(resumed, saved, tmp_path / "run", resume=True, progress=False, verbose=False, checkpoint=ck)
    whole = job()
    train(whole, cfg(workers=1), tmp_path / "whole", progress=False, verbose=False)
    for k, v in whole.model.state_dict().items():
        np.testing.assert_array_equal(resumed.model.state_dict()[k], v, err_msg=k)


# -- a stopped worker and Ctrl-C end the run (subprocesses, each bounded in time) -------------------
_TRAIN_AND_REPORT_WORKERS = """
import os, sys, time
from scratchformer.cli.main import main
from scratchformer.training import parallel

parallel.WORKER_TIMEOUT_S = float(sys.argv[2])
split_forward = parallel.DataParallel._split_forward

def stopped(pid):  # the state letter of /proc/PID/stat: T once SIGSTOP has landed
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "T"

def report(self, *args):
    # At the second step's forward (step 1 is applied), tell the test the workers' pids, then wait
    # until the test has stopped them: the stop lands in step 2 whatever the load. (A test that
    # never stops them fails on its own; this process then goes on after two minutes.)
    report.calls += 1
    if report.calls == 2:
        pids = self.worker_pids()
        with open(sys.argv[1] + ".part", "w") as f:
            f.write(" ".join(map(str, pids)))
        os.replace(sys.argv[1] + ".part", sys.argv[1])  # the test never reads half a list
        deadline = time.monotonic() + 120
        while not all(stopped(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.01)
    return split_forward(self, *args)

report.calls = 0
parallel.DataParallel._split_forward = report
sys.exit(main(["train", "--max-steps", "100000", "--batch-size", "64", "--n-layer", "1", "--n-embd", "16",
               "--n-head", "2", "--eval-interval", "100000", "--workers", "2", "--no-progress", "--quiet",
               "--out", sys.argv[3]]))
"""


def _start_training(tmp_path, timeout_s: float):
    import subprocess
    import sys
    import time
    from pathlib import Path

    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    pids = tmp_path / "pids"
    proc = subprocess.Popen(
        [sys.executable, "-c", _TRAIN_AND_REPORT_WORKERS, str(pids), str(timeout_s), str(tmp_path / "run")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    for _ in range(600):  # the pids come at the second step (at most a minute on a busy machine)
        if pids.exists() and pids.read_text():
            return proc, [int(p) for p in pids.read_text().split()]
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.1)
    proc.kill()
    raise AssertionError("the workers did not start")


def _end(proc, seconds: float):
    import subprocess

    try:
        out, err = proc.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError(f"training did not end within {seconds} s: {proc.communicate()}")  # noqa: B904
    return proc.returncode, out, err


def test_a_stopped_worker_is_detected_and_the_run_saves_and_ends_with_one_line(tmp_path):
    from scratchformer.training.checkpoint import load_checkpoint

    proc, (worker,) = _start_training(tmp_path, timeout_s=2.0)
    os.kill(worker, signal.SIGSTOP)
    try:
        code, out, err = _end(proc, 120)  # 2 s of silence, then a save
    finally:
        os.kill(worker, signal.SIGKILL) if os.path.exists(f"/proc/{worker}") else None
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(
        f"scratchformer train: error: DataParallel worker 1 (pid {worker}) has stopped or "
        "is stuck: no answer in 2 s"
    )
    assert "checkpoint of step 1 written" in lines[0] and "--resume" in lines[0]
    assert load_checkpoint(tmp_path / "run" / "last").step == 1  # the last step done before the stop
    assert not os.path.exists(f"/proc/{worker}") or open(f"/proc/{worker}/stat").read().split()[2] == "Z"


def test_ctrl_c_ends_at_once_even_while_a_worker_is_stopped(tmp_path):
    from scratchformer.training.checkpoint import load_checkpoint

    proc, (worker,) = _start_training(tmp_path, timeout_s=600.0)  # the stop is not detected by time here
    os.kill(worker, signal.SIGSTOP)
    try:
        proc.send_signal(signal.SIGINT)
        code, out, err = _end(proc, 60)  # no hang in multiprocessing's exit-time join of the stopped worker
    finally:
        os.kill(worker, signal.SIGKILL) if os.path.exists(f"/proc/{worker}") else None
    assert code == 130, err
    assert err.count("\n") == 1 and err.startswith("scratchformer train: interrupted at step 1: "), err
    assert "Exception ignored" not in err and "Traceback" not in err
    assert load_checkpoint(tmp_path / "run" / "last").step == 1


def test_a_step_that_cannot_end_in_time_is_refused_at_the_start(tmp_path, capsys):
    from scratchformer.cli.main import main
    from scratchformer.training.lm import LMJob
    from scratchformer.training.trainer import train

    base = [
        "train",
        "--max-steps",
        "5",
        "--n-layer",
        "1",
        "--n-embd",
        "16",
        "--n-head",
        "2",
        "--workers",
        "1",
        "--no-progress",
        "--quiet",
    ]
    with pytest.raises(SystemExit) as refused:  # beyond what a checkpoint holds: the option refuses it
        main(base + ["--grad-accum", "3000000000", "--time-limit", "1", "--out", str(tmp_path / "a")])
    assert refused.value.code == 2
    assert main(base + ["--grad-accum", "100000", "--time-limit", "1", "--out", str(tmp_path / "a")]) == 2
    assert "--grad-accum 100,000 micro-batches a step cannot be honoured" in capsys.readouterr().err
    assert not (tmp_path / "a" / "last").exists()
    job = LMJob.create("lines", dict(n_layer=1, n_head=2, n_embd=16), {"split_seed": 1337}, 0)
    with pytest.raises(
        ConfigError,
        match=r"--grad-accum 1,000 makes one step take about .* longer than "
        r"--time-limit 0.001",
    ):
        train(
            job,
            TrainConfig(max_steps=5, grad_accum=1000, time_limit=0.001, workers=1, batch_size=8),
            tmp_path / "b",
            progress=False,
            verbose=False,
        )
    assert not (tmp_path / "b" / "last").exists()
