"""A forward and a training step of a small GPT, to compare the code with and without hook
points (docs/lens.md). Run it alternately on two checkouts, a fresh process each time:

    for i in 1 2 3 4 5 6; do PYTHONPATH=/path/to/base python benchmarks/hook_points.py A-base
                             PYTHONPATH=. python benchmarks/hook_points.py B-hooks; done
"""

import sys
import timeit

import numpy as np

from scratchformer.models import GPT, GPTConfig

model = GPT(GPTConfig(vocab_size=65, block_size=64, n_layer=4, n_head=4, n_embd=128), seed=0)
ids = np.random.default_rng(0).integers(0, 65, (8, 64))
model.eval()
model(ids)
forward = min(timeit.repeat(lambda: model(ids), number=20, repeat=5)) / 20
model.train()


def step():
    model(ids, ids)
    model.backward()


step()
train_step = min(timeit.repeat(step, number=5, repeat=5)) / 5
label = sys.argv[1] if len(sys.argv) > 1 else "this checkout"
print(f"{label} eval_forward_ms={forward * 1e3:.3f} train_step_ms={train_step * 1e3:.3f}")
