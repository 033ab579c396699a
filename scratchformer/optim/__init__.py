"""Optimizers (AdamW, SGD), gradient clipping and the warmup + cosine schedule."""

from scratchformer.optim.optimizers import (
    SGD,
    AdamW,
    clip_grad_norm,
    merge_state,
    param_groups,
    split_state,
)
from scratchformer.optim.schedule import cosine_lr

__all__ = ["AdamW", "SGD", "clip_grad_norm", "cosine_lr", "merge_state", "param_groups", "split_state"]
