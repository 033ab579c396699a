"""A Hugging Face causal-LM directory as a model and its tokenizer, and text generated from it.

    model, tokenizer = load_hf_causal_lm("gpt2-dir")        # config.json's model_type picks the loader
    texts = hf_samples(model, tokenizer, "Hello", n=3, max_new_tokens=40, rng=0)
    save_hf_causal_lm(model, tokenizer, "out-dir")          # what transformers' from_pretrained reads

The directory is what `save_pretrained` writes: config.json, model.safetensors (any of
float32/bfloat16/float16, or shards) and the tokenizer (tokenizer.json, or GPT-2's vocab.json +
merges.txt). `scratchformer sample --hf DIR` runs `hf_samples`, whose text is transformers':
the prompt gets the start token the tokenizer's post-processor adds, and the continuation is
decoded after the prompt, as the whole sequence decodes. `scratchformer train --init-from DIR`
continues training such a model, and `scratchformer export RUN --hf OUT` writes a run back with
`save_hf_causal_lm`, in the first layout of HF_LAYOUTS (GPT-2, Llama) that holds it.
"""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

import numpy as np

from scratchformer.data.bpe import BPETokenizer
from scratchformer.errors import CheckpointError, ConfigError, DataError
from scratchformer.interop.hf_files import HFCheckpoint, read_checkpoint
from scratchformer.limits.estimates import check_model_fits, generation_bytes
from scratchformer.limits.memory import check_fits
from scratchformer.models import GPT
from scratchformer.runfiles import read_optional_json

__all__ = [
    "load_hf_causal_lm",
    "hf_generate",
    "hf_samples",
    "save_hf_causal_lm",
    "hf_layout",
    "hf_token_ids",
    "HF_LOADERS",
    "HF_LAYOUTS",
]


def _gpt2_reader():
    from scratchformer.interop.gpt2 import gpt2_config_from_hf, gpt2_from_hf

    return "GPT-2", gpt2_config_from_hf, gpt2_from_hf


def _llama_reader():
    from scratchformer.interop.llama import llama_config_from_hf, llama_from_hf

    return "Llama", llama_config_from_hf, llama_from_hf


# config.json's model_type -> (the family its messages name, its GPTConfig from config.json,
# its GPT from that config and a read checkpoint)
HF_LOADERS = {"gpt2": _gpt2_reader, "llama": _llama_reader}


# what the "not a directory" line says: the usual way to get one where a hub is reachable
HOW_TO_GET = (
    'to get one where the Hugging Face hub is reachable: python -c "from transformers import '
    "AutoModelForCausalLM as M, AutoTokenizer as T; M.from_pretrained('gpt2').save_pretrained('gpt2-dir'); "
    "T.from_pretrained('gpt2').save_pretrained('gpt2-dir')\""
)


def load_hf_causal_lm(
    path: str | Path, dtype: str = "float32", notes: list[str] | None = None, training: bool = False
) -> tuple[GPT, BPETokenizer]:
    """(model, tokenizer) of a Hugging Face causal-LM directory, read in the order that fails
    first where it is cheapest: config.json (CheckpointError when missing or unreadable,
    ConfigError for a model_type not in HF_LOADERS or a config its layout cannot hold), the
    tokenizer (DataError when it has more ids than the model's vocabulary), then the weights.
    `training`: a model whose weights, gradients and AdamW moments would not fit in memory is
    refused (limits.check_model_fits) before any weight is read.

    bfloat16 and float16 weights are read as float32 (or `dtype`). An embedding padded past the
    tokenizer (nanoGPT's 50,304 rows for GPT-2's 50,257 ids) keeps only the tokenizer's rows:
    logits of ids no text has are never computed, so they are never sampled (as if masked to
    -inf). What was converted or dropped is said in `notes` (lines appended), where given."""
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(
            f"{path}: not a directory: give a Hugging Face model directory (config.json, "
            f"model.safetensors, the tokenizer files); {HOW_TO_GET}"
        )
    cfg = read_optional_json(path / "config.json", error=CheckpointError)
    if cfg is None:
        raise CheckpointError(f"{path} has no config.json: is it a Hugging Face model directory?")
    model_type = cfg.get("model_type")
    if not isinstance(model_type, str) or model_type not in HF_LOADERS:  # a list: no TypeError
        raise ConfigError(
            f"{path}: model_type {model_type!r} is not a causal LM scratchformer loads "
            f"(one of: {', '.join(HF_LOADERS)})"
        )
    family, config_from_hf, from_hf = HF_LOADERS[model_type]()
    config = config_from_hf(cfg, dtype=dtype)
    tokenizer = BPETokenizer.from_hf_dir(path, cfg)
    n_tok, n_model = tokenizer.vocab_size, config.vocab_size
    if n_tok > n_model:
        raise DataError(
            f"{path}: the tokenizer has {n_tok:,} ids but the model only "
            f"{n_model:,}: they do not belong together"
        )
    if training:  # the model as it is trained: the tokenizer's rows only
        check_model_fits(dataclasses.replace(config, vocab_size=n_tok), GPT, training=True)
    checkpoint = read_checkpoint(path, family, cfg)  # each weight file read once
    model = from_hf(checkpoint, config)
    if notes is not None:
        notes.extend(_notes(checkpoint, config.dtype, n_tok, n_model))
    if n_tok < n_model:
        model = _vocab_rows(model, n_tok)
    return model, tokenizer


