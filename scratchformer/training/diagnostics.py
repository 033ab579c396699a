"""Training diagnostics over time, as in makemore part 3: what the activations, the gradients
and the updates of each layer do while a model trains.

A fresh run is recorded at step 0 (the initialisation: its activations, the first batch's
gradient, no update yet: the point makemore part 3 compares against), then every
`diag_interval` steps (TrainConfig; default max(1, max_steps // 25), so any run gets 25
records or more, a shorter one every step; 0: off) and at max_steps (a run stopped by its time limit ends without a
record of its last step). The trainer hands this module the parameters just before and just
after the optimiser step, and it appends one record to `diagnostics.jsonl` beside log.jsonl:

    step, lr
    layers     per block with a feed-forward (none for attention-only blocks), its hidden units on a fixed probe batch (PROBE_ROWS
               training sequences drawn with the run's seed, run by the job's own forward
               and backward in training mode with dropout off): mean and std of the
               activation f(h), `saturation` (the fraction of units where |f'(h)| <
               SATURATED_SLOPE: little gradient passes back; makemore's |tanh| > 0.97 is
               |tanh'| < 0.06; for GELU the flat tail h < -2.35 and the band
               -0.88 < h < -0.65 around its minimum at h = -0.75; for ReLU h <= 0) and
               `dead` (the fraction of units whose h is never > 0 on any probe token), and a
               histogram of f(h) (HIST_BINS bins over `act_range`, the same for every layer);
               and the gradient of the probe batch's loss arriving at f(h) (makemore's
               gradient distribution per layer, from the same pass; the parameters'
               gradients are restored after it): `grad_zero`, the number of values exactly
               0 (positions no loss depends on: the padding after a name), and of the others
               `grad_mean`, `grad_std` and `grad_hist` over `act_grad_range` (the same for
               every layer: +- ACT_GRAD_STDS times the largest layer's std), with
               `grad_outside` the number beyond it (the heavy tails)
    params     per parameter (model.named_parameters()): its `shape`, mean and std of the
               gradient the optimiser stepped with (after averaging micro-batches and
               clipping), the update:data ratio log10(std(after - before) / std(before)) of
               this step (the whole AdamW update, decay included; None at step 0 and where
               the parameter is constant, as a LayerNorm gain at init), and for matrices a
               gradient histogram `grad_hist` over the matrix's own `grad_range` (+- its
               largest |gradient|)
    probe      the attention weights (n_layer, n_head, T, T) of the main stack on the probe
               text (the viz example input: "emma" for names) and its tokens
    (task)     what the job measures of its own task, as extra keys (`job.progress_measures()`:
               the induction job's loss on each half, head scores and ablations)
    ms         milliseconds the record took (a timing field: the only one that varies between runs)

None of this runs on an ordinary step. The file is bounded: at most MAX_RECORDS records; when
full, every other record is dropped (the records at multiples of twice the current spacing
stay, the spacing doubles). The file is rewritten whole and atomically (runfiles.write_atomic)
at each record, so a kill leaves the old file or the new one; a resume first drops the records
past its checkpoint's step, so the file continues without gaps or repeats.
"""  # noqa: E501

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import numpy as np

from scratchformer.errors import DataError, RunFileError
from scratchformer.lens.trace import attention_maps
from scratchformer.nn.layers import dropout_off
from scratchformer.runfiles import parse_json_line, read_regular_file, write_atomic

DIAG_FILE = "diagnostics.jsonl"
FORMAT = "scratchformer-diagnostics"
MAX_RECORDS = 128  # a record of the names model is ~21 KB: its file stays under ~2.7 MB
MAX_BYTES = 256 * 2**20  # a bigger file is not ours
MAX_RECORD_BYTES = 32 * 2**20  # one record: its probe's attention maps are the largest part
PROBE_ROWS = 32  # training sequences in the probe batch
PROBE_SEED_TAG = (
    20  # the probe batch is drawn from default_rng([seed, PROBE_SEED_TAG]), apart from the batches
)
PROBE_TOKENS = 16  # a text run's probe text: the first tokens of the first probe row
HIST_BINS = 40
SATURATED_SLOPE = 0.05
ACT_GRAD_STDS = 5  # the activation gradients' histogram spans +- this many times the widest layer's std


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
    return {
        "mean": _float(post.mean()),
        "std": _float(post.std()),
        "saturation": float((slope < SATURATED_SLOPE).mean()),
        "dead": float((~(pre > 0).any(axis=0)).mean()),
    }


