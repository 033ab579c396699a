"""`recording(model)`: the model's own record of one run (scratchformer/record.py), taken while the
block runs.

    with recording(model) as record:
        logits, loss = model(ids, targets)
        model.backward()

Every op call (through `fast.lane`) and every module's forward and backward is recorded, with the
module path it ran in (`model.named_modules()`'s names) and the last hook point passed (each
HookPoint without a hook of its own gets a read-only tap that notes its name). generator: the
random generator the model's dropout draws from (`set_dropout_rng`), whose state each call keeps.
"""

from __future__ import annotations

from contextlib import contextmanager

from scratchformer import record
from scratchformer.checks import check_module
from scratchformer.nn.hooks import HookPoint

__all__ = ["recording"]


@contextmanager
def recording(model, generator=None):
    """Take the record of what `model` runs inside the block; yields the `record.Record`."""
    check_module("model", model)
    modules = list(model.named_modules())
    taken = record.Record({id(m): name for name, m in modules}, generator)
    taps = [(name, m) for name, m in modules if isinstance(m, HookPoint) and not m.active]
    for name, hook_point in taps:
        hook_point.set_hooks(name, hook=lambda x, hook_name: taken.passed(hook_name))
    outer, record.ACTIVE = record.ACTIVE, taken
    try:
        yield taken
    finally:
        record.ACTIVE = outer
        for _, hook_point in taps:
            hook_point.remove_hooks()
