"""The numbers of docs/operations.md's hand-off section, measured on tiny seeded models.

Usage::

    HF_HUB_OFFLINE=1 python scripts/handoff_numbers.py

Needs torch and transformers (the other side of the hand-off). Each model is a GPT of 2 layers,
4 heads, n_embd 64, 256 positions and a 512-token vocabulary, its weights PyTorch's default
initialisation (GPTConfig(init="pytorch")), seed 0; the prompt is 64 random ids (seed 1). Prints:

1. float32 internals: the export of a float64 model, loaded by transformers in float64; the
   largest logit difference over the largest logit. GPT-2 computes in float64 throughout;
   transformers' Llama computes its RMSNorm's mean square and its rotary tables in float32.
2. bfloat16 by default: the Llama export saved by transformers in bfloat16, then
   `from_pretrained(DIR)` (transformers 5 keeps the checkpoint's dtype) against
   `from_pretrained(DIR, dtype=torch.float32)`: the largest logit difference, and the largest logit.
3. GPT-2's key bias: one fine-tuning step of the float32 GPT-2 export with torch.optim.Adam
   (lr 1e-3) and of the run with scratchformer's AdamW (lr 1e-3, no weight decay) on the same
   batch: the key bias's largest gradient (its true gradient is zero: a shift every key shares
   leaves softmax unchanged) and how far the step moved it, against the query bias's.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scratchformer.data.bpe import BPETokenizer  # noqa: E402
from scratchformer.interop.hf_lm import save_hf_causal_lm  # noqa: E402
from scratchformer.models import GPT, GPTConfig  # noqa: E402
from scratchformer.nn import eval_mode  # noqa: E402

SIZES = dict(vocab_size=512, block_size=256, n_layer=2, n_head=4, n_embd=64, init="pytorch")
LLAMA = dict(positional="rope", normalization="rmsnorm", activation="swiglu", bias=False)
LR = 1e-3


def tokenizer() -> BPETokenizer:
    text = "the cat sat on the mat and the dog ran to the log; a bird sang in the tree by the road. " * 60
    return BPETokenizer.train([text], SIZES["vocab_size"])


def prompt() -> np.ndarray:
    return np.random.default_rng(1).integers(0, SIZES["vocab_size"], (1, 64))


def float32_internals(tmp: Path, tok) -> dict[str, float]:
    """style -> max |transformers' float64 logits - ours| / max |ours|."""
    import torch
    import transformers

    out = {}
    for style, extra in (("GPT-2", {}), ("Llama", LLAMA)):
        model = GPT(GPTConfig(**SIZES, **extra, dtype="float64"), seed=0)
        path = save_hf_causal_lm(model, tok, tmp / f"f64-{style}")
        hf = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float64).eval()
        ids = prompt()
        with eval_mode(model), torch.no_grad():
            ours, theirs = model(ids)[0], hf(torch.tensor(ids)).logits.numpy()
        out[style] = float(np.abs(theirs - ours).max() / np.abs(ours).max())
    return out


def bfloat16_default(tmp: Path, tok) -> tuple[str, float, float]:
    """(the dtype from_pretrained picks, max |its logits - float32 logits|, max |float32 logits|)."""
    import torch
    import transformers

    model = GPT(GPTConfig(**SIZES, **LLAMA), seed=0)
    path = save_hf_causal_lm(model, tok, tmp / "f32-llama")
    transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).save_pretrained(
        tmp / "bf16"
    )
    default = transformers.AutoModelForCausalLM.from_pretrained(tmp / "bf16").eval()
    f32 = transformers.AutoModelForCausalLM.from_pretrained(tmp / "bf16", dtype=torch.float32).eval()
    ids = torch.tensor(prompt())
    with torch.no_grad():
        a, b = default(ids).logits.float(), f32(ids).logits
    return str(next(default.parameters()).dtype), float((a - b).abs().max()), float(b.abs().max())


def key_bias_step(tmp: Path, tok) -> dict[str, tuple[float, float, float]]:
    """side -> (max |key bias gradient|, max |key bias step|, max |query bias step|) after one Adam step."""
    import torch
    import transformers

    from scratchformer.optim import AdamW

    model = GPT(GPTConfig(**SIZES), seed=0)
    path = save_hf_causal_lm(model, tok, tmp / "gpt2")
    ids = prompt()
    x, y = ids[:, :-1], ids[:, 1:]
    C = SIZES["n_embd"]

    hf = transformers.AutoModelForCausalLM.from_pretrained(path).train()
    for module in hf.modules():  # no dropout: the same function on both sides
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    bias = hf.transformer.h[0].attn.c_attn.bias
    before = bias.detach().clone()
    opt = torch.optim.Adam(hf.parameters(), lr=LR)
    logits = hf(torch.tensor(x)).logits
    torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), torch.tensor(y).reshape(-1)
    ).backward()
    grad = bias.grad[C : 2 * C].abs().max().item()
    opt.step()
    moved = (bias.detach() - before).abs()
    out = {"transformers + torch.optim.Adam": (grad, moved[C : 2 * C].max().item(), moved[:C].max().item())}

    model.train()
    opt = AdamW([{"params": model.parameters(), "weight_decay": 0.0}], lr=LR)
    bias = model.h[0].self_attn.in_proj_bias
    before = bias.data.copy()
    model.zero_grad()
    model(x, y)
    model.backward()
    grad = float(np.abs(bias.grad[C : 2 * C]).max())
    opt.step()
    moved = np.abs(bias.data - before)
    out["scratchformer AdamW"] = (grad, float(moved[C : 2 * C].max()), float(moved[:C].max()))
    return out


def main() -> int:
    import torch
    import transformers

    torch.manual_seed(0)
    tok = tokenizer()
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for style, rel in float32_internals(tmp, tok).items():
            print(f"1. float64 {style} export in transformers: logits within {rel:.1e} of the largest logit")
        dtype, diff, scale = bfloat16_default(tmp, tok)
        print(
            f"2. a bfloat16 Llama directory, from_pretrained without dtype: {dtype}; its logits are "
            f"{diff:.2f} from float32's (largest logit {scale:.2f})"
        )
        for side, (grad, key, query) in key_bias_step(tmp, tok).items():
            print(
                f"3. {side}: key bias gradient at most {grad:.1e}; one step (lr {LR:g}) moves it by up to "
                f"{key:.1e} (the query bias: {query:.1e})"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
