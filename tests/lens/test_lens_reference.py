"""The lens against a reference: a tiny random GPT-2 saved by `transformers`, loaded with
`load_hf_gpt2`, in float64. The logit lens equals `output_hidden_states` through ln_f and
lm_head; saliency equals torch autograd's gradient with respect to `inputs_embeds`; head
ablation equals zeroing that head's slice of the input of `attn.c_proj` with a torch forward
pre-hook (transformers 5 dropped `head_mask`, which did the same to the attention weights).
Llama checkpoints: tests/lens/test_lens_llama.py."""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from scratchformer.interop import load_hf_gpt2  # noqa: E402
from scratchformer.lens import head_ablation, logit_lens, logit_objective, loss_objective, saliency  # noqa: E402

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from torch_ablation import ablated_loss  # noqa: E402

CFG = dict(
    n_layer=3,
    n_head=2,
    n_embd=16,
    vocab_size=40,
    n_positions=16,
    resid_pdrop=0.0,
    embd_pdrop=0.0,
    attn_pdrop=0.0,
)
IDS = np.array([[3, 17, 5, 5, 29, 11, 0, 38]])


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(**CFG)
    try:
        hf = transformers.GPT2LMHeadModel(cfg, attn_implementation="eager")
    except TypeError:
        hf = transformers.GPT2LMHeadModel(cfg)
    with torch.no_grad():  # weights larger than the 0.02 init, so the layers matter
        for name, p in hf.named_parameters():
            if p.ndim == 2:
                p.normal_(0.0, 0.2)
            elif ".ln_" in name or name.startswith("transformer.ln_f"):
                p.normal_(1.0 if name.endswith("weight") else 0.0, 0.3)
            else:
                p.normal_(0.0, 0.1)
    path = tmp_path_factory.mktemp("gpt2")
    hf.save_pretrained(path, safe_serialization=True)
    return load_hf_gpt2(path, dtype="float64"), hf.double().eval()


def test_logit_lens_equals_hidden_states_through_ln_f_and_lm_head(pair):
    ours, hf = pair
    lens = logit_lens(ours, (IDS,))
    assert lens.check.ok
    with torch.no_grad():
        out = hf(torch.tensor(IDS), output_hidden_states=True)
        hidden = out.hidden_states  # embeddings, after block 0, ..., the last one already through ln_f
        ref = [hf.lm_head(hf.transformer.ln_f(h))[0].numpy() for h in hidden[:-1]]
        ref.append(hf.lm_head(hidden[-1])[0].numpy())
    assert len(ref) == lens.logits.shape[0]
    for layer, expected in enumerate(ref):
        np.testing.assert_allclose(lens.logits[layer], expected, rtol=0, atol=1e-10)
    assert np.abs(lens.logits[0] - lens.logits[-1]).max() > 0.1  # the layers differ: a real comparison


def _torch_embeds(hf):
    return hf.transformer.wte(torch.tensor(IDS)).detach().clone().requires_grad_(True)


@pytest.mark.parametrize("what", ["logit", "loss"])
def test_saliency_equals_autograd_gradient_wrt_inputs_embeds(pair, what):
    ours, hf = pair
    embeds = _torch_embeds(hf)
    if what == "logit":
        hf(inputs_embeds=embeds).logits[0, -1, 7].backward()
        s = saliency(ours, (IDS,), logit_objective(-1, 7))
    else:
        x, y = IDS[:, :-1], IDS[:, 1:]
        embeds = embeds[:, :-1].detach().clone().requires_grad_(True)
        logits = hf(inputs_embeds=embeds).logits
        torch.nn.functional.cross_entropy(logits[0], torch.tensor(y[0])).backward()
        s = saliency(ours, (x, y), loss_objective)
    assert np.abs(embeds.grad.numpy()).max() > 1e-3
    np.testing.assert_allclose(s.gradient, embeds.grad.numpy(), rtol=0, atol=1e-10)


def test_head_ablation_equals_a_torch_ablation_of_the_same_head(pair):
    ours, hf = pair
    x, y = IDS[:, :-1], IDS[:, 1:]
    table = head_ablation(ours, (x, y))
    hs = CFG["n_embd"] // CFG["n_head"]

    def torch_loss(layer=None, head=None):
        return ablated_loss(hf, lambda m, i: m.transformer.h[i].attn.c_proj, x, y, hs, layer, head)

    base = torch_loss()
    assert table.baseline == pytest.approx(base, abs=1e-10)
    for layer in range(CFG["n_layer"]):
        for head in range(CFG["n_head"]):
            assert table.change[layer, head] == pytest.approx(torch_loss(layer, head) - base, abs=1e-10)
    assert np.abs(table.change).max() > 1e-3
