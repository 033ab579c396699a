"""Rough upper bounds of what a model, a batch, a data file or a tokenizer run needs, checked before allocating."""

from __future__ import annotations

from typing import NamedTuple

from scratchformer.limits.memory import check_fits, refuse_if

FLOAT_BYTES = 4  # float32, the library's default dtype
LAYER_OVERHEAD_BYTES = (
    32 * 1024
)  # Python objects of one block (~15 KB measured for a tiny GPT block), doubled
# memory a data file costs while it is read and encoded, per byte of the file (measured on
# tinyshakespeare: the bytes, the decoded str, the int64 ids and the split copies, ~9.6)
TEXT_BYTES_PER_BYTE = 10
# what the `tokenizers` library (Rust) holds per byte of text, measured as peak RSS on
# tinyshakespeare x2 and x4: training a byte-level BPE on one text ~103 (its pre-tokenized
# words), encoding one text ~225 (the Encoding's ids, token strings, offsets and masks)
BPE_TRAIN_BYTES_PER_BYTE = 120
BPE_ENCODE_BYTES_PER_BYTE = 250
PROCESS_BYTES = 64 << 20  # a forked training process beyond its share of the batch: Python, NumPy, buffers


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


def activation_bytes(
    batch_size: int,
    block_size: int,
    n_layer: int,
    n_embd: int,
    n_head: int,
    vocab_size: int,
    itemsize: int = FLOAT_BYTES,
    per_layer_factor: int = 16,
) -> int:
    """Rough upper bound of one micro-batch's forward cache plus its backward's temporaries:
    per layer ~k*B*T*C for the LayerNorm/linear/feed-forward caches (the 4x-wide hidden layer
    included in k) and 2*B*H*T*T for the attention scores and probabilities; the logits,
    their softmax and gradient are 3*B*T*V."""
    B, T = batch_size, block_size
    per_layer = per_layer_factor * B * T * n_embd + 2 * B * n_head * T * T
    return (n_layer * per_layer + 3 * B * T * vocab_size) * itemsize


def generation_bytes(
    n: int,
    prompt_len: int,
    max_new_tokens: int,
    n_layer: int,
    n_embd: int,
    vocab_size: int,
    itemsize: int = FLOAT_BYTES,
) -> int:
    """n sequences of prompt + new tokens: the KV cache (keys and values of every layer) and
    a few (n, V) arrays of logits and probabilities per step."""
    length = prompt_len + max_new_tokens
    return (2 * n_layer * n * length * n_embd + 4 * n * vocab_size) * itemsize


def check_model_fits(
    config, model_class, training: bool, option: str = "--n-embd, --n-layer or --block-size"
) -> None:
    """Before building a model of `model_class` from `config`: its weights (and, when training,
    gradients and AdamW moments)."""
    sizes = model_sizes(config, model_class)
    n = sizes.params
    nbytes = (training_state_bytes(n) if training else n * FLOAT_BYTES) + sizes.n_layer * LAYER_OVERHEAD_BYTES
    check_fits(
        nbytes,
        f"a model of about {n:,} parameters" + (" with its training state" if training else ""),
        option,
    )


def check_training_fits(model, batch_size: int, workers: int = 1) -> None:
    """Before the first step: the training state of `model` plus one micro-batch's activations
    (split over the processes, the same in all) plus each further process's own overhead."""
    _, L, C, heads, T, V = type(model).sizes(model.config)
    state = 3 * model.num_parameters() * FLOAT_BYTES  # gradients and AdamW's m, v (the weights exist)
    processes = "" if workers == 1 else f" in {workers} processes"
    check_fits(
        state + activation_bytes(batch_size, T, L, C, heads, V) + (workers - 1) * PROCESS_BYTES,
        f"training with --batch-size {batch_size} and a context of {T}{processes}",
        "--batch-size or --block-size" + (", or --workers" if workers > 1 else ""),
    )


def check_text_fits(nbytes: int, source: str, option: str = "--data") -> None:
    """Before reading a data file of `nbytes` bytes: what reading and encoding it costs."""
    refuse_if(
        TEXT_BYTES_PER_BYTE * nbytes,
        f"reading the data file {source} ({nbytes:,} bytes)",
        f"give {option} a smaller file",
    )


def check_bpe_fits(nbytes: int, what: str, option: str, training: bool = False) -> None:
    """Before the tokenizers library trains on (`training`) or encodes `nbytes` of text: a
    ResourceError naming `option` when it would not fit (the library itself would abort the
    process, no Python error to catch)."""
    per_byte = BPE_TRAIN_BYTES_PER_BYTE if training else BPE_ENCODE_BYTES_PER_BYTE
    refuse_if(
        per_byte * nbytes,
        f"{'training a BPE tokenizer on' if training else 'BPE-encoding'} {what} ({nbytes:,} bytes)",
        option,
    )
