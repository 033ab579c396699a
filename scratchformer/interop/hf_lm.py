"""A Hugging Face causal-LM directory as a model and its tokenizer, and text generated from it.

    model, tokenizer = load_hf_causal_lm("gpt2-dir")        # config.json's model_type picks the loader
    texts = hf_samples(model, tokenizer, "Hello", n=3, max_new_tokens=40, rng=0)
    save_hf_causal_lm(model, tokenizer, "out-dir")          # what transformers' from_pretrained reads

The directory is what `save_pretrained` writes: config.json, model.safetensors and the
tokenizer (tokenizer.json, or GPT-2's vocab.json + merges.txt). `scratchformer sample --hf DIR`
runs `hf_samples`; `scratchformer train --init-from DIR` continues training such a model, and
`scratchformer export RUN --hf OUT` writes a run back with `save_hf_causal_lm`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from scratchformer.data.bpe import BPETokenizer
from scratchformer.errors import CheckpointError, ConfigError, DataError
from scratchformer.interop.hf_files import HALF_DTYPES, read_json, safetensors_dtypes
from scratchformer.limits import check_fits, generation_bytes
from scratchformer.models import GPT

__all__ = ["load_hf_causal_lm", "hf_generate", "hf_samples", "save_hf_causal_lm", "HF_LOADERS"]


def _load_gpt2(path: Path, dtype: str) -> GPT:
    from scratchformer.interop.gpt2 import load_hf_gpt2

    return load_hf_gpt2(path, dtype=dtype)


def _load_llama(path: Path, dtype: str) -> GPT:
    from scratchformer.interop.llama import load_hf_llama

    return load_hf_llama(path, dtype=dtype)


HF_LOADERS = {"gpt2": _load_gpt2, "llama": _load_llama}  # config.json's model_type -> loader


# what the "not a directory" line says: the usual way to get one where a hub is reachable
HOW_TO_GET = ("to get one where the Hugging Face hub is reachable: python -c \"from transformers import "
              "AutoModelForCausalLM as M, AutoTokenizer as T; M.from_pretrained('gpt2').save_pretrained('gpt2-dir'); "
              "T.from_pretrained('gpt2').save_pretrained('gpt2-dir')\"")


def load_hf_causal_lm(path: str | Path, dtype: str = "float32",
                      notes: list[str] | None = None) -> tuple[GPT, BPETokenizer]:
    """(model, tokenizer) of a Hugging Face causal-LM directory. Raises CheckpointError for a
    missing or unreadable config.json, ConfigError for a model_type not in HF_LOADERS, and
    DataError for a tokenizer larger than the model's vocabulary.

    bfloat16 and float16 weights are read as float32 (or `dtype`). An embedding padded past the
    tokenizer (nanoGPT's 50,304 rows for GPT-2's 50,257 ids) keeps only the tokenizer's rows:
    logits of ids no text has are never computed, so they are never sampled (as if masked to
    -inf). What was converted or dropped is said in `notes` (lines appended), where given."""
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"{path}: not a directory: give a Hugging Face model directory (config.json, "
                              f"model.safetensors, the tokenizer files); {HOW_TO_GET}")
    cfg = read_json(path / "config.json", error=CheckpointError)
    if cfg is None:
        raise CheckpointError(f"{path} has no config.json: is it a Hugging Face model directory?")
    model_type = cfg.get("model_type")
    if model_type not in HF_LOADERS:
        raise ConfigError(f"{path}: model_type {model_type!r} is not a causal LM scratchformer loads "
                          f"(one of: {', '.join(HF_LOADERS)})")
    tokenizer = BPETokenizer.from_hf_dir(path)
    model = HF_LOADERS[model_type](path, dtype)
    n_tok, n_model = tokenizer.vocab_size, model.config.vocab_size
    if n_tok > n_model:
        raise DataError(f"{path}: the tokenizer has {n_tok:,} ids but the model only "
                        f"{n_model:,}: they do not belong together")
    if notes is not None:
        half = sorted(HALF_DTYPES[d] for d in safetensors_dtypes(path / "model.safetensors") if d in HALF_DTYPES)
        if half:
            notes.append(f"note: {path / 'model.safetensors'} holds {' and '.join(half)} weights, "
                         f"read as {model.config.dtype}")
    if n_tok < n_model:
        model = _vocab_rows(model, n_tok)
        if notes is not None:
            notes.append(f"note: the model's {n_model:,} embedding rows are padded past the tokenizer's "
                         f"{n_tok:,} ids; the {n_model - n_tok:,} rows no text uses are dropped (never sampled)")
    return model, tokenizer


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


def hf_generate(model: GPT, tokenizer: BPETokenizer, prompt: str = "", n: int = 1, max_new_tokens: int = 50,
                temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None,
                rng=None) -> tuple[np.ndarray, list[np.ndarray]]:
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
    check_fits(generation_bytes(n, len(start), max_new_tokens, cfg.n_layer, cfg.n_embd, cfg.vocab_size)
               + 8 * n * (len(start) + max_new_tokens),
               f"{n:,} samples of up to {len(start) + max_new_tokens:,} tokens", "-n or --max-new-tokens")
    stops = tokenizer.stop_ids
    out = model.generate(np.tile(start, (n, 1)), max_new_tokens, temperature=temperature, top_k=top_k,
                         top_p=top_p, rng=rng, eos_id=stops[0] if len(stops) == 1 else None)
    news = []
    for row in out:
        new = row[len(start):]
        ends = np.isin(new, stops)
        news.append(new[: int(np.argmax(ends))] if ends.any() else new)
    return start, news


def hf_samples(model: GPT, tokenizer: BPETokenizer, prompt: str = "", n: int = 1,
               max_new_tokens: int = 50, temperature: float = 1.0, top_k: int | None = None,
               top_p: float | None = None, rng=None) -> list[str]:
    """n continuations of `prompt` (see `hf_generate`), each the prompt followed by its new
    tokens' text as transformers decodes the whole sequence (special tokens skipped)."""
    start, news = hf_generate(model, tokenizer, prompt, n, max_new_tokens, temperature, top_k, top_p, rng)
    return [prompt + tokenizer.decode_continuation(start, new) for new in news]


