"""Run files checked against a schema when read: config.json, trainer_state.json,
tokenizer.json and each row of log.jsonl.

A hand-edited or damaged run file must end as one line naming the file and the field
(`RunFileError`), never as a KeyError or a wrong result deep inside the trainer. A schema is
a tree of small spec objects, each of which checks one JSON value:

    Int(min, max)     an int (not a bool), in range
    Num(min, finite)  an int or float; NaN/inf only where finite=False
    Str(choices)      a string, optionally one of a few
    Bool()            true or false
    Maybe(spec)       null, or a value matching spec
    List(spec, max_len, unique)
    Obj(fields, optional, extra)   a JSON object with exactly these keys (extra: a spec for
                                   any other key, or None to reject other keys)
    Tagged(key, {value: Obj})      an object whose schema depends on one key ("kind")

`check_json(value, schema, path)` checks a value read by scratchformer.runfiles.read_json_file
(which turns huge integers and absurd nesting into the same one-line error). `strict_json` is the
output side: JSON that never holds NaN or Infinity (for `eval --json`).
"""

from __future__ import annotations

import json
import math
import os

from scratchformer.errors import RunFileError

MAX_DEPTH = 32  # our run files nest 4 deep; anything deeper was not written by us
BIG = 2**31 - 1  # upper bound for sizes and counts: far beyond any model that fits in memory


class SchemaMismatch(Exception):
    """Internal: raised by a spec with the field path and what was expected."""

    def __init__(self, where: str, expected: str, value):
        self.where, self.expected, self.value = where, expected, value


def _short(value) -> str:
    """A value as it appears in a one-line message (long ones cut)."""
    text = json.dumps(value) if not isinstance(value, float) or math.isfinite(value) else str(value)
    return text if len(text) <= 40 else text[:37] + "..."


class Int:
    def __init__(self, min: int | None = None, max: int | None = BIG):
        self.min, self.max = min, max

    def describe(self) -> str:
        lo = "" if self.min is None else f" >= {self.min}"
        hi = "" if self.max is None else f" <= {self.max}"
        return f"an integer{lo}{' and' if lo and hi else ''}{hi}"

    def check(self, value, where: str) -> None:
        if isinstance(value, bool) or not isinstance(value, int):
            raise SchemaMismatch(where, self.describe(), value)
        if (self.min is not None and value < self.min) or (self.max is not None and value > self.max):
            raise SchemaMismatch(where, self.describe(), value)


class Num:
    def __init__(self, min: float | None = None, max: float | None = None, finite: bool = True):
        self.min, self.max, self.finite = min, max, finite

    def describe(self) -> str:
        parts = [f">= {self.min}"] if self.min is not None else []
        parts += [f"<= {self.max}"] if self.max is not None else []
        return "a " + ("finite " if self.finite else "") + "number" + (" " + " and ".join(parts) if parts else "")

    def check(self, value, where: str) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise SchemaMismatch(where, self.describe(), value)
        if self.finite and not math.isfinite(value):
            raise SchemaMismatch(where, self.describe(), value)
        if (self.min is not None and value < self.min) or (self.max is not None and value > self.max):
            raise SchemaMismatch(where, self.describe(), value)


class Str:
    def __init__(self, choices: tuple[str, ...] | None = None, max_len: int = 4096):
        self.choices, self.max_len = choices, max_len

    def describe(self) -> str:
        return "one of " + ", ".join(map(repr, self.choices)) if self.choices else "a string"

    def check(self, value, where: str) -> None:
        if not isinstance(value, str) or len(value) > self.max_len:
            raise SchemaMismatch(where, self.describe(), value)
        if self.choices is not None and value not in self.choices:
            raise SchemaMismatch(where, self.describe(), value)


class Bool:
    def describe(self) -> str:
        return "true or false"

    def check(self, value, where: str) -> None:
        if not isinstance(value, bool):
            raise SchemaMismatch(where, self.describe(), value)


class Maybe:
    def __init__(self, spec):
        self.spec = spec

    def describe(self) -> str:
        return f"null or {self.spec.describe()}"

    def check(self, value, where: str) -> None:
        if value is not None:
            self.spec.check(value, where)


class List:
    def __init__(self, item, max_len: int = 2**20, unique: bool = False):
        self.item, self.max_len, self.unique = item, max_len, unique

    def describe(self) -> str:
        return f"a list of {self.item.describe()}" + (" without repeats" if self.unique else "")

    def check(self, value, where: str) -> None:
        if not isinstance(value, list) or len(value) > self.max_len:
            raise SchemaMismatch(where, self.describe(), value)
        for i, v in enumerate(value):
            self.item.check(v, f"{where}[{i}]")
        if self.unique and len(set(map(json.dumps, value))) != len(value):
            raise SchemaMismatch(where, self.describe(), value)


