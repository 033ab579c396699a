"""The training loop: one straight-line function, nanoGPT style, shared by every model family.

What is trained is described by a *job* (the `Job` protocol in `scratchformer.training.jobs`):
it owns the model, hands out training batches, runs forward + backward on one, evaluates a
split and shows samples. The loop owns everything else: optimiser, learning-rate schedule,
gradient accumulation and clipping, evaluation, checkpoints, logs, progress, time limits.

Resuming is exact: the last checkpoint stores the model, the optimiser, the step and the
state of both random generators (batches and dropout), so a resumed run takes the same
steps as an uninterrupted one, bit for bit on the same machine.
"""

from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import numpy as np

from scratchformer.allocator import keep_freed_memory
from scratchformer.data import DEFAULT_SEED
from scratchformer.errors import CheckpointError, ConfigError
from scratchformer.nn import set_dropout_rng
from scratchformer.optim import AdamW, clip_grad_norm, cosine_lr, param_groups
from scratchformer.training.checkpoint import Checkpoint, load_checkpoint, save_checkpoint

LAST, BEST, LOG = "last", "best", "log.jsonl"


@dataclass
class TrainConfig:
    """Optimisation settings. Defaults follow nanoGPT's small CPU configuration."""

    max_steps: int = 2000
    batch_size: int = 32
    grad_accum: int = 1  # micro-batches per optimiser step
    lr: float = 1e-3
    min_lr: float | None = None  # end of the cosine; default lr / 10
    warmup_steps: int = 100
    decay_steps: int | None = None  # cosine length; default max_steps
    weight_decay: float = 0.1
    decay_embeddings: bool = False  # True: decay embedding tables too, as nanoGPT does
    beta1: float = 0.9
    beta2: float = 0.99
    grad_clip: float = 1.0  # global-norm clipping; 0 disables it
    eval_interval: int = 250
    eval_batches: int | None = None  # None: the whole split
    log_interval: int = 10
    num_samples: int = 5  # samples printed at each evaluation (when the job can sample)
    seed: int = DEFAULT_SEED  # initial weights, batches (seed) and dropout (seed + 1)
    time_limit: float | None = None  # seconds of training before stopping cleanly

    def __post_init__(self):
        positive = ["max_steps", "batch_size", "grad_accum", "eval_interval", "log_interval"]
        for name in positive:
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ConfigError(f"{name} must be a positive integer, got {getattr(self, name)!r}")
        if not self.lr > 0:
            raise ConfigError(f"lr must be positive, got {self.lr}")
        if self.warmup_steps < 0 or self.weight_decay < 0 or self.grad_clip < 0:
            raise ConfigError("warmup_steps, weight_decay and grad_clip must be >= 0")
        if self.time_limit is not None and self.time_limit <= 0:
            raise ConfigError(f"time_limit must be positive seconds, got {self.time_limit}")

    @property
    def final_lr(self) -> float:
        return self.lr / 10 if self.min_lr is None else self.min_lr

    @property
    def schedule_steps(self) -> int:
        return self.max_steps if self.decay_steps is None else self.decay_steps

    @property
    def warmup(self) -> int:
        # a short run (--max-steps 10) keeps the default warmup from outlasting the schedule
        return min(self.warmup_steps, self.schedule_steps)

    @classmethod
    def from_dict(cls, d: dict) -> TrainConfig:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


def _say(msg: str) -> None:
    """Print without breaking the progress bar."""
    try:
        from tqdm import tqdm

        tqdm.write(msg, file=sys.stdout)
    except ImportError:  # pragma: no cover
        print(msg)


