"""scratchformer and PyTorch trained in lockstep: same initial weights, same batches.

    python benchmarks/shakespeare_lockstep.py [--seed 0] [--steps 2000] [--data ../shared/data/tinyshakespeare.txt]

nanoGPT's CPU configuration for tinyshakespeare (as `torch_shakespeare_reference.py`),
started from the PyTorch model's initial weights copied into a scratchformer GPT. Each step
both models see the same batch, learning rate and clipping; every 200 steps the script prints
both mean training losses and the largest weight difference, and at the end both losses on
the whole validation split. Optimiser groups are nanoGPT's (every 2-D tensor decayed, so
scratchformer runs with `decay_embeddings=True`). It separates what the implementation does
from what the random initial weights do. Needs torch (the test extra); about 6 minutes on
2 cores.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from torch_gpt import TorchGPT, nanogpt_adamw, scratchformer_state, whole_split_loss

from scratchformer.data import load_dataset
from scratchformer.models import GPT, GPTConfig
from scratchformer.optim import clip_grad_norm, cosine_lr, make_adamw, param_groups
from scratchformer.training.lm import LMJob

BATCH, LR, MIN_LR, WARMUP, WD, CLIP = 12, 1e-3, 1e-4, 100, 0.1, 1.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="../shared/data/tinyshakespeare.txt")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=2000, help="optimiser steps (the cosine ends there)")
    args = ap.parse_args()
    ds = load_dataset(args.data, "text", block_size=64)
    size = dict(n_layer=4, n_head=4, n_embd=128, bias=False)
    torch.manual_seed(args.seed)
    theirs = TorchGPT(ds.tokenizer.vocab_size, 64, **size)
    ours = GPT(GPTConfig(vocab_size=ds.tokenizer.vocab_size, block_size=64, **size))
    ours.load_state_dict(scratchformer_state(theirs))

    their_opt = nanogpt_adamw(theirs, lr=LR, betas=(0.9, 0.99), weight_decay=WD)
    our_opt = make_adamw(param_groups(ours, WD, decay_embeddings=True), lr=LR, betas=(0.9, 0.99), eps=1e-8)
    rng = np.random.default_rng(args.seed)
    their_losses, our_losses = [], []
    for step in range(args.steps):
        lr = cosine_lr(step, LR, MIN_LR, min(WARMUP, args.steps), args.steps)
        x, y = ds.train.batch(rng, BATCH)

        for g in their_opt.param_groups:
            g["lr"] = lr
        loss = theirs(torch.from_numpy(x), torch.from_numpy(y))
        their_opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(theirs.parameters(), CLIP)
        their_opt.step()
        their_losses.append(loss.item())

        our_opt.lr = lr
        our_opt.zero_grad()
        _, our_loss = ours(x, y)
        ours.backward()
        clip_grad_norm(ours.parameters(), CLIP)
        our_opt.step()
        our_losses.append(float(our_loss))

        if (step + 1) % 200 == 0 or step + 1 == args.steps:
            their_state, our_state = scratchformer_state(theirs), ours.state_dict()
            diff = max(float(np.abs(our_state[k] - v).max()) for k, v in their_state.items())
            print(
                f"step {step + 1}: train loss torch {np.mean(their_losses[-200:]):.4f}, scratchformer "
                f"{np.mean(our_losses[-200:]):.4f}; largest weight difference {diff:.1e}",
                flush=True,
            )

    their_val, _ = whole_split_loss(theirs, ds.val)
    our_val = LMJob(ours, ds, {}).evaluate("val")["loss"]  # what `scratchformer eval` computes
    print(f"seed {args.seed}: whole val split loss torch {their_val:.4f}, scratchformer {our_val:.4f}")


if __name__ == "__main__":
    main()
