"""Time and peak memory of the fast lane's pieces for big arrays, each against the reference
lane (or, for GELU's blocks, against one block): a GPT-2 head's log-softmax and weight
gradient, a fine-tuning step's GELU, and causal attention at T = 1024 (forward and backward,
the weights recomputed: the fast lane's blocks of queries against the reference's whole weights). One process, the allocator tuned as train() does;
peak memory is tracemalloc's (NumPy reports its arrays to it), above what the inputs hold.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OPENBLAS_NUM_THREADS=1 python benchmarks/fast_pieces.py

Prints one line per piece: median ms over --repeats calls and the peak MiB of one call.
"""  # noqa: E501

from __future__ import annotations

import argparse
import statistics
import time
import tracemalloc

import numpy as np

from scratchformer import fast, ops
from scratchformer.allocator import keep_freed_memory
from scratchformer.fast import activations as fast_activations

TOKENS, VOCAB, WIDTH = (
    256,
    50257,
    768,
)  # half of the suite's init-from batch (4 x 128), as each process runs it
GELU_SHAPE = (1024, 1536)  # half of a MiniLM fine-tuning batch (32 x 64 tokens), its feed-forward width
ATTN_SHAPE = (4, 4, 1024, 32)  # (B, H, T, head size): suite.py's long-1024 layer, one process


def measure(fn, repeats: int) -> tuple[float, float]:
    """(median ms, peak MiB of one call above what was allocated before it)."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    tracemalloc.start()
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return statistics.median(times) * 1e3, peak / 2**20


def pieces(
    tokens: int = TOKENS,
    vocab: int = VOCAB,
    width: int = WIDTH,
    gelu_shape=GELU_SHAPE,
    attn_shape=ATTN_SHAPE,
    repeats: int = 5,
) -> list[dict]:
    """One row per piece: {"piece", "before": (ms, MiB), "after": (ms, MiB), "labels"}."""
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((tokens, vocab), dtype=np.float32)
    dy = rng.standard_normal((tokens, vocab), dtype=np.float32)
    x = rng.standard_normal((tokens, width), dtype=np.float32)
    W = rng.standard_normal((vocab, width), dtype=np.float32) * 0.02
    grad = np.zeros_like(W)
    h = rng.standard_normal(gelu_shape, dtype=np.float32)
    q, k, v, dout = (rng.standard_normal(attn_shape, dtype=np.float32) for _ in range(4))

    def attention():  # a training layer's: causal, the weights not kept (recomputed in the backward)
        _, cache = ops.attention_forward(q, k, v, causal=True, training=True, keep_weights=False)
        ops.attention_backward(dout, cache)

    rows = []
    for name, fn in (
        (f"log_softmax_forward {logits.shape}", lambda: ops.log_softmax_forward(logits)),
        (f"linear_backward_into dW {W.shape}", lambda: ops.linear_backward_into(dy, x, W, grad)),
        (f"attention_forward+backward causal {q.shape}", attention),
    ):
        with fast.reference():
            before = measure(fn, repeats)
        rows.append(
            {
                "piece": name,
                "before": before,
                "after": measure(fn, repeats),
                "labels": ("reference", "fast lane"),
            }
        )
    block = fast_activations.BLOCK
    for name, fn in (  # inference's GELU, and training's (its derivative computed beside it)
        (f"gelu_forward {h.shape}", lambda: ops.gelu_forward(h)),
        (f"gelu_with_grad {h.shape}", lambda: ops.activations.gelu_with_grad(h)),
    ):
        fast_activations.BLOCK = h.size  # the fast lane with one block as big as the array, then in blocks
        try:
            before = measure(fn, repeats)
        finally:
            fast_activations.BLOCK = block
        rows.append(
            {
                "piece": name,
                "before": before,
                "after": measure(fn, repeats),
                "labels": ("one block", f"blocks of {block:,}"),
            }
        )
    return rows


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5, help="timed calls per piece (default 5)")
    args = ap.parse_args(argv)
    keep_freed_memory()
    for row in pieces(repeats=args.repeats):
        (ms0, mib0), (ms1, mib1), (l0, l1) = row["before"], row["after"], row["labels"]
        print(
            f"{row['piece']}: {l0} {ms0:.1f} ms, peak {mib0:.0f} MiB; {l1} {ms1:.1f} ms, peak {mib1:.0f} MiB",
            flush=True,
        )


if __name__ == "__main__":
    main()
