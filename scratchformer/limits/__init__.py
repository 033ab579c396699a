"""Memory estimates made before allocating, so a size that cannot fit ends as one line
naming the option to lower instead of a MemoryError traceback or a machine that swaps.

The estimates are deliberately rough upper bounds (what matters is the order of magnitude:
a --block-size of 10^6 asks for terabytes); `check_fits` compares them with the memory this
process can really have now: the smallest of the machine's MemAvailable, its cgroup's limit
(memory.max, or memory.limit_in_bytes under cgroup v1) less what the cgroup uses, and its
address-space limit (`ulimit -v`, RLIMIT_AS) less what it has mapped.

memory.py (what the OS lets this process allocate)
    memory_limits()                     {name of the limit: bytes left under it}
    available_memory()                  the smallest of them, or None if none is known
    check_fits(nbytes, what, option)    ResourceError naming `option` if it does not fit
estimates.py (what a run needs; sizes and parameter counts come from the model class's
`sizes(config)`, models/base.py, so nothing here knows a family's fields)
    Sizes, model_sizes(config, cls)     what a model class says of a config: parameters, layers, width...
    param_count_bound(config, cls)      its parameters, counted by the model class
    training_state_bytes(n_params)      weights + grads + AdamW's two moments
    activation_bytes(...)               one training micro-batch's forward cache
    generation_bytes(...)               a batch of generations: KV cache + logits
    check_model_fits(config, cls, ...)  before building a model (any kind) from its config
    check_training_fits(model, B, W)    before the first training step: state + one batch + W processes
    check_text_fits(nbytes, source)     before reading a data file: TEXT_BYTES_PER_BYTE of memory each
    check_bpe_fits(nbytes, what, option)  before the tokenizers library trains on or encodes a text: it
                                        aborts the process (a Rust abort, no exception) when memory runs out
gemm.py (the GEMM micro-benchmark MFU is measured against)
    model_flops_per_token(model)        6N + 12 L C T (nanoGPT's estimate), for MFU
    gemm_peak_flops()                   float32 GEMM FLOP/s, measured once (well under a second)
    gemm_rate()                         one n x n float32 product's FLOP/s, measured now
    mfu(flops, tokens_per_s, peak)      model FLOP rate / peak, or None when that cannot be right (> 1)

The names are importable from here too; a test that replaces one (monkeypatch) replaces it in
the module that defines it (`scratchformer.limits.memory.memory_limits`).
"""

from scratchformer.limits.estimates import (
    BPE_ENCODE_BYTES_PER_BYTE,
    BPE_TRAIN_BYTES_PER_BYTE,
    FLOAT_BYTES,
    LAYER_OVERHEAD_BYTES,
    PROCESS_BYTES,
    TEXT_BYTES_PER_BYTE,
    Sizes,
    activation_bytes,
    check_bpe_fits,
    check_model_fits,
    check_text_fits,
    check_training_fits,
    generation_bytes,
    model_sizes,
    param_count_bound,
    training_state_bytes,
)
from scratchformer.limits.gemm import gemm_peak_flops, gemm_rate, mfu, model_flops_per_token
from scratchformer.limits.memory import USABLE_FRACTION, available_memory, check_fits, memory_limits

__all__ = [
    "BPE_ENCODE_BYTES_PER_BYTE",
    "BPE_TRAIN_BYTES_PER_BYTE",
    "FLOAT_BYTES",
    "LAYER_OVERHEAD_BYTES",
    "PROCESS_BYTES",
    "TEXT_BYTES_PER_BYTE",
    "USABLE_FRACTION",
    "Sizes",
    "activation_bytes",
    "available_memory",
    "check_bpe_fits",
    "check_fits",
    "check_model_fits",
    "check_text_fits",
    "check_training_fits",
    "gemm_peak_flops",
    "gemm_rate",
    "generation_bytes",
    "memory_limits",
    "mfu",
    "model_flops_per_token",
    "model_sizes",
    "param_count_bound",
    "training_state_bytes",
]
