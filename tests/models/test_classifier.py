"""TransformerClassifier: finite-difference and PyTorch gradient checks, padding, smoke training."""

from __future__ import annotations

import numpy as np
import pytest
from model_state import assert_same_init, assert_seed_equals_manual_seed, seeded_state

from scratchformer.data.tasks import make_task
from scratchformer.errors import ConfigError, ShapeError
from scratchformer.gradcheck import numerical_gradient, relative_error
from scratchformer.models import ClassifierConfig, Seq2SeqConfig, TransformerClassifier
from scratchformer.nn import BackwardError, manual_seed

PAD = 0


def tiny(pooling="mean", norm_first=True, positional="sinusoidal", dtype=np.float64, **kw):
    manual_seed(0)
    cfg = {
        "vocab_size": 7,
        "n_classes": 3,
        "max_len": 6,
        "n_layer": 2,
        "n_head": 2,
        "n_embd": 8,
        "n_inner": 12,
        "norm_first": norm_first,
        "positional": positional,
        "pooling": pooling,
        "pad_id": PAD,
    }
    cfg.update(kw)
    return TransformerClassifier(ClassifierConfig(**cfg)).to(dtype)


def randomize_layernorms(model, seed=5):
    g = np.random.default_rng(seed)
    for name, p in model.named_parameters():
        if "norm." in name or name.startswith("ln_f."):
            p.data[...] = g.normal(1.0 if name.endswith("weight") else 0.0, 0.3, p.shape)


def batch():
    rng = np.random.default_rng(1)
    x = rng.integers(1, 7, size=(3, 5))
    x[0, 3:] = PAD  # padded rows
    x[2, 1:] = PAD
    return x, np.array([0, 2, 1])


CASES = [
    ("mean", True, "sinusoidal"),
    ("cls", True, "learned"),
    ("mean", False, "learned"),
    ("cls", False, "sinusoidal"),
]


@pytest.mark.parametrize("pooling,norm_first,positional", CASES)
def test_gradcheck_whole_classifier(pooling, norm_first, positional):
    model = tiny(pooling, norm_first, positional)
    x, y = batch()
    model.zero_grad()
    model(x, y)
    model.backward()
    for name, p in model.named_parameters():
        numeric = numerical_gradient(lambda: model(x, y)[1], p.data)
        err = relative_error(p.grad, numeric)
        assert err <= 5e-8, f"{name}: relative error {err:.2e}"


def test_padding_does_not_change_predictions():
    for pooling in ("mean", "cls"):
        model = tiny(pooling).eval()
        x = np.array([[3, 4, 5]])
        padded = np.array([[3, 4, 5, PAD, PAD]])
        a, _ = model(x)
        b, _ = model(padded)
        np.testing.assert_allclose(a, b, atol=1e-12)
        # an explicit padding_mask does the same as pad_id
        c, _ = model(np.array([[3, 4, 5, 6, 6]]), padding_mask=np.array([[1, 1, 1, 0, 0]], dtype=bool))
        np.testing.assert_allclose(a, c, atol=1e-12)


def test_float32_default_and_predict():
    manual_seed(0)
    model = TransformerClassifier(
        ClassifierConfig(vocab_size=5, n_classes=2, max_len=4, n_layer=1, n_head=2, n_embd=8)
    )
    logits, loss = model(np.array([[1, 2, 3, 4]]), np.array([1]))
    assert logits.dtype == np.float32 and isinstance(loss, float)
    assert model.predict(np.array([[1, 2, 3, 4]])).shape == (1,)
    assert model.training  # predict restores the mode


SEEDED_CFG = dict(
    vocab_size=7,
    n_classes=3,
    max_len=6,
    n_layer=2,
    n_head=2,
    n_embd=8,
    dropout=0.1,
    positional="learned",
    pooling="cls",
)  # every random tensor and dropout generator in play


def test_seed_fixes_initial_weights():
    cfg = ClassifierConfig(**SEEDED_CFG)
    a, b, c = (TransformerClassifier(cfg, seed=s) for s in (3, 3, 4))
    assert_same_init(a, b)
    (pa, ra), (pc, rc) = seeded_state(a), seeded_state(c)
    for name in (
        "tok_emb.weight",
        "pos.weight",
        "cls_token",
        "blocks.0.self_attn.in_proj_weight",
        "blocks.1.ff.fc2.weight",
        "head.weight",
    ):  # drawn at random (LayerNorms start at 1 / 0)
        assert not np.array_equal(pa[name], pc[name]), name
    assert ra != rc


def test_seed_argument_equals_manual_seed_then_construction():
    cfg = ClassifierConfig(**SEEDED_CFG)
    assert_seed_equals_manual_seed(lambda seed: TransformerClassifier(cfg, seed=seed), "tok_emb.weight")


def test_errors():
    with pytest.raises(ConfigError):
        ClassifierConfig(vocab_size=5, n_classes=2, pooling="max")
    with pytest.raises(ConfigError):
        ClassifierConfig(vocab_size=5, n_classes=2, n_embd=10, n_head=4)
    model = tiny()
    with pytest.raises(ShapeError):
        model(np.zeros((2, 7), dtype=np.int64))  # longer than max_len
    with pytest.raises(ShapeError):
        model(np.ones((2, 3), dtype=np.int64), np.array([0, 1, 2]))
    model(np.ones((2, 3), dtype=np.int64))
    with pytest.raises(BackwardError):
        model.backward()  # no labels -> no loss to backpropagate


