"""Optimizers (AdamW, SGD), gradient clipping and the warmup + cosine schedule."""

from scratchformer.optim.optimizers import (
    SGD,
    AdamW,
    clip_grad_norm,
    param_groups,
)
from scratchformer.optim.schedule import cosine_lr

__all__ = ["AdamW", "SGD", "clip_grad_norm", "cosine_lr", "param_groups"]
