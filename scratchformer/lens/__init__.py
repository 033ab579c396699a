"""Experiments inside a model: named hooks and a cache (`hooks.py`), the logit lens, direct
logit attribution, head ablation, activation patching, saliency and head scores
(`analyses.py`, each checked by a second computation along another path), the one report of
them all on an example (`report.py`, for `scratchformer lens` and report.html), and what the
figures and the training diagnostics read of a model through the hooks (`trace.py`). Their
figures are in `scratchformer.viz.lens`. See docs/lens.md.

Layering: after `scratchformer.models` and `scratchformer.interop`, before `scratchformer.training`
(whose diagnostics and induction measures use it) and `scratchformer.viz`."""

# the names each module declares in its own __all__, listed once there
from scratchformer.lens import analyses, hooks, report
from scratchformer.lens.analyses import *  # noqa: F403
from scratchformer.lens.hooks import *  # noqa: F403
from scratchformer.lens.report import *  # noqa: F403

__all__ = hooks.__all__ + analyses.__all__ + report.__all__
