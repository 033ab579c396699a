"""The lens against a reference Llama: a tiny random LlamaForCausalLM (grouped-query attention)
saved by `transformers`, loaded with `load_hf_llama`, in float64 (with the float64 RMSNorm and
rotary tables of tests/interop/test_llama_interop.py: transformers computes those in float32). The logit
lens equals `output_hidden_states` through `model.norm` and `lm_head`; saliency equals torch
autograd's gradient with respect to `inputs_embeds`; head ablation equals zeroing that head's
slice of the input of `o_proj`."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from test_llama_interop import _hf_model, _save, float64_llama  # noqa: E402, F401 (a fixture)
from torch_ablation import ablated_loss  # noqa: E402

from scratchformer.interop import load_hf_llama  # noqa: E402
from scratchformer.lens import head_ablation, logit_lens, logit_objective, saliency  # noqa: E402

IDS = np.array([[3, 17, 5, 5, 29, 11, 0, 38, 2]])
HEADS, HEAD_SIZE = 4, 8  # tests/test_llama_interop.SMALL: hidden 32 over 4 heads


@pytest.fixture
def pair(tmp_path, float64_llama):  # noqa: F811
    hf = _hf_model(num_key_value_heads=2).eval()
    return load_hf_llama(_save(hf, tmp_path / "llama"), dtype="float64"), hf


def test_logit_lens_equals_hidden_states_through_norm_and_lm_head(pair):
    ours, hf = pair
    lens = logit_lens(ours, (IDS,))
    assert lens.check.ok
    with torch.no_grad():
        hidden = hf(torch.tensor(IDS), output_hidden_states=True).hidden_states  # the last one through norm
        ref = [hf.lm_head(hf.model.norm(h))[0].numpy() for h in hidden[:-1]] + [
            hf.lm_head(hidden[-1])[0].numpy()
        ]
    assert len(ref) == lens.logits.shape[0]
    for layer, expected in enumerate(ref):
        np.testing.assert_allclose(lens.logits[layer], expected, rtol=0, atol=1e-9)
    assert np.abs(lens.logits[0] - lens.logits[-1]).max() > 0.1


def test_saliency_equals_autograd_gradient_wrt_inputs_embeds(pair):
    ours, hf = pair
    embeds = hf.model.embed_tokens(torch.tensor(IDS)).detach().clone().requires_grad_(True)
    hf(inputs_embeds=embeds).logits[0, -1, 7].backward()
    s = saliency(ours, (IDS,), logit_objective(-1, 7))
    assert np.abs(embeds.grad.numpy()).max() > 1e-3
    np.testing.assert_allclose(s.gradient, embeds.grad.numpy(), rtol=0, atol=1e-9)


def test_head_ablation_equals_a_torch_ablation_of_the_same_head(pair):
    ours, hf = pair
    x, y = IDS[:, :-1], IDS[:, 1:]
    table = head_ablation(ours, (x, y))

    def torch_loss(layer=None, head=None):
        return ablated_loss(hf, lambda m, i: m.model.layers[i].self_attn.o_proj, x, y, HEAD_SIZE, layer, head)

    base = torch_loss()
    assert table.baseline == pytest.approx(base, abs=1e-9)
    for layer in range(2):
        for head in range(HEADS):
            assert table.change[layer, head] == pytest.approx(torch_loss(layer, head) - base, abs=1e-9)
    assert np.abs(table.change).max() > 1e-3
