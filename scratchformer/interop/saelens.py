"""A sparse autoencoder in SAELens's layout: the directory `SAE.save_inference_model` writes and
`SAE.load_from_disk` reads (sae_lens/saes/sae.py, version 6.51.1):

    cfg.json                  SAELens's inference config: architecture ("standard" for the relu
                              kind, "topk"), d_in, d_sae, dtype, device, apply_b_dec_to_input,
                              normalize_activations, reshape_activations, metadata (hook_name, ...)
                              and the kind's own fields (topk: k, rescale_acts_by_decoder_norm)
    sae_weights.safetensors   W_enc (d_in, d_sae), b_enc (d_sae,), W_dec (d_sae, d_in), b_dec (d_in,)

The relu kind is written as it is (SAELens saves a StandardTrainingSAE unchanged). The topk
kind is written as SAELens's TopKTrainingSAE.process_state_dict_for_saving_inference writes it:
the decoder's norms folded into the encoder (W_enc and b_enc times each norm, W_dec divided by
it), which computes the same features and reconstruction with unit decoder rows.

A hook point with heads (B, H, T, d) is read as one row per position with the heads side by
side (lens/sae.py `to_rows`), which is TransformerLens's hook_z flattened: the saved SAE reads
rows of H * d and its config says reshape_activations "none".

    save_saelens(sae, "out/names-sae/saelens", hook_name="blocks.1.resid_post", model_name="names")
    sae = load_saelens("out/names-sae/saelens")
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from scratchformer.errors import CheckpointError
from scratchformer.interop.hf_files import read_safetensors
from scratchformer.models.sae import SAEConfig, SparseAutoencoder
from scratchformer.ops.sae import decoder_norms
from scratchformer.runfiles import read_optional_json, write_atomic

__all__ = ["SAELENS_CONFIG", "SAELENS_WEIGHTS", "load_saelens", "save_saelens"]

SAELENS_CONFIG, SAELENS_WEIGHTS = "cfg.json", "sae_weights.safetensors"  # sae_lens/constants.py
# metadata.sae_lens_version: SAELens writes its own version there, and its loader reads a file
# without one (or older than 6.0) as a pre-6.0 config, whose nested metadata it drops. We write
# the release whose layout this is.
SAELENS_FORMAT_VERSION = "6.51.1"
ARCHITECTURES = {"relu": "standard", "topk": "topk"}


def save_saelens(
    sae: SparseAutoencoder, path, hook_name: str, model_name: str, context_size: int | None = None
):
    """Write `sae` into the directory `path` (created) as SAELens saves an inference SAE; each
    file written atomically. Returns the directory."""
    c = sae.config
    W_enc, b_enc = sae.W_enc.data.astype(np.float64), sae.b_enc.data.astype(np.float64)
    W_dec, b_dec = sae.W_dec.data.astype(np.float64), sae.b_dec.data.astype(np.float64)
    cfg = {
        "architecture": ARCHITECTURES[c.kind],
        "d_in": c.d_in,
        "d_sae": c.d_sae,
        "dtype": c.dtype,
        "device": "cpu",
        "apply_b_dec_to_input": True,
        "normalize_activations": "none",
        "reshape_activations": "none",
        "metadata": {
            "model_name": model_name,
            "hook_name": hook_name,
            "hook_head_index": None,
            "prepend_bos": True,
            "context_size": context_size,
            "model_class_name": "scratchformer",
            "sae_lens_version": SAELENS_FORMAT_VERSION,
            "sae_lens_training_version": None,
        },
    }
    if c.kind == "topk":  # TopKTrainingSAE's _fold_norm_topk
        norms = decoder_norms(W_dec)
        W_enc, b_enc, W_dec = W_enc * norms[None, :], b_enc * norms, W_dec / norms[:, None]
        cfg.update(k=c.k, rescale_acts_by_decoder_norm=True)
    from safetensors.numpy import save

    dtype = np.dtype(c.dtype)
    tensors = {
        n: np.ascontiguousarray(a.astype(dtype))
        for n, a in zip(("W_enc", "b_enc", "W_dec", "b_dec"), (W_enc, b_enc, W_dec, b_dec))
    }
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    write_atomic(path / SAELENS_WEIGHTS, save(tensors))
    write_atomic(path / SAELENS_CONFIG, (json.dumps(cfg, indent=2) + "\n").encode())
    return path


def load_saelens(path) -> SparseAutoencoder:
    """A `SparseAutoencoder` (eval mode) from a SAELens directory of architecture "standard"
    (read as the relu kind) or "topk"; anything else is one CheckpointError line."""
    path = Path(path)
    cfg = read_optional_json(
        path / SAELENS_CONFIG, error=CheckpointError, hint="is it a SAELens SAE directory?"
    )
    if cfg is None:
        raise CheckpointError(f"{path} holds no {SAELENS_CONFIG}: not a SAELens SAE directory")
    kinds = {v: k for k, v in ARCHITECTURES.items()}
    arch = cfg.get("architecture") if isinstance(cfg, dict) else None
    if arch not in kinds:
        raise CheckpointError(
            f"{path / SAELENS_CONFIG}: architecture {arch!r}; scratchformer reads {sorted(kinds)} SAEs"
        )
    if (
        cfg.get("normalize_activations", "none") != "none"
        or cfg.get("apply_b_dec_to_input", True) is not True
    ):
        raise CheckpointError(
            f"{path / SAELENS_CONFIG}: normalize_activations must be 'none' and apply_b_dec_to_input true "
            "for scratchformer to read it"
        )
    weights = read_safetensors(path / SAELENS_WEIGHTS)
    if set(weights) != {"W_enc", "b_enc", "W_dec", "b_dec"}:
        raise CheckpointError(
            f"{path / SAELENS_WEIGHTS} holds {sorted(weights)}, not W_enc, b_enc, W_dec and b_dec"
        )
    kind = kinds[arch]
    config = SAEConfig(
        kind=kind,
        d_in=int(cfg["d_in"]),
        d_sae=int(cfg["d_sae"]),
        k=int(cfg["k"]) if kind == "topk" else None,
        dtype="float64" if cfg.get("dtype") == "float64" else "float32",
    )
    sae = SparseAutoencoder(config)
    sae.load_state_dict({**weights, "steps_since_fired": np.zeros(config.d_sae)})
    return sae.eval()
