"""The training loop: one straight-line function, nanoGPT style, shared by every model family.

What is trained is described by a *job* (the `Job` protocol in `scratchformer.training.jobs`):
it owns the model, hands out training batches, runs forward + backward on one, evaluates a
split and shows samples. The loop owns everything else: optimiser, learning-rate schedule,
gradient accumulation and clipping, evaluation, checkpoints, logs, progress, time limits.

Resuming is exact: the last checkpoint stores the model, the optimiser, the step and the
state of both random generators (batches and dropout), so a resumed run takes the same
steps as an uninterrupted one, bit for bit on the same machine. `resume_config` keeps the
original schedule when a resumed run is extended.

Nothing is lost or silently wrong: one training per run directory (rundir.RunLock); a fresh
run refuses a directory that holds a run unless told to overwrite it; the log gets whole rows
only (rundir.LogWriter), a resume drops rows past its step; a NaN or infinite loss or gradient
norm stops the run before the step is applied, so no checkpoint ever holds it; Ctrl-C, SIGTERM
and a closed stdout stop it between two steps, `last/` saved first; each evaluation saves
before it prints.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import sys
import threading
import time
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np

from scratchformer.allocator import keep_freed_memory
from scratchformer.errors import (CheckpointError, ConfigError, ParallelWorkerError, TrainingDivergedError,
                                  TrainingInterrupted)
from scratchformer.limits import gemm
from scratchformer.limits.estimates import check_training_fits
from scratchformer.nn import set_dropout_rng
from scratchformer.optim import AdamW, clip_grad_norm, cosine_lr, param_groups
from scratchformer.training.checkpoint import Checkpoint, load_checkpoint, save_checkpoint
from scratchformer.training.config import TrainConfig
from scratchformer.training.diagnostics import DIAG_FILE, Diagnostics
from scratchformer.training.parallel import DataParallel, WaitInterrupted, can_fork_workers, check_workers
from scratchformer.training.rundir import (LogWriter, RunLock, check_checkpoint_paths, check_fresh, clear_run,
                                          recover_run, start_log, sweep_temporaries, truncate_log)
from scratchformer.training.schema import CONFIG, check_json

LAST, BEST, LOG = "last", "best", "log.jsonl"


class _Stdout:
    """Where the trainer's lines go, one flushed line at a time, without breaking the progress
    bar. A character stdout cannot encode is written as a backslash escape. A stdout whose
    reader left (`train | head`) is noted in `closed` and written to no more: the loop then
    stops as for Ctrl-C, its checkpoint saved."""

    def __init__(self):
        self.closed = False

    def say(self, msg: str) -> None:
        if self.closed:
            return
        try:
            try:
                self._write(msg)
            except UnicodeEncodeError:
                encoding = getattr(sys.stdout, "encoding", None) or "ascii"
                self._write(msg.encode(encoding, "backslashreplace").decode(encoding))
        except (OSError, ValueError):  # BrokenPipeError; ValueError: the file was closed
            self.closed = True
            _silence_stdout()

    @staticmethod
    def _write(msg: str) -> None:
        try:
            from tqdm import tqdm

            tqdm.write(msg, file=sys.stdout)
        except ImportError:  # pragma: no cover
            print(msg)
        sys.stdout.flush()


def _silence_stdout() -> None:
    """Point stdout at the null device, so nothing later (the interpreter's exit flushing what
    is left) writes into the closed pipe again and prints a traceback."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


stdout = _Stdout()  # the CLI's train command prints through it too
_say = stdout.say