def save_hf_causal_lm(model: GPT, tokenizer, path: str | Path) -> Path:
    """Write `model` and its BPE `tokenizer` as a Hugging Face GPT-2 directory: config.json and
    model.safetensors (`save_hf_gpt2`), tokenizer.json, GPT-2's vocab.json + merges.txt and
    tokenizer_config.json, so `GPT2LMHeadModel.from_pretrained` and `AutoTokenizer` read it.
    ConfigError when GPT-2 cannot hold the model (e.g. bias=False) or the tokenizer is not a BPE."""
    import json

    from scratchformer.interop.gpt2 import gpt2_config_to_hf, save_hf_gpt2

    if not isinstance(tokenizer, BPETokenizer):
        raise ConfigError("a character tokenizer has no Hugging Face form: export a run trained with "
                          "--tokenizer bpe or --init-from")
    if tokenizer.vocab_size > model.config.vocab_size:
        raise DataError(f"the tokenizer has {tokenizer.vocab_size:,} ids but the model only "
                        f"{model.config.vocab_size:,}")
    gpt2_config_to_hf(model.config)  # refused before anything is written
    path = Path(path)
    save_hf_gpt2(model, path)
    tokenizer.save_hf(path / "tokenizer.json")
    tokenizer._tok.model.save(str(path))  # vocab.json + merges.txt
    special = tokenizer.special
    config = {"tokenizer_class": "GPT2Tokenizer", "model_max_length": model.config.block_size,
              "add_prefix_space": False}
    if special is not None:
        config.update(bos_token=special, eos_token=special, unk_token=special)
    (path / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    return path
