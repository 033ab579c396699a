"""Run files checked against a schema when read: config.json, trainer_state.json,
tokenizer.json and each row of log.jsonl.

A hand-edited or damaged run file must end as one line naming the file and the field
(`RunFileError`), never as a KeyError or a wrong result deep inside the trainer. A schema is
a tree of small spec objects (scratchformer/specs.py), each of which checks one JSON value:

    Int(min, max)     an int (not a bool), in range
    Num(min, finite)  an int or float; NaN/inf only where finite=False
    Str(choices)      a string, optionally one of a few
    Bool()            true or false
    Maybe(spec)       null, or a value matching spec
    List(spec, max_len, unique)
    Obj(fields, optional, extra)   a JSON object with exactly these keys (extra: a spec for
                                   any other key, or None to reject other keys)
    Tagged(key, {value: Obj})      an object whose schema depends on one key ("kind")

The config sections are not written here: they are derived from the config dataclasses
(`GPTConfig.schema()`, ... `TrainConfig.schema()`), whose field declarations are the one home
of each setting, and the task names from the task registry (data/tasks.py). Checkpoints are
checked against these schemas when written and when read (training/checkpoint.py), so a
choice added to a config is accepted by both at once.

`upgrade_run_files(config, state)` is the one place that reads what older versions wrote
(renamed fields, settings added since) and turns it into today's form.

`check_json(value, schema, path)` checks a value read by scratchformer.runfiles.read_json_file
(which turns huge integers and absurd nesting into the same one-line error). `strict_json` is the
output side: JSON that never holds NaN or Infinity (for `eval --json`).
"""

from __future__ import annotations

import json
import math
import os

from scratchformer.data.bpe import MAX_VOCAB, MIN_VOCAB
from scratchformer.data.datasets import FORMATS, TOKENIZERS
from scratchformer.data.tasks import TASKS
from scratchformer.errors import RunFileError
from scratchformer.interop.bert_classifier import SentenceClassifierConfig
from scratchformer.models import ClassifierConfig, GPTConfig, Seq2SeqConfig
from scratchformer.models.sae import SAEConfig
from scratchformer.specs import (
    BIG,
    NON_NEGATIVE,
    POSITIVE,
    SEED,
    Bool,
    Int,
    List,
    Maybe,
    Num,
    Obj,
    SchemaMismatch,
    Str,
    Tagged,
)
from scratchformer.training.config import TrainConfig

__all__ = [
    "BIG",
    "CONFIG",
    "LOG_ROW",
    "TOKENIZER",
    "TRAINER_STATE",
    "check_json",
    "strict_json",
    "upgrade_run_files",
]

MAX_DEPTH = 32  # our run files nest 4 deep; anything deeper was not written by us


# -- checking and reading --------------------------------------------------------------------
def _short(value) -> str:
    """A value as it appears in a one-line message (long ones cut)."""
    text = json.dumps(value) if not isinstance(value, float) or math.isfinite(value) else str(value)
    return text if len(text) <= 40 else text[:37] + "..."


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
        raise RunFileError(
            f"{path}: nested more than {MAX_DEPTH} levels deep: not a scratchformer run file; {hint}"
        )
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
POS = POSITIVE
NONNEG = NON_NEGATIVE

# tokenizer and vocab_size (the BPE size asked for; null for characters) are absent in runs
# written before BPE existed: those are character runs. init_from: the Hugging Face directory a
# run started from (`train --init-from`), whose tokenizer the run keeps.
LM_DATA = Obj(
    {
        "path": Maybe(Str()),
        "format": Str(FORMATS),
        "seed": SEED,
        "block_size": POS,
        "sha256": Str(),
        "name": Str(),
        "tokenizer": Str(TOKENIZERS),
        "vocab_size": Maybe(Int(min=MIN_VOCAB, max=MAX_VOCAB)),
        "init_from": Str(),
    },
    optional=("sha256", "name", "tokenizer", "vocab_size", "init_from"),
)
CSV_DATA = Obj(
    {"path": Str(), "sha256": Str(), "base": Str(), "val_fraction": Num(above=0.0, below=1.0), "seed": SEED}
)  # a fine-tuned classifier's training CSV and pretrained encoder
TASK_DATA = Obj({"n_train": POS, "n_test": POS, "max_len": POS, "seed": SEED}, extra=Int())
MODADD_DATA = Obj(
    {"modulus": Int(min=3), "train_fraction": Num(above=0.0, below=1.0), "max_len": POS, "seed": SEED}
)


INDUCTION_DATA = Obj(
    {
        "symbols": Int(min=2, max=62),
        "block_size": POS,
        "repeats": Int(min=2),
        "n_train": POS,
        "n_test": POS,
        "seed": SEED,
    }
)  # data/induction.py: what generates the sequences again


SAE_DATA = Obj(
    {"base": Str(), "base_sha256": Str(), "site": Str(), "pool": Int(min=1, max=64)}
)  # training/sae.py: the run an autoencoder reads, its weights' sha256, the hook point, the buffer


def _tasks_of(kind: str) -> Str:
    return Str(tuple(name for name, task in TASKS.items() if task.kind == kind))