def resume_config(saved: dict, given: dict) -> tuple[TrainConfig, str | None]:
    """The TrainConfig of a resumed run: the saved settings with the `given` ones on top, and
    a note saying how the schedule changes (None when it does not).

    `--resume` alone continues the original schedule exactly. A larger max_steps extends the
    run: the cosine keeps the length it was planned with (its decay_steps), so the learning
    rate does not jump back up, and the extra steps run at min_lr; pass decay_steps as well
    to stretch the cosine instead. The seed cannot change: a resumed run continues the saved
    random generators, so a new seed would change nothing but what the checkpoint records.
    Another `workers` is allowed, with a line saying the run no longer repeats the uninterrupted
    one bit for bit (a batch is split, summed and dropped out differently across processes).
    """
    cfg, note = _resume_schedule(saved, given)
    before = TrainConfig.from_dict(saved).workers
    if cfg.workers != before:
        change = (f"--workers {cfg.workers} instead of the run's {before}: the steps from here will not repeat the "
                  f"uninterrupted run bit for bit (each batch is split, summed and dropped out another way); resume "
                  f"with --workers {before} to repeat it")
        note = change if note is None else f"{note}\n{change}"
    return cfg, note


def _resume_schedule(saved: dict, given: dict) -> tuple[TrainConfig, str | None]:
    """resume_config's schedule part."""
    if "seed" in given:
        raise ConfigError(f"--seed cannot change a resumed run: it continues the random generators of its seed "
                          f"{saved.get('seed')}; drop --seed (or train a new run into another --out)")
    cfg = TrainConfig.from_dict({**saved, **given})
    planned = TrainConfig.from_dict(saved)
    if cfg.max_steps == planned.max_steps or "decay_steps" in given:
        return cfg, None
    cfg.decay_steps = planned.schedule_steps
    if cfg.max_steps > planned.max_steps:
        note = (f"extending the run from {planned.max_steps} to {cfg.max_steps} steps: the cosine keeps its "
                f"length of {cfg.decay_steps} steps, so steps after {cfg.decay_steps} run at min_lr "
                f"{cfg.final_lr:g} (pass --decay-steps N to stretch the cosine instead)")
    else:
        note = f"stopping at step {cfg.max_steps} instead of {planned.max_steps}; the schedule is unchanged"
    return cfg, note


def nothing_to_do(step: int, cfg: TrainConfig, out_dir: str | Path) -> str | None:
    """Whether a resumed run at `step` is already done under `cfg`, decided here alone: the
    line that says so (the run is not touched), or None when there are steps to train."""
    if step < cfg.max_steps:
        return None
    return (f"nothing to do: the run in {out_dir} is at step {step} of {cfg.max_steps}; pass a larger --max-steps "
            "to extend it")


class _StopRequests:
    """While training: the first Ctrl-C (SIGINT) or SIGTERM (what `timeout`, `docker stop`,
    systemd and Slurm send) only records a request, so the loop stops between two steps and
    saves a checkpoint of that step; a second one interrupts at once. During a save (`held()`)
    a signal is recorded, never acted on, so a save always completes. Handlers are installed
    only in the main thread."""

    SIGNALS = {signal.SIGINT: "interrupted", signal.SIGTERM: "terminated (SIGTERM)"}

    def __init__(self):
        self.reason: str | None = None
        self.exit_code = 130
        self._previous: dict = {}
        self._holding = False

    def _handler(self, signum, frame):
        if self.reason is None:
            self.reason, self.exit_code = self.SIGNALS[signum], 128 + signum  # 130, 143: as the shell reports
        elif not self._holding:
            raise KeyboardInterrupt

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self._previous = {s: signal.signal(s, self._handler) for s in self.SIGNALS}
        return self

    def __exit__(self, *exc):
        for s, previous in self._previous.items():
            signal.signal(s, previous)
        self._previous = {}

    @contextlib.contextmanager
    def held(self):
        self._holding = True
        try:
            yield
        finally:
            self._holding = False


def _finite_or_stop(step: int, cfg: TrainConfig, **values: float) -> None:
    """Stop with one line if a loss or the gradient norm is NaN or infinite (before the step
    is applied, so the weights and the checkpoints stay as they were)."""
    for name, value in values.items():
        if not math.isfinite(value):
            raise TrainingDivergedError(
                f"{name.replace('_', ' ')} became {value} at step {step}: training stopped and no checkpoint of "
                f"this step was written; lower --lr (now {cfg.lr:g}) or --grad-clip, or check the data")


