"""scratchformer against PyTorch / transformers on this CPU, side by side: one command, one
table, one JSON file.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/suite.py          # headline
    python benchmarks/suite.py --quick                         # smoke run: seconds, not minutes
    python benchmarks/suite.py --only long --pairs 3           # T = 1024: the library alone against PyTorch
    python benchmarks/suite.py --only train --configs names --pairs 5
    python benchmarks/suite.py --only finetune --pairs 1        # fine-tuning MiniLM, batch 32 x 64 tokens
    python benchmarks/suite.py --e2e                           # adds the whole training runs (long)
    python benchmarks/suite.py --markdown suite_results.json   # the tables of docs/performance.md

Unset both OpenBLAS variables *for the headline command only*: this project's machines set
OPENBLAS_CORETYPE=Haswell, which makes NumPy's GEMMs 1.6-1.8x slower than the kernel OpenBLAS
picks by itself on a user's machine (PyTorch does not use OpenBLAS). The suite prints them and
the BLAS kernel that ran (threadpoolctl), and records both in the JSON, with the CPU: its model,
its vector flags (AVX2, AVX-512, AMX) and, for PyTorch, its BLAS (MKL, oneDNN) and the CPU
capability its kernels chose. Before any step, the float32 GEMM rate of both sides' BLAS at each
config's own step shapes (`step_gemm_shapes`; NumPy's matmul and torch.mm, each in a fresh
process with the workers' 2 threads) is printed in the header and recorded as
environment.gemm_gflops.

Method. Every measurement runs in a fresh process (this file with --worker), one at a time,
alternating scratchformer, reference, scratchformer, reference ... (`--pairs` pairs); the
ratio reported is the median of the per-pair ratios of throughput (> 1: scratchformer is
faster). Each process uses 2 threads (OPENBLAS_NUM_THREADS=2, torch.set_num_threads(2)).
Sections:

- train: forward + backward + clip_grad_norm + AdamW of a GPT (pre-norm, exact GELU, tied
  head, biases, no dropout) on random tokens; scratchformer through its public API (GPT,
  AdamW, param_groups, clip_grad_norm) and, as `scratchformer train` does, DataParallel over
  `--workers` processes (default 2, the measuring process included; `--workers 1`: the GPT
  alone; peak RSS is then the sum over the processes), PyTorch as benchmarks/torch_gpt.py with
  scaled_dot_product_attention and fused AdamW. Reports tokens/s, forward / backward /
  optimiser ms, peak RSS (VmHWM of each process), and MFU: model FLOPs (nanoGPT's
  6N + 12 L T C per token) per second over the float32 GEMM GFLOP/s NumPy reaches at the
  model's own GEMM shapes, measured in the same process right after the steps (PyTorch's
  rate at the same shapes, torch.mm in its own process, is reported beside it).
- long: the train section's step at long context, T = 1024 (shakespeare-cpu's widths, batch 4),
  scratchformer alone (one process, a user's own loop) against PyTorch: time and peak memory.
  PyTorch's scaled_dot_product_attention never holds the (B, H, T, T) weights; scratchformer's
  fast lane takes the queries in blocks (fast/attention.py).
- sample: greedy generation of 200 new tokens with the KV cache at batch 1 and 32, GPT.generate
  against transformers' GPT2LMHeadModel.generate(use_cache=True, do_sample=False) on the same
  random GPT-2 weights (written by transformers, read by scratchformer.interop.load_hf_gpt2).
  Model sizes of names and shakespeare-cpu, with 256 positions so 200 tokens fit the cache.
- embed: SentenceEncoder.encode (all-MiniLM-L6-v2) against transformers' BertModel + mean
  pooling + L2 normalisation, the first 1,000 non-empty lines of tinyshakespeare, batch 32.
- finetune: one step of fine-tuning all-MiniLM-L6-v2 as a sentence classifier (batch 32, 64
  tokens, every position real; mean pooling + an 8-class linear head; forward + backward +
  AdamW over every parameter): scratchformer's BertClassifier as `scratchformer finetune` runs
  it (DataParallel over `--workers` processes with train_outputs=False, the allocator tuned)
  against transformers' BertModel with the same head and torch.optim.AdamW, the loop of
  tests/training/test_finetune.py. Reports tokens/s, forward+backward / optimiser ms, peak RSS summed
  over the processes and peak PSS (shared pages once, read every 10 ms over two extra steps).
- initfrom: one training step of a pretrained GPT-2 (`train --init-from`'s model: a random
  distilgpt2-shaped checkpoint, 6 layers, 768 wide, GPT-2's 50,257-token vocabulary, written by
  transformers and read by load_hf_gpt2; batch 4 x 128 tokens, AdamW over every parameter, run
  as the trainer runs it, like finetune) against transformers' GPT2LMHeadModel +
  torch.optim.AdamW on the same weights. Reports what finetune reports.
- e2e (--e2e only): wall time of the default `scratchformer train` on names and on
  tinyshakespeare against benchmarks/torch_names_reference.py and
  benchmarks/torch_shakespeare_reference.py (one run each; minutes).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

# name -> (vocab, layers, heads, width, block, batch), the training configurations
TRAIN_CONFIGS = {
    "tiny": (16, 1, 2, 32, 16, 8),
    "names": (27, 4, 4, 64, 16, 32),
    "shakespeare-cpu": (65, 4, 4, 128, 64, 12),
    "medium": (65, 6, 6, 384, 256, 16),
}
# long context: the library alone (one process) at T = 1024
LONG_CONFIGS = {"long-1024": (65, 4, 4, 128, 1024, 4)}
LONG_QUICK = {"long-1024-quick": (65, 1, 2, 32, 1024, 1)}  # --quick: the same path (blocks of queries), cheap
DEFAULT_DATA = REPO.parent / "shared" / "data" / "tinyshakespeare.txt"
SECTIONS = ("train", "sample", "embed", "long", "finetune", "initfrom")
DEFAULT_SECTIONS = "train,sample,embed,long"
# timed steps per process (after WARMUP steps): about 5-10 s of work each on 2 cores
TRAIN_STEPS = {"tiny": 300, "names": 60, "shakespeare-cpu": 40, "medium": 6, "long-1024": 5}
WARMUP = 3
SAMPLE_SIZES = ["names", "shakespeare-cpu"]
SAMPLE_BATCHES = [1, 32]
NEW_TOKENS = 200
SAMPLE_POSITIONS = 256
EMBED_LINES = 1000
OPENBLAS_VARS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OPENBLAS_NUM_THREADS")


# -- workers: each runs in its own process and prints one JSON line ---------------------------
def _peak_rss_mib(pid: int | str = "self") -> float:
    """A process's peak resident memory (this one by default). Linux's getrusage maxrss survives
    exec, so a worker would report its parent's peak if larger; VmHWM belongs to this program alone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        return next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM")) / 1024
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux, bytes on macOS


