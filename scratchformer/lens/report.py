"""One lens report: every analysis that applies to a model, run on one `Example` (models/base.py),
for `scratchformer lens` (which prints it, or its JSON) and report.html's Lens part (which draws
it). What applies is asked of the model and the example, never of the model's kind:

    logit lens                  a vocabulary head (`Model.unembedding`)
    direct logit attribution    ... and pre-norm blocks (the stream is a sum of its parts)
    head ablation               a loss on the example (`Example.loss_inputs`)
    saliency, integrated grads  logits to explain (`Example.output_labels`)
    head scores                 always
    patching                    a corrupted input given

    r = lens_report(model, model.example(ids, tokens, vocab_labels))
    r.checks                    # every analysis's check line, in the order above
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from scratchformer.errors import DataError
from scratchformer.lens.analyses import (
    HeadAblation,
    HeadScores,
    IntegratedGradients,
    LogitAttribution,
    LogitLens,
    Patching,
    Saliency,
    activation_patching,
    baseline_embeddings,
    default_baseline_kind,
    direct_logit_attribution,
    head_ablation,
    head_scores,
    integrated_gradients,
    logit_lens,
    logit_metric,
    logit_objective,
    saliency,
)
from scratchformer.lens.hooks import run_with_cache
from scratchformer.lens.parts import as_batch, unembedding
from scratchformer.nn.module import eval_mode

__all__ = ["BASELINE_TEXT", "LensReport", "lens_report"]

# integrated gradients' start, as the reports name it
BASELINE_TEXT = {"zero": "zero embeddings", "mean": "the mean token embedding"}


@dataclass
class LensReport:
    """The analyses of one example (None where one does not apply). target: the output entry
    explained (the example's, else the model's prediction at the last position); baseline: how
    integrated gradients started ("zero", "mean", or None for embeddings the caller gave);
    other: patching's contrast entry (the corrupted run's prediction, its runner-up when that is
    the target); activations: the names asked for (`show`) -> their values."""

    target: int | None
    logit_lens: LogitLens | None = None
    attribution: LogitAttribution | None = None
    ablation: HeadAblation | None = None
    saliency: Saliency | None = None
    integrated_gradients: IntegratedGradients | None = None
    baseline: str | None = None
    head_scores: HeadScores | None = None
    patching: Patching | None = None
    other: int | None = None
    activations: dict = field(default_factory=dict)

    @property
    def checks(self) -> list[str]:
        """Each analysis's one-line check, in the order of the module docstring."""
        parts = (
            self.logit_lens,
            self.attribution,
            self.ablation,
            self.saliency,
            self.integrated_gradients,
            self.head_scores,
            self.patching,
        )
        return [str(p.check) for p in parts if p is not None]


def _last_logits(model, inputs: tuple) -> np.ndarray:
    """The output at the last position (V,), or a classifier's (C,)."""
    with eval_mode(model):
        out = model(*inputs)
    logits = out[0] if isinstance(out, tuple) else out
    return logits[0, -1] if logits.ndim == 3 else logits[0]


def lens_report(
    model,
    example,
    *,
    attribution: bool = True,
    k: int = 5,
    steps: int = 32,
    baseline=None,
    show=None,
    corrupt=None,
) -> LensReport:
    """Every analysis that applies (module docstring) on `example` (`Model.example`).
    attribution: run direct logit attribution where it applies; k: the logit lens's top tokens;
    steps: integrated gradients' nodes; baseline: its start, "zero" or "mean" (None: the model's
    `default_baseline_kind`) or embeddings (`token_embeddings` of another text); show: hook
    names (or patterns) whose activations to keep; corrupt: ids (1, T) of a corrupted main input
    (the example's other inputs kept) to patch the example into."""
    inputs = example.explained
    logits = example.output_labels is not None
    target = example.target
    if target is None and logits:
        target = int(_last_logits(model, inputs).argmax())
    r = LensReport(target)
    if model.unembedding() is not None:
        r.logit_lens = logit_lens(model, inputs, k=k)
        if attribution and unembedding(model).pre_norm:  # the stream must be a sum of its parts
            r.attribution = direct_logit_attribution(model, inputs, target)
    if example.loss_inputs is not None:
        r.ablation = head_ablation(model, example.loss_inputs)
    if logits:
        objective = logit_objective(-1, target)
        r.saliency = saliency(model, inputs, objective)
        if baseline is None or isinstance(baseline, str):
            r.baseline = default_baseline_kind(model) if baseline is None else baseline
            baseline = baseline_embeddings(model, inputs, r.baseline)
        r.integrated_gradients = integrated_gradients(
            model, inputs, objective, steps=steps, baseline=baseline
        )
    r.head_scores = head_scores(model, inputs)
    if show:
        r.activations = run_with_cache(model, *inputs, names=show)[1]
    if corrupt is not None:
        _patch(model, r, inputs, corrupt)
    return r


def _patch(model, r: LensReport, inputs: tuple, corrupt) -> None:
    """Patching `inputs` into the corrupted ones, on the logit difference between the target and
    the corrupted run's own answer (its runner-up when they agree)."""
    corrupted = (as_batch(corrupt),) + inputs[1:]
    if r.target is None:
        raise DataError("patching follows a logit: this model's output has none")
    last = _last_logits(model, corrupted)
    r.other = int(last.argmax())
    if r.other == r.target:
        r.other = int(np.argsort(-last)[1])
    r.patching = activation_patching(model, inputs, corrupted, logit_metric(-1, r.target, r.other))
