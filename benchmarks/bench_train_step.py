"""Time one training step (forward + backward + AdamW) of the same GPT in scratchformer and in
PyTorch (CPU), side by side, on the same machine and threads.

    python benchmarks/bench_train_step.py                 # names and shakespeare configs
    python benchmarks/bench_train_step.py --steps 50 --config names

Needs torch (the test extra). Reports the median milliseconds per step over --steps steps
after --warmup steps, and tokens per second. Results are recorded in docs/performance.md.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

CONFIGS = {
    # the default `scratchformer train` model on names.txt
    "names": dict(vocab_size=27, block_size=16, n_layer=4, n_head=4, n_embd=64, batch_size=64),
    # nanoGPT's CPU configuration for tinyshakespeare
    "shakespeare": dict(vocab_size=65, block_size=64, n_layer=4, n_head=4, n_embd=128, batch_size=12),
}


def time_steps(step, steps: int, warmup: int) -> float:
    for _ in range(warmup):
        step()
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def scratchformer_step(cfg, x, y):
    from scratchformer.models import GPT, GPTConfig
    from scratchformer.optim import AdamW, clip_grad_norm, param_groups

    model = GPT(GPTConfig(**{k: v for k, v in cfg.items() if k != "batch_size"}), seed=0)
    opt = AdamW(param_groups(model, 0.1), lr=1e-3, betas=(0.9, 0.99), weight_decay=0.1)
    params = model.parameters()

    def step():
        opt.zero_grad()
        model(x, y)
        model.backward()
        clip_grad_norm(params, 1.0)
        opt.step()

    return step


def torch_step(cfg, x, y):
    import torch
    from torch_gpt import TorchGPT

    torch.manual_seed(0)
    model = TorchGPT(**{k: v for k, v in cfg.items() if k != "batch_size"})
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.99), weight_decay=0.1)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)

    def step():
        opt.zero_grad(set_to_none=True)
        model(xt, yt).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    return step


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", choices=[*CONFIGS, "all"], default="all")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    args = ap.parse_args()
    import torch

    from scratchformer.allocator import keep_freed_memory

    keep_freed_memory()  # as the training loop does
    print(f"numpy {np.__version__}, torch {torch.__version__} ({torch.get_num_threads()} threads)")
    names = list(CONFIGS) if args.config == "all" else [args.config]
    for name in names:
        cfg = CONFIGS[name]
        rng = np.random.default_rng(0)
        x = rng.integers(0, cfg["vocab_size"], size=(cfg["batch_size"], cfg["block_size"]))
        y = rng.integers(0, cfg["vocab_size"], size=x.shape)
        tokens = x.size
        for lib, make in (("scratchformer", scratchformer_step), ("torch", torch_step)):
            sec = time_steps(make(cfg, x, y), args.steps, args.warmup)
            print(f"{name:12s} {lib:13s} {sec * 1e3:8.1f} ms/step {tokens / sec:10,.0f} tokens/s")


if __name__ == "__main__":
    main()
