"""cProfile of scratchformer training steps (forward + backward + clip + AdamW), as the suite
runs them: where the time of a step goes, by function (own time). `--sample B` profiles
greedy generation of 200 tokens at batch B instead (GPT-2 layout, 256 positions, as the
suite's sample section); `--embed` profiles SentenceEncoder.encode on 1,000 lines.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/profile_step.py --config names
    python benchmarks/profile_step.py --config shakespeare-cpu --steps 50 --top 30
    python benchmarks/profile_step.py --config names --sample 32
    python benchmarks/profile_step.py --embed --data ../shared/data/tinyshakespeare.txt

Prints the top entries by own time (tottime) with their share of the profiled steps.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from suite import TRAIN_CONFIGS  # noqa: E402

from scratchformer.allocator import keep_freed_memory  # noqa: E402
from scratchformer.models import GPT, GPTConfig  # noqa: E402
from scratchformer.optim import clip_grad_norm, make_adamw, param_groups  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", choices=list(TRAIN_CONFIGS), default="names")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--sample", type=int, metavar="B", help="profile generate() at batch B instead")
    ap.add_argument("--embed", action="store_true", help="profile SentenceEncoder.encode instead")
    ap.add_argument(
        "--data", default=str(Path(__file__).resolve().parents[2] / "shared/data/tinyshakespeare.txt")
    )
    args = ap.parse_args()
    keep_freed_memory()  # as train() and every command run (scratchformer/allocator.py)
    if args.sample or args.embed:
        return profile_inference(args)
    V, L, H, C, T, B = TRAIN_CONFIGS[args.config]
    rng = np.random.default_rng(0)
    x, y = rng.integers(0, V, size=(B, T)), rng.integers(0, V, size=(B, T))
    model = GPT(GPTConfig(vocab_size=V, block_size=T, n_layer=L, n_head=H, n_embd=C), seed=0)
    opt = make_adamw(param_groups(model, 0.1), lr=1e-3, betas=(0.9, 0.99), weight_decay=0.1)
    params = model.parameters()

    def step():
        opt.zero_grad()
        model(x, y)
        model.backward()
        clip_grad_norm(params, 1.0)
        opt.step()

    for _ in range(5):
        step()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(args.steps):
        step()
    prof.disable()
    report(prof, args.steps, f"{args.config}: {args.steps} steps", args.top)


def profile_inference(args) -> None:
    if args.embed:
        from scratchformer.interop.sentence import SentenceEncoder

        lines = [s for s in Path(args.data).read_text(encoding="utf-8").splitlines() if s.strip()][:1000]
        enc = SentenceEncoder()
        enc.encode(lines[:32])  # warm-up

        def run():
            enc.encode(lines, batch_size=32)

        what = "encode 1,000 lines, batch 32"
    else:
        V, L, H, C, _, _ = TRAIN_CONFIGS[args.config]
        model = GPT(
            GPTConfig(vocab_size=V, block_size=256, n_layer=L, n_head=H, n_embd=C, activation="gelu_tanh"),
            seed=0,
        ).eval()
        prompt = np.zeros((args.sample, 1), dtype=np.int64)
        model.generate(prompt, 8, temperature=0.0)  # warm-up

        def run():
            model.generate(prompt, 200, temperature=0.0)

        what = f"{args.config}: generate 200 tokens at batch {args.sample}"
    prof = cProfile.Profile()
    prof.enable()
    run()
    prof.disable()
    report(prof, 1, what, args.top)


def report(prof, steps: int, what: str, top: int) -> None:
    stats = pstats.Stats(prof)
    total = stats.total_tt
    print(f"{what}, {total / steps * 1e3:.2f} ms/step under cProfile")
    print(f"{'own %':>6} {'own ms/step':>11} {'cum ms/step':>11} {'calls/step':>10}  function")
    rows = sorted(stats.stats.items(), key=lambda kv: -kv[1][2])[:top]
    for (file, line, fn), (cc, nc, tt, ct, _) in rows:  # noqa: B007
        where = f"{Path(file).name}:{line}({fn})" if line else fn
        print(
            f"{tt / total:6.1%} {tt / steps * 1e3:11.3f} {ct / steps * 1e3:11.3f} {nc / steps:10.1f}  {where}"
        )


if __name__ == "__main__":
    main()
