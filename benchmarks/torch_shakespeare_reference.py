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
import math
import time

import numpy as np
import torch
import torch.nn as tnn
import torch.nn.functional as F

from scratchformer.data import load_dataset
from scratchformer.optim import cosine_lr


class Block(tnn.Module):
    def __init__(self, C: int, H: int):
        super().__init__()
        self.H = H
        self.ln_1, self.ln_2 = tnn.LayerNorm(C, bias=False), tnn.LayerNorm(C, bias=False)
        self.c_attn, self.c_proj = tnn.Linear(C, 3 * C, bias=False), tnn.Linear(C, C, bias=False)
        self.c_fc, self.mlp_proj = tnn.Linear(C, 4 * C, bias=False), tnn.Linear(4 * C, C, bias=False)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(a.transpose(1, 2).reshape(B, T, C))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x))))


class GPT(tnn.Module):
    def __init__(self, V: int, T: int, L: int = 4, H: int = 4, C: int = 128):
        super().__init__()
        self.wte, self.wpe = tnn.Embedding(V, C), tnn.Embedding(T, C)
        self.h = tnn.ModuleList(Block(C, H) for _ in range(L))
        self.ln_f = tnn.LayerNorm(C, bias=False)
        for name, p in self.named_parameters():  # GPT-2 init, as nanoGPT
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * L) if name.endswith(("c_proj.weight", "mlp_proj.weight")) else 0.02
                tnn.init.normal_(p, 0.0, std)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for b in self.h:
            x = b(x)
        logits = self.ln_f(x) @ self.wte.weight.T
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="../shared/data/tinyshakespeare.txt")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    ds = load_dataset(args.data, "text", block_size=64)
    torch.manual_seed(args.seed)
    model = GPT(ds.tokenizer.vocab_size, 64)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.99))
    rng = np.random.default_rng(args.seed)
    start = time.perf_counter()
    for step in range(2000):
        for g in opt.param_groups:
            g["lr"] = cosine_lr(step, 1e-3, 1e-4, 100, 2000)
        x, y = ds.train.batch(rng, 12)
        loss = model(torch.from_numpy(x), torch.from_numpy(y))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    model.eval()
    total = count = 0
    with torch.no_grad():
        for x, y in ds.val.all_batches(64):
            n = int((y != -1).sum())
            total += model(torch.from_numpy(x), torch.from_numpy(y)).item() * n
            count += n
    print(f"seed {args.seed}: val loss {total / count:.4f} on the whole val split "
          f"({count} tokens), {time.perf_counter() - start:.0f}s")


if __name__ == "__main__":
    main()
