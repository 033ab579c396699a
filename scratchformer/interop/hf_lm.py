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
`save_hf_causal_lm`, in the first layout of HF_LAYOUTS (GPT-2, Llama) that holds it (each an
interop.layout.Layout: what it holds is declared there, and anything else is refused in one line).
The directory's JSON files (hf_files.HF_JSON) are read once, together, before the tokenizer and
the weights.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np

from scratchformer.data.bpe import BPETokenizer
from scratchformer.errors import CheckpointError, ConfigError, DataError
from scratchformer.interop.gpt2 import GPT2
from scratchformer.interop.hf_files import HF_JSON, read_checkpoint, write_checkpoint
from scratchformer.interop.layout import Layout
from scratchformer.interop.llama import LLAMA
from scratchformer.limits.estimates import check_model_fits, generation_bytes
from scratchformer.limits.memory import check_fits
from scratchformer.models import GPT
from scratchformer.runfiles import read_optional_jsons

__all__ = [
    "load_hf_causal_lm",
    "hf_generate",
    "hf_samples",
    "save_hf_causal_lm",
    "hf_layout",
    "LAYOUT_OF",
    "hf_token_ids",
    "tokenizer_config",
    "HF_LAYOUTS",
]

# tried in this order by `hf_layout` (the first that holds a model writes it); config.json's
# model_type picks one when a directory is read
HF_LAYOUTS: tuple[Layout, ...] = (GPT2, LLAMA)
LAYOUT_OF = {layout.model_type: layout for layout in HF_LAYOUTS}  # config.json's model_type -> its layout
NOT_READ = f"is not a causal LM scratchformer loads (one of: {', '.join(LAYOUT_OF)})"


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
    first where it is cheapest: its JSON files, once (CheckpointError when config.json is missing or
    unreadable, ConfigError for a model_type no layout of HF_LAYOUTS reads or a config its layout
    cannot hold), the tokenizer (DataError when it has more ids than the model's vocabulary), then
    the weights (CheckpointError for a tensor missing or left over). `training`: a model whose
    weights, gradients and AdamW moments would not fit in memory is refused
    (limits.check_model_fits) before any weight is read.

    bfloat16 and float16 weights are read as float32 (or `dtype`). An embedding padded past the
    tokenizer (nanoGPT's 50,304 rows for GPT-2's 50,257 ids) keeps only the tokenizer's rows:
    logits of ids no text has are never computed, so they are never sampled (as if masked to
    -inf). What was converted, dropped or decided is said in `notes` (lines appended), where given."""
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(
            f"{path}: not a directory: give a Hugging Face model directory (config.json, "
            f"model.safetensors, the tokenizer files); {HOW_TO_GET}"
        )
    files = read_optional_jsons(path, HF_JSON)  # config.json, tokenizer_config.json, generation_config.json
    cfg = files["config.json"]
    if cfg is None:
        raise CheckpointError(f"{path} has no config.json: is it a Hugging Face model directory?")
    model_type = cfg.get("model_type")
    layout = LAYOUT_OF.get(model_type) if isinstance(model_type, str) else None  # a list: no TypeError
    if layout is None:
        raise ConfigError(f"{path}: model_type {model_type!r} {NOT_READ}")
    config = layout.config_from_hf(cfg, dtype=dtype)
    tokenizer = BPETokenizer.from_hf_files(path, files)
    n_tok, n_model = tokenizer.vocab_size, config.vocab_size
    if n_tok > n_model:
        raise DataError(
            f"{path}: the tokenizer has {n_tok:,} ids but the model only "
            f"{n_model:,}: they do not belong together"
        )
    if training:  # the model as it is trained: the tokenizer's rows only
        check_model_fits(dataclasses.replace(config, vocab_size=n_tok), GPT, training=True)
    checkpoint = read_checkpoint(path, layout.family, cfg)  # each weight file read once
    said = layout.dropout_note(config, "training") if training else []
    if checkpoint.half_dtypes:
        said.append(
            f"note: {checkpoint.weights} holds {' and '.join(checkpoint.half_dtypes)} weights, read as {dtype}"
        )
    if n_tok < n_model:
        said.append(
            f"note: the model's {n_model:,} embedding rows are padded past the tokenizer's "
            f"{n_tok:,} ids; the {n_model - n_tok:,} rows no text uses are dropped (never sampled)"
        )
    model = layout.model_from_hf(checkpoint, config, said, rows=n_tok)
    if notes is not None:
        notes.extend(said)
    return model, tokenizer


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


def hf_layout(model) -> Layout:
    """The first Hugging Face layout of HF_LAYOUTS that holds `model` (a GPT: its settings and its
    parameters; a GPTConfig: its settings only). ConfigError naming every layout's reasons, in
    one line, when none does."""
    reasons = []
    for layout in HF_LAYOUTS:
        problems = layout.cannot_hold(model)
        if not problems:
            return layout
        reasons.append(f"{layout.family} cannot represent this model: " + "; ".join(problems))
    raise ConfigError("no Hugging Face layout scratchformer writes holds this model: " + "; ".join(reasons))


def hf_token_ids(tokenizer: BPETokenizer) -> dict[str, int]:
    """config.json's bos/eos/pad token ids for `tokenizer` (a tokenizer's `hf_form()`): eos is
    its end-of-text token; bos the start token its post-processor adds (Llama's <s>, a line run's
    end-of-text token), else the end token (GPT-2 uses <|endoftext|> for both); pad where the
    tokenizer names a pad token. Empty without an end token."""
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


def tokenizer_config(tokenizer: BPETokenizer, token_ids: dict[str, int], block_size: int) -> dict:
    """tokenizer_config.json for `tokenizer` (a tokenizer's `hf_form()`), whose config.json ids
    are `token_ids`: GPT2Tokenizer for a byte-level BPE (GPT-2's own files), else
    PreTrainedTokenizerFast; the bos/eos/pad tokens by name, and add_bos_token where its
    post-processor starts every text with a token (read so by GPT2Tokenizer's vocab.json path too)."""
    tok = tokenizer._tok
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": block_size,
        "clean_up_tokenization_spaces": False,
    }
    if byte_level(tokenizer):
        config.update(tokenizer_class="GPT2Tokenizer", add_prefix_space=False)
        if tokenizer.special is not None:
            config["unk_token"] = tokenizer.special
    names = {key: tok.id_to_token(i) for key, i in token_ids.items()}
    config.update({key.replace("_id", ""): name for key, name in names.items() if name is not None})
    if len(tokenizer.encode_prompt("")):
        config["add_bos_token"] = True
    return config


def byte_level(tokenizer: BPETokenizer) -> bool:
    """Whether `tokenizer` is a byte-level BPE, as GPT-2's (written also as vocab.json + merges.txt)."""
    import tokenizers

    tok = tokenizer._tok
    return isinstance(tok.model, tokenizers.models.BPE) and isinstance(
        tok.pre_tokenizer, tokenizers.pre_tokenizers.ByteLevel
    )


def save_hf_causal_lm(model: GPT, tokenizer, path: str | Path, notes: list[str] | None = None) -> Path:
    """Write `model` and its tokenizer (a run's: characters or BPE) as a Hugging Face directory
    that transformers' from_pretrained and AutoTokenizer read: the first layout of HF_LAYOUTS
    that holds the model (`hf_layout`: GPT2LMHeadModel's where GPT-2 holds it, else
    LlamaForCausalLM's); config.json carries the tokenizer's bos/eos/pad ids, so generate stops at
    the end token, and the tokenizer starts a prompt where `sample` does (a line run's start
    token). Files: config.json, generation_config.json, model.safetensors, tokenizer.json,
    tokenizer_config.json, and for a byte-level BPE GPT-2's vocab.json + merges.txt. Returns the
    directory. ConfigError when no layout holds the model (naming why), before anything is
    written; `notes` gets a line on what the layout's dropout keeps of the model's."""
    import tempfile

    from scratchformer.runfiles import write_atomic

    layout = hf_layout(model)  # refused before anything is written
    form = tokenizer.hf_form()
    if form.vocab_size > model.config.vocab_size:
        raise DataError(
            f"the tokenizer has {form.vocab_size:,} ids but the model only {model.config.vocab_size:,}"
        )
    token_ids = hf_token_ids(form)
    path = Path(path)
    write_checkpoint(path, layout.config_to_hf(model.config), layout.hf_tensors(model), token_ids)
    write_atomic(path / "generation_config.json", (json.dumps(token_ids, indent=2) + "\n").encode())
    form.save_hf(path / "tokenizer.json")
    config = tokenizer_config(form, token_ids, model.config.block_size)
    if config["tokenizer_class"] == "GPT2Tokenizer":  # GPT-2's own tokenizer: its two files too
        with tempfile.TemporaryDirectory() as tmp:  # written by the tokenizers library, then moved atomically
            for written in form._tok.model.save(tmp):  # vocab.json + merges.txt
                write_atomic(path / Path(written).name, Path(written).read_bytes())
    write_atomic(path / "tokenizer_config.json", (json.dumps(config, indent=2) + "\n").encode())
    if notes is not None:
        notes.extend(layout.dropout_note(model.config, "exported"))
    return path