CONFIG = Tagged(
    "kind",
    {
        "gpt": Obj({"kind": Str(), "model": GPTConfig.schema(), "data": LM_DATA}),
        "classifier": Obj(
            {
                "kind": Str(),
                "task": _tasks_of("classifier"),
                "model": ClassifierConfig.schema(),
                "data": TASK_DATA,
            }
        ),
        "seq2seq": Obj(
            {"kind": Str(), "task": _tasks_of("seq2seq"), "model": Seq2SeqConfig.schema(), "data": TASK_DATA}
        ),
        "sentence_classifier": Obj(
            {"kind": Str(), "model": SentenceClassifierConfig.schema(), "data": CSV_DATA}
        ),
        "induction": Obj(
            {"kind": Str(), "task": Str(("induction",)), "model": GPTConfig.schema(), "data": INDUCTION_DATA}
        ),
        "modadd": Obj(
            {"kind": Str(), "task": _tasks_of("modadd"), "model": GPTConfig.schema(), "data": MODADD_DATA}
        ),
        "sae": Obj({"kind": Str(), "model": SAEConfig.schema(), "data": SAE_DATA}),
    },
)

# numpy's PCG64 state, exactly as `Generator.bit_generator.state` gives it; a state of another
# bit generator (MT19937, Philox, ...) is refused here rather than deep inside numpy.
U128 = Int(min=0, max=2**128 - 1)
PCG64_STATE = Obj(
    {
        "bit_generator": Str(("PCG64",)),
        "state": Obj({"state": U128, "inc": U128}),
        "has_uint32": Int(min=0, max=1),
        "uinteger": Int(min=0, max=2**32 - 1),
    }
)

TRAIN_CONFIG = TrainConfig.schema()

TRAINER_STATE = Obj(
    {
        "format": Str(("scratchformer-checkpoint",)),
        "version": Int(min=1, max=1),
        "step": NONNEG,
        "rng_state": Maybe(Obj({"data": PCG64_STATE, "dropout": PCG64_STATE})),
        "extra": Obj(
            {"best_val_loss": Num(), "val_loss": Num(), "train_config": TRAIN_CONFIG},
            optional=("best_val_loss", "val_loss", "train_config"),
            extra=Maybe(Num(finite=False)),
        ),
        "optimizer": Maybe(
            Obj(
                {"kind": Str(("AdamW", "SGD")), "step": NONNEG, "num_params": NONNEG},
                extra=Maybe(Num(finite=False)),
            )
        ),
        "files": List(
            Str(
                (
                    "model.safetensors",
                    "config.json",
                    "tokenizer.json",
                    "optimizer.safetensors",
                    "trainer_state.json",
                )
            ),
            max_len=5,
            unique=True,
        ),
    },
    optional=("rng_state", "extra", "optimizer", "files"),
)


class AnyJSON:
    """Any JSON value: the Hugging Face tokenizer JSON inside a BPE or WordPiece tokenizer.json,
    which `tokenizers` itself checks when it reads it (a damaged one is one line from from_json)."""

    def describe(self) -> str:
        return "any JSON value"

    def check(self, value, where: str) -> None:
        pass


TOKENIZER = Tagged(
    "type",
    {
        "char": Obj(
            {
                "type": Str(),
                "version": Int(min=1, max=1),
                "special": Maybe(Str(max_len=64)),
                "chars": List(Str(max_len=1), unique=True),
            },
            optional=("version", "special"),
        ),
        "bpe": Obj(
            {
                "type": Str(),
                "version": Int(min=1, max=1),
                "special": Maybe(Str(max_len=64)),
                "boundary": Bool(),
                "hf": Obj({"model": Obj({"type": Str(("BPE",))}, extra=AnyJSON())}, extra=AnyJSON()),
            }
        ),
        "wordpiece": Obj(
            {
                "type": Str(),
                "hf": Obj({"model": Obj({"type": Str(("WordPiece",))}, extra=AnyJSON())}, extra=AnyJSON()),
            }
        ),
    },
)

# One log.jsonl row: a step and numbers (train rows: lr, train_loss, grad_norm, tokens_per_s;
# eval rows: val_loss and val_<metric>). Non-finite numbers are allowed here: the log records
# what happened, and the trainer refuses to checkpoint non-finite losses.
LOG_ROW = Obj({"step": NONNEG}, extra=Maybe(Num(finite=False)))


# -- what older versions wrote ----------------------------------------------------------------
# Task models' config fields before the GPT-2 naming (d_model, d_ff); a run's train_config
# before `workers` existed (those runs trained in one process).
_RENAMED_MODEL_FIELDS = {"d_model": "n_embd", "d_ff": "n_inner"}
_ADDED_TRAIN_SETTINGS = {"workers": 1}


def upgrade_run_files(config, state):
    """(config.json, trainer_state.json) as an older version wrote them -> today's form: the
    one place old field names are read. Values that are not what any version wrote pass
    through unchanged, for the schema check that follows to name."""
    if (
        isinstance(config, dict)
        and config.get("kind") in ("classifier", "seq2seq")
        and isinstance(config.get("model"), dict)
    ):
        model = config["model"]
        renamed = {_RENAMED_MODEL_FIELDS.get(k, k): v for k, v in model.items()}
        if len(renamed) == len(model):  # a file holding both spellings is left for the schema to refuse
            config = {**config, "model": renamed}
    extra = state.get("extra") if isinstance(state, dict) else None
    if isinstance(extra, dict) and isinstance(extra.get("train_config"), dict):
        state = {
            **state,
            "extra": {**extra, "train_config": {**_ADDED_TRAIN_SETTINGS, **extra["train_config"]}},
        }
    return config, state
