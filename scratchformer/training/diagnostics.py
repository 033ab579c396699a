"""Training diagnostics over time, as in makemore part 3: what the activations, the gradients
and the updates of each layer do while a model trains.

At every `diag_interval` steps (TrainConfig; default: the eval interval; 0: off) and at
max_steps (a run stopped by its time limit ends without a record of its last step), the trainer
hands this module the parameters just before and just after the optimiser step, and it appends
one record to `diagnostics.jsonl` beside log.jsonl:

    step, lr
    layers     per block, the feed-forward hidden units on a fixed probe batch (PROBE_ROWS
               training sequences drawn with the run's seed, run in eval mode through
               `viz.trace`): mean and std of the activation f(h), `saturation` (the fraction of
               units where |f'(h)| < SATURATED_SLOPE: little gradient passes back; makemore's
               |tanh| > 0.97 is |tanh'| < 0.06; for GELU the flat tail h < -2.35 and the
               band -0.88 < h < -0.65 around its minimum at h = -0.75; for ReLU h <= 0) and
               `dead` (the fraction of units whose h is never > 0 on any probe token), and a
               histogram of f(h) (HIST_BINS bins over `act_range`, the same for every layer)
    params     per parameter (model.named_parameters()): mean and std of the gradient the
               optimiser stepped with (after averaging micro-batches and clipping), the
               update:data ratio log10(std(after - before) / std(before)) of this step (the
               whole AdamW update, decay included; None where the parameter is constant, as a
               LayerNorm gain at init), and for matrices a gradient histogram over `grad_range`
    probe      the attention weights (n_layer, n_head, T, T) of the main stack on the probe
               text (the viz example input: "emma" for names) and its tokens
    ms         milliseconds the record took (a timing field: the only one that varies between runs)

None of this runs on an ordinary step. The file is bounded: at most MAX_RECORDS records; when
full, every other record is dropped (the records at multiples of twice the current spacing
stay, the spacing doubles). The file is rewritten whole and atomically (runfiles.write_atomic)
at each record, so a kill leaves the old file or the new one; a resume first drops the records
past its checkpoint's step, so the file continues without gaps or repeats.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import numpy as np

from scratchformer.errors import DataError, RunFileError
from scratchformer.runfiles import parse_json, read_regular_file, write_atomic

DIAG_FILE = "diagnostics.jsonl"
FORMAT = "scratchformer-diagnostics"
MAX_RECORDS = 128  # a record of the names model is ~17 KB: its file stays under ~2.2 MB
MAX_BYTES = 256 * 2**20  # a bigger file is not ours
PROBE_ROWS = 32  # training sequences in the probe batch
PROBE_SEED_TAG = 20  # the probe batch is drawn from default_rng([seed, PROBE_SEED_TAG]), apart from the batches
PROBE_TOKENS = 16  # a text run's probe text: the first tokens of the first probe row
HIST_BINS = 40
SATURATED_SLOPE = 0.05


def _float(x) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


def _finite_or_null(value):
    """A record with NaN and +-inf (a diverging run's) as null, so the file stays strict JSON."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite_or_null(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite_or_null(v) for v in value]
    return value


def _histogram(values: np.ndarray, lo: float, hi: float) -> list[int]:
    """HIST_BINS counts over [lo, hi]; non-finite values (a diverging run) are not counted."""
    values = values[np.isfinite(values)]
    if not (math.isfinite(lo) and math.isfinite(hi)):
        lo, hi = (float(values.min()), float(values.max())) if values.size else (0.0, 0.0)
    if not hi > lo:
        lo, hi = lo - 0.5, hi + 0.5
    return np.histogram(values, bins=HIST_BINS, range=(lo, hi))[0].tolist()


def layer_stats(pre: np.ndarray, activation: str) -> dict:
    """Statistics of one feed-forward layer's hidden units. pre: (N, n_inner) pre-activations h
    of N probe tokens. Returns mean, std of f(h), saturation, dead (see the module docstring)."""
    from scratchformer.ops import ACTIVATIONS
    from scratchformer.ops.swiglu import sigmoid, swiglu_forward

    if activation == "swiglu":  # gated: pre is [gate | up]; a unit saturates and dies by its gate
        gate = np.split(pre, 2, axis=-1)[0]
        s = sigmoid(gate)
        post, slope, pre = swiglu_forward(pre), s + gate * s * (1 - s), gate  # silu'(gate)
    else:
        post, slope = ACTIVATIONS[activation][1](pre)
    slope = np.abs(np.asarray(slope, dtype=np.float64))
    return {"mean": _float(post.mean()), "std": _float(post.std()),
            "saturation": float((slope < SATURATED_SLOPE).mean()),
            "dead": float((~(pre > 0).any(axis=0)).mean())}


def update_ratio(before: np.ndarray, after: np.ndarray) -> float | None:
    """log10(std(after - before) / std(before)); None where either std is 0."""
    data_std, update_std = float(np.std(before)), float(np.std(after - before))
    if data_std == 0 or update_std == 0:
        return None
    return _float(math.log10(update_std / data_std))


def job_measures(job) -> dict:
    """What a job adds to each record beside the common measures: {name: its measures} from
    `job.progress_measures()` where the job has them (modadd: {"modadd": the grokking
    progress measures, training/modadd.py}), else {}."""
    measure = getattr(job, "progress_measures", None)
    return {} if measure is None else {job.task: measure()}


def read_records(path: str | Path) -> tuple[dict, list[dict]]:
    """(header, records) of a diagnostics file; RunFileError (one line) for anything else.
    A missing file raises FileNotFoundError."""
    text = read_regular_file(path, MAX_BYTES, hint="delete it (diagnostics are optional) or train again")
    lines = text.decode("utf-8", "replace").splitlines()
    rows = [parse_json(line, path, "delete it (diagnostics are optional)") for line in lines if line.strip()]
    if not rows or not isinstance(rows[0], dict) or rows[0].get("format") != FORMAT:
        raise RunFileError(f"{path} is not a scratchformer diagnostics file: delete it or train again")
    if not all(isinstance(r, dict) and isinstance(r.get("step"), int) for r in rows[1:]):
        raise RunFileError(f"{path}: a record without a step; delete the file (diagnostics are optional)")
    return rows[0], rows[1:]


class Diagnostics:
    """The recorder the trainer holds while `cfg.diag_interval` > 0 (see the module docstring).

    job: the training job (its model, `train_batch` and `viz_inputs`); interval: steps between
    records; max_steps: the last step (recorded too); resume_step: the checkpoint's step when
    resuming (the file is cut back to it), None for a fresh run (an old file is replaced)."""

    def __init__(self, job, interval: int, max_steps: int, seed: int, path: str | Path,
                 resume_step: int | None = None):
        from scratchformer.viz.trace import trace

        self.job, self.model, self.path, self.max_steps = job, job.model, Path(path), max_steps
        self._run = trace  # viz.trace: the model run block by block
        self.header = {"format": FORMAT, "version": 1, "interval": interval, "every": interval}
        self.records: list[dict] = []
        if resume_step is not None and self.path.exists():
            header, records = read_records(self.path)
            if header.get("interval") == interval:
                self.header = header
            self.records = [r for r in records if r["step"] <= resume_step]
        # the probe: fixed training rows (row 0 of a batch is the model's input for every job)
        batch = job.train_batch(np.random.default_rng([seed, PROBE_SEED_TAG]), PROBE_ROWS)
        self.probe_rows = np.asarray(batch[0])
        try:
            inputs = job.viz_inputs(None)
        except DataError:  # a text run has no example input: the start of the first probe row
            inputs = job.viz_inputs(job.tokenizer.decode(self.probe_rows[0][:PROBE_TOKENS]))
        self.probe_ids, self.probe_tokens = np.asarray(inputs["ids"]), list(inputs["tokens"])
        self.traced = inputs.get("model", self.model)  # what viz draws: a fine-tuned classifier's encoder

    def due(self, step: int) -> bool:
        """Is a record taken after the optimiser step that makes the count `step`?"""
        return step % self.header["every"] == 0 or step == self.max_steps

    def snapshot(self) -> dict[str, np.ndarray]:
        """Copies of the parameters before the optimiser step (only on a due step)."""
        return {name: p.data.copy() for name, p in self.model.named_parameters()}

    def record(self, step: int, lr: float, before: dict[str, np.ndarray]) -> dict:
        """Measure after the optimiser step of `step` and rewrite the file; returns the record."""
        t0 = time.perf_counter()
        params, grads_2d = {}, []
        for name, p in self.model.named_parameters():
            g = p.grad
            params[name] = {"grad_mean": _float(g.mean()), "grad_std": _float(g.std()),
                            "update_ratio": update_ratio(before[name], p.data)}
            if p.data.ndim == 2:
                grads_2d.append((name, g))
        g_max = max((float(np.abs(g[np.isfinite(g)]).max()) for _, g in grads_2d if np.isfinite(g).any()), default=0.0)
        for name, g in grads_2d:
            params[name]["grad_hist"] = _histogram(g, -g_max, g_max)

        # the main stack's blocks, asked of the model's contract (models/base.py)
        parts = [self.traced.block_parts(b) for b in self.traced.stacks()[self.traced.main_prefix()]]
        pres = [[] for _ in parts]
        for row in self.probe_rows:  # one sequence at a time: viz.trace runs batch row 0
            t = self._run(self.traced, row)
            for i, pre in enumerate(t.ff_pre):
                pres[i].append(pre.reshape(-1, pre.shape[-1]))
        layers, posts = [], []
        for part, rows in zip(parts, pres):
            pre = np.concatenate(rows).astype(np.float64)
            layers.append(layer_stats(pre, part.feedforward.activation))
            posts.append(part.feedforward.activate(pre))
        finite = [a[np.isfinite(a)] for a in posts]  # a diverging run's NaN are not counted
        lo = min((float(a.min()) for a in finite if a.size), default=0.0)
        hi = max((float(a.max()) for a in finite if a.size), default=0.0)
        for stats, post in zip(layers, posts):
            stats["hist"] = _histogram(post, lo, hi)

        self._run(self.traced, self.probe_ids)  # leaves each attention's weights on the probe
        attention = [part.attentions["attn"].attn_weights[0].astype(np.float64).tolist() for part in parts]
        if attention and len(attention[0][0]) == len(self.probe_tokens) + 1:  # a classifier's [CLS] comes first
            self.probe_tokens = ["[CLS]"] + self.probe_tokens
        rec = {"step": step, "lr": lr, "layers": layers, "act_range": [lo, hi], "params": params,
               "grad_range": [-g_max, g_max], "probe": {"tokens": self.probe_tokens, "attention": attention},
               "ms": round(1000 * (time.perf_counter() - t0), 1)}
        rec.update(job_measures(self.job))
        self.records.append(rec)
        if len(self.records) > MAX_RECORDS:
            self._thin()
        self._write()
        return rec

    def _thin(self) -> None:
        """Keep the records at multiples of twice the spacing, and the last; the spacing doubles."""
        every = 2 * self.header["every"]
        last = self.records[-1]
        self.records = [r for r in self.records[:-1] if r["step"] % every == 0] + [last]
        self.header = {**self.header, "every": every}

    def _write(self) -> None:
        lines = [json.dumps(self.header)] + [json.dumps(_finite_or_null(r), allow_nan=False) for r in self.records]
        write_atomic(self.path, ("\n".join(lines) + "\n").encode())
