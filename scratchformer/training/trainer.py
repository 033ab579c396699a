"""The training loop: one straight-line function, nanoGPT style, shared by every model family.

What is trained is described by a *job* (the `Job` protocol in `scratchformer.training.jobs`):
it owns the model, hands out training batches (the model's arguments), says what an evaluation
reads and measures (training/evaluation.py) and shows samples. The loop owns everything else:
how batches run (forward + backward through `DataParallel`, one process or several),
optimiser, learning-rate schedule, gradient accumulation and clipping, checkpoints, logs,
progress, time limits.

Resuming is exact: the last checkpoint stores the model, the optimiser, the step and the
state of both random generators (batches and dropout), so a resumed run takes the same
steps as an uninterrupted one, bit for bit on the same machine. `resume_config` keeps the
original schedule when a resumed run is extended; `nothing_to_do` decides, once, inside
train(), that a resumed run has already reached its max_steps.

Inside: `train` checks the settings in one place (`_checked_settings`: what a checkpoint can
hold, a step that can end, the processes that can run) and builds the optimiser, before anything
is written; then it takes the run's lock and starts a fresh run's directory (rundir.start_run).
`_train_locked` builds the run's state (`_Run`: the optimiser and what a checkpoint records),
restores it (`_restore`) when resuming, `_prepare`s the runner and diagnostics, then `_loop` runs
`_step`, logs `_Throughput`'s rows and `_evaluate`s, saving last/ first on any stop
(`_stop_if_asked`, `_save_after_failure`). With `announce`, train() prints the run's header
(`_header`, `settings_line`) and summary line, as `scratchformer train` shows them.

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
import textwrap
import threading
import time
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np

from scratchformer.allocator import keep_freed_memory
from scratchformer.errors import (
    CheckpointError,
    ConfigError,
    ParallelWorkerError,
    TrainingDivergedError,
    TrainingInterrupted,
)
from scratchformer.limits import gemm
from scratchformer.limits.estimates import check_training_fits
from scratchformer.nn import set_dropout_rng
from scratchformer.optim import AdamW, clip_grad_norm, cosine_lr, make_adamw, param_groups
from scratchformer.training.checkpoint import Checkpoint, load_checkpoint, save_checkpoint
from scratchformer.training.config import TrainConfig
from scratchformer.training.diagnostics import DIAG_FILE, Diagnostics
from scratchformer.training.evaluation import run_evaluation
from scratchformer.training.parallel import DataParallel, WaitInterrupted, workers_that_run
from scratchformer.training.rundir import (
    LogWriter,
    RunLock,
    check_checkpoint_paths,
    recover_run,
    start_run,
    truncate_log,
)
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


# What a training setting changed on --resume does to the run. Every setting of TrainConfig not
# named here changes the steps themselves (the batches, the rates, the updates), the reading a
# new setting gets: resume_config then says that the run will not repeat.
RESUME_REFUSED = ("seed",)  # the saved random generators continue: a new seed would change nothing
RESUME_SCHEDULE = ("max_steps",)  # an extension or an earlier stop: _resume_schedule's line
RESUME_RECORD = (  # the steps repeat; what is logged, evaluated, kept as best/, or when it stops, changes
    "log_interval",
    "num_samples",
    "eval_interval",
    "eval_batches",
    "patience",
    "time_limit",
    "diag_interval",
)
_RATES = ("lr", "min_lr", "warmup_steps", "decay_steps")  # the learning-rate schedule's settings


def resume_config(saved: dict, given: dict, step: int | None = None) -> tuple[TrainConfig, str | None]:
    """The TrainConfig of a resumed run: the saved settings with the `given` ones on top, and
    the lines (one per kind of change; None when nothing changes) saying what changes.

    `--resume` alone continues the original schedule exactly. A larger max_steps extends the
    run: the cosine keeps the length it was planned with (its decay_steps), so the learning
    rate does not jump back up, and the extra steps run at min_lr; pass decay_steps as well
    to stretch the cosine instead. The seed cannot change: a resumed run continues the saved
    random generators, so a new seed would change nothing but what the checkpoint records.
    Any other setting given with another value than the run's is taken, with a line: those that
    change the steps (RESUME_RECORD's complement: the batch, the rates, the optimiser, the
    workers) say that the steps from here will not repeat the uninterrupted run; a change to
    the learning-rate schedule that changes no step left (`step`: the checkpoint's; every one
    past the cosine, at min_lr) says so instead; RESUME_RECORD's say that the steps repeat.
    """
    run = TrainConfig.from_dict(saved)
    given = {k: v for k, v in given.items() if not (k in RESUME_REFUSED and v == getattr(run, k))}
    cfg, note = _resume_schedule(saved, given)
    changed = [k for k in given if k not in RESUME_SCHEDULE and getattr(cfg, k) != getattr(run, k)]
    steps = [k for k in changed if k not in RESUME_RECORD]
    record = [k for k in changed if k in RESUME_RECORD]
    idle = [k for k in steps if k in _RATES] if _no_rate_changes(cfg, saved, given, changed, step) else []
    steps = [k for k in steps if k not in idle]
    lines = [note] if note else []
    if steps:
        lines.append(
            f"{_changes(steps, cfg, run)}: the steps from here will not repeat the uninterrupted run bit for "
            f"bit ({_why(steps)}); resume with the run's values ({_flags(steps, run)}) to repeat it"
        )
    if idle and step >= cfg.schedule_steps:
        lines.append(
            f"{_changes(idle, cfg, run)} changes no step left: every step from {step + 1} to {cfg.max_steps} "
            f"runs at min_lr {cfg.final_lr:g}, past the cosine's {cfg.schedule_steps} steps (pass --min-lr "
            "or --decay-steps to change them)"
        )
    elif idle:
        lines.append(
            f"{_changes(idle, cfg, run)} changes no learning rate of steps {step + 1} to {cfg.max_steps}: "
            "the steps repeat the uninterrupted run"
        )
    if record:
        lines.append(
            f"{_changes(record, cfg, run)}: the steps repeat the uninterrupted run; only what is logged, "
            "evaluated and kept as best/, or when the run stops, changes"
        )
    return cfg, "\n".join(lines) or None


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _changes(names: list[str], cfg: TrainConfig, run: TrainConfig) -> str:
    return ", ".join(
        f"{_flag(k)} {shown(getattr(cfg, k), 'none')} instead of the run's {shown(getattr(run, k), 'none')}"
        for k in names
    )


def _flags(names: list[str], run: TrainConfig) -> str:
    """The run's values as options: '--lr 0.002', or 'no --decay-steps' for a default."""
    return "; ".join(
        f"no {_flag(k)}" if getattr(run, k) is None else f"{_flag(k)} {shown(getattr(run, k))}" for k in names
    )


