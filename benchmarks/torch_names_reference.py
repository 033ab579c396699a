"""Reference run: the default `scratchformer train` on names (makemore's transformer size) in
PyTorch, for the suite's end-to-end wall time (benchmarks/suite.py --e2e).

    python benchmarks/torch_names_reference.py [--seed 1337] [--steps 16000]

The CLI's "lines" defaults (scratchformer/cli/main.py LM_DEFAULTS): 4 layers, 4 heads, 64
wide, dropout 0.1, untied head, biases, each layer's PyTorch default init; AdamW lr 2e-3 with
200 warmup steps and a cosine to 1e-4 over 16,000 steps, weight decay 0.1 on 2-D weights
other than the embeddings, betas (0.9, 0.99), clipping 1.0, batch 64; batches and the test
split from scratchformer's own data pipeline. Prints the test loss at the end and the wall
time. Needs torch (the test extra).
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
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--steps", type=int, default=16000)
    args = ap.parse_args()
    ds = load_dataset(None, "lines")
    torch.manual_seed(args.seed)
    model = TorchGPT(
        ds.tokenizer.vocab_size,
        ds.train.block_size,
        n_layer=4,
        n_head=4,
        n_embd=64,
        dropout=0.1,
        tie_weights=False,
        init="pytorch",
    )
    opt = nanogpt_adamw(model, lr=2e-3, betas=(0.9, 0.99), weight_decay=0.1, decay_embeddings=False)
    rng = np.random.default_rng(args.seed)
    start = time.perf_counter()
    train_steps(
        model,
        opt,
        ds.train,
        rng,
        args.steps,
        64,
        lambda step: cosine_lr(step, 2e-3, 1e-4, min(200, args.steps), args.steps),
    )
    test_loss, count = whole_split_loss(model, ds.test)
    print(f"seed {args.seed}: test loss {test_loss:.4f} ({count} tokens), {time.perf_counter() - start:.0f}s")


if __name__ == "__main__":
    main()
