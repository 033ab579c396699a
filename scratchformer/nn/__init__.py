"""Layers with hand-written backward passes. See docs/architecture.md for the conventions."""

from scratchformer.errors import BackwardError, StateDictError
from scratchformer.nn.attention import KVCache, MultiHeadAttention
from scratchformer.nn.blocks import DecoderBlock, EncoderBlock
from scratchformer.nn.feedforward import FEEDFORWARD_ACTIVATIONS, FeedForward
from scratchformer.nn.init import manual_seed
from scratchformer.nn.layers import (
    NORMALIZATIONS,
    Dropout,
    Embedding,
    LayerNorm,
    Linear,
    NoNorm,
    RMSNorm,
    make_norm,
    set_dropout_rng,
)
from scratchformer.nn.module import Module, Parameter, eval_mode, trusted_calls
from scratchformer.nn.positional import (
    LearnedPositionalEmbedding,
    SinusoidalPositionalEncoding,
    sinusoidal_table,
)
from scratchformer.nn.recording import recording

__all__ = [
    "Module",
    "Parameter",
    "Linear",
    "Embedding",
    "LayerNorm",
    "Dropout",
    "MultiHeadAttention",
    "KVCache",
    "FeedForward",
    "SinusoidalPositionalEncoding",
    "LearnedPositionalEmbedding",
    "sinusoidal_table",
    "EncoderBlock",
    "DecoderBlock",
    "manual_seed",
    "set_dropout_rng",
    "BackwardError",
    "StateDictError",
    "eval_mode",
    "trusted_calls",
    "RMSNorm",
    "NoNorm",
    "NORMALIZATIONS",
    "make_norm",
    "FEEDFORWARD_ACTIVATIONS",
    "recording",
]