def _why(names: list[str]) -> str:
    """What the changed settings change in a step, in words."""
    what = {
        "workers": "each batch is split, summed and dropped out another way",
        "batch_size": "other batches",
        "grad_accum": "other batches",
        **dict.fromkeys(_RATES, "other learning rates"),
    }
    return "; ".join(dict.fromkeys(what.get(k, "other updates") for k in names))


def _no_rate_changes(
    cfg: TrainConfig, saved: dict, given: dict, changed: list[str], step: int | None
) -> bool:
    """Whether the schedule's settings among `changed` (and nothing else that moves the steps)
    leave every learning rate from `step` on as the run without them would have it."""
    rates = [k for k in changed if k in _RATES]
    others = [k for k in changed if k not in _RATES and k not in RESUME_RECORD]
    if step is None or not rates or others:
        return False
    before, _ = _resume_schedule(saved, {k: v for k, v in given.items() if k not in rates})

    def schedule(c: TrainConfig) -> list[float]:
        return [cosine_lr(s, c.lr, c.final_lr, c.warmup, c.schedule_steps) for s in range(step, c.max_steps)]

    head = (cfg.head_lr or cfg.lr) / cfg.lr == (before.head_lr or before.lr) / before.lr
    return head and schedule(cfg) == schedule(before)


