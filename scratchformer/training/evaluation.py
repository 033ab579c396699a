"""Running a job's evaluation: the job says what (its batches, and what it makes of each output
and loss), the caller how (the model alone, or the trainer's DataParallel over processes).

A job's `evaluation(split, batches, **options)` is a generator. It yields the positional
arguments of `model(...)` for each batch (targets included), is sent back what that call
returned, `(output, loss)`, and returns its metrics ({"loss": ..., and the kind's scores}):

    def evaluation(self, split, batches=None):
        total = 0.0
        for x, y in self.batches_of(split, batches):
            _, loss = yield x, y            # run by run_evaluation, as it chooses
            total += loss
        return {"loss": total / n}

`run_evaluation` drives it, in eval mode:

    metrics = run_evaluation(job.evaluation("val"), job.model)            # the model alone
    metrics = run_evaluation(job.evaluation("val"), job.model, runner)    # each batch split over processes

So the job never learns how its batches were computed, and a process runner never learns what
a job measures.
"""

from __future__ import annotations

from collections.abc import Callable, Generator

from scratchformer.nn import eval_mode

__all__ = ["run_evaluation"]


def run_evaluation(steps: Generator[tuple, tuple, dict], model, forward: Callable | None = None) -> dict:
    """The metrics `steps` (a job's evaluation generator) returns, with each batch it yields
    computed as forward(*batch) (default: model(*batch)) while `model` is in eval mode."""
    forward = model if forward is None else forward
    with eval_mode(model):
        try:
            batch = next(steps)
            while True:
                batch = steps.send(forward(*batch))
        except StopIteration as done:
            return done.value
