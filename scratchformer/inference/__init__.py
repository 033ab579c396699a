"""Decoding: turning a model's logits into tokens (temperature, top-k, top-p, greedy)."""

from scratchformer.inference.beam import beam_search, greedy_decode, sequence_scores
from scratchformer.inference.sampling import as_rng, filtered_probs, sample_next, top_k_mask, top_p_mask

__all__ = [
    "beam_search",
    "greedy_decode",
    "sequence_scores",
    "as_rng",
    "filtered_probs",
    "sample_next",
    "top_k_mask",
    "top_p_mask",
]