def _pss_mib(pid: int | str = "self") -> float:
    """A process's proportional set size: its resident memory with each shared page split among
    the processes sharing it (so forked workers do not count the pages they share twice)."""
    try:
        rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
        return next(int(line.split()[1]) for line in rollup.splitlines() if line.startswith("Pss:")) / 1024
    except (OSError, StopIteration):
        return float("nan")


def _blas() -> list[dict]:
    from threadpoolctl import threadpool_info

    return [
        {k: d.get(k) for k in ("internal_api", "version", "architecture", "num_threads")}
        for d in threadpool_info()
    ]


def step_gemm_shapes(config: str) -> list[tuple[int, int, int]]:
    """The (M, K, N) of a train config's dense products per layer (rows = batch x block): the
    attention's qkv projection and the MLP's two layers, where the FLOPs of a step are."""
    V, L, H, C, T, B = {**TRAIN_CONFIGS, **LONG_CONFIGS, **LONG_QUICK}[config]
    return [(B * T, C, 3 * C), (B * T, C, 4 * C), (B * T, 4 * C, C)]


def gemm_ms(shapes, lib: str = "numpy", reps: int = 20, seconds: float | None = None) -> list[float]:
    """Median ms of each float32 product (M, K) @ (K, N) in `shapes`, on random arrays: NumPy's
    matmul (its BLAS) or, with lib="torch", torch.mm (PyTorch's, on its threads). A shape may
    carry a 4th item, True when the second operand is read transposed (a weight kept (N, K),
    as x W^T reads it). `seconds`: time each product for about that long instead of `reps`
    times. The one home of a GEMM timing for the benchmarks (suite, modadd_step)."""
    import numpy as np

    rng = np.random.default_rng(0)
    out = []
    for m, k, n, *transposed in shapes:
        a = rng.standard_normal((m, k), dtype=np.float32)
        b = (
            rng.standard_normal((n, k), dtype=np.float32).T
            if transposed and transposed[0]
            else rng.standard_normal((k, n), dtype=np.float32)
        )
        if lib == "torch":
            import torch

            a, b = torch.from_numpy(a), torch.from_numpy(b)  # a transposed view stays one
            product = lambda a=a, b=b: torch.mm(a, b)  # noqa: E731
        else:
            product = lambda a=a, b=b: a @ b  # noqa: E731
        for _ in range(2):  # warm-up: the BLAS's threads and buffers
            product()
        times, start = [], time.perf_counter()
        while len(times) < (1 if seconds else reps) or (seconds and time.perf_counter() - start < seconds):
            t0 = time.perf_counter()
            product()
            times.append(time.perf_counter() - t0)
        out.append(1e3 * statistics.median(times))
    return out


def _gemm_gflops(shapes: list[tuple[int, int, int]], seconds: float = 0.3, lib: str = "numpy") -> float:
    """Best float32 GFLOP/s over `shapes` (gemm_ms, each product timed ~`seconds`)."""
    return max(
        2 * m * k * n / ms / 1e6 for (m, k, n), ms in zip(shapes, gemm_ms(shapes, lib, seconds=seconds))
    )


def worker_gemm(lib: str, configs: list[str], seconds: float) -> dict:
    """config -> the float32 GEMM GFLOP/s of NumPy's BLAS (lib="numpy") or PyTorch's ("torch")
    at that train config's own shapes, in this process (the worker's 2 threads)."""
    if lib == "torch":
        import torch

        torch.set_num_threads(2)
    return {config: _gemm_gflops(step_gemm_shapes(config), seconds, lib) for config in configs}


def _memory(result: dict, pids: list, phases=None, steps: int = 2) -> None:
    """Into result: peak RSS (VmHWM) summed over the processes (pages they share count in each),
    and PSS after the steps, summed (shared pages counted once; glibc keeps freed temporaries
    resident here, scratchformer.allocator, so it is close to the peak). With `phases` (the
    step's (name, fn) list), also `peak_pss_mib`: the largest sum of the processes' PSS seen by
    a thread reading it every 10 ms while `steps` more steps run, after the timed ones, so the
    reading costs the timings nothing."""
    result["peak_rss_mib"] = sum(_peak_rss_mib(pid) for pid in pids)
    result["pss_mib"] = sum(_pss_mib(pid) for pid in pids)
    if phases is None:
        return
    import threading

    peak, done = [result["pss_mib"]], threading.Event()

    def sample():
        while not done.wait(0.01):
            peak[0] = max(peak[0], sum(_pss_mib(pid) for pid in pids))

    thread = threading.Thread(target=sample)
    thread.start()
    for _ in range(steps):
        for _, fn in phases:
            fn()
    done.set()
    thread.join()
    result["peak_pss_mib"] = max(peak[0], sum(_pss_mib(pid) for pid in pids))


def _time_phases(phases, steps: int, warmup: int) -> dict:
    """Run the step (a list of (name, fn)) warmup + steps times; median ms of each phase."""
    for _ in range(warmup):
        for _, fn in phases:
            fn()
    times = {name: [] for name, _ in phases}
    totals = []
    for _ in range(steps):
        t_step = time.perf_counter()
        for name, fn in phases:
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
        totals.append(time.perf_counter() - t_step)
    out = {f"{name}_ms": statistics.median(ts) * 1e3 for name, ts in times.items()}
    out["step_ms"] = statistics.median(totals) * 1e3
    return out


