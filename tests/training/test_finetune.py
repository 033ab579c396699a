"""Fine-tuning a BERT-family encoder as a sentence classifier, in lockstep with PyTorch:
transformers' BertModel + the same mean pooling and head + torch.optim.AdamW, from the same
weights, on the same batches, without dropout."""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from scratchformer.errors import BackwardError, DataError  # noqa: E402
from scratchformer.interop import load_hf_bert  # noqa: E402
from scratchformer.interop.bert_classifier import BertClassifier, mean_pool_backward, mean_pool_forward  # noqa: E402
from scratchformer.optim import AdamW  # noqa: E402

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

NUM_CLASSES, VOCAB, B, T = 3, 40, 4, 9


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("bert")
    torch.manual_seed(0)
    cfg = transformers.BertConfig(
        vocab_size=VOCAB,
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=16,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    transformers.BertModel(cfg, add_pooling_layer=False).save_pretrained(path, safe_serialization=True)
    return path


def _batches(steps, seed=0):
    """Random ids, each row padded after a random length >= 2, and labels."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(steps):
        ids = rng.integers(0, VOCAB, (B, T))
        lengths = rng.integers(2, T + 1, B)
        mask = (np.arange(T)[None, :] < lengths[:, None]).astype(np.int64)
        out.append((ids * mask, mask, rng.integers(0, NUM_CLASSES, B)))
    return out


class _TorchClassifier(torch.nn.Module):
    def __init__(self, path, head_w, head_b, dtype):
        super().__init__()
        self.bert = transformers.BertModel.from_pretrained(
            path, add_pooling_layer=False, attn_implementation="eager"
        ).to(dtype)
        self.head = torch.nn.Linear(head_w.shape[1], head_w.shape[0]).to(dtype)
        with torch.no_grad():
            self.head.weight.copy_(torch.tensor(head_w))
            self.head.bias.copy_(torch.tensor(head_b))

    def forward(self, ids, mask):
        hidden = self.bert(input_ids=ids, attention_mask=mask).last_hidden_state
        m = mask.to(hidden.dtype).unsqueeze(-1)
        return self.head((hidden * m).sum(1) / m.sum(1).clamp(min=1e-9))


def _lockstep(path, dtype, steps=50, freeze=False):
    np_dtype = np.float64 if dtype == torch.float64 else np.float32
    ours = BertClassifier(load_hf_bert(path, dtype=np_dtype), NUM_CLASSES, freeze_encoder=freeze, seed=0)
    ours.train()
    ref = _TorchClassifier(path, ours.head.weight.data, ours.head.bias.data, dtype).train()
    ref_params = list(ref.head.parameters()) if freeze else list(ref.parameters())
    opt, ref_opt = AdamW(ours.trainable_parameters(), lr=3e-3), torch.optim.AdamW(ref_params, lr=3e-3)
    losses, ref_losses = [], []
    for ids, mask, labels in _batches(steps):
        ours.zero_grad()
        _, loss = ours(ids, mask, labels=labels)
        ours.backward()
        opt.step()
        ref_opt.zero_grad()
        ref_loss = torch.nn.functional.cross_entropy(
            ref(torch.tensor(ids), torch.tensor(mask)), torch.tensor(labels)
        )
        ref_loss.backward()
        ref_opt.step()
        losses.append(loss)
        ref_losses.append(ref_loss.item())
    ours_state = ours.state_dict()
    ref_state = {k: v.detach().numpy() for k, v in ref.named_parameters()}
    return np.array(losses), np.array(ref_losses), ours_state, ref_state


def _rel(a, b):
    return np.abs(a - b).max() / max(np.abs(b).max(), 1e-30)


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-8), (torch.float32, 1e-4)])
def test_fifty_steps_in_lockstep_with_pytorch(bert_dir, dtype, tol):
    losses, ref_losses, ours, ref = _lockstep(bert_dir, dtype)
    assert _rel(losses, ref_losses) < tol
    assert losses[-5:].mean() < losses[:5].mean()  # it learns the (random) labels
    pairs = [
        ("head.weight", "head.weight"),
        ("head.bias", "head.bias"),
        ("encoder.word_embeddings.weight", "bert.embeddings.word_embeddings.weight"),
        ("encoder.layers.0.ff.fc1.weight", "bert.encoder.layer.0.intermediate.dense.weight"),
        ("encoder.layers.1.ff_norm.weight", "bert.encoder.layer.1.output.LayerNorm.weight"),
    ]
    for name, ref_name in pairs:
        assert _rel(ours[name], ref[ref_name]) < tol, name
    # the encoder moved: fine-tuning reached it, not only the head
    start = load_hf_bert(bert_dir, dtype=np.float64).state_dict()["layers.0.ff.fc1.weight"]
    assert np.abs(ours["encoder.layers.0.ff.fc1.weight"] - start).max() > 1e-3


def test_frozen_encoder_trains_the_head_alone_in_lockstep(bert_dir):
    losses, ref_losses, ours, ref = _lockstep(bert_dir, torch.float64, steps=10, freeze=True)
    assert _rel(losses, ref_losses) < 1e-8
    assert _rel(ours["head.weight"], ref["head.weight"]) < 1e-8
    start = load_hf_bert(bert_dir, dtype=np.float64).state_dict()
    for name, value in start.items():
        assert np.array_equal(ours["encoder." + name], value), name


def test_mean_pool_gradient_by_finite_differences():
    rng = np.random.default_rng(0)
    hidden, mask = rng.normal(size=(3, 5, 4)), np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]])
    dpooled = rng.normal(size=(3, 4))
    pooled, weights = mean_pool_forward(hidden, mask)
    assert np.allclose(pooled[2], hidden[2, 0]) and np.allclose(pooled[0], hidden[0, :3].mean(0))
    dh = mean_pool_backward(dpooled, weights)
    eps, num = 1e-6, np.zeros_like(hidden)
    for idx in np.ndindex(hidden.shape):
        h = hidden.copy()
        h[idx] += eps
        up = (mean_pool_forward(h, mask)[0] * dpooled).sum()
        h[idx] -= 2 * eps
        num[idx] = (up - (mean_pool_forward(h, mask)[0] * dpooled).sum()) / (2 * eps)
    assert np.abs(dh - num).max() < 1e-8
    assert np.all(dh[0, 3:] == 0)  # padding gets no gradient


def test_classifier_gradcheck(bert_dir):
    clf = BertClassifier(load_hf_bert(bert_dir, dtype=np.float64), NUM_CLASSES, seed=1)
    ids, mask, labels = _batches(1, seed=3)[0]

    def loss_fn():
        return clf(ids, mask, labels=labels)[1]

    clf.train()
    clf.zero_grad()
    loss_fn()
    clf.backward()
    clf.eval()  # the probes keep no cache (no dropout: the same function in both modes)
    for name in ["head.weight", "encoder.layers.1.self_attn.in_proj_weight", "encoder.embeddings_norm.bias"]:
        p = dict(clf.named_parameters())[name]
        flat = p.data.reshape(-1)
        for i in np.random.default_rng(0).choice(flat.size, 5, replace=False):
            old = flat[i]
            flat[i] = old + 1e-6
            up = loss_fn()
            flat[i] = old - 1e-6
            down = loss_fn()
            flat[i] = old
            assert abs((up - down) / 2e-6 - p.grad.reshape(-1)[i]) < 1e-7, name


def test_bad_input_is_typed(bert_dir):
    clf = BertClassifier(load_hf_bert(bert_dir, dtype=np.float64), NUM_CLASSES).train()
    ids, mask, _ = _batches(1)[0]
    with pytest.raises(DataError, match="labels must be in 0..2"):
        clf(ids, mask, labels=np.array([0, 1, 2, 3]))
    with pytest.raises(DataError, match="labels must be a"):
        clf(ids, mask, labels=np.array([0.5] * B))
    clf(ids, mask)
    with pytest.raises(BackwardError, match="with labels"):
        clf.backward()