def _notes(checkpoint: HFCheckpoint, dtype: str, n_tok: int, n_model: int) -> list[str]:
    """What reading the directory converted or dropped, one line each."""
    notes = []
    if checkpoint.half_dtypes:
        notes.append(
            f"note: {checkpoint.weights} holds {' and '.join(checkpoint.half_dtypes)} weights, read as {dtype}"
        )
    if n_tok < n_model:
        notes.append(
            f"note: the model's {n_model:,} embedding rows are padded past the tokenizer's "
            f"{n_tok:,} ids; the {n_model - n_tok:,} rows no text uses are dropped (never sampled)"
        )
    return notes


def _vocab_rows(model: GPT, n: int) -> GPT:
    """`model` with the first `n` rows of its token embedding (and of an untied head)."""
    config = dataclasses.replace(model.config, vocab_size=n)
    state = model.state_dict()
    for name in ("wte.weight", "lm_head.weight"):
        if name in state:
            state[name] = state[name][:n]
    smaller = GPT(config)
    smaller.load_state_dict(state, strict=True)
    return smaller


def hf_generate(
    model: GPT,
    tokenizer: BPETokenizer,
    prompt: str = "",
    n: int = 1,
    max_new_tokens: int = 50,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    rng=None,
) -> tuple[np.ndarray, list[np.ndarray]]:
    """(start ids (T,), n arrays of new ids): `prompt` as transformers' tokenizer(prompt) gives
    it (the start token its post-processor adds, never twice), continued by `model`; each
    continuation ends before the first of the tokenizer's stop ids. An empty prompt that gets
    no start token starts from the end-of-text token, as GPT-2 generates unconditionally."""
    if top_k is not None and top_k > tokenizer.vocab_size:
        raise ConfigError(f"--top-k {top_k} is larger than the vocabulary ({tokenizer.vocab_size:,})")
    start = tokenizer.encode_prompt(prompt, what="--prompt")
    if len(start) == 0:
        if tokenizer.end_id is None:
            raise DataError("this tokenizer has no end-of-text token to start from: give a --prompt")
        start = np.array([tokenizer.end_id], dtype=np.int64)
    cfg = model.config
    check_fits(
        generation_bytes(n, len(start), max_new_tokens, cfg.n_layer, cfg.n_embd, cfg.vocab_size)
        + 8 * n * (len(start) + max_new_tokens),
        f"{n:,} samples of up to {len(start) + max_new_tokens:,} tokens",
        "-n or --max-new-tokens",
    )
    stops = tokenizer.stop_ids
    out = model.generate(
        np.tile(start, (n, 1)),
        max_new_tokens,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        rng=rng,
        eos_id=stops[0] if len(stops) == 1 else None,
    )
    news = []
    for row in out:
        new = row[len(start) :]
        ends = np.isin(new, stops)
        news.append(new[: int(np.argmax(ends))] if ends.any() else new)
    return start, news


def hf_samples(model: GPT, tokenizer: BPETokenizer, prompt: str = "", *args, **options) -> list[str]:
    """n continuations of `prompt`, each the prompt followed by its new tokens' text as
    transformers decodes the whole sequence (special tokens skipped). The arguments are
    `hf_generate`'s (n, max_new_tokens, temperature, top_k, top_p, rng), passed on to it."""
    start, news = hf_generate(model, tokenizer, prompt, *args, **options)
    return [prompt + tokenizer.decode_continuation(start, new) for new in news]


def _gpt2_layout():
    from scratchformer.interop.gpt2 import gpt2_config_to_hf, save_hf_gpt2

    return "GPT-2", "GPT2LMHeadModel", gpt2_config_to_hf, save_hf_gpt2


