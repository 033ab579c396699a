"""`recording(model)`: the model's own record of one run (scratchformer/record.py), taken while the
block runs.

    with recording(model) as record:
        logits, loss = model(ids, targets)
        model.backward()

Every op call (through `fast.lane`) and every module's forward and backward is recorded, with the
module path it ran in (`model.named_modules()`'s names) and the last hook point passed (a
HookPoint tells the record it was passed; it sets no hook, so the forward runs as it does without
a record). generator: the random generator the model's dropout draws from (`set_dropout_rng`),
whose state each call keeps.
"""

from __future__ import annotations

from contextlib import contextmanager

from scratchformer import record
from scratchformer.checks import check_module

__all__ = ["recording"]


@contextmanager
def recording(model, generator=None):
    """Take the record of what `model` runs inside the block; yields the `record.Record`."""
    check_module("model", model)
    taken = record.Record({id(m): name for name, m in model.named_modules()}, generator)
    outer, record.ACTIVE = record.ACTIVE, taken
    try:
        yield taken
    finally:
        record.ACTIVE = outer