class Obj:
    def __init__(self, fields: dict, optional: tuple[str, ...] = (), extra=None):
        self.fields, self.optional, self.extra = fields, set(optional), extra

    def describe(self) -> str:
        return "an object"

    def check(self, value, where: str) -> None:
        if not isinstance(value, dict):
            raise SchemaMismatch(where, "an object {...}", value)
        prefix = f"{where}." if where else ""
        for name, spec in self.fields.items():
            if name in value:
                spec.check(value[name], prefix + name)
            elif name not in self.optional:
                raise SchemaMismatch(prefix + name, f"present ({spec.describe()})", "missing")
        for name in value.keys() - self.fields.keys():
            if self.extra is None:
                raise SchemaMismatch(prefix + name, "absent (not a known field)", value[name])
            self.extra.check(value[name], prefix + name)


class Tagged:
    """An object whose schema is picked by the value of one key, e.g. config.json's "kind"."""

    def __init__(self, key: str, variants: dict[str, Obj]):
        self.key, self.variants = key, variants

    def describe(self) -> str:
        return "an object"

    def check(self, value, where: str) -> None:
        if not isinstance(value, dict):
            raise SchemaMismatch(where, "an object {...}", value)
        tag_where = f"{where}.{self.key}" if where else self.key
        Str(tuple(self.variants)).check(value.get(self.key), tag_where)
        self.variants[value[self.key]].check(value, where)