def _llama_layout():
    from scratchformer.interop.llama import llama_config_to_hf, save_hf_llama

    return "Llama", "LlamaForCausalLM", llama_config_to_hf, save_hf_llama


HF_LAYOUTS = (
    _gpt2_layout,
    _llama_layout,
)  # tried in order: the first whose config conversion accepts the model


def hf_layout(config) -> tuple[str, str, object]:
    """(family, transformers class, writer) of the first Hugging Face layout that can hold a model
    of `config`, asked through each layout's config conversion (which names what it cannot
    hold). ConfigError naming every layout's reasons when none can."""
    reasons = []
    for layout in HF_LAYOUTS:
        family, cls, to_hf, writer = layout()
        try:
            to_hf(config)
        except ConfigError as e:
            reasons.append(str(e))
            continue
        return family, cls, writer
    raise ConfigError("no Hugging Face layout scratchformer writes holds this model: " + "; ".join(reasons))


def hf_token_ids(tokenizer: BPETokenizer) -> dict[str, int]:
    """config.json's bos/eos/pad token ids for `tokenizer`: eos is its end-of-text token; bos the
    start token its post-processor adds (Llama's <s>), else the end token (GPT-2 uses
    <|endoftext|> for both); pad where the tokenizer names a pad token. Empty without an end token."""
    ids = {}
    if tokenizer.end_id is not None:
        ids["eos_token_id"] = ids["bos_token_id"] = tokenizer.end_id
    start = tokenizer.encode_prompt("")
    if len(start):
        ids["bos_token_id"] = int(start[0])
    pad = tokenizer._tok.padding
    if pad is not None and pad.get("pad_id") is not None:
        ids["pad_token_id"] = int(pad["pad_id"])
    return ids


def save_hf_causal_lm(model: GPT, tokenizer, path: str | Path) -> Path:
    """Write `model` and its BPE `tokenizer` as a Hugging Face directory that transformers'
    from_pretrained and AutoTokenizer read: GPT2LMHeadModel's layout where GPT-2 holds the model
    (learned positions, LayerNorm, biases, ...), else LlamaForCausalLM's (RoPE, RMSNorm, SwiGLU,
    no biases); config.json carries the tokenizer's bos/eos/pad ids, so generate stops at the end
    token. Files: config.json, generation_config.json, model.safetensors, tokenizer.json,
    tokenizer_config.json, and for a byte-level BPE GPT-2's vocab.json + merges.txt.
    Returns the directory (`hf_layout` says which class reads it). ConfigError when no layout holds the model (naming
    why) or the tokenizer is not a BPE, before anything is written."""
    import json

    import tokenizers

    from scratchformer.runfiles import write_atomic

    if not isinstance(tokenizer, BPETokenizer):
        raise ConfigError(
            "a character tokenizer has no Hugging Face form: export a run trained with "
            "--tokenizer bpe or --init-from"
        )
    if tokenizer.vocab_size > model.config.vocab_size:
        raise DataError(
            f"the tokenizer has {tokenizer.vocab_size:,} ids but the model only {model.config.vocab_size:,}"
        )
    _, _, writer = hf_layout(model.config)  # refused before anything is written
    token_ids = hf_token_ids(tokenizer)
    path = Path(path)
    writer(model, path, token_ids=token_ids)
    write_atomic(path / "generation_config.json", (json.dumps(token_ids, indent=2) + "\n").encode())
    tokenizer.save_hf(path / "tokenizer.json")
    tok = tokenizer._tok
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": model.config.block_size}
    if (
        isinstance(tok.model, tokenizers.models.BPE)
        and isinstance(tok.pre_tokenizer, tokenizers.pre_tokenizers.ByteLevel)
        and len(tokenizer.encode_prompt("")) == 0
    ):  # GPT-2's own tokenizer: its two files too
        with tempfile.TemporaryDirectory() as tmp:  # written by the tokenizers library, then moved atomically
            for written in tok.model.save(tmp):  # vocab.json + merges.txt
                write_atomic(path / Path(written).name, Path(written).read_bytes())
        config.update(tokenizer_class="GPT2Tokenizer", add_prefix_space=False)
    names = {key: tok.id_to_token(i) for key, i in token_ids.items()}
    config.update({key.replace("_id", ""): name for key, name in names.items() if name is not None})
    if tokenizer.special is not None and config["tokenizer_class"] == "GPT2Tokenizer":
        config["unk_token"] = tokenizer.special
    write_atomic(path / "tokenizer_config.json", (json.dumps(config, indent=2) + "\n").encode())
    return path
