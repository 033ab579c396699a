"""Reference run: nanoGPT's CPU configuration for tinyshakespeare, in PyTorch, evaluated the
way docs/results.md evaluates scratchformer (whole validation split). It tells whether a gap
to nanoGPT's published 1.88 comes from scratchformer or from the measurement.

    python benchmarks/torch_shakespeare_reference.py [--seed 0] [--data ../shared/data/tinyshakespeare.txt]

nanoGPT's model (bias-free pre-norm GPT, exact GELU, tied head, GPT-2 init), its optimiser
groups (weight decay on every 2-D tensor, embeddings included), its lr schedule; batches come
from scratchformer's own data pipeline. Needs torch (the test extra).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from torch_gpt import TorchGPT, nanogpt_adamw, train_steps, whole_split_loss

from scratchformer.data import load_dataset
from scratchformer.optim import cosine_lr


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="../shared/data/tinyshakespeare.txt")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    ds = load_dataset(args.data, "text", block_size=64)
    torch.manual_seed(args.seed)
    model = TorchGPT(ds.tokenizer.vocab_size, 64, n_layer=4, n_head=4, n_embd=128, bias=False)
    opt = nanogpt_adamw(model, lr=1e-3, betas=(0.9, 0.99), weight_decay=0.1)
    rng = np.random.default_rng(args.seed)
    start = time.perf_counter()
    train_steps(model, opt, ds.train, rng, 2000, 12, lambda step: cosine_lr(step, 1e-3, 1e-4, 100, 2000))
    val_loss, count = whole_split_loss(model, ds.val)
    print(
        f"seed {args.seed}: val loss {val_loss:.4f} on the whole val split "
        f"({count} tokens), {time.perf_counter() - start:.0f}s"
    )


if __name__ == "__main__":
    main()
