"""Experiments inside a model: named hooks and a cache (`hooks.py`), the logit lens, direct
logit attribution, head ablation, activation patching, saliency and head scores
(`analyses.py`, each checked by a second computation along another path), and what the figures
and the training diagnostics read of a model (`trace.py`). Their figures are in
`scratchformer.viz.lens`. See docs/lens.md.

Layering: after `scratchformer.models` and `scratchformer.interop`, before `scratchformer.training`
(whose diagnostics and induction measures use it) and `scratchformer.viz`."""

from scratchformer.lens.analyses import (
    Check,
    activation_patching,
    direct_logit_attribution,
    head_ablation,
    head_scores,
    integrated_gradients,
    logit_lens,
    logit_metric,
    logit_objective,
    loss_metric,
    loss_objective,
    mean_token_embedding,
    saliency,
    similarity_objective,
    token_embeddings,
)
from scratchformer.lens.hooks import (
    grad_hook_names,
    hook_names,
    hook_points,
    hooked,
    resolve_names,
    run_with_cache,
    run_with_hooks,
)

__all__ = [
    "hook_names",
    "grad_hook_names",
    "hook_points",
    "hooked",
    "resolve_names",
    "run_with_cache",
    "run_with_hooks",
    "Check",
    "logit_lens",
    "direct_logit_attribution",
    "head_ablation",
    "activation_patching",
    "saliency",
    "integrated_gradients",
    "head_scores",
    "logit_metric",
    "loss_metric",
    "logit_objective",
    "loss_objective",
    "similarity_objective",
    "token_embeddings",
    "mean_token_embedding",
]