def train(job, cfg: TrainConfig, out_dir: str | Path, resume: bool = False, progress: bool = True,
          verbose: bool = True, checkpoint: Checkpoint | None = None, overwrite: bool = False) -> dict:
    """Train `job.model` under `cfg`, writing checkpoints and a JSONL log into `out_dir`.

    out_dir/last/  the latest state (written at every evaluation, at the end, and on a stop request)
    out_dir/best/  the state with the lowest validation loss so far
    out_dir/log.jsonl  one JSON object per logged step / evaluation (rundir.LogWriter)
    out_dir/.lock  held while training: a second training into out_dir fails at once
    resume: continue from out_dir/last (restoring what an interrupted save left); `checkpoint`
    is that checkpoint when the caller has already read it (so it is read once). A resumed run
    that already reached cfg.max_steps does nothing (stopped_by "nothing to do").
    A fresh run refuses an out_dir holding a run (rundir.check_fresh: last/, best/, a backup or
    a log; ConfigError) unless `overwrite`, which deletes those first.
    Stops with TrainingDivergedError on a non-finite loss or gradient norm, and with
    TrainingInterrupted (after saving out_dir/last; its exit_code 130, 143 or 141) on Ctrl-C,
    SIGTERM or a closed stdout.
    With cfg.patience, the run stops early (stopped_by "patience") after that many evaluations
    in a row without a lower validation loss.
    Returns a summary dict (step, train_loss, val_loss, best_val_loss, seconds, stopped_by).
    """
    out_dir = Path(out_dir)
    with RunLock(out_dir) as lock:
        if lock.note:
            _say(lock.note)
        started = {"log": False}  # set once a fresh run has started its own log
        try:
            return _train_locked(job, cfg, out_dir, resume, progress, verbose, checkpoint, overwrite, lock, started)
        except BaseException:
            if started["log"]:
                _drop_unstarted_run(out_dir)
            raise


def _drop_unstarted_run(out_dir: Path) -> None:
    """A fresh run that failed before logging a row or saving a checkpoint leaves nothing behind
    (its empty log and header-only diagnostics would make the retry ask for --overwrite)."""
    log = out_dir / LOG
    if any(os.path.lexists(out_dir / name) for name in (LAST, BEST)):
        return
    try:
        if not log.is_file() or log.stat().st_size:
            return
    except OSError:
        return
    log.unlink(missing_ok=True)
    (out_dir / DIAG_FILE).unlink(missing_ok=True)


# The GEMM rate MFU divides by is the best seen: measured at the start, then again at a log row
# at most this often (and whenever the row's MFU would exceed 1), so load at the start cannot
# make it read several times too high for the whole run.
PEAK_REMEASURE_S = 30.0
MAX_GRAD_ACCUM = 1 << 16  # micro-batches a step: more is a step nobody waits for (a larger batch does it)


def _check_step_can_end(cfg: TrainConfig, micro_batch_s: float | None = None) -> None:
    """Refuse, at the start, a gradient accumulation no run can finish a step of, or one whose
    step outlasts --time-limit (checked between steps only): `micro_batch_s` is the first
    micro-batch's time, once measured."""
    if cfg.grad_accum > MAX_GRAD_ACCUM:
        raise ConfigError(f"--grad-accum {cfg.grad_accum:,} micro-batches a step cannot be honoured: give at most "
                          f"{MAX_GRAD_ACCUM:,} (a larger --batch-size does the same work in fewer micro-batches)")
    if micro_batch_s is not None and cfg.time_limit is not None and micro_batch_s * cfg.grad_accum > cfg.time_limit:
        raise ConfigError(f"--grad-accum {cfg.grad_accum:,} makes one step take about "
                          f"{micro_batch_s * cfg.grad_accum:.3g} s ({micro_batch_s:.2g} s a micro-batch), longer than "
                          f"--time-limit {cfg.time_limit:g}, which is checked between steps: lower --grad-accum or "
                          "raise --time-limit")