# -- checking and reading --------------------------------------------------------------------
def _depth(value) -> int:
    """Nesting depth of a parsed JSON value, without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        v, d = stack.pop()
        deepest = max(deepest, d)
        if d > MAX_DEPTH:
            return d
        children = v.values() if isinstance(v, dict) else v if isinstance(v, list) else ()
        stack.extend((c, d + 1) for c in children)
    return deepest


def check_json(value, schema, path: str | os.PathLike, hint: str = "restore the file or train again") -> None:
    """Raise RunFileError (one line: file, field, expected, got) if `value` breaks `schema`."""
    if _depth(value) > MAX_DEPTH:
        raise RunFileError(f"{path}: nested more than {MAX_DEPTH} levels deep: not a scratchformer run file; {hint}")
    try:
        schema.check(value, "")
    except SchemaMismatch as e:
        field = e.where or "the top level"
        got = "missing" if e.value == "missing" and e.expected.startswith("present") else _short(e.value)
        raise RunFileError(f"{path}: field {field} must be {e.expected}, got {got}; {hint}") from None


def strict_json(obj) -> str:
    """json.dumps for machine readers: NaN and +-Infinity become null, and the names of the
    fields that were not finite are listed under "non_finite" (so the output stays valid JSON
    and says what happened)."""
    non_finite: list[str] = []

    def clean(value, where: str):
        if isinstance(value, float) and not math.isfinite(value):
            non_finite.append(where)
            return None
        if isinstance(value, dict):
            return {k: clean(v, f"{where}.{k}" if where else str(k)) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [clean(v, f"{where}[{i}]") for i, v in enumerate(value)]
        return value

    cleaned = clean(obj, "")
    if non_finite:
        cleaned = {**cleaned, "non_finite": non_finite} if isinstance(cleaned, dict) else cleaned
    return json.dumps(cleaned, allow_nan=False)


# -- the run files as they are written today ---------------------------------------------------
POS = Int(min=1)
NONNEG = Int(min=0)
PROB = Num(min=0.0, max=1.0)
ACTIVATION = Str(("gelu", "gelu_tanh", "relu"))
POSITIONAL = Str(("learned", "sinusoidal"))

GPT_MODEL = Obj({
    "vocab_size": POS, "block_size": POS, "n_layer": POS, "n_head": POS, "n_embd": POS,
    "dropout": PROB, "bias": Bool(), "norm_first": Bool(), "activation": ACTIVATION,
    "positional": POSITIONAL, "tie_weights": Bool(), "n_inner": Maybe(POS),
    "layer_norm_eps": Num(min=0.0), "dtype": Str(("float32", "float64")), "init": Str(("gpt2", "pytorch")),
}, optional=("dropout", "bias", "norm_first", "activation", "positional", "tie_weights", "n_inner",
             "layer_norm_eps", "dtype", "init"))

# Task models: today's checkpoints say d_model/d_ff, the GPT-2 naming says n_embd/n_inner;
# both are accepted (the model's own config decides which one it needs).
_TASK_COMMON = {
    "max_len": POS, "n_layer": POS, "n_head": POS, "d_model": POS, "d_ff": Maybe(POS),
    "n_embd": POS, "n_inner": Maybe(POS), "dropout": PROB, "norm_first": Bool(), "activation": ACTIVATION,
}
_TASK_OPTIONAL = ("d_model", "d_ff", "n_embd", "n_inner", "dropout", "norm_first", "activation")
CLASSIFIER_MODEL = Obj({**_TASK_COMMON, "vocab_size": POS, "n_classes": POS, "positional": POSITIONAL,
                        "pooling": Str(("mean", "cls")), "pad_id": Maybe(NONNEG)},
                       optional=(*_TASK_OPTIONAL, "positional", "pooling", "pad_id"))
SEQ2SEQ_MODEL = Obj({**_TASK_COMMON, "src_vocab_size": POS, "tgt_vocab_size": POS, "share_embeddings": Bool(),
                     "label_smoothing": Num(min=0.0, max=1.0), "pad_id": NONNEG, "bos_id": NONNEG,
                     "eos_id": NONNEG, "n_encoder_layers": Maybe(POS), "n_decoder_layers": Maybe(POS)},
                    optional=(*_TASK_OPTIONAL, "share_embeddings", "label_smoothing", "n_encoder_layers",
                              "n_decoder_layers"))

LM_DATA = Obj({"path": Maybe(Str()), "format": Str(("lines", "text")), "seed": Int(), "block_size": POS,
               "sha256": Str(), "name": Str()}, optional=("sha256", "name"))
TASK_DATA = Obj({"n_train": POS, "n_test": POS, "max_len": POS, "seed": Int()}, extra=Int())
TASKS = ("majority", "copy", "reverse", "sort")

CONFIG = Tagged("kind", {
    "gpt": Obj({"kind": Str(), "model": GPT_MODEL, "data": LM_DATA}),
    "classifier": Obj({"kind": Str(), "task": Str(TASKS), "model": CLASSIFIER_MODEL, "data": TASK_DATA}),
    "seq2seq": Obj({"kind": Str(), "task": Str(TASKS), "model": SEQ2SEQ_MODEL, "data": TASK_DATA}),
})

# numpy's PCG64 state, exactly as `Generator.bit_generator.state` gives it; a state of another
# bit generator (MT19937, Philox, ...) is refused here rather than deep inside numpy.
U128 = Int(min=0, max=2**128 - 1)
PCG64_STATE = Obj({"bit_generator": Str(("PCG64",)), "state": Obj({"state": U128, "inc": U128}),
                   "has_uint32": Int(min=0, max=1), "uinteger": Int(min=0, max=2**32 - 1)})

TRAIN_CONFIG = Obj({
    "max_steps": POS, "batch_size": POS, "grad_accum": POS, "lr": Num(min=0.0), "min_lr": Maybe(Num(min=0.0)),
    "warmup_steps": NONNEG, "decay_steps": Maybe(POS), "weight_decay": Num(min=0.0), "decay_embeddings": Bool(),
    "beta1": Num(min=0.0, max=1.0), "beta2": Num(min=0.0, max=1.0), "grad_clip": Num(min=0.0),
    "eval_interval": POS, "eval_batches": Maybe(POS), "log_interval": POS, "num_samples": NONNEG,
    "seed": Int(min=0, max=2**63 - 1), "time_limit": Maybe(Num(min=0.0)), "workers": POS,
}, optional=("grad_accum", "min_lr", "decay_steps", "decay_embeddings", "eval_batches", "num_samples",
             "time_limit", "workers"))

TRAINER_STATE = Obj({
    "format": Str(("scratchformer-checkpoint",)),
    "version": Int(min=1, max=1),
    "step": NONNEG,
    "rng_state": Maybe(Obj({"data": PCG64_STATE, "dropout": PCG64_STATE})),
    "extra": Obj({"best_val_loss": Num(), "val_loss": Num(), "train_config": TRAIN_CONFIG,
                  "data_sha256": Str()}, optional=("best_val_loss", "val_loss", "train_config", "data_sha256"),
                 extra=Maybe(Num(finite=False))),
    "optimizer": Maybe(Obj({"kind": Str(("AdamW", "SGD")), "step": NONNEG, "num_params": NONNEG},
                           extra=Maybe(Num(finite=False)))),
    "files": List(Str(("model.safetensors", "config.json", "tokenizer.json", "optimizer.safetensors",
                       "trainer_state.json")), max_len=5, unique=True),
}, optional=("rng_state", "extra", "optimizer", "files"))

TOKENIZER = Obj({"type": Str(("char",)), "version": Int(min=1, max=1), "special": Maybe(Str(max_len=64)),
                 "chars": List(Str(max_len=1), unique=True)}, optional=("version", "special"))

# One log.jsonl row: a step and numbers (train rows: lr, train_loss, grad_norm, tokens_per_s;
# eval rows: val_loss and val_<metric>). Non-finite numbers are allowed here: the log records
# what happened, and the trainer refuses to checkpoint non-finite losses.
LOG_ROW = Obj({"step": NONNEG}, extra=Maybe(Num(finite=False)))
