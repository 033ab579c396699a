"""Experiments inside a model: named hooks and a cache (`hooks.py`), the logit lens, direct
logit attribution, head ablation, activation patching, saliency and head scores
(`analyses.py`), each checking its own arithmetic. See docs/lens.md."""

from scratchformer.lens.hooks import hook_names, hook_points, hooked, resolve_names, run_with_cache, run_with_hooks

__all__ = ["hook_names", "hook_points", "hooked", "resolve_names", "run_with_cache", "run_with_hooks"]
