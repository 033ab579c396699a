"""Hugging Face checkpoint layouts in scratchformer's own layers."""

from scratchformer.interop.bert import BertConfig, BertEncoder, load_hf_bert
from scratchformer.interop.gpt2 import load_hf_gpt2, save_hf_gpt2
from scratchformer.interop.hf_lm import hf_generate, hf_samples, load_hf_causal_lm, save_hf_causal_lm
from scratchformer.interop.in_memory import from_transformers, to_transformers
from scratchformer.interop.lens_names import from_transformer_lens, to_transformer_lens
from scratchformer.interop.llama import load_hf_llama, save_hf_llama
from scratchformer.interop.sentence import SentenceEncoder
from scratchformer.interop.wordpiece import WordPieceTokenizer

__all__ = [
    "BertConfig",
    "BertEncoder",
    "load_hf_bert",
    "SentenceEncoder",
    "WordPieceTokenizer",
    "load_hf_gpt2",
    "save_hf_gpt2",
    "load_hf_causal_lm",
    "hf_generate",
    "hf_samples",
    "save_hf_causal_lm",
    "to_transformers",
    "from_transformers",
    "to_transformer_lens",
    "from_transformer_lens",
    "load_hf_llama",
    "save_hf_llama",
]