def update_ratio(before: np.ndarray, after: np.ndarray) -> float | None:
    """log10(std(after - before) / std(before)); None where either std is 0."""
    data_std, update_std = float(np.std(before)), float(np.std(after - before))
    if data_std == 0 or update_std == 0:
        return None
    return _float(math.log10(update_std / data_std))


_DIAG_HINT = "delete the file (diagnostics are optional) or train again"


def _number(value, where: str) -> float:
    """A number of a record; null (what the recorder writes for NaN and infinity) as NaN."""
    if value is None:
        return math.nan
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RunFileError(f"{where}: {type(value).__name__} where a number belongs; {_DIAG_HINT}")
    return float(value)


def _numbers(value, where: str, length: int | None = None) -> list[float]:
    if not isinstance(value, list) or (length is not None and len(value) != length):
        raise RunFileError(f"{where}: not a list of {length or 'some'} numbers; {_DIAG_HINT}")
    return [_number(v, where) for v in value]


def _field(record: dict, key: str, kind: type, where: str):
    value = record.get(key)
    if not isinstance(value, kind):
        raise RunFileError(f"{where}: `{key}` missing or not a {kind.__name__}; {_DIAG_HINT}")
    return value


def _checked_record(rec: dict, where: str) -> dict:
    """A record as the figures read it, every field checked (RunFileError naming it) and every
    null a NaN: a diverging run's records draw with gaps, a damaged one is one line."""
    out = {"step": rec["step"], "lr": _number(rec.get("lr"), f"{where} `lr`")}
    layers = []
    for i, layer in enumerate(_field(rec, "layers", list, where)):
        at = f"{where} `layers[{i}]`"
        if not isinstance(layer, dict):
            raise RunFileError(f"{at}: not an object; {_DIAG_HINT}")
        stats = {k: _number(layer.get(k), f"{at}.{k}") for k in ("mean", "std", "saturation", "dead")}
        stats["hist"] = _numbers(layer.get("hist"), f"{at}.hist", HIST_BINS)
        # version 2: the gradient at the activation (absent from version 1 records)
        stats.update(
            {
                k: _number(layer[k], f"{at}.{k}")
                for k in ("grad_mean", "grad_std", "grad_outside", "grad_zero")
                if k in layer
            }
        )
        if "grad_hist" in layer:
            stats["grad_hist"] = _numbers(layer["grad_hist"], f"{at}.grad_hist", HIST_BINS)
        layers.append(stats)
    out["layers"] = layers
    out["act_range"] = _numbers(rec.get("act_range"), f"{where} `act_range`", 2)
    for key in ("grad_range", "act_grad_range"):  # version 1 has the first, version 2 the second
        if key in rec:
            out[key] = _numbers(rec[key], f"{where} `{key}`", 2)
    params = {}
    for name, p in _field(rec, "params", dict, where).items():
        at = f"{where} `params.{name}`"
        if not isinstance(p, dict):
            raise RunFileError(f"{at}: not an object; {_DIAG_HINT}")
        params[name] = {k: _number(p.get(k), f"{at}.{k}") for k in ("grad_mean", "grad_std", "update_ratio")}
        if "grad_hist" in p:
            params[name]["grad_hist"] = _numbers(p["grad_hist"], f"{at}.grad_hist", HIST_BINS)
        if "grad_range" in p:  # version 2: each matrix on its own range
            params[name]["grad_range"] = _numbers(p["grad_range"], f"{at}.grad_range", 2)
        if "shape" in p:
            shape = p["shape"]
            if not isinstance(shape, list) or not all(
                isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape
            ):
                raise RunFileError(f"{at}.shape: not a list of sizes; {_DIAG_HINT}")
            params[name]["shape"] = shape
    out["params"] = params
    probe = _field(rec, "probe", dict, where)
    tokens = probe.get("tokens")
    if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
        raise RunFileError(f"{where} `probe.tokens`: not a list of strings; {_DIAG_HINT}")
    try:
        attention = np.array(probe.get("attention"), dtype=np.float64)  # null -> NaN
    except (TypeError, ValueError):
        raise RunFileError(f"{where} `probe.attention`: not an array of numbers; {_DIAG_HINT}") from None
    # one map per block (attention-only blocks have attention and no feed-forward layer stats)
    if attention.ndim != 4 or attention.shape[0] < len(layers) or attention.shape[2:] != (len(tokens),) * 2:
        raise RunFileError(
            f"{where} `probe.attention`: shape {attention.shape}, not (blocks >= {len(layers)}, "
            f"heads, {len(tokens)}, {len(tokens)}); {_DIAG_HINT}"
        )
    out["probe"] = {"tokens": tokens, "attention": attention.tolist()}
    if "ms" in rec:
        out["ms"] = _number(rec["ms"], f"{where} `ms`")
    for key, value in rec.items():  # what a job measures of its own task (`Job.progress_measures`),
        out.setdefault(key, value)  # kept as written; its figure checks what it reads
    return out