def worker_train(lib: str, config: str, steps: int, warmup: int, workers: int = 2) -> dict:
    import numpy as np

    V, L, H, C, T, B = {**TRAIN_CONFIGS, **LONG_CONFIGS, **LONG_QUICK}[config]
    rng = np.random.default_rng(0)
    x = rng.integers(0, V, size=(B, T))
    y = rng.integers(0, V, size=(B, T))
    if lib == "scratchformer":
        from scratchformer.allocator import keep_freed_memory
        from scratchformer.models import GPT, GPTConfig
        from scratchformer.optim import clip_grad_norm, make_adamw, param_groups
        from scratchformer.training.parallel import DataParallel

        rss_before = _peak_rss_mib()  # the imports' memory, not the model's
        keep_freed_memory()  # as train() does
        gpt = GPT(GPTConfig(vocab_size=V, block_size=T, n_layer=L, n_head=H, n_embd=C), seed=0)
        opt = make_adamw(param_groups(gpt, 0.1), lr=1e-3, betas=(0.9, 0.99), weight_decay=0.1)
        # as the trainer: the optimiser's state moves into shared memory when the workers fork
        model = DataParallel(gpt, workers, optimizer=opt, train_outputs=False) if workers > 1 else gpt
        params = gpt.parameters()
        n_params = sum(p.data.size for p in params)

        def forward():
            opt.zero_grad()
            model(x, y)

        def optimiser():
            clip_grad_norm(params, 1.0)
            opt.step()

        phases = [("forward", forward), ("backward", model.backward), ("optimiser", optimiser)]
    else:
        import torch

        sys.path.insert(0, str(HERE))
        from torch_gpt import TorchGPT

        rss_before = _peak_rss_mib()
        torch.set_num_threads(2)
        torch.manual_seed(0)
        model = TorchGPT(V, T, n_layer=L, n_head=H, n_embd=C)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.99), weight_decay=0.1, fused=True)
        n_params = sum(p.numel() for p in model.parameters())
        xt, yt = torch.from_numpy(x), torch.from_numpy(y)
        state = {}

        def forward():
            opt.zero_grad(set_to_none=True)
            state["loss"] = model(xt, yt)

        def backward():
            state["loss"].backward()

        def optimiser():
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()

        phases = [("forward", forward), ("backward", backward), ("optimiser", optimiser)]
    result = _time_phases(phases, steps, warmup)
    result["tokens_per_s"] = B * T / (result["step_ms"] / 1e3)
    _memory(result, ["self"] + (model.worker_pids() if lib == "scratchformer" and workers > 1 else []))
    result["rss_before_model_mib"] = rss_before
    result["peak_rss_above_start_mib"] = (
        result["peak_rss_mib"] - rss_before
    )  # the model and its step, not the imports
    # nanoGPT's estimate_mfu: 6 N + 12 L T C FLOPs per token (position table not counted)
    n_flop_params = n_params - T * C
    result["model_gflop_per_s"] = (6 * n_flop_params + 12 * L * T * C) * result["tokens_per_s"] / 1e9
    # the GEMM peak at this model's own shapes, in this process: NumPy's BLAS or PyTorch's
    result["gemm_gflops"] = _gemm_gflops(
        step_gemm_shapes(config), lib="numpy" if lib == "scratchformer" else "torch"
    )
    result["blas"] = _blas()
    return result


