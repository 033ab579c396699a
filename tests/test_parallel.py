"""nn.DataParallel: worker processes on slices of the batch give the whole batch's loss and
gradients (up to float rounding), for every model family; deterministic; eval mode, small
batches and forwards without targets are the model alone; a dead worker is one clear error."""

import numpy as np
import pytest

import os
import signal

from scratchformer.errors import BackwardError, ConfigError, DataError, ParallelWorkerError
from scratchformer.models import (GPT, ClassifierConfig, GPTConfig, Seq2SeqConfig, Seq2SeqTransformer,
                                  TransformerClassifier)
from scratchformer.nn import DataParallel, eval_mode, manual_seed, set_dropout_rng
from scratchformer.optim import AdamW, param_groups
from scratchformer.training.trainer import TrainConfig, resume_config

RNG = np.random.default_rng(0)
GPT_CFG = GPTConfig(vocab_size=11, block_size=8, n_layer=2, n_head=2, n_embd=16)


def gpt_batch(B=7):
    x, y = RNG.integers(0, 11, (B, 8)), RNG.integers(0, 11, (B, 8))
    y[0, :6] = -1  # ignored targets: the first slice has fewer loss terms, so weighting matters
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
    yield ("classifier", lambda: seeded(TransformerClassifier, ClassifierConfig(vocab_size=9, n_classes=3, n_layer=1,
                                                                                n_embd=16, n_head=2)),
           (RNG.integers(0, 9, (6, 5)), RNG.integers(0, 3, 6)))
    yield ("seq2seq", lambda: seeded(Seq2SeqTransformer, Seq2SeqConfig(src_vocab_size=9, tgt_vocab_size=9, n_layer=1,
                                                                       n_embd=16, n_head=2)),
           (src, tgt, tgt_out))


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


def test_replicas_follow_the_optimiser_and_dloss_scales():
    """After AdamW moved the weights into its flat buffer and updated them, the replicas see the
    new weights; dloss scales every gradient."""
    x, y = gpt_batch(8)
    alone, parallel = GPT(GPT_CFG, seed=2), DataParallel(GPT(GPT_CFG, seed=2), min_tokens=1)
    for model in (alone, parallel.module):
        opt = AdamW(param_groups(model, 0.1), lr=1e-2)
        runner = parallel if model is parallel.module else model
        for _ in range(3):
            opt.zero_grad()
            runner(x, y)
            runner.backward(dloss=0.5)
            opt.step()
    for (n, p), q in zip(alone.named_parameters(), parallel.module.parameters()):
        np.testing.assert_allclose(q.data, p.data, rtol=1e-4, atol=2e-5, err_msg=n)
    assert parallel._pool.copied == []  # AdamW's weights are shared memory: the workers read them in place
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


def test_job_evaluate_through_the_runner_equals_the_model_alone():
    from scratchformer.training.lm import LMJob
    job = LMJob.create("lines", dict(n_layer=1, n_head=2, n_embd=16), {"split_seed": 1337}, 0)
    runner = DataParallel(job.model)
    alone, split = job.evaluate("val"), job.evaluate("val", runner=runner)
    assert runner.worker_pids() and job.model.training  # split over the workers, mode restored
    assert split["loss"] == pytest.approx(alone["loss"], rel=1e-6)
    runner.close()


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
        opts = [AdamW(param_groups(alone, 0.1), lr=1e-2), None]
        if optimiser_first:
            opts[1] = AdamW(param_groups(parallel.module, 0.1), lr=1e-2)
        parallel(x, y)
        pool, n_params = parallel._pool, len(parallel.module.parameters())
        # forked before any optimiser: copies; after AdamW: its shared flat buffer, read in place
        assert len(pool.copied) == (0 if optimiser_first else n_params)
        parallel.module.zero_grad()
        opts[1] = opts[1] or AdamW(param_groups(parallel.module, 0.1), lr=1e-2)
        for step in range(4):
            if step == 2:  # new optimisers: a new flat buffer, which workers reading in place do not map
                pids = parallel.worker_pids()
                opts = [AdamW(param_groups(m, 0.1), lr=1e-2) for m in (alone, parallel.module)]
            for opt, runner in zip(opts, (alone, parallel)):
                opt.zero_grad()
                runner(x, y)
                runner.backward()
                opt.step()
        # copied weights may move (the copy follows them); weights read in place may not
        assert (parallel._pool is pool) == (not optimiser_first)
        assert (parallel.worker_pids() == pids) == (not optimiser_first)
        for (n, p), q in zip(alone.named_parameters(), parallel.module.parameters()):
            np.testing.assert_allclose(q.data, p.data, rtol=1e-4, atol=2e-5, err_msg=n)
        parallel.close()