def _resume_schedule(saved: dict, given: dict) -> tuple[TrainConfig, str | None]:
    """resume_config's schedule part: the seed refused, an extension or an earlier stop said."""
    if "seed" in given:
        raise ConfigError(
            f"--seed cannot change a resumed run: it continues the random generators of its seed "
            f"{saved.get('seed')}; drop --seed (or train a new run into another --out)"
        )
    cfg = TrainConfig.from_dict({**saved, **given})
    planned = TrainConfig.from_dict(saved)
    if cfg.max_steps == planned.max_steps:
        return cfg, None
    if "decay_steps" in given:  # the cosine's new length: resume_config's line for --decay-steps
        what = "extending the run" if cfg.max_steps > planned.max_steps else "stopping the run"
        return cfg, f"{what} from {planned.max_steps} to {cfg.max_steps} steps"
    cfg.decay_steps = planned.schedule_steps
    if cfg.max_steps > planned.max_steps:
        note = (
            f"extending the run from {planned.max_steps} to {cfg.max_steps} steps: the cosine keeps its "
            f"length of {cfg.decay_steps} steps, so steps after {cfg.decay_steps} run at min_lr "
            f"{cfg.final_lr:g} (pass --decay-steps N to stretch the cosine instead)"
        )
    else:
        note = f"stopping at step {cfg.max_steps} instead of {planned.max_steps}; the schedule is unchanged"
    return cfg, note


def nothing_to_do(step: int, cfg: TrainConfig, out_dir: str | Path) -> str | None:
    """Whether a resumed run at `step` is already done under `cfg`, decided here alone: the
    line that says so (the run is not touched), or None when there are steps to train."""
    if step < cfg.max_steps:
        return None
    return (
        f"nothing to do: the run in {out_dir} is at step {step} of {cfg.max_steps}; pass a larger --max-steps "
        "to extend it"
    )


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
                f"this step was written; lower --lr (now {cfg.lr:g}) or --grad-clip, or check the data"
            )


