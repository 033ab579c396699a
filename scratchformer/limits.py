"""Memory estimates made before allocating, so a size that cannot fit ends as one line
naming the option to lower instead of a MemoryError traceback or a machine that swaps.

The estimates are deliberately rough upper bounds (what matters is the order of magnitude:
a --block-size of 10^6 asks for terabytes); `check_fits` compares them with the memory the
machine has available now.

    available_memory()                  bytes free now (MemAvailable), or None if unknown
    gpt_param_count(config)             parameters of a GPT config (dict or GPTConfig)
    training_state_bytes(n_params)      weights + grads + AdamW's two moments
    activation_bytes(...)               one training micro-batch's forward cache
    generation_bytes(...)               a batch of generations: KV cache + logits
    check_fits(nbytes, what, option)    ResourceError naming `option` if it does not fit
    check_line_lengths(lines, path)     DataError naming the first line that is too long
"""

from __future__ import annotations

import os

from scratchformer.errors import DataError, ResourceError

FLOAT_BYTES = 4  # float32, the library's default dtype
USABLE_FRACTION = 0.9  # leave the rest to the OS and the Python interpreter
MAX_LINE_CHARS = 1000  # a "lines" data set is names and short items; 1,000 chars is generous


def available_memory() -> int | None:
    """Bytes of memory available to a new allocation: MemAvailable from /proc/meminfo
    (Linux), else free pages times the page size, else None (unknown)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024  # the value is in kB
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _get(config, name: str, default=None):
    """A field of a config given as a dataclass or as a plain dict (config.json's "model")."""
    return config.get(name, default) if isinstance(config, dict) else getattr(config, name, default)


def gpt_param_count(config) -> int:
    """Parameters of a GPT (upper bound: counts biases and an untied head when unsure)."""
    V, T, L, C = (int(_get(config, k)) for k in ("vocab_size", "block_size", "n_layer", "n_embd"))
    H = int(_get(config, "n_inner") or 4 * C)
    per_block = 4 * C * C + 4 * C      # attention: q, k, v, output projections (+ biases)
    per_block += 2 * C * H + H + C     # feed-forward: C -> H -> C (+ biases)
    per_block += 4 * C                 # two LayerNorms: weight and bias
    embeddings = V * C + T * C         # token table + learned positions
    head = 0 if _get(config, "tie_weights", False) else C * V
    return embeddings + L * per_block + 2 * C + head


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
    if available is None:
        available = available_memory()
    if available is None:
        return
    if nbytes > USABLE_FRACTION * available:
        raise ResourceError(f"{what} needs about {_gb(nbytes)} of memory but {_gb(available)} is available: "
                            f"lower {option}")


def check_line_lengths(lines, path, limit: int = MAX_LINE_CHARS, option: str = "--format text") -> None:
    """Refuse a lines data set with a line longer than `limit` characters (its block size,
    and every batch, would grow with it), naming the first such line (1-based)."""
    for number, line in enumerate(lines, start=1):
        if len(line) > limit:
            raise DataError(f"{path} line {number} has {len(line):,} characters (the limit for a lines file is "
                            f"{limit:,}): shorten it, or train on the file with {option}")
