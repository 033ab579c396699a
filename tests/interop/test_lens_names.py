"""scratchformer's hook names <-> TransformerLens 4's (interop.lens_names), checked against
`TransformerBridge` on exported GPT-2- and Llama-style runs (float64), and the nnsight module paths
docs/lens.md gives, checked with torch forward hooks on the same transformers models (nnsight's
`model.PATH.output` / `.input` are those modules' outputs and first inputs).

GPT-2: every activation within 1e-12 of TransformerLens's (relative to its largest value; measured
7.5e-16). Llama: within 1e-6 (measured 4.1e-7), the bound of transformers' float32 internals: its
RMSNorm computes the mean square in float32 and its rotary tables are float32, in a float64 model.

`python tests/interop/test_lens_names.py --markdown` prints docs/lens.md's table of names.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from scratchformer.data.tokenizer import CharTokenizer  # noqa: E402
from scratchformer.errors import HookError  # noqa: E402
from scratchformer.interop.hf_lm import save_hf_causal_lm  # noqa: E402
from scratchformer.interop.lens_names import (  # noqa: E402
    BATCHED,
    HEADS,
    TL_NAMES,
    from_transformer_lens,
    tl_partner,
    to_transformer_lens,
)
from scratchformer.models import GPT, GPTConfig  # noqa: E402

TOKENIZER = CharTokenizer(list("abcdefgh .\n"), special="<eot>")
SIZES = dict(vocab_size=TOKENIZER.vocab_size, block_size=16, n_layer=2, n_head=2, n_embd=8, dtype="float64")
LLAMA = dict(positional="rope", normalization="rmsnorm", activation="swiglu", bias=False, n_kv_head=1)
STYLES = {"gpt2": {}, "llama": LLAMA}
BOUND = {"gpt2": 1e-12, "llama": 1e-6}
IDS = np.array([[0, 1, 2, 3, 4, 5, 6, 7], [0, 8, 7, 6, 5, 4, 3, 2]])

# scratchformer name -> where nnsight reaches it on the export's transformers model (docs/lens.md):
# {family: (module path, "output" / "output[i]" / "input" (its first argument))}; None: no module holds it
NNSIGHT = {
    "embed": {"gpt2": ("transformer.wte", "output"), "llama": ("model.embed_tokens", "output")},
    "pos_embed": {"gpt2": ("transformer.wpe", "output"), "llama": None},
    "blocks.L.resid_pre": {"gpt2": ("transformer.h.L", "input"), "llama": ("model.layers.L", "input")},
    "blocks.L.attn_norm.in": {
        "gpt2": ("transformer.h.L.ln_1", "input"),
        "llama": ("model.layers.L.input_layernorm", "input"),
    },
    "blocks.L.attn_norm.out": {
        "gpt2": ("transformer.h.L.ln_1", "output"),
        "llama": ("model.layers.L.input_layernorm", "output"),
    },
    "blocks.L.attn.q": {"gpt2": ("transformer.h.L.attn.c_attn", "output"), "llama": None},
    "blocks.L.attn.k": {"gpt2": ("transformer.h.L.attn.c_attn", "output"), "llama": None},
    "blocks.L.attn.v": {
        "gpt2": ("transformer.h.L.attn.c_attn", "output"),
        "llama": ("model.layers.L.self_attn.v_proj", "output"),
    },
    "blocks.L.attn.scores": {"gpt2": None, "llama": None},  # inside the attention's forward
    "blocks.L.attn.pattern": {
        "gpt2": ("transformer.h.L.attn", "output[1]"),
        "llama": ("model.layers.L.self_attn", "output[1]"),
    },
    "blocks.L.attn.head_out": {
        "gpt2": ("transformer.h.L.attn.c_proj", "input"),
        "llama": ("model.layers.L.self_attn.o_proj", "input"),
    },
    "blocks.L.attn.out": {
        "gpt2": ("transformer.h.L.attn", "output[0]"),
        "llama": ("model.layers.L.self_attn", "output[0]"),
    },
    "blocks.L.resid_mid": {
        "gpt2": ("transformer.h.L.ln_2", "input"),
        "llama": ("model.layers.L.post_attention_layernorm", "input"),
    },
    "blocks.L.ff_norm.in": {
        "gpt2": ("transformer.h.L.ln_2", "input"),
        "llama": ("model.layers.L.post_attention_layernorm", "input"),
    },
    "blocks.L.ff_norm.out": {
        "gpt2": ("transformer.h.L.ln_2", "output"),
        "llama": ("model.layers.L.post_attention_layernorm", "output"),
    },
    "blocks.L.mlp.in": {"gpt2": ("transformer.h.L.mlp", "input"), "llama": ("model.layers.L.mlp", "input")},
    "blocks.L.mlp.pre": {
        "gpt2": ("transformer.h.L.mlp.c_fc", "output"),
        "llama": ("model.layers.L.mlp.gate_proj", "output"),  # and up_proj's output: [gate | up]
    },
    "blocks.L.mlp.post": {
        "gpt2": ("transformer.h.L.mlp.act", "output"),
        "llama": ("model.layers.L.mlp.down_proj", "input"),
    },
    "blocks.L.mlp.out": {
        "gpt2": ("transformer.h.L.mlp", "output"),
        "llama": ("model.layers.L.mlp", "output"),
    },
    "blocks.L.resid_post": {"gpt2": ("transformer.h.L", "output"), "llama": ("model.layers.L", "output")},
    "final_norm.in": {"gpt2": ("transformer.ln_f", "input"), "llama": ("model.norm", "input")},
    "final_norm.out": {"gpt2": ("transformer.ln_f", "output"), "llama": ("model.norm", "output")},
    "ln_final": {"gpt2": ("transformer.ln_f", "output"), "llama": ("model.norm", "output")},
}


def _model(style: str) -> GPT:
    """A float64 GPT of the style, its weights far from the 0.02 init (activations of every size)."""
    model = GPT(GPTConfig(**SIZES, **STYLES[style]), seed=0)
    rng = np.random.default_rng(0)
    for name, p in model.named_parameters():
        norm = name.endswith("norm.weight") or name == "ln_f.weight"
        p.data[...] = (1.0 if norm else 0.0) + rng.normal(0, 0.1 if name.endswith("bias") else 0.3, p.shape)
    return model


def _hook_names() -> list:
    from scratchformer.lens import hook_names

    return hook_names


def test_every_hook_name_of_every_gpt_style_has_a_partner():
    """Fails the day a hook point is added without its row in TL_NAMES (never skipped silently)."""
    hook_names = _hook_names()
    styles = [{}, LLAMA, dict(positional="alibi"), dict(positional="sinusoidal", activation="relu")]
    for extra in styles:
        model = GPT(GPTConfig(**SIZES, **extra), seed=0)
        for name in hook_names(model):
            names, _ = tl_partner(name, model)
            assert names and all(n.startswith(("hook_", "blocks.", "ln_final.")) for n in names)
    with pytest.raises(HookError, match="'blocks.0.attn.q_norm.in' has no TransformerLens partner"):
        to_transformer_lens({"blocks.0.attn.q_norm.in": np.zeros((1, 2, 3, 4))}, model)
    assert set(NNSIGHT) == set(TL_NAMES)


@pytest.fixture(scope="module")
def bridged(tmp_path_factory):
    """style -> (model, its cache, the export's TransformerBridge cache, the transformers model)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    bridge = pytest.importorskip("transformer_lens.model_bridge")
    from scratchformer.lens import run_with_cache

    out = {}
    for style in STYLES:
        model = _model(style)
        path = save_hf_causal_lm(model, TOKENIZER, tmp_path_factory.mktemp(style))

        def load():
            return transformers.AutoModelForCausalLM.from_pretrained(
                path, dtype=torch.float64, attn_implementation="eager"
            ).eval()

        tok = transformers.AutoTokenizer.from_pretrained(path)
        # the bridge wraps the modules of the model it is given: the nnsight paths are read on another
        tl = bridge.TransformerBridge.boot_transformers(
            str(path), hf_model=load(), tokenizer=tok, dtype=torch.float64
        )
        tl.enable_compatibility_mode(no_processing=True)
        _, tl_cache = tl.run_with_cache(torch.tensor(IDS))
        _, cache = run_with_cache(model, IDS)
        out[style] = model, cache, {k: v.detach().numpy() for k, v in tl_cache.items()}, load()
    return out


def _rel(a, b) -> float:
    """The largest difference relative to b's largest value; -inf (a hidden key's score) must
    stand in the same places in both."""
    a, b = np.asarray(a), np.asarray(b)
    hidden = np.isneginf(b)
    if not np.array_equal(np.isneginf(a), hidden):
        return np.inf
    a, b = np.where(hidden, 0, a), np.where(hidden, 0, b)
    return float(np.abs(a - b).max() / np.abs(b).max())


@pytest.mark.parametrize("style", STYLES)
def test_the_map_equals_transformer_bridge_both_ways(bridged, style):
    model, cache, tl_cache, _ = bridged[style]
    theirs_named = to_transformer_lens(cache, model)
    worst = max(_rel(x, tl_cache[name]) for name, x in theirs_named.items())
    assert worst <= BOUND[style], (style, worst)
    back = from_transformer_lens(tl_cache, model)
    assert set(back) == set(cache)  # every activation has its partner there, and comes back
    for name, x in back.items():
        assert x.shape == cache[name].shape and _rel(x, cache[name]) <= BOUND[style], name
    # the conversion alone loses nothing
    again = from_transformer_lens(to_transformer_lens(cache, model), model)
    assert all(np.array_equal(again[n], cache[n]) for n in cache)
    # TransformerLens's hook_normalized is before the final norm's weight (and bias): not ln_final
    ln = model.ln_f
    bias = getattr(ln, "bias", None)  # RMSNorm has none
    scaled = tl_cache["ln_final.hook_normalized"] * ln.weight.data + (0 if bias is None else bias.data)
    assert (
        _rel(scaled, cache["ln_final"])
        <= BOUND[style]
        < _rel(tl_cache["ln_final.hook_normalized"], cache["ln_final"])
    )


def _nnsight_read(hf, path: str, which: str, layer: int):
    """What nnsight's `model.PATH.which` holds in a forward of IDS: the module's output (or one
    element of it) or its first input, caught with a torch forward hook."""
    import torch

    module = hf.get_submodule(path.replace(".L", f".{layer}"))
    seen = {}

    def hook(mod, args, kwargs, output):
        seen["input"] = args[0] if args else kwargs["hidden_states"]
        seen["output"] = output

    handle = module.register_forward_hook(hook, with_kwargs=True)
    try:
        with torch.no_grad():
            hf(torch.tensor(IDS))
    finally:
        handle.remove()
    if which == "input":
        return seen["input"].numpy()
    out = seen["output"]
    index = re.fullmatch(r"output\[(\d)\]", which)
    return (out[int(index.group(1))] if index else out[0] if isinstance(out, tuple) else out).numpy()


@pytest.mark.parametrize("style", STYLES)
def test_the_nnsight_paths_of_the_docs_hold_each_activation(bridged, style):
    model, cache, _, hf = bridged[style]
    C, H, hs = model.config.n_embd, model.config.n_head, model.config.n_embd // model.config.n_head
    for pattern, where in NNSIGHT.items():
        if where[style] is None:  # rotary q and k: rotated inside the attention's forward, no module's output
            continue
        layers = range(model.config.n_layer) if ".L." in pattern else [0]
        for layer in layers:
            name = pattern.replace(".L.", f".{layer}.")
            if name not in cache:
                continue
            x = _nnsight_read(hf, *where[style], layer)
            ours = cache[name]
            if pattern.endswith(("attn.q", "attn.k", "attn.v")) and style == "gpt2":  # c_attn's [q | k | v]
                x = np.split(x, 3, axis=-1)["qkv".index(pattern[-1])]
            if pattern == "blocks.L.mlp.pre" and style == "llama":  # [gate | up]
                up = _nnsight_read(hf, "model.layers.L.mlp.up_proj", "output", layer)
                x = np.concatenate([x, up], axis=-1)
            if ours.ndim == 4 and x.ndim == 3:  # heads merged there: (B, T, H hs)
                x = x.reshape(*x.shape[:2], -1, hs).transpose(0, 2, 1, 3)
            if pattern == "pos_embed":
                x = x[0]
            assert x.shape == ours.shape and _rel(x, ours) <= BOUND[style], (style, name)
    assert C == H * hs


def markdown() -> str:
    """docs/lens.md's table of names, from TL_NAMES and NNSIGHT."""

    def tl(name: str) -> str:
        row = TL_NAMES[name]
        text = f"`{row.name}`"
        if row.rotary:
            text += f" (rotary: `{row.rotary.split('.')[-1]}`)"
        if row.gated:
            text += " (gated: `" + "` \\| `".join(n.split(".")[-1] for n in row.gated) + "`)"
        layout = {HEADS: "heads third: (B, T, H, hs)", BATCHED: "(B, T, C)"}.get(row.layout, "same")
        if row.gated:
            layout += "; gated: ours is the two side by side, (B, T, 2F)"
        return f"{text} | {layout}"

    def nn(name: str, style: str) -> str:
        where = NNSIGHT[name][style]
        if where is None:
            return "none (rotated inside the attention)" if ".attn." in name else "none"
        path, which = where
        text = f"`{path.replace('.L.', '[L].').replace('.L', '[L]')}.{which}`"
        if name.endswith(("attn.q", "attn.k", "attn.v")) and style == "gpt2":
            text += f" ({'first second third'.split()['qkv'.index(name[-1])]} third)"
        if name == "blocks.L.mlp.pre" and style == "llama":
            text += " \\| `...mlp.up_proj.output`"
        return text

    lines = [
        "| scratchformer | TransformerLens 4 | layout there | nnsight, GPT-2 export | nnsight, Llama export |",
        "| --- | --- | --- | --- | --- |",
    ]
    lines += [f"| `{name}` | {tl(name)} | {nn(name, 'gpt2')} | {nn(name, 'llama')} |" for name in TL_NAMES]
    return "\n".join(lines) + "\n"


def test_the_docs_give_this_table():
    doc = (Path(__file__).resolve().parents[2] / "docs" / "lens.md").read_text(encoding="utf-8")
    assert markdown() in doc, "docs/lens.md: run python tests/interop/test_lens_names.py --markdown"


if __name__ == "__main__" and "--markdown" in sys.argv:
    print(markdown(), end="")
