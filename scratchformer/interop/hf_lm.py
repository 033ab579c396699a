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

from pathlib import Path

import numpy as np

from scratchformer.data.bpe import BPETokenizer
from scratchformer.errors import CheckpointError, ConfigError, DataError
from scratchformer.interop.hf_files import read_json
from scratchformer.limits import check_fits, generation_bytes
from scratchformer.models import GPT

__all__ = ["load_hf_causal_lm", "hf_samples", "save_hf_causal_lm", "HF_LOADERS"]


def _load_gpt2(path: Path, dtype: str) -> GPT:
    from scratchformer.interop.gpt2 import load_hf_gpt2

    return load_hf_gpt2(path, dtype=dtype)


def _load_llama(path: Path, dtype: str) -> GPT:
    from scratchformer.interop.llama import load_hf_llama

    return load_hf_llama(path, dtype=dtype)


HF_LOADERS = {"gpt2": _load_gpt2, "llama": _load_llama}  # config.json's model_type -> loader


def load_hf_causal_lm(path: str | Path, dtype: str = "float32") -> tuple[GPT, BPETokenizer]:
    """(model, tokenizer) of a Hugging Face causal-LM directory. Raises CheckpointError for a
    missing or unreadable config.json, ConfigError for a model_type not in HF_LOADERS, and
    DataError for a tokenizer missing or larger than the model's vocabulary."""
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"--hf {path}: not a directory (give a Hugging Face model directory)")
    cfg = read_json(path / "config.json", error=CheckpointError)
    if cfg is None:
        raise CheckpointError(f"{path} has no config.json: is it a Hugging Face model directory?")
    model_type = cfg.get("model_type")
    if model_type not in HF_LOADERS:
        raise ConfigError(f"{path}: model_type {model_type!r} is not a causal LM scratchformer loads "
                          f"(one of: {', '.join(HF_LOADERS)})")
    tokenizer = BPETokenizer.from_hf_dir(path)
    model = HF_LOADERS[model_type](path, dtype)
    if tokenizer.vocab_size > model.config.vocab_size:
        raise DataError(f"{path}: the tokenizer has {tokenizer.vocab_size:,} ids but the model only "
                        f"{model.config.vocab_size:,}: they do not belong together")
    return model, tokenizer


def hf_samples(model: GPT, tokenizer: BPETokenizer, prompt: str = "", n: int = 1,
               max_new_tokens: int = 50, temperature: float = 1.0, top_k: int | None = None,
               top_p: float | None = None, rng=None) -> list[str]:
    """n continuations of `prompt`, each the prompt followed by up to `max_new_tokens` tokens
    (a sample ends early at the tokenizer's end-of-text token). An empty prompt starts from the
    end-of-text token, as GPT-2 generates unconditionally."""
    if top_k is not None and top_k > tokenizer.vocab_size:
        raise ConfigError(f"--top-k {top_k} is larger than the vocabulary ({tokenizer.vocab_size:,})")
    ids = tokenizer.encode(prompt, what="--prompt")
    start = ids
    if len(ids) == 0:
        if tokenizer.end_id is None:
            raise DataError("this tokenizer has no end-of-text token to start from: give a --prompt")
        start = np.array([tokenizer.end_id], dtype=np.int64)
    cfg = model.config
    check_fits(generation_bytes(n, len(start), max_new_tokens, cfg.n_layer, cfg.n_embd, cfg.vocab_size)
               + 8 * n * (len(start) + max_new_tokens),
               f"{n:,} samples of up to {len(start) + max_new_tokens:,} tokens", "-n or --max-new-tokens")
    out = model.generate(np.tile(start, (n, 1)), max_new_tokens, temperature=temperature, top_k=top_k,
                         top_p=top_p, rng=rng, eos_id=tokenizer.end_id)
    texts = []
    for row in out:
        new = row[len(start):]
        if tokenizer.end_id is not None and (new == tokenizer.end_id).any():
            new = new[: int(np.argmax(new == tokenizer.end_id))]
        texts.append(prompt + tokenizer.decode(new))
    return texts


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
