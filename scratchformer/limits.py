"""Memory estimates made before allocating, so a size that cannot fit ends as one line
naming the option to lower instead of a MemoryError traceback or a machine that swaps.

The estimates are deliberately rough upper bounds (what matters is the order of magnitude:
a --block-size of 10^6 asks for terabytes); `check_fits` compares them with the memory this
process can really have now: the smallest of the machine's MemAvailable, its cgroup's limit
(memory.max, or memory.limit_in_bytes under cgroup v1) less what the cgroup uses, and its
address-space limit (`ulimit -v`, RLIMIT_AS) less what it has mapped.

    memory_limits()                     {name of the limit: bytes left under it}
    available_memory()                  the smallest of them, or None if none is known
    Sizes, model_sizes(config, cls)     what a model class says of a config: parameters, layers, width...
    param_count_bound(config, cls)      its parameters, counted by the model class
    training_state_bytes(n_params)      weights + grads + AdamW's two moments
    activation_bytes(...)               one training micro-batch's forward cache
    generation_bytes(...)               a batch of generations: KV cache + logits
    check_fits(nbytes, what, option)    ResourceError naming `option` if it does not fit
    check_line_lengths(lines, path)     DataError naming the first line that is too long
    check_model_fits(config, cls, ...)  before building a model (any kind) from its config
    check_training_fits(model, B, W)    before the first training step: state + one batch + W processes
    check_text_fits(nbytes, source)     before reading a data file: TEXT_BYTES_PER_BYTE of memory each
    check_bpe_fits(nbytes, what, option)  before the tokenizers library trains on or encodes a text: it
                                        aborts the process (a Rust abort, no exception) when memory runs out
    model_flops_per_token(model)        6N + 12 L C T (nanoGPT's estimate), for MFU
    gemm_peak_flops()                   float32 GEMM FLOP/s, measured once (well under a second)
    gemm_rate()                         one n x n float32 product's FLOP/s, measured now
    mfu(flops, tokens_per_s, peak)      model FLOP rate / peak, or None when that cannot be right (> 1)
"""

from __future__ import annotations

import math
import os
import time
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from scratchformer.errors import ConfigError, DataError, DTypeError, ResourceError

FLOAT_BYTES = 4  # float32, the library's default dtype
USABLE_FRACTION = 0.9  # leave the rest to the OS and the Python interpreter
LAYER_OVERHEAD_BYTES = 32 * 1024  # Python objects of one block (~15 KB measured for a tiny GPT block), doubled
MAX_LINE_CHARS = 1000  # a "lines" data set is names and short items; 1,000 chars is generous
# memory a data file costs while it is read and encoded, per byte of the file (measured on
# tinyshakespeare: the bytes, the decoded str, the int64 ids and the split copies, ~9.6)
TEXT_BYTES_PER_BYTE = 10
# what the `tokenizers` library (Rust) holds per byte of text, measured as peak RSS on
# tinyshakespeare x2 and x4: training a byte-level BPE on one text ~103 (its pre-tokenized
# words), encoding one text ~225 (the Encoding's ids, token strings, offsets and masks)
BPE_TRAIN_BYTES_PER_BYTE = 120
BPE_ENCODE_BYTES_PER_BYTE = 250
PROCESS_BYTES = 64 << 20  # a forked training process beyond its share of the batch: Python, NumPy, buffers