# -- PyTorch parity ---------------------------------------------------------------------------------
ENC_MAP = {
    "self_attn.in_proj_weight": "self_attn.in_proj_weight",
    "self_attn.in_proj_bias": "self_attn.in_proj_bias",
    "self_attn.out_proj.weight": "self_attn.out_proj.weight",
    "self_attn.out_proj.bias": "self_attn.out_proj.bias",
    "norm1.weight": "attn_norm.weight",
    "norm1.bias": "attn_norm.bias",
    "linear1.weight": "ff.fc1.weight",
    "linear1.bias": "ff.fc1.bias",
    "linear2.weight": "ff.fc2.weight",
    "linear2.bias": "ff.fc2.bias",
    "norm2.weight": "ff_norm.weight",
    "norm2.bias": "ff_norm.bias",
}


@pytest.mark.parametrize("pooling,norm_first,positional", CASES)
def test_matches_pytorch(pooling, norm_first, positional):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    F = torch.nn.functional
    model = tiny(pooling, norm_first, positional)
    c = model.config
    x, y = batch()
    randomize_layernorms(model)  # weight 1 and bias 0 would hide a swapped or dropped gain
    model.zero_grad()
    _, loss = model(x, y)
    model.backward()

    ours = dict(model.named_parameters())
    leaves = {}  # our name -> torch tensor whose .grad we compare

    def leaf(name):
        leaves[name] = torch.tensor(ours[name].data, dtype=torch.float64, requires_grad=True)
        return leaves[name]

    layers = []
    for i in range(c.n_layer):
        layer = torch.nn.TransformerEncoderLayer(
            c.n_embd,
            c.n_head,
            c.n_inner,
            dropout=0.0,
            activation=c.activation,
            batch_first=True,
            norm_first=c.norm_first,
            dtype=torch.float64,
        )
        tparams = dict(layer.named_parameters())
        with torch.no_grad():
            for tname, oname in ENC_MAP.items():
                tparams[tname].copy_(torch.from_numpy(ours[f"blocks.{i}.{oname}"].data))
                leaves[f"blocks.{i}.{oname}"] = tparams[tname]
        layers.append(layer.train())

    xt = torch.from_numpy(x)
    keep = torch.from_numpy(x != PAD)
    h = leaf("tok_emb.weight")[xt]
    B = x.shape[0]
    if pooling == "cls":
        h = torch.cat([leaf("cls_token").expand(B, 1, c.n_embd), h], dim=1)
        keep = torch.cat([torch.ones(B, 1, dtype=torch.bool), keep], dim=1)
    T = h.shape[1]
    if positional == "learned":
        h = h + leaf("pos.weight")[:T]
    else:
        h = h + torch.from_numpy(model.pos.pe[:T])
    for layer in layers:
        h = layer(h, src_key_padding_mask=~keep)  # torch: True = NOT allowed
    if norm_first:
        h = F.layer_norm(h, (c.n_embd,), leaf("ln_f.weight"), leaf("ln_f.bias"), eps=1e-5)
    if pooling == "cls":
        pooled = h[:, 0]
    else:
        w = keep.double() / keep.sum(dim=1, keepdim=True)
        pooled = (h * w[:, :, None]).sum(dim=1)
    logits = F.linear(pooled, leaf("head.weight"), leaf("head.bias"))
    tloss = F.cross_entropy(logits, torch.from_numpy(y))
    tloss.backward()

    assert abs(loss - tloss.item()) <= 1e-9 * max(1.0, abs(tloss.item()))
    assert set(leaves) == set(ours), set(ours) ^ set(leaves)
    for name, t in leaves.items():
        ref = t.grad.numpy()
        scale = max(np.abs(ref).max(), 1e-12)
        assert np.abs(ours[name].grad - ref).max() <= 1e-9 * scale, name


# -- smoke training ----------------------------------------------------------------------------------
def test_majority_smoke_training_improves_loss():
    from scratchformer.optim import AdamW

    manual_seed(0)
    model = TransformerClassifier(
        ClassifierConfig(vocab_size=3, n_classes=3, max_len=8, n_layer=1, n_head=2, n_embd=16, n_inner=32)
    )
    data = make_task("majority", 512, np.random.default_rng(0))
    opt = AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    rng = np.random.default_rng(0)
    losses = []
    for _ in range(30):
        idx = rng.integers(0, len(data), size=64)
        _, loss = model(data.x[idx], data.y[idx])
        model.zero_grad()
        model.backward()
        opt.step()
        losses.append(loss)
    assert np.mean(losses[-5:]) < np.mean(losses[:5]) - 0.05, losses


@pytest.mark.parametrize(
    "cls, base",
    [
        (ClassifierConfig, {"vocab_size": 7, "n_classes": 3}),
        (Seq2SeqConfig, {"src_vocab_size": 9, "tgt_vocab_size": 9}),
    ],
)
def test_task_configs_from_dict_is_strict_and_round_trips(cls, base):
    """Old names (d_model / d_ff) are read by the checkpoint upgrade (test_checkpoint.py), not here."""
    c = cls.from_dict({**base, "n_embd": 16, "n_inner": 40, "n_head": 2})
    assert (c.n_embd, c.n_inner, c.n_head) == (16, 40, 2)
    assert cls.from_dict(c.to_dict()) == c
    for bad in ({**base, "colour": "red"}, {**base, "d_model": 16}):
        with pytest.raises(ConfigError, match=r"unknown .*Config fields"):
            cls.from_dict(bad)
    with pytest.raises(ConfigError, match="needs the fields"):
        cls.from_dict({"n_embd": 16})
