"""A model handed to transformers and back in memory, with no directory in between.

    hf_model, hf_tokenizer = to_transformers(model, tokenizer)     # a run's GPT and its tokenizer
    model, tokenizer = from_transformers(hf_model, hf_tokenizer)   # any GPT-2 or Llama in transformers

Each equals the directory route: `to_transformers` is what `from_pretrained` and
`AutoTokenizer.from_pretrained` read from `save_hf_causal_lm`'s directory (the same layout,
config, weights and tokenizer, built by the same functions); `from_transformers` is what
`load_hf_causal_lm` reads from the model's `save_pretrained` directory (the same layout checks:
a setting or tensor outside the layout is refused in one line). torch and transformers are imported
only when these are called.
"""

from __future__ import annotations

import numpy as np

from scratchformer.data.bpe import BPETokenizer
from scratchformer.errors import ConfigError, DataError
from scratchformer.interop.hf_files import HFCheckpoint
from scratchformer.interop.hf_lm import LAYOUT_OF, NOT_READ, hf_layout, hf_token_ids, tokenizer_config
from scratchformer.models import GPT

__all__ = ["to_transformers", "from_transformers"]


def to_transformers(model: GPT, tokenizer):
    """(a transformers GPT2LMHeadModel or LlamaForCausalLM in eval mode, its tokenizer) equal to
    `model` and its run's `tokenizer` (characters or BPE): the first layout of HF_LAYOUTS that
    holds the model, its dtype kept. ConfigError naming why, where no layout holds it."""
    import torch
    import transformers

    layout = hf_layout(model)
    form = tokenizer.hf_form()
    if form.vocab_size > model.config.vocab_size:
        raise DataError(
            f"the tokenizer has {form.vocab_size:,} ids but the model only {model.config.vocab_size:,}"
        )
    token_ids = hf_token_ids(form)
    hf_config = {**layout.config_to_hf(model.config), **token_ids}
    config = transformers.AutoConfig.for_model(hf_config.pop("model_type"), **hf_config)
    dtype = getattr(torch, model.config.dtype)
    hf_model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)
    tensors = {
        name: torch.from_numpy(np.ascontiguousarray(a)) for name, a in layout.hf_tensors(model).items()
    }
    missing, unexpected = hf_model.load_state_dict(tensors, strict=False)
    tied = {"lm_head.weight"} if model.config.tie_weights else set()
    if set(missing) - tied or unexpected:  # the layouts' tensors are transformers' own: never expected
        raise ConfigError(f"{layout.hf_class} has no place for {unexpected[:3]} or lacks {missing[:3]}")
    hf_model.generation_config.update(**token_ids)
    options = tokenizer_config(form, token_ids, model.config.block_size)
    cls = getattr(transformers, options.pop("tokenizer_class"))
    return hf_model.eval(), cls(tokenizer_object=form._tok, **options)


def from_transformers(hf_model, hf_tokenizer, notes: list[str] | None = None) -> tuple[GPT, BPETokenizer]:
    """(model, tokenizer) of a transformers GPT-2 or Llama causal LM and its tokenizer (a fast
    one: its `backend_tokenizer`), in eval mode: float64 where the model is, else float32 (bfloat16
    and float16 read exactly as float32). As `load_hf_causal_lm`: a setting or tensor outside the
    layout is refused in one line, an embedding padded past the tokenizer keeps the tokenizer's rows,
    and `notes` gets what the reading decided."""
    import torch

    config_json = hf_model.config.to_dict()
    layout = LAYOUT_OF.get(config_json.get("model_type"))
    if layout is None:
        raise ConfigError(f"model_type {config_json.get('model_type')!r} {NOT_READ}")
    backend = getattr(hf_tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise ConfigError(
            f"{type(hf_tokenizer).__name__} has no backend_tokenizer: give a fast (tokenizers) one"
        )
    dtype = "float64" if next(hf_model.parameters()).dtype == torch.float64 else "float32"
    config = layout.config_from_hf(config_json, dtype=dtype)
    tokenizer = BPETokenizer.from_hf_tokenizer(
        type(backend).from_str(backend.to_str()),  # a copy: the transformers tokenizer is left as it is
        {
            "tokenizer_config.json": {
                "eos_token": hf_tokenizer.eos_token,
                "bos_token": hf_tokenizer.bos_token,
            },
            "config.json": config_json,
            "generation_config.json": hf_model.generation_config.to_dict(),
        },
    )
    if tokenizer.vocab_size > config.vocab_size:
        raise DataError(
            f"the tokenizer has {tokenizer.vocab_size:,} ids but the model only {config.vocab_size:,}: "
            "they do not belong together"
        )
    wanted = getattr(torch, dtype)
    tensors = {name: t.detach().cpu().to(wanted).numpy() for name, t in hf_model.state_dict().items()}
    checkpoint = HFCheckpoint(config_json, tensors, f"the {type(hf_model).__name__} in memory", ())
    model = layout.model_from_hf(checkpoint, config, notes, rows=tokenizer.vocab_size)
    return model.eval(), tokenizer