def train(
    job,
    cfg: TrainConfig,
    out_dir: str | Path,
    resume: bool = False,
    progress: bool = True,
    verbose: bool = True,
    checkpoint: Checkpoint | None = None,
    overwrite: bool = False,
    announce: bool = False,
) -> dict:
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
    announce: print what is trained (the model, its settings, out_dir) before the first step, the
    summary line at the end, and the nothing-to-do line (`scratchformer train` and `finetune`).
    Returns a summary dict (step, train_loss, val_loss, best_val_loss, seconds, stopped_by).
    """
    out_dir = Path(out_dir)
    cfg = _checked_settings(job, cfg, out_dir)  # every setting refused before the directory is touched
    opt = _optimizer(job.model, cfg)  # it refuses a head_lr for a model without a fresh head
    with RunLock(out_dir) as lock:
        if lock.note:
            _say(lock.note)
        if not resume:  # the old run deleted (overwrite) or refused, an empty log begun
            kept = start_run(out_dir, overwrite)
            if kept:
                _say(
                    f"--overwrite kept what you left inside the old checkpoints ({', '.join(kept[:5])}"
                    f"{', ...' if len(kept) > 5 else ''}): the new run's first save of each takes them in"
                )
        try:
            return _train_locked(
                job, cfg, out_dir, lock, opt, resume, checkpoint, progress, verbose, announce
            )
        except BaseException:
            if not resume:
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
        raise ConfigError(
            f"--grad-accum {cfg.grad_accum:,} micro-batches a step cannot be honoured: give at most "
            f"{MAX_GRAD_ACCUM:,} (a larger --batch-size does the same work in fewer micro-batches)"
        )
    if (
        micro_batch_s is not None
        and cfg.time_limit is not None
        and micro_batch_s * cfg.grad_accum > cfg.time_limit
    ):
        raise ConfigError(
            f"--grad-accum {cfg.grad_accum:,} makes one step take about "
            f"{micro_batch_s * cfg.grad_accum:.3g} s ({micro_batch_s:.2g} s a micro-batch), longer than "
            f"--time-limit {cfg.time_limit:g}, which is checked between steps: lower --grad-accum or "
            "raise --time-limit"
        )


def _progress_bar(total: int, initial: int):
    """A tqdm bar that starts no monitor thread: DataParallel forks its workers after the bar
    exists, and forking a process with a second Python thread risks a deadlock in the child
    (Python 3.12+ warns). tqdm starts the thread when a bar is created and monitor_interval is
    not 0, so the setting is 0 for this creation only."""
    from tqdm import tqdm

    interval, tqdm.monitor_interval = tqdm.monitor_interval, 0
    try:
        return tqdm(total=total, initial=initial, unit="step", dynamic_ncols=True, file=sys.stderr)
    finally:
        tqdm.monitor_interval = interval


def _train_locked(job, cfg, out_dir, lock, opt, resume, checkpoint, progress, verbose, announce) -> dict:
    """train() under the run's lock, its directory started: the run's state built, restored from
    last/ when resuming (where it may have nothing left to do); then the loop."""
    run = _Run(job, cfg, out_dir, lock, opt)
    if resume:
        _restore(run, checkpoint)
        if run.done is not None:
            if announce:
                _say(run.done)
            return run.summary(0.0, "nothing to do")
    _prepare(run, diag_resume_step=run.step if resume else None)
    if announce:
        _say(_header(run))
    summary = _loop(run, progress, verbose)
    if announce:
        _say(_summary_line(summary, out_dir))
    return summary


def _prepare(run: _Run, diag_resume_step: int | None) -> None:
    """Before the first step: what no save could replace refused, the memory estimate asked, the
    diagnostics recorder (resumed at `diag_resume_step`) and the processes that run each batch."""
    job, cfg, out_dir = run.job, run.cfg, run.out_dir
    check_checkpoint_paths(out_dir)  # refused now, not at the first save
    check_training_fits(job.model, cfg.batch_size, cfg.workers)
    if cfg.diagnostics_every > 0:  # the recorder runs only on its own steps
        run.diag = Diagnostics(
            job,
            cfg.diagnostics_every,
            cfg.max_steps,
            cfg.seed,
            out_dir / DIAG_FILE,
            resume_step=diag_resume_step,
        )
    # runs each batch (with workers=1, the model alone); a pending Ctrl-C or SIGTERM ends a wait for a worker
    run.runner = DataParallel(
        job.model,
        cfg.workers,
        optimizer=run.opt,
        train_outputs=False,  # the steps use the loss alone
        interrupted=lambda: run.stop.reason is not None,
    )


def _header(run: _Run) -> str:
    """What is trained, for how long, into where, and every setting (train's first lines)."""
    model, cfg = run.job.model, run.cfg
    limit = f" (time limit {cfg.time_limit:g}s)" if cfg.time_limit else ""
    return (
        f"training {type(model).__name__} ({model.num_parameters():,} parameters) for {cfg.max_steps} steps"
        f"{limit} -> {run.out_dir}\n"
        f"model: {settings_line(run.job.config_dict()['model'])}\ntrain: {settings_line(asdict(cfg))}"
    )


def _summary_line(summary: dict, out_dir: Path) -> str:
    return (
        f"done: step {summary['step']}, val loss {summary['val_loss']:.4f} "
        f"(best {summary['best_val_loss']:.4f}), {summary['seconds']:.0f}s, stopped by {summary['stopped_by']}; "
        f"checkpoints in {out_dir}/best and {out_dir}/last"
    )


def shown(value, none_means: str | None = None) -> str:
    """A setting's value as the command line and the training's lines show it: on/off, 3e-05."""
    if value is None:
        return none_means or "none"
    if isinstance(value, bool):
        return "on" if value else "off"
    return f"{value:g}" if isinstance(value, float) else str(value)


def settings_line(settings: dict, width: int = 100) -> str:
    """key=value pairs, wrapped at `width` characters, continuation lines indented."""
    pairs = [f"{k}={shown(v)}" for k, v in settings.items()]
    return "\n".join(
        textwrap.wrap(
            " ".join(pairs),
            width - 7,
            subsequent_indent="       ",
            break_long_words=False,
            break_on_hyphens=False,
        )
    )


def _checked_settings(job, cfg: TrainConfig, out_dir: Path) -> TrainConfig:
    """Before the run's directory is touched: the settings and the model's config must be what a
    checkpoint can hold (a field changed after the config was built, or a value beyond its
    declaration, would otherwise surface only at the first save); -> cfg with as many processes
    as can run (what the run records, so that a resume elsewhere repeats it)."""
    keep_freed_memory()  # freed temporaries stay in the process (scratchformer/allocator.py)
    cfg.validate()
    _check_step_can_end(cfg)
    check_json(job.config_dict(), CONFIG, out_dir / LAST / "config.json", hint="change the setting it names")
    workers, note = workers_that_run(cfg.workers, cfg.batch_size)
    if note:
        _say(note)
    return cfg if workers == cfg.workers else replace(cfg, workers=workers)


def _optimizer(model, cfg: TrainConfig) -> AdamW:
    """The lane's AdamW over the parameters that train (a frozen encoder's are neither updated
    nor decayed): in the fast lane a FlatAdamW, whose binding makes the parameters' arrays views
    of its flat buffers (values unchanged; optim/flat.py)."""
    groups = param_groups(model, cfg.weight_decay, cfg.decay_embeddings)
    if hasattr(model, "trainable_parameters"):
        trainable = {id(p) for p in model.trainable_parameters()}
        groups = [{**g, "params": [p for p in g["params"] if id(p) in trainable]} for g in groups]
    if cfg.head_lr is not None and cfg.head_lr != cfg.lr:
        groups = _head_groups(model, groups, cfg.head_lr / cfg.lr)
    return make_adamw(
        groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=1e-8, weight_decay=cfg.weight_decay
    )


def _head_groups(model, groups: list[dict], scale: float) -> list[dict]:
    """`groups` with the model's head_parameters() moved into groups of their own at lr_scale
    `scale` (head_lr / lr: the schedule sets lr, the head follows at that ratio); empty groups
    dropped. A model without a fresh head is refused: head_lr would silently do nothing."""
    if not hasattr(model, "head_parameters"):
        raise ConfigError(
            f"head_lr (--head-lr) applies to a model with a fresh head (a finetune classifier); "
            f"a {type(model).__name__} has none: leave it unset"
        )
    head = {id(p) for p in model.head_parameters()}
    split = []
    for g in groups:
        split.append({**g, "params": [p for p in g["params"] if id(p) not in head]})
        split.append({**g, "params": [p for p in g["params"] if id(p) in head], "lr_scale": scale})
    return [g for g in split if g["params"]]


class _Run:
    """What a training holds while it runs and what its checkpoints record: the optimiser, the
    two random generators (batches, dropout), the step and the validation losses seen."""

    def __init__(self, job, cfg: TrainConfig, out_dir: Path, lock: RunLock, opt: AdamW):
        self.job, self.cfg, self.out_dir, self.lock, self.opt = job, cfg, out_dir, lock, opt
        self.params = job.model.parameters()
        self.data_rng = np.random.default_rng(cfg.seed)  # the batches
        self.dropout_rng = set_dropout_rng(job.model, np.random.default_rng(cfg.seed + 1))
        self.step, self.best_val, self.val_loss, self.train_loss = 0, math.inf, float("nan"), float("nan")
        self.since_best = 0  # evaluations since the lowest validation loss (early stopping: cfg.patience)
        self.step_start = (
            None  # the generators' states where an abandoned step restarts (None: between steps)
        )
        self.stop: _StopRequests | None = None  # set while the loop runs
        self.runner = None  # the DataParallel that runs each batch (set by _prepare)
        self.diag: Diagnostics | None = None  # the diagnostics recorder, when cfg.diagnostics_every
        self.done: str | None = None  # a resumed run with nothing left to do: the line that says so

    def save(self, which: str) -> None:
        """Checkpoint the state into out_dir/which, a stop request held off until it is written."""
        # losses are checked before any save; NaN here only means "not evaluated yet" (Ctrl-C)
        finite = {
            k: v
            for k, v in (("best_val_loss", self.best_val), ("val_loss", self.val_loss))
            if math.isfinite(v)
        }
        with self.stop.held():
            self.lock.check_held()  # the run directory is still the one locked
            save_checkpoint(
                self.out_dir / which,
                model_state=self.job.model.state_dict(),
                config=self.job.config_dict(),
                tokenizer=self.job.tokenizer_dict(),
                optimizer_state=self.opt.state_dict(),
                rng_state={
                    "data": self.data_rng.bit_generator.state,
                    "dropout": self.dropout_rng.bit_generator.state,
                },
                step=self.step,
                extra={**finite, "evals_since_best": self.since_best, "train_config": asdict(self.cfg)},
            )

    def summary(self, seconds: float, stopped_by: str) -> dict:
        return {
            "step": self.step,
            "train_loss": self.train_loss,
            "val_loss": self.val_loss,
            "best_val_loss": self.best_val,
            "seconds": seconds,
            "stopped_by": stopped_by,
        }


def _restore(run: _Run, checkpoint: Checkpoint | None) -> None:
    """Load out_dir/last (`checkpoint` when already read) into the run, restoring first what an
    interrupted save left; `run.done` says so when it has already reached its max_steps."""
    recover_run(run.out_dir)  # a backup an interrupted save left becomes last/ (or best/) again
    ck = checkpoint if checkpoint is not None else load_checkpoint(run.out_dir / LAST)
    run.job.check_compatible(ck)
    run.job.model.load_state_dict(ck.model_state)
    if ck.optimizer_state is None or not ck.rng_state:
        raise CheckpointError(f"{run.out_dir / LAST} holds no optimiser/RNG state: cannot resume from it")
    run.opt.load_state_dict(ck.optimizer_state)
    run.data_rng.bit_generator.state = ck.rng_state["data"]
    run.dropout_rng.bit_generator.state = ck.rng_state["dropout"]
    run.step, run.best_val = ck.step, ck.extra.get("best_val_loss", math.inf)
    run.val_loss = ck.extra.get("val_loss", run.val_loss)
    run.since_best = int(ck.extra.get("evals_since_best", 0))
    run.done = nothing_to_do(run.step, run.cfg, run.out_dir)
    if run.done is None:
        note = truncate_log(run.out_dir / LOG, run.step)
        if note:
            _say(note)


class _Throughput:
    """Tokens per second and MFU between two log rows. The GEMM rate MFU divides by is the best
    seen (PEAK_REMEASURE_S)."""

    def __init__(self, model):
        self.flops_per_token = gemm.model_flops_per_token(model)  # for MFU: 6N + the attention term
        self.peak = gemm.gemm_peak_flops()  # the best GEMM rate seen: measured again as the run goes
        self.peak_at = time.perf_counter()
        self.tokens, self.steps, self.since = 0, 0, time.perf_counter()
        self.tok_s = 0.0  # the rate of the last row

    def row(self, step: int, lr: float, train_loss: float, grad_norm) -> dict:
        """The log row of `step`, the counts restarted."""
        now = time.perf_counter()
        seconds = max(now - self.since, 1e-9)
        self.tok_s = tok_s = self.tokens / seconds
        row = {
            "step": step,
            "lr": lr,
            "train_loss": train_loss,
            "grad_norm": grad_norm,
            "tokens_per_s": round(tok_s, 1),
            "ms_per_step": round(1000 * seconds / self.steps, 2),
        }
        if now - self.peak_at >= PEAK_REMEASURE_S or gemm.mfu(self.flops_per_token, tok_s, self.peak) is None:
            self.peak, self.peak_at = max(self.peak, gemm.gemm_rate()), time.perf_counter()
        utilisation = gemm.mfu(self.flops_per_token, tok_s, self.peak)
        if utilisation is not None:  # absent rather than wrong (gemm.mfu)
            row["mfu"] = utilisation
        self.tokens, self.steps, self.since = 0, 0, time.perf_counter()
        return row


def _loop(run: _Run, progress: bool, verbose: bool) -> dict:
    """The steps until max_steps, the time limit, patience or a stop request; a failed worker or
    an interrupted wait saves the last good state first."""
    cfg, out_dir, runner = run.cfg, run.out_dir, run.runner
    meter = _Throughput(run.job.model)
    bar = _progress_bar(cfg.max_steps, run.step) if progress else None
    start = time.perf_counter()
    stopped_by = "max_steps"
    first_step = cfg.time_limit is not None and cfg.grad_accum > 1
    with LogWriter(out_dir / LOG) as log, _StopRequests() as stop:
        run.stop = stop
        try:
            while run.step < cfg.max_steps:
                _stop_if_asked(run)
                lr, grad_norm = _step(run, meter, first_step)
                first_step = False
                time_up = cfg.time_limit is not None and time.perf_counter() - start >= cfg.time_limit
                if run.step % cfg.log_interval == 0 or run.step == cfg.max_steps or time_up:
                    log.append(meter.row(run.step, lr, run.train_loss, grad_norm))
                    if bar is not None:
                        bar.set_postfix(loss=f"{run.train_loss:.4f}", tok_s=f"{meter.tok_s:,.0f}")
                if bar is not None:
                    bar.update(1)
                if run.step % cfg.eval_interval == 0 or run.step == cfg.max_steps or time_up:
                    _evaluate(run, runner, log, lr, verbose)
                if time_up:
                    stopped_by = "time_limit"
                    break
                if cfg.patience is not None and run.since_best >= cfg.patience:
                    stopped_by = "patience"  # best/ holds the lowest validation loss
                    break
        except (ParallelWorkerError, WaitInterrupted) as e:
            _save_after_failure(run, e)
        finally:
            if bar is not None:
                bar.close()
            runner.close()  # stop the worker processes (none with workers=1)
    return run.summary(time.perf_counter() - start, stopped_by)


def _stop_if_asked(run: _Run) -> None:
    """Between two steps: a stop request (Ctrl-C, SIGTERM, a closed stdout) saves this step and stops."""
    stop = run.stop
    if stop.reason is None and stdout.closed:
        stop.reason, stop.exit_code = "stdout was closed", 141  # 128 + SIGPIPE, as the shell reports
    if stop.reason is not None:
        run.save(LAST)
        raise TrainingInterrupted(
            f"{stop.reason} at step {run.step}: checkpoint written to {run.out_dir / LAST}; "
            f"continue with 'scratchformer train --resume --out {run.out_dir}'",
            exit_code=stop.exit_code,
        )


def _step(run: _Run, meter: _Throughput, first_step: bool) -> tuple[float, float]:
    """One optimiser step over cfg.grad_accum micro-batches, refused before it is applied when a
    loss or the gradient norm is not finite; -> (learning rate, gradient norm)."""
    cfg, opt, step, runner, diag = run.cfg, run.opt, run.step, run.runner, run.diag
    lr = cosine_lr(step, cfg.lr, cfg.final_lr, cfg.warmup, cfg.schedule_steps)
    opt.lr = lr
    opt.zero_grad()
    loss_sum = 0.0
    # where a step abandoned half-way (a worker fails, Ctrl-C during a wait) restarts
    run.step_start = (run.data_rng.bit_generator.state, run.dropout_rng.bit_generator.state)
    for micro in range(cfg.grad_accum):
        t_micro = time.perf_counter()
        batch = run.job.train_batch(run.data_rng, cfg.batch_size)
        _, loss = runner(*batch)
        runner.backward()
        n_tokens = run.job.batch_tokens(batch)
        loss_sum += loss
        meter.tokens += n_tokens
        if micro == 0 and first_step:  # nothing saved yet: a step that outlasts the limit is refused
            _check_step_can_end(cfg, time.perf_counter() - t_micro)
    if cfg.grad_accum > 1:  # each backward gave d(mean loss); average the micro-batches
        for p in run.params:
            p.grad *= 1.0 / cfg.grad_accum
    grad_norm = clip_grad_norm(run.params, cfg.grad_clip if cfg.grad_clip > 0 else math.inf)
    run.train_loss = loss_sum / cfg.grad_accum
    _finite_or_stop(step + 1, cfg, loss=run.train_loss, gradient_norm=float(grad_norm))
    if diag is not None and step == 0:  # the initialisation, before any update (no update ratios)
        diag.record(0, lr, None)
    before = diag.snapshot() if diag is not None and diag.due(step + 1) else None
    opt.step()
    if before is not None:
        diag.record(step + 1, lr, before)
    run.step += 1
    run.step_start = None  # applied: the state now is the step's end
    meter.steps += 1
    return lr, grad_norm


def _evaluate(run: _Run, runner, log: LogWriter, lr: float, verbose: bool) -> None:
    """Validation loss and scores logged, best/ and last/ saved (before printing: a failing
    stdout cannot cost a checkpoint), then the line and the samples printed."""
    cfg, job, step = run.cfg, run.job, run.step
    metrics = run_evaluation(job.evaluation("val", cfg.eval_batches), job.model, runner)
    run.val_loss = val_loss = metrics["loss"]
    _finite_or_stop(step, cfg, val_loss=val_loss)
    improved = val_loss < run.best_val
    run.best_val = min(run.best_val, val_loss)
    run.since_best = 0 if improved else run.since_best + 1
    log.append(
        {
            "step": step,
            "lr": lr,
            "train_loss": run.train_loss,
            "val_loss": val_loss,
            **{f"val_{k}": v for k, v in metrics.items() if k != "loss"},
        }
    )
    if improved:
        run.save(BEST)
    run.save(LAST)
    if verbose and not stdout.closed:
        extra = " ".join(f"{k} {v:.4f}" for k, v in metrics.items() if k != "loss")
        _say(f"step {step}: train loss {run.train_loss:.4f}, val loss {val_loss:.4f} {extra}".rstrip())
        for s in job.samples(cfg.num_samples, np.random.default_rng([cfg.seed, step])):
            _say(f"  {s}")


def _save_after_failure(run: _Run, e: ParallelWorkerError | WaitInterrupted) -> None:
    """Save the last good state and stop: a step abandoned half-way restarts from its beginning
    (weights and optimiser change only in opt.step), so --resume repeats it exactly."""
    if run.step_start is not None:
        run.data_rng.bit_generator.state, run.dropout_rng.bit_generator.state = run.step_start
    run.save(LAST)
    where = (
        f"checkpoint of step {run.step} written to {run.out_dir / LAST}; continue with "
        f"'scratchformer train --resume --out {run.out_dir}'"
    )
    if isinstance(e, WaitInterrupted):
        raise TrainingInterrupted(
            f"{run.stop.reason} at step {run.step}: {where}", exit_code=run.stop.exit_code
        ) from None
    raise ParallelWorkerError(f"{e}; {where}") from None