def train(job, cfg: TrainConfig, out_dir: str | Path, resume: bool = False, progress: bool = True,
          verbose: bool = True, checkpoint: Checkpoint | None = None) -> dict:
    """Train `job.model` under `cfg`, writing checkpoints and a JSONL log into `out_dir`.

    out_dir/last/  the latest state (written at every evaluation and at the end)
    out_dir/best/  the state with the lowest validation loss so far
    out_dir/log.jsonl  one JSON object per logged step / evaluation
    resume: continue from out_dir/last; `checkpoint` is that checkpoint when the caller has
    already read it (so it is read once).
    Returns a summary dict (step, train_loss, val_loss, best_val_loss, seconds, stopped_by).
    """
    keep_freed_memory()  # reuse freed blocks: avoids page faults on every step (glibc only)
    out_dir = Path(out_dir)
    model = job.model
    params = model.parameters()
    opt = AdamW(param_groups(model, cfg.weight_decay, cfg.decay_embeddings), lr=cfg.lr, betas=(cfg.beta1, cfg.beta2),
                eps=1e-8, weight_decay=cfg.weight_decay)
    data_rng = np.random.default_rng(cfg.seed)
    dropout_rng = set_dropout_rng(model, np.random.default_rng(cfg.seed + 1))
    step, best_val = 0, math.inf

    if resume:
        ck = checkpoint if checkpoint is not None else load_checkpoint(out_dir / LAST)
        job.check_compatible(ck)
        model.load_state_dict(ck.model_state)
        if ck.optimizer_state is None or not ck.rng_state:
            raise CheckpointError(f"{out_dir / LAST} holds no optimiser/RNG state: cannot resume from it")
        opt.load_state_dict(ck.optimizer_state)
        data_rng.bit_generator.state = ck.rng_state["data"]
        dropout_rng.bit_generator.state = ck.rng_state["dropout"]
        step, best_val = ck.step, ck.extra.get("best_val_loss", math.inf)
        _truncate_log(out_dir / LOG, step)
    elif (out_dir / LAST).exists():
        raise ConfigError(f"{out_dir} already holds a run: pass --resume to continue it, or choose another --out")
    out_dir.mkdir(parents=True, exist_ok=True)

    def save(which: str, val_loss: float) -> None:
        save_checkpoint(
            out_dir / which,
            model_state=model.state_dict(),
            config=job.config_dict(),
            tokenizer=job.tokenizer_dict(),
            optimizer_state=opt.state_dict(),
            rng_state={"data": data_rng.bit_generator.state, "dropout": dropout_rng.bit_generator.state},
            step=step,
            extra={"best_val_loss": best_val, "val_loss": val_loss, "train_config": asdict(cfg)},
        )

    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=cfg.max_steps, initial=step, unit="step", dynamic_ncols=True, file=sys.stderr)
    log = (out_dir / LOG).open("a", encoding="utf-8")
    start = time.perf_counter()
    stopped_by, train_loss, val_loss = "max_steps", float("nan"), float("nan")
    tokens_since, t_since = 0, time.perf_counter()
    try:
        while step < cfg.max_steps:
            lr = cosine_lr(step, cfg.lr, cfg.final_lr, cfg.warmup, cfg.schedule_steps)
            opt.lr = lr
            opt.zero_grad()
            loss_sum = 0.0
            for _ in range(cfg.grad_accum):
                loss, n_tokens = job.forward_backward(job.train_batch(data_rng, cfg.batch_size))
                loss_sum += loss
                tokens_since += n_tokens
            if cfg.grad_accum > 1:  # each backward gave d(mean loss); average the micro-batches
                for p in params:
                    p.grad *= 1.0 / cfg.grad_accum
            grad_norm = clip_grad_norm(params, cfg.grad_clip if cfg.grad_clip > 0 else math.inf)
            opt.step()
            step += 1
            train_loss = loss_sum / cfg.grad_accum
            if not math.isfinite(train_loss):
                raise FloatingPointError(f"loss became {train_loss} at step {step}: lower --lr or check the data")
            time_up = cfg.time_limit is not None and time.perf_counter() - start >= cfg.time_limit

            if step % cfg.log_interval == 0 or step == cfg.max_steps or time_up:
                now = time.perf_counter()
                tok_s = tokens_since / max(now - t_since, 1e-9)
                tokens_since, t_since = 0, now
                _write_row(log, {"step": step, "lr": lr, "train_loss": train_loss, "grad_norm": grad_norm,
                                 "tokens_per_s": round(tok_s, 1)})
                if bar is not None:
                    bar.set_postfix(loss=f"{train_loss:.4f}", tok_s=f"{tok_s:,.0f}")
            if bar is not None:
                bar.update(1)

            if step % cfg.eval_interval == 0 or step == cfg.max_steps or time_up:
                metrics = job.evaluate("val", cfg.eval_batches)
                val_loss = metrics["loss"]
                improved = val_loss < best_val
                best_val = min(best_val, val_loss)
                _write_row(log, {"step": step, "lr": lr, "train_loss": train_loss, "val_loss": val_loss,
                                 **{f"val_{k}": v for k, v in metrics.items() if k != "loss"}})
                if verbose:
                    extra = " ".join(f"{k} {v:.4f}" for k, v in metrics.items() if k != "loss")
                    _say(f"step {step}: train loss {train_loss:.4f}, val loss {val_loss:.4f} {extra}".rstrip())
                    for s in job.samples(cfg.num_samples, np.random.default_rng([cfg.seed, step])):
                        _say(f"  {s}")
                if improved:
                    save(BEST, val_loss)
                save(LAST, val_loss)
            if time_up:
                stopped_by = "time_limit"
                break
    finally:
        log.close()
        if bar is not None:
            bar.close()
    return {"step": step, "train_loss": train_loss, "val_loss": val_loss, "best_val_loss": best_val,
            "seconds": time.perf_counter() - start, "stopped_by": stopped_by}


def _write_row(log, row: dict) -> None:
    log.write(json.dumps({k: (float(v) if isinstance(v, np.floating) else v) for k, v in row.items()}) + "\n")
    log.flush()


def _truncate_log(path: Path, step: int) -> None:
    """Drop log rows written after the checkpoint we resume from (they will be redone)."""
    if not path.exists():
        return
    rows = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    kept = [r for r in rows if json.loads(r).get("step", 0) <= step]
    path.write_text("".join(r + "\n" for r in kept), encoding="utf-8")
