"""scratchformer's hook names and TransformerLens 4's, both ways, for a GPT and its export.

    tl = to_transformer_lens(cache, model)          # {TransformerLens name: array in its layout}
    back = from_transformer_lens(tl_cache, model)   # {scratchformer name: array in ours}

`cache` is what `scratchformer.lens.run_with_cache(model, ids)` keeps; `tl_cache` what
TransformerLens 4's `TransformerBridge` keeps for the same ids on the model's export, booted as
`TransformerBridge.boot_transformers(EXPORT, hf_model=..., tokenizer=...)` then
`enable_compatibility_mode(no_processing=True)` (weights as exported: nothing folded or centred).
Its values may be torch tensors; what comes back is NumPy.

Every activation has a partner there, but not one to one by name or layout (`TL_NAMES`):
- q and k are after rotation in a rotary model (`hook_rot_q` / `hook_rot_k`; TransformerLens's
  `hook_q` / `hook_k` are before it); heads are the second axis here, the third there;
- a gated feed-forward's `mlp.pre` is [gate | up] (twice the width), there `hook_pre` and
  `hook_pre_linear`;
- `ln_final` is `ln_final.hook_out` (TransformerLens's `hook_normalized` is before the norm's weight);
- `pos_embed` is (T, C) here, (B, T, C) there.

A scratchformer name with no row in TL_NAMES is a HookError naming it, never skipped: a new hook
point needs its row (tests/interop/test_lens_names.py fails until it has one).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from scratchformer.errors import HookError
from scratchformer.nn.feedforward import GATED_ACTIVATIONS

__all__ = ["TL_NAMES", "Partner", "tl_partner", "to_transformer_lens", "from_transformer_lens"]

SAME, HEADS, BATCHED, HALVES = "same", "heads", "batched", "halves"


@dataclass(frozen=True)
class Partner:
    """A scratchformer activation's partner in TransformerLens 4: its name (L: the layer), how the
    array is laid out there, and the names instead in a rotary model (q and k after rotation) or
    with a gated feed-forward (its halves)."""

    name: str
    layout: str = (
        SAME  # SAME; HEADS: (B, H, T, hs) here, (B, T, H, hs) there; BATCHED: (T, C) here, (B, T, C) there
    )
    rotary: str | None = None
    gated: tuple[str, ...] | None = None  # HALVES: the last axis here is these, side by side


# scratchformer hook name (L: a layer) -> its partner; the table a new hook point extends
TL_NAMES: dict[str, Partner] = {
    "embed": Partner("hook_embed"),
    "pos_embed": Partner("hook_pos_embed", BATCHED),
    "blocks.L.resid_pre": Partner("blocks.L.hook_resid_pre"),
    "blocks.L.attn_norm.in": Partner("blocks.L.ln1.hook_in"),
    "blocks.L.attn_norm.out": Partner("blocks.L.ln1.hook_out"),
    "blocks.L.attn.q": Partner("blocks.L.attn.hook_q", HEADS, rotary="blocks.L.attn.hook_rot_q"),
    "blocks.L.attn.k": Partner("blocks.L.attn.hook_k", HEADS, rotary="blocks.L.attn.hook_rot_k"),
    "blocks.L.attn.v": Partner("blocks.L.attn.hook_v", HEADS),
    "blocks.L.attn.scores": Partner("blocks.L.attn.hook_attn_scores"),
    "blocks.L.attn.pattern": Partner("blocks.L.attn.hook_pattern"),
    "blocks.L.attn.head_out": Partner("blocks.L.attn.hook_z", HEADS),
    "blocks.L.attn.out": Partner("blocks.L.hook_attn_out"),
    "blocks.L.resid_mid": Partner("blocks.L.hook_resid_mid"),
    "blocks.L.ff_norm.in": Partner("blocks.L.ln2.hook_in"),
    "blocks.L.ff_norm.out": Partner("blocks.L.ln2.hook_out"),
    "blocks.L.mlp.in": Partner("blocks.L.mlp.hook_in"),
    "blocks.L.mlp.pre": Partner(
        "blocks.L.mlp.hook_pre", gated=("blocks.L.mlp.hook_pre", "blocks.L.mlp.hook_pre_linear")
    ),
    "blocks.L.mlp.post": Partner("blocks.L.mlp.hook_post"),
    "blocks.L.mlp.out": Partner("blocks.L.hook_mlp_out"),
    "blocks.L.resid_post": Partner("blocks.L.hook_resid_post"),
    "final_norm.in": Partner("ln_final.hook_in"),
    "final_norm.out": Partner("ln_final.hook_out"),
    "ln_final": Partner("ln_final.hook_out"),
}

_LAYER = re.compile(r"^blocks\.(\d+)\.")


def tl_partner(name: str, model) -> tuple[tuple[str, ...], str]:
    """(TransformerLens 4 names, layout) of scratchformer hook `name` in `model` (a GPT, or its
    config): one name, or a gated feed-forward's halves (layout HALVES). HookError for a name
    TL_NAMES has no row for."""
    config = getattr(model, "config", model)
    layer = _LAYER.match(name)
    row = TL_NAMES.get(_LAYER.sub("blocks.L.", name) if layer else name)
    if row is None:
        raise HookError(
            f"{name!r} has no TransformerLens partner in interop.lens_names.TL_NAMES: add its row "
            "(the name there and how its array is laid out)"
        )
    names, layout = (row.name,), row.layout
    if row.rotary is not None and config.positional == "rope":
        names = (row.rotary,)
    if row.gated is not None and config.activation in GATED_ACTIVATIONS:
        names, layout = row.gated, HALVES
    if layer:
        names = tuple(n.replace("blocks.L.", f"blocks.{layer.group(1)}.") for n in names)
    return names, layout


def to_transformer_lens(cache: dict, model) -> dict[str, np.ndarray]:
    """{TransformerLens 4 name: array in its layout} of a scratchformer cache of `model`
    (`run_with_cache`); every name must have a partner (HookError otherwise)."""
    batch = next((np.shape(x)[0] for n, x in cache.items() if n != "pos_embed"), 1)
    out = {}
    for name, x in cache.items():
        names, layout = tl_partner(name, model)
        x = np.asarray(x)
        if layout == HEADS:
            x = x.transpose(0, 2, 1, 3)
        elif layout == BATCHED:
            x = np.broadcast_to(x, (batch, *x.shape)).copy()
        parts = np.split(x, len(names), axis=-1) if layout == HALVES else [x]
        out.update(zip(names, parts))
    return out


def from_transformer_lens(tl_cache, model, names=None) -> dict[str, np.ndarray]:
    """{scratchformer name: array in its layout} from a TransformerLens 4 cache (an
    ActivationCache, or a dict of arrays or tensors) of `model`'s export: `names` (default: every
    row of TL_NAMES, at each of the model's layers, whose partners the cache holds)."""
    config = getattr(model, "config", model)
    held = set(tl_cache.keys())
    if names is None:
        layers = [str(i) for i in range(config.n_layer)]
        every = [n.replace(".L.", f".{i}.") for n in TL_NAMES for i in (layers if ".L." in n else [""])]
        names = [n for n in every if set(tl_partner(n, config)[0]) <= held]
    out = {}
    for name in names:
        theirs, layout = tl_partner(name, config)
        missing = [n for n in theirs if n not in held]
        if missing:
            raise HookError(f"the TransformerLens cache has no {missing[0]!r} ({name!r}'s partner)")
        parts = [_numpy(tl_cache[n]) for n in theirs]
        x = np.concatenate(parts, axis=-1) if layout == HALVES else parts[0]
        if layout == HEADS:
            x = x.transpose(0, 2, 1, 3)
        elif layout == BATCHED:
            x = x[0]  # the same positions for every sequence
        out[name] = x
    return out


def _numpy(value) -> np.ndarray:
    """A torch tensor (detached, on the CPU) or an array, as a NumPy array."""
    if hasattr(value, "detach"):
        value = value.detach().cpu().numpy()
    return np.asarray(value)