def read_records(path: str | Path, nulls_as_nan: bool = False) -> tuple[dict, list[dict]]:
    """(header, records) of a diagnostics file; RunFileError (one line) for anything else.
    Every record is checked field by field (the records must agree on the model's layers,
    heads and parameters). The records come back as written, null for the recorder's NaN and
    infinity; `nulls_as_nan`: as the figures read them, every number a float and null NaN.
    A missing file raises FileNotFoundError."""
    text = read_regular_file(path, MAX_BYTES, hint="delete it (diagnostics are optional) or train again")
    rows = [
        parse_json_line(line, f"{path} line {i}", MAX_RECORD_BYTES, "delete it (diagnostics are optional)")
        for i, line in enumerate(text.splitlines(), start=1)
        if line.strip()
    ]
    if not rows or not isinstance(rows[0], dict) or rows[0].get("format") != FORMAT:
        raise RunFileError(f"{path} is not a scratchformer diagnostics file: delete it or train again")
    if not all(
        isinstance(r, dict) and isinstance(r.get("step"), int) and not isinstance(r.get("step"), bool)
        for r in rows[1:]
    ):
        raise RunFileError(f"{path}: a record without a step; delete the file (diagnostics are optional)")
    records = [_checked_record(r, f"{path} record {i}") for i, r in enumerate(rows[1:], start=1)]
    if records:
        last = records[-1]
        shape = (len(last["layers"]), len(last["probe"]["attention"][0]) if last["layers"] else 0)
        for i, r in enumerate(records, start=1):
            heads = len(r["probe"]["attention"][0]) if r["layers"] else 0
            if (len(r["layers"]), heads) != shape or set(r["params"]) != set(last["params"]):
                raise RunFileError(
                    f"{path} record {i}: its layers, heads or parameters differ from the last "
                    f"record's (records of another model?); {_DIAG_HINT}"
                )
    return rows[0], (records if nulls_as_nan else rows[1:])