def _write_gpt2(path: Path, config: str) -> None:
    """Random GPT-2 weights (transformers' init, seed 0) at a config's size, saved by transformers."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    V, L, H, C, _, _ = TRAIN_CONFIGS[config]
    torch.manual_seed(0)
    cfg = GPT2Config(
        vocab_size=V,
        n_positions=SAMPLE_POSITIONS,
        n_embd=C,
        n_layer=L,
        n_head=H,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=0,
        eos_token_id=0,
    )
    GPT2LMHeadModel(cfg).save_pretrained(path, safe_serialization=True)


def worker_sample(lib: str, model_dir: str, batch: int, new_tokens: int, tokens_out: str) -> dict:
    import numpy as np

    prompt = np.zeros((batch, 1), dtype=np.int64)
    if lib == "scratchformer":
        from scratchformer.interop import load_hf_gpt2

        model = load_hf_gpt2(model_dir)
        model.eval()

        def generate(n):
            return model.generate(prompt, n, temperature=0.0, use_cache=True)
    else:
        import torch
        from transformers import GPT2LMHeadModel

        torch.set_num_threads(2)
        model = GPT2LMHeadModel.from_pretrained(model_dir).eval()
        p = torch.from_numpy(prompt)

        def generate(n):
            with torch.inference_mode():
                return model.generate(
                    p,
                    attention_mask=torch.ones_like(p),
                    max_new_tokens=n,
                    min_new_tokens=n,
                    do_sample=False,
                    use_cache=True,
                    pad_token_id=0,
                    eos_token_id=None,
                ).numpy()

    generate(8)  # warm-up
    start = time.perf_counter()
    tokens = generate(new_tokens)
    seconds = time.perf_counter() - start
    np.save(tokens_out, np.asarray(tokens)[:, 1:])
    return {
        "tokens_per_s": batch * new_tokens / seconds,
        "seconds": seconds,
        "peak_rss_mib": _peak_rss_mib(),
        "blas": _blas(),
    }


def worker_embed(lib: str, data: str, n_lines: int, emb_out: str) -> dict:
    import numpy as np

    from scratchformer.interop.sentence import default_model_dir

    lines = [s for s in Path(data).read_text(encoding="utf-8").splitlines() if s.strip()][:n_lines]
    if lib == "scratchformer":
        from scratchformer.interop.sentence import SentenceEncoder

        enc = SentenceEncoder()

        def encode(texts):
            return enc.encode(texts, batch_size=32)
    else:
        import torch
        from transformers import AutoTokenizer, BertModel

        torch.set_num_threads(2)
        tok = AutoTokenizer.from_pretrained(default_model_dir())
        bert = BertModel.from_pretrained(default_model_dir()).eval()

        def encode(texts):  # the sentence-transformers recipe: mean over the mask, L2 normalise
            out = []
            with torch.inference_mode():
                for i in range(0, len(texts), 32):
                    b = tok(
                        texts[i : i + 32], padding=True, truncation=True, max_length=256, return_tensors="pt"
                    )
                    h = bert(**b).last_hidden_state
                    m = b["attention_mask"].unsqueeze(-1).to(h.dtype)
                    e = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
                    out.append(torch.nn.functional.normalize(e, p=2, dim=1).numpy())
            return np.concatenate(out)

    encode(lines[:32])  # warm-up
    start = time.perf_counter()
    emb = encode(lines)
    seconds = time.perf_counter() - start
    np.save(emb_out, emb)
    return {
        "sentences_per_s": len(lines) / seconds,
        "seconds": seconds,
        "peak_rss_mib": _peak_rss_mib(),
        "blas": _blas(),
    }


FINETUNE_BATCH, FINETUNE_TOKENS, FINETUNE_CLASSES, FINETUNE_STEPS = 32, 64, 8, 10


def _timed_steps(forward_backward, optimiser, steps: int, warmup: int, tokens: int, workers_of) -> dict:
    """A fine-tuning-style step (forward + backward, then the optimiser) timed, then its memory
    (`_memory`) over this process and the pids `workers_of()` gives once the steps have run."""
    phases = [("forward_backward", forward_backward), ("optimiser", optimiser)]
    times = _time_phases(phases, steps, warmup)
    result = {**times, "tokens_per_s": tokens / (times["step_ms"] / 1e3), "blas": _blas()}
    _memory(result, ["self"] + list(workers_of()), phases)
    return result


def worker_finetune(lib: str, steps: int, warmup: int, workers: int = 2) -> dict:
    import numpy as np

    from scratchformer.interop.sentence import default_model_dir

    path = default_model_dir()
    rng = np.random.default_rng(0)
    ids = rng.integers(1000, 30000, (FINETUNE_BATCH, FINETUNE_TOKENS))
    mask = np.ones_like(ids)
    labels = rng.integers(0, FINETUNE_CLASSES, FINETUNE_BATCH)
    if lib == "scratchformer":
        from scratchformer.allocator import keep_freed_memory
        from scratchformer.interop.bert import load_hf_bert
        from scratchformer.interop.bert_classifier import BertClassifier
        from scratchformer.optim import make_adamw
        from scratchformer.training.parallel import DataParallel

        keep_freed_memory()  # as `scratchformer finetune` does
        model = BertClassifier(load_hf_bert(path), FINETUNE_CLASSES, seed=0)
        model.train()
        opt = make_adamw(model.trainable_parameters(), lr=5e-5)
        # as the trainer: DataParallel over `workers` processes, the optimiser's state shared
        runner = DataParallel(model, workers, optimizer=opt, train_outputs=False)

        def forward_backward():
            model.zero_grad()
            runner(ids, mask, labels)
            runner.backward()

        step = opt.step
    else:
        import torch
        import transformers

        torch.set_num_threads(2)
        bert = transformers.BertModel.from_pretrained(path, add_pooling_layer=False).train()
        head = torch.nn.Linear(bert.config.hidden_size, FINETUNE_CLASSES)
        params = list(bert.parameters()) + list(head.parameters())
        opt = torch.optim.AdamW(params, lr=5e-5)
        t_ids, t_mask, t_labels = torch.tensor(ids), torch.tensor(mask), torch.tensor(labels)

        def forward_backward():
            opt.zero_grad()
            hidden = bert(input_ids=t_ids, attention_mask=t_mask).last_hidden_state
            m = t_mask.to(hidden.dtype).unsqueeze(-1)
            loss = torch.nn.functional.cross_entropy(head((hidden * m).sum(1) / m.sum(1)), t_labels)
            loss.backward()

        step = opt.step
    workers_of = runner.worker_pids if lib == "scratchformer" else list
    return _timed_steps(forward_backward, step, steps, warmup, FINETUNE_BATCH * FINETUNE_TOKENS, workers_of)


def bench_finetune(pairs: int, quick: bool, workers: int = 2) -> dict:
    steps, warm = (2, 1) if quick else (FINETUNE_STEPS, 2)
    res = paired(lambda lib: ["finetune", lib, str(steps), str(warm), str(workers)], pairs, "tokens_per_s")
    res["workers"] = workers
    s, r = res["scratchformer"], res["reference"]
    print(
        f"finetune MiniLM batch {FINETUNE_BATCH} x {FINETUNE_TOKENS} ratio {res['ratio']:5.2f}  tok/s "
        f"{_med(s, 'tokens_per_s'):7,.0f} vs {_med(r, 'tokens_per_s'):7,.0f}  fwd+bwd/opt ms "
        f"{_med(s, 'forward_backward_ms'):.0f}/{_med(s, 'optimiser_ms'):.0f} vs "
        f"{_med(r, 'forward_backward_ms'):.0f}/{_med(r, 'optimiser_ms'):.0f}  RSS MiB "
        f"{_med(s, 'peak_rss_mib'):.0f} vs {_med(r, 'peak_rss_mib'):.0f}, peak PSS {_med(s, 'peak_pss_mib'):.0f} vs "
        f"{_med(r, 'peak_pss_mib'):.0f}",
        flush=True,
    )
    return res


INITFROM_BATCH, INITFROM_TOKENS, INITFROM_STEPS = 4, 128, 4
INITFROM_GPT2 = dict(
    n_layer=6,
    n_head=12,
    n_embd=768,
    vocab_size=50257,
    n_positions=1024,
    resid_pdrop=0.0,
    embd_pdrop=0.0,
    attn_pdrop=0.0,
)


def _gpt2_dir(path: Path) -> Path:
    """A random distilgpt2-shaped GPT-2 written by transformers (made once, seeded)."""
    if not (path / "model.safetensors").exists():
        import torch
        import transformers

        torch.manual_seed(0)
        transformers.GPT2LMHeadModel(transformers.GPT2Config(**INITFROM_GPT2)).save_pretrained(path)
    return path


def worker_initfrom(lib: str, path: str, steps: int, warmup: int, workers: int = 2) -> dict:
    import numpy as np

    rng = np.random.default_rng(0)
    tokens = rng.integers(0, INITFROM_GPT2["vocab_size"], (INITFROM_BATCH, INITFROM_TOKENS + 1))
    x, y = tokens[:, :-1], tokens[:, 1:]
    if lib == "scratchformer":
        from scratchformer.allocator import keep_freed_memory
        from scratchformer.interop import load_hf_gpt2
        from scratchformer.optim import make_adamw
        from scratchformer.training.parallel import DataParallel

        keep_freed_memory()  # as train() does
        model = load_hf_gpt2(path).train()
        opt = make_adamw(model.parameters(), lr=3e-5)
        runner = DataParallel(model, workers, optimizer=opt, train_outputs=False)  # as train() runs it

        def forward_backward():
            model.zero_grad()
            runner(x, y)
            runner.backward()

        step = opt.step
    else:
        import torch
        import transformers

        torch.set_num_threads(2)
        model = transformers.GPT2LMHeadModel.from_pretrained(path).train()
        opt = torch.optim.AdamW(model.parameters(), lr=3e-5)
        tx, ty = torch.tensor(x), torch.tensor(y)

        def forward_backward():
            opt.zero_grad()
            logits = model(tx).logits
            torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), ty.reshape(-1)).backward()

        step = opt.step
    workers_of = runner.worker_pids if lib == "scratchformer" else list
    return _timed_steps(forward_backward, step, steps, warmup, INITFROM_BATCH * INITFROM_TOKENS, workers_of)


def bench_initfrom(tmp: Path, pairs: int, quick: bool, workers: int = 2) -> dict:
    steps, warm = (2, 1) if quick else (INITFROM_STEPS, 1)
    path = str(_gpt2_dir(tmp / "gpt2-initfrom"))
    res = paired(
        lambda lib: ["initfrom", lib, path, str(steps), str(warm), str(workers)], pairs, "tokens_per_s"
    )
    res["workers"] = workers
    s, r = res["scratchformer"], res["reference"]
    print(
        f"init-from GPT-2 (6 x 768, vocab 50,257) batch {INITFROM_BATCH} x {INITFROM_TOKENS} ratio "
        f"{res['ratio']:5.2f}  tok/s {_med(s, 'tokens_per_s'):7,.0f} vs {_med(r, 'tokens_per_s'):7,.0f}  fwd+bwd/opt ms "  # noqa: E501
        f"{_med(s, 'forward_backward_ms'):.0f}/{_med(s, 'optimiser_ms'):.0f} vs "
        f"{_med(r, 'forward_backward_ms'):.0f}/{_med(r, 'optimiser_ms'):.0f}  RSS MiB "
        f"{_med(s, 'peak_rss_mib'):.0f} vs {_med(r, 'peak_rss_mib'):.0f}, peak PSS {_med(s, 'peak_pss_mib'):.0f} vs "
        f"{_med(r, 'peak_pss_mib'):.0f}",
        flush=True,
    )
    return res


# -- driver -----------------------------------------------------------------------------------
def run_worker(args: list[str], threads: int = 2) -> dict:
    env = dict(
        os.environ,
        OPENBLAS_NUM_THREADS=str(threads),
        OMP_NUM_THREADS=str(threads),
        PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    )
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--worker", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"worker {args} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def paired(make_args, pairs: int, metric: str) -> dict:
    """Alternate scratchformer / reference processes `pairs` times; median of per-pair ratios."""
    ours, theirs = [], []
    for _ in range(pairs):
        ours.append(run_worker(make_args("scratchformer")))
        theirs.append(run_worker(make_args("reference")))
    ratios = [a[metric] / b[metric] for a, b in zip(ours, theirs)]
    return {"ratio": statistics.median(ratios), "ratios": ratios, "scratchformer": ours, "reference": theirs}


def _med(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def bench_train(configs, pairs: int, quick: bool, workers: int = 2, section: str = "train") -> dict:
    out = {}
    for name in configs:
        steps = (1 if name in LONG_CONFIGS else 3) if quick else TRAIN_STEPS[name]
        warm = 1 if quick else WARMUP
        res = paired(
            lambda lib: ["train", lib, name, str(steps), str(warm), str(workers)], pairs, "tokens_per_s"
        )
        res["workers"] = workers
        peak = _med(res["scratchformer"], "gemm_gflops")
        res["torch_gemm_gflops"] = _med(res["reference"], "gemm_gflops")
        for side in ("scratchformer", "reference"):
            runs = res[side]
            res[f"{side}_summary"] = {
                k: _med(runs, k)
                for k in (
                    "tokens_per_s",
                    "forward_ms",
                    "backward_ms",
                    "optimiser_ms",
                    "step_ms",
                    "peak_rss_mib",
                    "pss_mib",
                    "model_gflop_per_s",
                    "peak_rss_above_start_mib",
                )
            }
            res[f"{side}_summary"]["mfu"] = res[f"{side}_summary"]["model_gflop_per_s"] / peak
        res["gemm_gflops"] = peak
        out[name] = res
        s, r = res["scratchformer_summary"], res["reference_summary"]
        print(
            f"{section} {name:16s} ratio {res['ratio']:5.2f}  tok/s {s['tokens_per_s']:9,.0f} vs {r['tokens_per_s']:9,.0f}"  # noqa: E501
            f"  fwd/bwd/opt ms {s['forward_ms']:.1f}/{s['backward_ms']:.1f}/{s['optimiser_ms']:.1f}"
            f" vs {r['forward_ms']:.1f}/{r['backward_ms']:.1f}/{r['optimiser_ms']:.1f}"
            f"  RSS MiB {s['peak_rss_mib']:.0f} vs {r['peak_rss_mib']:.0f} (PSS {s['pss_mib']:.0f} vs {r['pss_mib']:.0f};"  # noqa: E501
            f" above the imports {s['peak_rss_above_start_mib']:.0f} vs {r['peak_rss_above_start_mib']:.0f})"
            f"  MFU {s['mfu']:.0%} vs {r['mfu']:.0%} of {peak:.0f} GFLOP/s (torch.mm: {res['torch_gemm_gflops']:.0f})",
            flush=True,
        )
    return out


def bench_sample(tmp: Path, pairs: int, quick: bool) -> dict:
    import numpy as np

    out = {}
    sizes, batches, new = (["names"], [1, 32], 10) if quick else (SAMPLE_SIZES, SAMPLE_BATCHES, NEW_TOKENS)
    for size in sizes:
        model_dir = tmp / f"gpt2-{size}"
        _write_gpt2(model_dir, size)
        for batch in batches:
            files = {
                lib: str(tmp / f"tokens-{size}-{batch}-{lib}.npy") for lib in ("scratchformer", "reference")
            }
            res = paired(
                lambda lib: ["sample", lib, str(model_dir), str(batch), str(new), files[lib]],
                pairs,
                "tokens_per_s",
            )
            a, b = np.load(files["scratchformer"]), np.load(files["reference"])
            res["same_tokens_fraction"] = float((a == b).mean())
            key = f"{size}/batch{batch}"
            out[key] = res
            print(
                f"sample {key:22s} ratio {res['ratio']:5.2f}  tok/s {_med(res['scratchformer'], 'tokens_per_s'):9,.0f}"
                f" vs {_med(res['reference'], 'tokens_per_s'):9,.0f}  RSS MiB "
                f"{_med(res['scratchformer'], 'peak_rss_mib'):.0f} vs {_med(res['reference'], 'peak_rss_mib'):.0f}"
                f"  same greedy tokens {res['same_tokens_fraction']:.0%}",
                flush=True,
            )
    return out


def bench_embed(tmp: Path, data: str, pairs: int, quick: bool) -> dict:
    import numpy as np

    n = 64 if quick else EMBED_LINES
    files = {lib: str(tmp / f"emb-{lib}.npy") for lib in ("scratchformer", "reference")}
    res = paired(lambda lib: ["embed", lib, data, str(n), files[lib]], pairs, "sentences_per_s")
    res["max_abs_diff"] = float(np.abs(np.load(files["scratchformer"]) - np.load(files["reference"])).max())
    print(
        f"embed  {n} lines, batch 32       ratio {res['ratio']:5.2f}  sentences/s "
        f"{_med(res['scratchformer'], 'sentences_per_s'):7,.1f} vs {_med(res['reference'], 'sentences_per_s'):7,.1f}"
        f"  RSS MiB {_med(res['scratchformer'], 'peak_rss_mib'):.0f} vs {_med(res['reference'], 'peak_rss_mib'):.0f}"
        f"  max |diff| {res['max_abs_diff']:.1e}",
        flush=True,
    )
    return res


def bench_e2e(tmp: Path, data: str) -> dict:
    """One wall-time run each of the default CLI trainings and their PyTorch equivalents."""
    env = dict(
        os.environ,
        OPENBLAS_NUM_THREADS="2",
        PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    )
    cli = [sys.executable, "-m", "scratchformer.cli.main", "train", "--no-progress", "--quiet"]
    runs = {
        "names/scratchformer": cli + ["--out", str(tmp / "names")],
        "names/pytorch": [sys.executable, str(HERE / "torch_names_reference.py")],
        "shakespeare/scratchformer": cli + ["--data", data, "--out", str(tmp / "shakespeare")],
        "shakespeare/pytorch": [sys.executable, str(HERE / "torch_shakespeare_reference.py"), "--data", data],
    }
    out = {}
    for name, cmd in runs.items():
        start = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)
        out[name] = {
            "seconds": time.perf_counter() - start,
            "returncode": proc.returncode,
            "tail": (proc.stdout + proc.stderr)[-600:],
        }
        print(f"e2e    {name:26s} {out[name]['seconds']:7.0f} s  (exit {proc.returncode})", flush=True)
    return out


def environment() -> dict:
    import numpy as np

    info = {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "platform": platform.platform(),
        "cpu": _cpu_name(),
        "cpu_flags": _cpu_flags(),
        "cores": os.cpu_count(),
        "env": {k: os.environ.get(k) for k in OPENBLAS_VARS},
        "blas": _blas(),
        "loadavg_at_start": os.getloadavg(),
        "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
    }
    try:
        import torch
        import transformers

        info["torch"], info["transformers"] = torch.__version__, transformers.__version__
        info["torch_blas"] = _torch_blas()
    except ImportError:
        pass
    return info


# the vector and matrix extensions that decide which kernels a BLAS picks
CPU_FLAGS = (
    "avx2",
    "fma",
    "avx512f",
    "avx512bw",
    "avx512vl",
    "avx512_vnni",
    "avx512_bf16",
    "avx512_fp16",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
    "amx_fp16",
)


def _cpu_flags() -> list[str]:
    """Which of CPU_FLAGS this CPU has (Linux's /proc/cpuinfo; empty elsewhere)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return []
    flags = next(
        (line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), []
    )
    return [f for f in CPU_FLAGS if f in flags]


def _torch_blas() -> dict:
    """PyTorch's BLAS and kernels: BLAS_INFO from its build configuration (mkl, openblas, ...),
    the MKL and oneDNN versions it was built with, whether both are available here, and the
    CPU capability (vector width) its own kernels chose at run time."""
    import torch

    config = torch.__config__.show()
    blas = re.search(r"\bBLAS_INFO=([^,\s]+)", config)
    info = {
        "blas_info": blas.group(1) if blas else None,
        "mkl": torch.backends.mkl.is_available(),
        "mkldnn": torch.backends.mkldnn.is_available(),
        "built_with": [
            line.strip(" -")
            for line in config.splitlines()
            if "Math Kernel Library" in line or "MKL-DNN" in line or "oneDNN" in line
        ],
    }
    try:
        info["cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    except AttributeError:  # older PyTorch
        info["cpu_capability"] = None
    return info


def _environment_line(env: dict) -> str:
    """The CPU, its flags and both sides' BLAS, in one line."""
    kernels = ", ".join(f"{b['internal_api']} {b['version']} {b['architecture']}" for b in env["blas"])
    tb = env.get("torch_blas") or {}
    torch_side = (
        f"torch {env.get('torch')} (BLAS {tb.get('blas_info')}, oneDNN {'on' if tb.get('mkldnn') else 'off'}, "
        f"kernels {tb.get('cpu_capability')})"
    )
    return (
        f"{env['cpu']} ({' '.join(env.get('cpu_flags') or ['no flags read'])}), {env['cores']} cores; "
        f"numpy {env['numpy']} ({kernels}); {torch_side}"
    )


def gemm_rates(configs: list[str], seconds: float) -> dict:
    """{"numpy": {config: GFLOP/s}, "torch": {...}}: the float32 GEMM rate of each side's BLAS at
    each config's step shapes (step_gemm_shapes), each side in a fresh process with the
    workers' 2 threads, so the header names what both BLAS reach on this CPU before any step runs."""
    if not configs:
        return {}
    return {lib: run_worker(["gemm", lib, str(seconds), *configs]) for lib in ("numpy", "torch")}


def _gemm_line(rates: dict) -> str:
    """The header's second line: each config's GEMM rate, NumPy's BLAS / PyTorch's."""
    if not rates:
        return "float32 GEMM GFLOP/s: no config to measure"
    cells = ", ".join(f"{c} {rates['numpy'][c]:.0f} / {rates['torch'][c]:.0f}" for c in rates["numpy"])
    return f"float32 GEMM GFLOP/s at each step's shapes, NumPy's BLAS / PyTorch's (2 threads): {cells}"


def _cpu_name() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        return next(
            line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name")
        )
    except (OSError, StopIteration):
        return platform.processor()


def markdown(results: dict) -> str:
    """The results as the markdown tables of docs/performance.md."""
    env = results["environment"]
    lines = [
        f"{env['date_utc']} UTC, {_environment_line(env)}, transformers {env.get('transformers')}; "
        f"{' '.join(f'{k}={v}' for k, v in env['env'].items())}; load average "
        f"{env['loadavg_at_start'][0]:.1f} at the start, {results['loadavg_at_end'][0]:.1f} at the end; "
        f"{results['pairs']} pair(s) per figure, {results['seconds']:.0f} s.",
        "",
    ]
    for section in ("train", "long"):
        if section not in results:
            continue
        title = "training" if section == "train" else "long context, one process:"
        lines += [
            f"| {title} config (V, L, H, C, T, B) | ratio | tokens/s (ours / torch) | fwd / bwd / opt ms (ours) "
            "| fwd / bwd / opt ms (torch) | peak RSS MiB (ours / torch) | PSS MiB (ours / torch) | MFU (ours / torch) "
            "| GEMM GFLOP/s (numpy / torch) |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for name, r in results[section].items():
            s, t = r["scratchformer_summary"], r["reference_summary"]
            shape = {**TRAIN_CONFIGS, **LONG_CONFIGS, **LONG_QUICK}[name]
            lines.append(
                f"| {name} {shape} | **{r['ratio']:.2f}** | {s['tokens_per_s']:,.0f} / "
                f"{t['tokens_per_s']:,.0f} | {s['forward_ms']:.1f} / {s['backward_ms']:.1f} / "
                f"{s['optimiser_ms']:.1f} | {t['forward_ms']:.1f} / {t['backward_ms']:.1f} / "
                f"{t['optimiser_ms']:.1f} | {s['peak_rss_mib']:.0f} / {t['peak_rss_mib']:.0f} | "
                f"{s.get('pss_mib', float('nan')):.0f} / {t.get('pss_mib', float('nan')):.0f} | "
                f"{s['mfu']:.0%} / {t['mfu']:.0%} | {r['gemm_gflops']:.0f} / "
                f"{r.get('torch_gemm_gflops', float('nan')):.0f} |"
            )
        lines.append("")
    if "sample" in results or "embed" in results:
        lines += [
            "| inference | ratio | throughput (ours / transformers) | peak RSS MiB (ours / transformers) | agreement |",
            "| --- | --- | --- | --- | --- |",
        ]
        for key, r in results.get("sample", {}).items():
            lines.append(
                f"| sample {key}, {NEW_TOKENS if not results['quick'] else 10} tokens | **{r['ratio']:.2f}** | "
                f"{_med(r['scratchformer'], 'tokens_per_s'):,.0f} / {_med(r['reference'], 'tokens_per_s'):,.0f}"
                f" tokens/s | {_med(r['scratchformer'], 'peak_rss_mib'):.0f} / "
                f"{_med(r['reference'], 'peak_rss_mib'):.0f} | {r['same_tokens_fraction']:.0%} same tokens |"
            )
        if "embed" in results:
            r = results["embed"]
            lines.append(
                f"| embed all-MiniLM-L6-v2, batch 32 | **{r['ratio']:.2f}** | "
                f"{_med(r['scratchformer'], 'sentences_per_s'):,.1f} / "
                f"{_med(r['reference'], 'sentences_per_s'):,.1f} sentences/s | "
                f"{_med(r['scratchformer'], 'peak_rss_mib'):.0f} / {_med(r['reference'], 'peak_rss_mib'):.0f}"
                f" | max abs diff {r['max_abs_diff']:.1e} |"
            )
        lines.append("")
    if "e2e" in results:
        lines += ["| end to end | wall time |", "| --- | --- |"]
        lines += [
            f"| {k} | {v['seconds']:.0f} s (exit {v['returncode']}) |" for k, v in results["e2e"].items()
        ]
    return "\n".join(lines)


def resolve_data(
    data: str | None, sections: set, named: bool, quick: bool, e2e: bool
) -> tuple[str | None, str]:
    """The text that embed and e2e read: (path or None, a note to print or ""). --data must
    exist; without it, ../shared/data/tinyshakespeare.txt is used if there. A fresh clone has
    none: --quick then embeds the lines of this repository's README.md (a smoke run needs no
    particular text), a full run leaves embed out unless --only named it. e2e needs the file."""
    path = Path(data) if data is not None else DEFAULT_DATA
    if path.is_file() or not ("embed" in sections or e2e):
        return str(path), ""
    if data is None and not e2e and quick:
        return str(
            REPO / "README.md"
        ), f"embed reads README.md's lines ({DEFAULT_DATA} not found; --data PATH)"
    if data is None and not e2e and not named:
        sections.discard("embed")
        return None, f"embed left out: {DEFAULT_DATA} not found (pass --data PATH/tinyshakespeare.txt)"
    sys.exit(f"suite.py: {path} not found: pass --data PATH/tinyshakespeare.txt")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--only",
        default=None,
        help=f"comma-separated sections of {', '.join(SECTIONS)} (default: {DEFAULT_SECTIONS})",
    )
    ap.add_argument(
        "--configs",
        default=",".join(TRAIN_CONFIGS),
        help=f"training configs (default: {','.join(TRAIN_CONFIGS)})",
    )
    ap.add_argument(
        "--pairs", type=int, default=3, help="alternating process pairs per measurement (default 3)"
    )
    ap.add_argument(
        "--workers",
        type=int,
        default=2,
        help="scratchformer's training processes in train, finetune and initfrom (DataParallel, as "
        "the commands run; 1: the model alone) (default 2)",
    )
    ap.add_argument("--quick", action="store_true", help="smoke run: 1 pair, 3 steps, tiny inputs")
    ap.add_argument("--e2e", action="store_true", help="also the whole default training runs (minutes)")
    ap.add_argument(
        "--data",
        default=None,
        help="tinyshakespeare.txt, for embed and e2e (default: ../shared/data/tinyshakespeare.txt from "
        "the repo if there; without it --quick embeds README.md's lines and a full run leaves "
        "embed out)",
    )
    ap.add_argument("--json", default="suite_results.json", help="where to write the results")
    ap.add_argument(
        "--markdown", metavar="JSON", help="print the tables of a results file as markdown, and exit"
    )
    ap.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.markdown:
        print(markdown(json.loads(Path(args.markdown).read_text())))
        return

    if args.worker:
        kind, rest = args.worker[0], args.worker[1:]
        if kind == "train":
            res = worker_train(rest[0], rest[1], int(rest[2]), int(rest[3]), int(rest[4]))
        elif kind == "sample":
            res = worker_sample(rest[0], rest[1], int(rest[2]), int(rest[3]), rest[4])
        elif kind == "finetune":
            res = worker_finetune(rest[0], int(rest[1]), int(rest[2]), int(rest[3]))
        elif kind == "initfrom":
            res = worker_initfrom(rest[0], rest[1], int(rest[2]), int(rest[3]), int(rest[4]))
        elif kind == "gemm":
            res = worker_gemm(rest[0], rest[2:], float(rest[1]))
        else:
            res = worker_embed(rest[0], rest[1], int(rest[2]), rest[3])
        print(json.dumps(res))
        return

    sections = {s.strip() for s in (args.only or DEFAULT_SECTIONS).split(",") if s.strip()}
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    bad = sorted((sections - set(SECTIONS)) | (set(configs) - set(TRAIN_CONFIGS)))
    if bad or args.pairs < 1 or args.workers < 1:
        sys.exit(
            f"suite.py: unknown section/config {bad}, --pairs < 1 or --workers < 1: sections are "
            f"{', '.join(SECTIONS)}; configs are {', '.join(TRAIN_CONFIGS)}"
        )
    if args.quick:
        args.pairs, configs = 1, [c for c in configs if c in ("tiny", "names")] or ["tiny"]
    data, note = resolve_data(args.data, sections, args.only is not None, args.quick, args.e2e)

    start = time.perf_counter()
    results = {"environment": environment(), "pairs": args.pairs, "quick": args.quick}
    env = results["environment"]
    print(
        f"{_environment_line(env)}; {' '.join(f'{k}={v}' for k, v in env['env'].items())}; "
        f"load {env['loadavg_at_start'][0]:.2f}",
        flush=True,
    )
    shapes_of = [  # the configs whose steps this run times
        *(configs if "train" in sections else ()),
        *((LONG_QUICK if args.quick else LONG_CONFIGS) if "long" in sections else ()),
    ]
    env["gemm_gflops"] = gemm_rates(shapes_of, seconds=0.05 if args.quick else 0.3)
    print(_gemm_line(env["gemm_gflops"]), flush=True)
    if note:
        print(note, flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        if "train" in sections:
            results["train"] = bench_train(configs, args.pairs, args.quick, args.workers)
        if "long" in sections:  # the library alone: one process
            results["long"] = bench_train(
                list(LONG_QUICK if args.quick else LONG_CONFIGS),
                args.pairs,
                args.quick,
                workers=1,
                section="long",
            )
        if "sample" in sections:
            results["sample"] = bench_sample(tmp, args.pairs, args.quick)
        if "embed" in sections:
            results["embed"] = bench_embed(tmp, data, args.pairs, args.quick)
        if "finetune" in sections:
            results["finetune"] = bench_finetune(args.pairs, args.quick, args.workers)
        if "initfrom" in sections:
            results["initfrom"] = bench_initfrom(tmp, args.pairs, args.quick, args.workers)
        if args.e2e:
            results["e2e"] = bench_e2e(tmp, data)
    results["seconds"] = time.perf_counter() - start
    results["loadavg_at_end"] = os.getloadavg()
    Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    print(f"{results['seconds']:.0f} s; results in {args.json}")


if __name__ == "__main__":
    main()