def processes_that_run(cfg: TrainConfig) -> tuple[TrainConfig, str | None]:
    """cfg with `workers` as many processes as can run (what the run records, so that a resume
    elsewhere repeats it), and a note when that is fewer than asked: one where processes cannot
    be forked (no os.fork: macOS, Windows), at most one per row of a batch."""
    check_workers(cfg.workers)
    if cfg.workers > 1 and not can_fork_workers():
        return replace(cfg, workers=1), (f"this platform cannot fork worker processes: training in one process "
                                         f"(--workers 1 instead of {cfg.workers})")
    if cfg.workers > cfg.batch_size:
        return replace(cfg, workers=cfg.batch_size), (f"--workers {cfg.workers} is more than the {cfg.batch_size} "
                                                      f"rows of a batch: training in {cfg.batch_size} processes")
    return cfg, None


def _train_locked(job, cfg, out_dir, resume, progress, verbose, checkpoint, overwrite, lock, started) -> dict:
    keep_freed_memory()  # freed temporaries stay in the process (scratchformer/allocator.py)
    # Before any step: the settings and the model's config must be what a checkpoint can hold
    # (a field changed after the config was built, or a value beyond its declaration, would
    # otherwise surface only at the first save).
    cfg.validate()
    check_json(job.config_dict(), CONFIG, out_dir / LAST / "config.json", hint="change the setting it names")
    _check_step_can_end(cfg)
    cfg, note = processes_that_run(cfg)
    if note:
        _say(note)
    model = job.model
    params = model.parameters()
    groups = param_groups(model, cfg.weight_decay, cfg.decay_embeddings)
    if hasattr(model, "trainable_parameters"):  # a frozen encoder: neither updated nor decayed
        trainable = {id(p) for p in model.trainable_parameters()}
        groups = [{**g, "params": [p for p in g["params"] if id(p) in trainable]} for g in groups]
    opt = AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2),
                eps=1e-8, weight_decay=cfg.weight_decay)
    # runs each batch (with workers=1, the model alone); a pending Ctrl-C or SIGTERM ends a wait for a worker
    runner = DataParallel(model, cfg.workers, optimizer=opt, train_outputs=False,  # the steps use the loss alone
                          interrupted=lambda: stop.reason is not None)
    data_rng = np.random.default_rng(cfg.seed)
    dropout_rng = set_dropout_rng(model, np.random.default_rng(cfg.seed + 1))
    step, best_val, val_loss = 0, math.inf, float("nan")
    since_best = 0  # evaluations since the lowest validation loss (early stopping: cfg.patience)

    if resume:
        recover_run(out_dir)  # a backup an interrupted save left becomes last/ (or best/) again
        ck = checkpoint if checkpoint is not None else load_checkpoint(out_dir / LAST)
        job.check_compatible(ck)
        model.load_state_dict(ck.model_state)
        if ck.optimizer_state is None or not ck.rng_state:
            raise CheckpointError(f"{out_dir / LAST} holds no optimiser/RNG state: cannot resume from it")
        opt.load_state_dict(ck.optimizer_state)
        data_rng.bit_generator.state = ck.rng_state["data"]
        dropout_rng.bit_generator.state = ck.rng_state["dropout"]
        step, best_val = ck.step, ck.extra.get("best_val_loss", math.inf)
        val_loss = ck.extra.get("val_loss", val_loss)
        since_best = int(ck.extra.get("evals_since_best", 0))
        if nothing_to_do(step, cfg, out_dir) is not None:
            return {"step": step, "train_loss": float("nan"), "val_loss": val_loss, "best_val_loss": best_val,
                    "seconds": 0.0, "stopped_by": "nothing to do"}
        note = truncate_log(out_dir / LOG, step)
        if note:
            _say(note)
    else:
        if overwrite:
            clear_run(out_dir)
        check_fresh(out_dir)
        sweep_temporaries(out_dir)
        start_log(out_dir / LOG)
        started["log"] = True
    check_checkpoint_paths(out_dir)  # what no save could replace is refused now, not at the first save
    check_training_fits(model, cfg.batch_size, cfg.workers)
    diag = None  # the diagnostics recorder; it runs only on its own steps
    if cfg.diagnostics_every > 0:
        diag = Diagnostics(job, cfg.diagnostics_every, cfg.max_steps, cfg.seed, out_dir / DIAG_FILE,
                           resume_step=step if resume else None)

    def save(which: str) -> None:
        # losses are checked before any save; NaN here only means "not evaluated yet" (Ctrl-C)
        finite = {k: v for k, v in (("best_val_loss", best_val), ("val_loss", val_loss)) if math.isfinite(v)}
        with stop.held():
            lock.check_held()  # the run directory is still the one locked
            save_checkpoint(
                out_dir / which,
                model_state=model.state_dict(),
                config=job.config_dict(),
                tokenizer=job.tokenizer_dict(),
                optimizer_state=opt.state_dict(),
                rng_state={"data": data_rng.bit_generator.state, "dropout": dropout_rng.bit_generator.state},
                step=step,
                extra={**finite, "evals_since_best": since_best, "train_config": asdict(cfg)},
            )

    flops_per_step_token = gemm.model_flops_per_token(model)  # for MFU: 6N + the attention term
    peak = gemm.gemm_peak_flops()  # the best GEMM rate seen: measured again as the run goes (PEAK_REMEASURE_S)
    peak_at = time.perf_counter()
    bar = None
    if progress:
        from tqdm import tqdm

        class ProgressBar(tqdm):
            # no monitor thread: DataParallel forks its workers after the bar exists, and forking a
            # process with a second Python thread risks a deadlock in the child (Python 3.12+ warns)
            monitor_interval = 0

        bar = ProgressBar(total=cfg.max_steps, initial=step, unit="step", dynamic_ncols=True, file=sys.stderr)
    start = time.perf_counter()
    stopped_by, train_loss = "max_steps", float("nan")
    tokens_since, steps_since, t_since = 0, 0, time.perf_counter()
    step_start, first_step = None, cfg.time_limit is not None and cfg.grad_accum > 1
    with LogWriter(out_dir / LOG) as log, _StopRequests() as stop:
        try:
            while step < cfg.max_steps:
                if stop.reason is None and stdout.closed:
                    stop.reason, stop.exit_code = "stdout was closed", 141  # 128 + SIGPIPE, as the shell reports
                if stop.reason is not None:  # between two steps: save this one and stop
                    save(LAST)
                    raise TrainingInterrupted(
                        f"{stop.reason} at step {step}: checkpoint written to {out_dir / LAST}; "
                        f"continue with 'scratchformer train --resume --out {out_dir}'", exit_code=stop.exit_code)
                lr = cosine_lr(step, cfg.lr, cfg.final_lr, cfg.warmup, cfg.schedule_steps)
                opt.lr = lr
                opt.zero_grad()
                loss_sum = 0.0
                # where a step abandoned half-way (a worker fails, Ctrl-C during a wait) restarts
                step_start = (data_rng.bit_generator.state, dropout_rng.bit_generator.state)
                for micro in range(cfg.grad_accum):
                    t_micro = time.perf_counter()
                    loss, n_tokens = job.forward_backward(job.train_batch(data_rng, cfg.batch_size), runner)
                    loss_sum += loss
                    tokens_since += n_tokens
                    if micro == 0 and first_step:  # nothing saved yet: a step that outlasts the limit is refused
                        first_step = False
                        _check_step_can_end(cfg, time.perf_counter() - t_micro)
                if cfg.grad_accum > 1:  # each backward gave d(mean loss); average the micro-batches
                    for p in params:
                        p.grad *= 1.0 / cfg.grad_accum
                grad_norm = clip_grad_norm(params, cfg.grad_clip if cfg.grad_clip > 0 else math.inf)
                train_loss = loss_sum / cfg.grad_accum
                _finite_or_stop(step + 1, cfg, loss=train_loss, gradient_norm=float(grad_norm))
                if diag is not None and step == 0:  # the initialisation, before any update (no update ratios)
                    diag.record(0, lr, None)
                before = diag.snapshot() if diag is not None and diag.due(step + 1) else None
                opt.step()
                if before is not None:
                    diag.record(step + 1, lr, before)
                step += 1
                step_start = None  # applied: the state now is the step's end
                steps_since += 1
                time_up = cfg.time_limit is not None and time.perf_counter() - start >= cfg.time_limit

                if step % cfg.log_interval == 0 or step == cfg.max_steps or time_up:
                    now = time.perf_counter()
                    seconds = max(now - t_since, 1e-9)
                    tok_s = tokens_since / seconds
                    row = {"step": step, "lr": lr, "train_loss": train_loss, "grad_norm": grad_norm,
                           "tokens_per_s": round(tok_s, 1), "ms_per_step": round(1000 * seconds / steps_since, 2)}
                    if now - peak_at >= PEAK_REMEASURE_S or gemm.mfu(flops_per_step_token, tok_s, peak) is None:
                        peak, peak_at = max(peak, gemm.gemm_rate()), time.perf_counter()
                    utilisation = gemm.mfu(flops_per_step_token, tok_s, peak)
                    if utilisation is not None:  # absent rather than wrong (gemm.mfu)
                        row["mfu"] = utilisation
                    log.append(row)
                    tokens_since, steps_since, t_since = 0, 0, time.perf_counter()
                    if bar is not None:
                        bar.set_postfix(loss=f"{train_loss:.4f}", tok_s=f"{tok_s:,.0f}")
                if bar is not None:
                    bar.update(1)

                if step % cfg.eval_interval == 0 or step == cfg.max_steps or time_up:
                    metrics = job.evaluate("val", cfg.eval_batches, runner=runner)
                    val_loss = metrics["loss"]
                    _finite_or_stop(step, cfg, val_loss=val_loss)
                    improved = val_loss < best_val
                    best_val = min(best_val, val_loss)
                    since_best = 0 if improved else since_best + 1
                    log.append({"step": step, "lr": lr, "train_loss": train_loss, "val_loss": val_loss,
                                **{f"val_{k}": v for k, v in metrics.items() if k != "loss"}})
                    if improved:
                        save(BEST)
                    save(LAST)  # before printing: a failing stdout cannot cost a checkpoint
                    if verbose and not stdout.closed:
                        extra = " ".join(f"{k} {v:.4f}" for k, v in metrics.items() if k != "loss")
                        _say(f"step {step}: train loss {train_loss:.4f}, val loss {val_loss:.4f} {extra}".rstrip())
                        for s in job.samples(cfg.num_samples, np.random.default_rng([cfg.seed, step])):
                            _say(f"  {s}")
                if time_up:
                    stopped_by = "time_limit"
                    break
                if cfg.patience is not None and since_best >= cfg.patience:
                    stopped_by = "patience"  # best/ holds the lowest validation loss
                    break
        except (ParallelWorkerError, WaitInterrupted) as e:
            # the last good state: a step abandoned half-way restarts from its beginning (weights
            # and optimiser change only in opt.step), so --resume repeats it exactly
            if step_start is not None:
                data_rng.bit_generator.state, dropout_rng.bit_generator.state = step_start
            save(LAST)
            where = (f"checkpoint of step {step} written to {out_dir / LAST}; continue with "
                     f"'scratchformer train --resume --out {out_dir}'")
            if isinstance(e, WaitInterrupted):
                raise TrainingInterrupted(f"{stop.reason} at step {step}: {where}", exit_code=stop.exit_code) from None
            raise ParallelWorkerError(f"{e}; {where}") from None
        finally:
            if bar is not None:
                bar.close()
            runner.close()  # stop the worker processes (none with workers=1)
    return {"step": step, "train_loss": train_loss, "val_loss": val_loss, "best_val_loss": best_val,
            "seconds": time.perf_counter() - start, "stopped_by": stopped_by}