class Diagnostics:
    """The recorder the trainer holds while `cfg.diag_interval` > 0 (see the module docstring).

    job: the training job (its model, `train_batch` and `viz_inputs`); interval: steps between
    records; max_steps: the last step (recorded too); resume_step: the checkpoint's step when
    resuming (the file is cut back to it), None for a fresh run (an old file is replaced)."""

    def __init__(
        self, job, interval: int, max_steps: int, seed: int, path: str | Path, resume_step: int | None = None
    ):
        self.job, self.model, self.path, self.max_steps = job, job.model, Path(path), max_steps
        self.header = {"format": FORMAT, "version": 2, "interval": interval, "every": interval}
        self.records: list[dict] = []
        if resume_step is not None and self.path.exists():
            header, records = read_records(self.path)
            if header.get("interval") == interval:
                self.header = header
            self.records = [r for r in records if r["step"] <= resume_step]
        # the probe: fixed training rows (row 0 of a batch is the model's input for every job)
        batch = job.train_batch(np.random.default_rng([seed, PROBE_SEED_TAG]), PROBE_ROWS)
        self.probe_batch, self.probe_rows = batch, np.asarray(batch[0])
        try:
            inputs = job.viz_inputs(None)
        except DataError:  # a text run has no example input: the start of the first probe row
            inputs = job.viz_inputs(job.tokenizer.decode(self.probe_rows[0][:PROBE_TOKENS]))
        self.probe_ids = np.asarray(inputs["ids"])
        self.traced = inputs.get("model", self.model)  # what viz draws: a fine-tuned classifier's encoder
        # the probe as the model reads it: its forward's inputs and the main stack's position labels
        example = self.traced.example(self.probe_ids, list(inputs["tokens"]), inputs.get("vocab_labels"))
        self.probe_inputs = example.inputs
        self.probe_tokens = example.tokens[self.traced.main_prefix()]

    def due(self, step: int) -> bool:
        """Is a record taken after the optimiser step that makes the count `step`? (Step 0, the
        initialisation, is recorded before the first optimiser step: `record(0, lr, None)`.)"""
        return step % self.header["every"] == 0 or step == self.max_steps

    def snapshot(self) -> dict[str, np.ndarray]:
        """Copies of the parameters before the optimiser step (only on a due step)."""
        return {name: p.data.copy() for name, p in self.model.named_parameters()}

    def record(self, step: int, lr: float, before: dict[str, np.ndarray] | None) -> dict:
        """Measure after the optimiser step of `step` and rewrite the file; returns the record.
        before: `snapshot()` taken before that step; None for step 0, recorded before the first
        optimiser step (no update ratios)."""
        t0 = time.perf_counter()
        params = {}
        for name, p in self.model.named_parameters():
            g = p.grad
            params[name] = {
                "shape": list(p.data.shape),
                "grad_mean": _float(g.mean()),
                "grad_std": _float(g.std()),
                "update_ratio": None if before is None else update_ratio(before[name], p.data),
            }
            if p.data.ndim == 2:  # each matrix on its own range: their widths differ by orders of magnitude
                finite = np.abs(g[np.isfinite(g)])
                g_max = float(finite.max()) if finite.size else 0.0
                params[name]["grad_hist"] = _histogram(g, -g_max, g_max)
                params[name]["grad_range"] = [-g_max, g_max]

        # the main stack's blocks, asked of the model's contract (models/base.py)
        all_parts = [self.traced.block_parts(b) for b in self.traced.stacks()[self.traced.main_prefix()]]
        parts = [
            p for p in all_parts if p.feedforward is not None
        ]  # attention-only blocks have no activations
        feedforwards = [part.feedforward for part in parts]
        pres, all_grads = self._probe_pass(feedforwards)
        layers, posts = [], []
        for ff, pre in zip(feedforwards, pres):
            layers.append(layer_stats(pre, ff.activation))
            posts.append(ff.activate(pre))
        finite = [a[np.isfinite(a)] for a in posts]  # a diverging run's NaN are not counted
        lo = min((float(a.min()) for a in finite if a.size), default=0.0)
        hi = max((float(a.max()) for a in finite if a.size), default=0.0)
        for stats, post in zip(layers, posts):
            stats["hist"] = _histogram(post, lo, hi)
        # exact zeros: positions with no loss on them (padding after a name ends), apart
        act_grads = [g[g != 0] for g in all_grads]
        finite = [g[np.isfinite(g)] for g in act_grads]
        # heavy tails: on +-max most values would share the middle bins; the tails are counted apart
        g_lim = ACT_GRAD_STDS * max((float(a.std()) for a in finite if a.size), default=0.0)
        for stats, g, full in zip(layers, act_grads, all_grads):
            hist = _histogram(g, -g_lim, g_lim)
            stats.update(
                grad_mean=_float(g.mean()) if g.size else None,
                grad_std=_float(g.std()) if g.size else None,
                grad_hist=hist,
                grad_outside=int(g.size - sum(hist)),
                grad_zero=int(full.size - g.size),
            )

        # the main stack's attention on the probe, read through the hooks of one eval-mode forward
        attention = attention_maps(self.traced, *self.probe_inputs)["encoder"].astype(np.float64).tolist()
        rec = {
            "step": step,
            "lr": lr,
            "layers": layers,
            "act_range": [lo, hi],
            "act_grad_range": [-g_lim, g_lim],
            "params": params,
            "probe": {"tokens": self.probe_tokens, "attention": attention},
            **self._job_measures(),
            "ms": round(1000 * (time.perf_counter() - t0), 1),
        }
        self.records.append(rec)
        if len(self.records) > MAX_RECORDS:
            self._thin()
        self._write()
        return rec

    def _probe_pass(self, feedforwards) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Per feed-forward (one per block of the main stack), the pre-activations h (N, fc1 width) and d(probe loss)/d(f(h)) flattened,
        both float64, of one forward and backward of the probe batch by the job itself, in
        training mode with every dropout set to 0 (so the forward is the eval-mode one, and no
        draw is taken from the run's dropout generator), caught by each feed-forward's
        `hook_pre` forward hook and `hook_post` grad hook. The parameters' gradients (the
        step's, which the optimiser may still need) are restored in place."""  # noqa: E501
        model = self.job.model
        grads = [(p, p.grad.copy()) for p in model.parameters()]
        caught, pres = [[] for _ in feedforwards], [[] for _ in feedforwards]
        was_training = model.training
        try:
            for i, ff in enumerate(feedforwards):
                ff.hook_pre.set_hooks(
                    f"diagnostics {i}",
                    lambda h, _name, i=i: pres[i].append(np.array(h, np.float64).reshape(-1, h.shape[-1])),
                )
                ff.hook_post.set_hooks(
                    f"diagnostics {i}", None, lambda g, _name, i=i: caught[i].append(np.array(g, np.float64))
                )
            model.train()
            with dropout_off(model):
                model(*self.probe_batch)
                model.backward()
        finally:
            for ff in feedforwards:
                ff.hook_pre.remove_hooks()
                ff.hook_post.remove_hooks()
            model.train(was_training)
            for p, g in grads:
                p.grad[...] = g
        # positions the job says hold no token (a fine-tuned classifier's [PAD]s, which its
        # attention mask hides) are left out: their activations are computed but mean nothing
        real = getattr(self.job, "real_tokens", lambda batch: None)(self.probe_batch)  # (B, T) bool or None
        keep = None if real is None else np.asarray(real, bool).reshape(-1)

        def real_rows(a: np.ndarray) -> np.ndarray:  # (B * T, width) -> the rows of real tokens
            return a[keep] if keep is not None and a.shape[0] == keep.size else a

        return (
            [real_rows(np.concatenate(p)) if p else np.zeros((0, 1)) for p in pres],
            [
                np.concatenate([real_rows(g.reshape(-1, g.shape[-1])).reshape(-1) for g in c])
                if c
                else np.zeros(0)
                for c in caught
            ],
        )

    def _job_measures(self) -> dict:
        """What the job measures of its own task (`progress_measures()`: the induction job's
        flat keys, training/induction.py; the modadd job's one "modadd" key, training/modadd.py),
        as extra keys of the record; {} for jobs without any."""
        measure = getattr(self.job, "progress_measures", None)
        return measure() if measure is not None else {}

    def _thin(self) -> None:
        """Keep the records at multiples of twice the spacing, and the last; the spacing doubles."""
        every = 2 * self.header["every"]
        last = self.records[-1]
        self.records = [r for r in self.records[:-1] if r["step"] % every == 0] + [last]
        self.header = {**self.header, "every": every}

    def _write(self) -> None:
        lines = [json.dumps(self.header)] + [
            json.dumps(_finite_or_null(r), allow_nan=False) for r in self.records
        ]
        write_atomic(self.path, ("\n".join(lines) + "\n").encode())