def _read_first(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as f:
            return f.read(4096).strip()
    except (OSError, ValueError):
        return None


def _machine_available() -> int | None:
    """MemAvailable from /proc/meminfo (Linux), else free pages times the page size."""
    text = _read_first("/proc/meminfo")
    for line in (text or "").splitlines():
        if line.startswith("MemAvailable:"):
            try:
                return int(line.split()[1]) * 1024  # the value is in kB
            except (ValueError, IndexError):
                break
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _cgroup_left(root: str = "/sys/fs/cgroup") -> int | None:
    """Bytes this process's cgroup may still use: memory.max - memory.current (v2), or
    memory.limit_in_bytes - memory.usage_in_bytes (v1); None without a limit."""
    paths = []
    for line in (_read_first("/proc/self/cgroup") or "").splitlines():
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if controllers == "":  # v2: one unified hierarchy
            paths.append((f"{root}{path.rstrip('/')}/memory.max", f"{root}{path.rstrip('/')}/memory.current"))
        elif "memory" in controllers.split(","):
            paths.append((f"{root}/memory{path.rstrip('/')}/memory.limit_in_bytes",
                          f"{root}/memory{path.rstrip('/')}/memory.usage_in_bytes"))
    # inside a container the process's own cgroup is usually mounted at the root
    paths += [(f"{root}/memory.max", f"{root}/memory.current"),
              (f"{root}/memory/memory.limit_in_bytes", f"{root}/memory/memory.usage_in_bytes")]
    for limit_path, usage_path in paths:
        limit = _read_first(limit_path)
        if limit is None:
            continue
        if not limit.isdigit() or int(limit) >= 1 << 60:  # "max", or v1's "no limit" (~2^63)
            return None
        usage = _read_first(usage_path)
        return max(int(limit) - (int(usage) if usage and usage.isdigit() else 0), 0)
    return None


def _address_space_left() -> int | None:
    """Bytes this process may still map under RLIMIT_AS (`ulimit -v`); None without a limit."""
    try:
        import resource
    except ImportError:  # Windows
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return None
    mapped = 0
    for line in (_read_first("/proc/self/status") or "").splitlines():
        if line.startswith("VmSize:"):
            mapped = int(line.split()[1]) * 1024
    return max(soft - mapped, 0)


def memory_limits() -> dict[str, int]:
    """{what limits it: bytes this process can still allocate under it}, for each limit known."""
    limits = {"the machine's available memory": _machine_available(), "the cgroup's memory limit": _cgroup_left(),
              "the address-space limit (ulimit -v)": _address_space_left()}
    return {name: left for name, left in limits.items() if left is not None}


def available_memory() -> int | None:
    """Bytes a new allocation can have: the smallest of memory_limits(), or None (unknown)."""
    return min(memory_limits().values(), default=None)


class Sizes(NamedTuple):
    """What the estimates need of a model, from its config alone: each model class answers
    `ModelClass.sizes(config)` (models/base.py), so nothing here knows a family's fields.

    params: the parameters its constructor builds; n_layer: attention layers (an
    encoder-decoder's cross-attentions counted as layers too); n_embd: width; n_head: heads;
    context: the longest sequence; vocab: the output (and input) vocabulary rows."""

    params: int
    n_layer: int
    n_embd: int
    n_head: int
    context: int
    vocab: int


def model_sizes(config, model_class) -> Sizes:
    """`model_class.sizes(config)`; config: the class's config object, or its dict
    (config.json's "model", read with the config class's `from_dict`)."""
    if isinstance(config, dict):
        config = model_class.config_class.from_dict(config)
    return model_class.sizes(config)


def param_count_bound(config, model_class) -> int:
    """Parameters of a model of `model_class` built from `config` (a config or its dict),
    counted by the class from the shapes its constructor builds."""
    return model_sizes(config, model_class).params


def training_state_bytes(n_params: int, itemsize: int = FLOAT_BYTES) -> int:
    """Weights, their gradients and AdamW's m and v: four arrays the size of the model."""
    return 4 * n_params * itemsize


def activation_bytes(batch_size: int, block_size: int, n_layer: int, n_embd: int, n_head: int,
                     vocab_size: int, itemsize: int = FLOAT_BYTES, per_layer_factor: int = 16) -> int:
    """Rough upper bound of one micro-batch's forward cache plus its backward's temporaries:
    per layer ~k*B*T*C for the LayerNorm/linear/feed-forward caches (the 4x-wide hidden layer
    included in k) and 2*B*H*T*T for the attention scores and probabilities; the logits,
    their softmax and gradient are 3*B*T*V."""
    B, T = batch_size, block_size
    per_layer = per_layer_factor * B * T * n_embd + 2 * B * n_head * T * T
    return (n_layer * per_layer + 3 * B * T * vocab_size) * itemsize


def generation_bytes(n: int, prompt_len: int, max_new_tokens: int, n_layer: int, n_embd: int,
                     vocab_size: int, itemsize: int = FLOAT_BYTES) -> int:
    """n sequences of prompt + new tokens: the KV cache (keys and values of every layer) and
    a few (n, V) arrays of logits and probabilities per step."""
    length = prompt_len + max_new_tokens
    return (2 * n_layer * n * length * n_embd + 4 * n * vocab_size) * itemsize


def _gb(nbytes: float) -> str:
    return f"{nbytes / 1e9:.3g} GB"


def check_fits(nbytes: int, what: str, option: str, available: int | None = None) -> None:
    """Raise ResourceError if `nbytes` exceeds the usable part of the available memory.

    `what` says what would be allocated ("a training batch"), `option` what to lower
    ("--batch-size or --block-size"). `available` defaults to available_memory(); when that
    is unknown, nothing is checked.
    """
    if isinstance(nbytes, bool) or not isinstance(nbytes, (int, float, np.integer, np.floating)) or not nbytes >= 0:
        raise ConfigError(f"check_fits nbytes must be a number >= 0, got {nbytes!r}")
    if not isinstance(what, str) or not isinstance(option, str):
        raise DTypeError("check_fits what and option must be str (they make the message)")
    _refuse_if(nbytes, what, f"lower {option}", available)


def _refuse_if(nbytes: int, what: str, fix: str, available: int | None = None) -> None:
    which = None
    if available is None:
        limits = memory_limits()
        if limits:
            which = min(limits, key=limits.get)
            available = limits[which]
    if available is None:
        return
    if nbytes > USABLE_FRACTION * available:
        under = "" if which is None or which.startswith("the machine") else f" under {which}"
        raise ResourceError(f"{what} needs about {_gb(nbytes)} of memory but {_gb(available)} is available{under}: "
                            f"{fix}")


def check_line_lengths(lines, path, limit: int = MAX_LINE_CHARS, option: str = "--format text") -> None:
    """Refuse a lines data set with a line longer than `limit` characters (its block size,
    and every batch, would grow with it), naming the first such line (1-based)."""
    for number, line in enumerate(lines, start=1):
        if len(line) > limit:
            raise DataError(f"{path} line {number} has {len(line):,} characters (the limit for a lines file is "
                            f"{limit:,}): shorten it, or train on the file with {option}")


def check_model_fits(config, model_class, training: bool, option: str = "--n-embd, --n-layer or --block-size") -> None:
    """Before building a model of `model_class` from `config`: its weights (and, when training,
    gradients and AdamW moments)."""
    sizes = model_sizes(config, model_class)
    n = sizes.params
    nbytes = (training_state_bytes(n) if training else n * FLOAT_BYTES) + sizes.n_layer * LAYER_OVERHEAD_BYTES
    check_fits(nbytes, f"a model of about {n:,} parameters" + (" with its training state" if training else ""),
               option)


def check_training_fits(model, batch_size: int, workers: int = 1) -> None:
    """Before the first step: the training state of `model` plus one micro-batch's activations
    (split over the processes, the same in all) plus each further process's own overhead."""
    _, L, C, heads, T, V = type(model).sizes(model.config)
    state = 3 * model.num_parameters() * FLOAT_BYTES  # gradients and AdamW's m, v (the weights exist)
    processes = "" if workers == 1 else f" in {workers} processes"
    check_fits(state + activation_bytes(batch_size, T, L, C, heads, V) + (workers - 1) * PROCESS_BYTES,
               f"training with --batch-size {batch_size} and a context of {T}{processes}",
               "--batch-size or --block-size" + (", or --workers" if workers > 1 else ""))


def check_text_fits(nbytes: int, source: str, option: str = "--data") -> None:
    """Before reading a data file of `nbytes` bytes: what reading and encoding it costs."""
    _refuse_if(TEXT_BYTES_PER_BYTE * nbytes, f"reading the data file {source} ({nbytes:,} bytes)",
               f"give {option} a smaller file")


def check_bpe_fits(nbytes: int, what: str, option: str, training: bool = False) -> None:
    """Before the tokenizers library trains on (`training`) or encodes `nbytes` of text: a
    ResourceError naming `option` when it would not fit (the library itself would abort the
    process, no Python error to catch)."""
    per_byte = BPE_TRAIN_BYTES_PER_BYTE if training else BPE_ENCODE_BYTES_PER_BYTE
    _refuse_if(per_byte * nbytes, f"{'training a BPE tokenizer on' if training else 'BPE-encoding'} {what} "
               f"({nbytes:,} bytes)", option)


def model_flops_per_token(model) -> float:
    """FLOPs of one training token, forward and backward: 6 per parameter plus attention's
    12 * layers * width * context (nanoGPT's estimate_mfu; the context is the model's
    maximum, so short names over-count the attention term)."""
    _, L, C, _, T, _ = type(model).sizes(model.config)
    return 6.0 * model.num_parameters() + 12.0 * L * C * T


@lru_cache(maxsize=1)
def gemm_peak_flops(n: int = 512, repeats: int = 3) -> float:
    """float32 matmul FLOP/s on this machine, the best of a few n x n products (measured once
    per process; an estimate of the peak MFU is measured against)."""
    a = np.ones((n, n), dtype=np.float32)
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        a @ a
        best = min(best, time.perf_counter() - t)
    return 2.0 * n**3 / max(best, 1e-9)


def gemm_rate(n: int = 512) -> float:
    """float32 FLOP/s of one n x n matmul, measured now (a few milliseconds)."""
    a = np.ones((n, n), dtype=np.float32)
    t = time.perf_counter()
    a @ a
    return 2.0 * n**3 / max(time.perf_counter() - t, 1e-9)


def mfu(flops_per_token: float, tokens_per_s: float, peak: float) -> float | None:
    """Model FLOPs utilisation: flops_per_token * tokens_per_s / peak, to 3 significant digits.

    None -- no figure -- where it cannot be right: a peak that is not a positive number, or a
    result above 1, which says the training ran faster than the GEMM rate `peak` measured, so
    that measurement was taken under load it no longer has (the trainer measures again and
    writes no MFU until the rate it divides by is at least what the training reached)."""
    for name, value in (("flops_per_token", flops_per_token), ("tokens_per_s", tokens_per_s)):
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) or value < 0:
            raise ConfigError(f"mfu {name} must be a number >= 0, got {value!r}")
    if isinstance(peak, bool) or not (isinstance(peak, (int, float)) and math.isfinite(peak) and peak > 0):
        return None
    value = flops_per_token * tokens_per_s / peak
    if not (math.isfinite(value) and 0 <= value <= 1):
        return None
    return float(f"{value:.3g}")
