"""Optimizers (AdamW, SGD; FlatAdamW, the fast lane's AdamW, and make_adamw, the lane's choice),
gradient clipping and the warmup + cosine schedule."""

from scratchformer.optim.flat import FlatAdamW, make_adamw
from scratchformer.optim.optimizers import (
    SGD,
    AdamW,
    clip_grad_norm,
    param_groups,
)
from scratchformer.optim.schedule import cosine_lr

__all__ = ["AdamW", "FlatAdamW", "SGD", "clip_grad_norm", "cosine_lr", "make_adamw", "param_groups"]
