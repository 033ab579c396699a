"""Complete models built from the `scratchformer.nn` layers."""

from scratchformer.models.classifier import ClassifierConfig, TransformerClassifier
from scratchformer.models.gpt import GPT, GPTConfig
from scratchformer.models.seq2seq import Seq2SeqConfig, Seq2SeqTransformer

__all__ = [
    "GPT",
    "GPTConfig",
    "ClassifierConfig",
    "TransformerClassifier",
    "Seq2SeqConfig",
    "Seq2SeqTransformer",
]
