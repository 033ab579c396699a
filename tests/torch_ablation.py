"""A reference head ablation in PyTorch, for the lens tests: the loss with one head's slice of
the output projection's input set to 0 (a forward pre-hook), as transformers 5, which has no
`head_mask`, allows."""

from __future__ import annotations

import torch


def ablated_loss(model, out_proj_of, x, y, head_size: int, layer=None, head=None) -> float:
    """Cross-entropy of `model` on ids x (1, T) against y (1, T); with `layer` and `head`, that
    head zeroed at the input of `out_proj_of(model, layer)` (c_proj for GPT-2, o_proj for Llama)."""
    handle = None
    if layer is not None:

        def zero_head(module, args):
            z = args[0].clone()
            z[..., head * head_size : (head + 1) * head_size] = 0
            return (z,)

        handle = out_proj_of(model, layer).register_forward_pre_hook(zero_head)
    try:
        with torch.no_grad():
            logits = model(torch.tensor(x)).logits[0]
            return float(torch.nn.functional.cross_entropy(logits, torch.tensor(y[0])))
    finally:
        if handle is not None:
            handle.remove()
