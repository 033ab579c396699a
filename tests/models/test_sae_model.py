"""models/sae.py: the autoencoder's training step in lockstep with a PyTorch implementation of
the same SAE (SAELens's training code, tests/torch_sae.py, autograd and torch.optim.AdamW), its
firing counts, and what the model contract asks of it."""

import numpy as np
import pytest
import torch
from torch_sae import torch_sae_loss

from scratchformer.errors import ConfigError, ShapeError
from scratchformer.gradcheck import numerical_gradient, relative_error
from scratchformer.models.sae import SAEConfig, SparseAutoencoder
from scratchformer.optim import clip_grad_norm, make_adamw

D, S, N = 8, 32, 64
NAMES = ("W_enc", "b_enc", "W_dec", "b_dec")


def _sae(kind, **kw):
    c = dict(kind=kind, d_in=D, d_sae=S, k=3, l1_coefficient=0.05, aux_coefficient=0.5, dead_window=1)
    return SparseAutoencoder(SAEConfig(**{**c, **kw}, dtype="float64"), seed=0)


def _batches(steps, seed=0):
    rng = np.random.default_rng(seed)
    mean = rng.standard_normal(D)
    return [mean + rng.standard_normal((N, D)) * rng.uniform(0.2, 2.0, D) for _ in range(steps)]


@pytest.mark.usefixtures("lane")
@pytest.mark.parametrize("kind", ["topk", "relu"])
def test_training_steps_in_lockstep_with_pytorch(kind):
    """Eight steps (forward, hand-written backward, clipping at norm 1, AdamW without decay, the
    firing counts and so the dead features and AuxK) against autograd and torch.optim.AdamW:
    the losses and every parameter after every step agree in float64."""
    sae = _sae(kind)
    sae.b_enc.data[:8] = -50.0  # eight features that never fire, so that AuxK trains them
    sae.train()
    opt = make_adamw(
        [{"params": sae.trainable_parameters(), "weight_decay": 0.0}], lr=1e-2, betas=(0.9, 0.999), eps=1e-8
    )
    t = {n: torch.tensor(getattr(sae, n).data.copy(), requires_grad=True) for n in NAMES}
    t_opt = torch.optim.AdamW(
        list(t.values()), lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, foreach=False
    )
    since = torch.zeros(S, dtype=torch.float64)  # SAELens's n_forward_passes_since_fired
    aux_steps = 0
    for x in _batches(8):
        opt.zero_grad()
        _, loss = sae(x)
        sae.backward()
        clip_grad_norm(sae.trainable_parameters(), 1.0)
        opt.step()

        dead = since > 1
        aux_steps += bool(dead.any())
        t_opt.zero_grad()
        _, acts, t_loss, _ = torch_sae_loss(
            torch.tensor(x), *t.values(), kind=kind, k=3, l1=0.05, dead=dead, aux=0.5
        )
        t_loss.backward()
        torch.nn.utils.clip_grad_norm_(list(t.values()), 1.0, foreach=False)
        t_opt.step()
        fired = (acts > 0).any(dim=0)
        since += 1
        since[fired] = 0

        assert abs(loss - t_loss.item()) <= 1e-11 * abs(loss)
        np.testing.assert_array_equal(sae.steps_since_fired.data, since.numpy())
        for n in NAMES:
            np.testing.assert_allclose(getattr(sae, n).data, t[n].detach().numpy(), rtol=1e-9, atol=1e-12)
    assert aux_steps >= 2  # the auxiliary loss took part


def test_the_firing_counts_follow_saelens():
    sae = _sae("topk", k=1)
    x = _batches(1)[0][:2]  # two rows: at most two features fire
    sae.train()
    sae(x)
    sae(x)
    fired = sae.steps_since_fired.data == 0
    assert 1 <= fired.sum() <= 2 and (sae.steps_since_fired.data[~fired] == 2).all()
    assert sae.dead_features().sum() == S - fired.sum()  # dead_window 1: two steps without firing
    sae.eval()
    sae(x)  # evaluation counts nothing
    assert (sae.steps_since_fired.data[~fired] == 2).all()


def test_eval_loss_leaves_out_the_auxiliary_term():
    sae = _sae("topk")
    x = _batches(1)[0]
    sae.train()
    sae(x)
    sae(x)  # now features are dead: AuxK is on
    _, train_loss = sae(x)
    assert sae.terms["aux"] > 0
    sae.eval()
    _, eval_loss = sae(x)
    assert eval_loss == pytest.approx(sae.terms["mse"] + sae.terms["l1"]) and eval_loss < train_loss


@pytest.mark.parametrize("kind", ["topk", "relu"])
def test_backward_of_an_output_gradient_matches_finite_differences(kind):
    sae = _sae(kind, k=5)
    x = _batches(1, seed=2)[0][:5]
    R = np.random.default_rng(3).standard_normal((5, D))
    sae.train()
    sae(x)
    sae.zero_grad()
    sae.backward(grad_output=R)
    for n in NAMES:
        p = getattr(sae, n)
        num = numerical_gradient(lambda: float(np.sum(sae.eval()(x)[0] * R)), p.data)
        assert relative_error(p.grad, num) < 1e-7, n


def test_encode_decode_and_the_contract():
    sae = _sae("topk")
    x = _batches(1)[0]
    x_hat, _ = sae.eval()(x)
    np.testing.assert_allclose(sae.decode(sae.encode(x)), x_hat, rtol=0, atol=1e-12)
    np.testing.assert_allclose(sae.reconstruct(x.reshape(4, 16, D)), x_hat.reshape(4, 16, D), atol=1e-12)
    assert sae.num_parameters() == SparseAutoencoder.param_count(sae.config)
    assert (sae.encode(x) > 0).sum(axis=1).max() <= 3
    with pytest.raises(ShapeError, match="width 8"):
        sae(np.zeros((2, 5)))
    with pytest.raises(ConfigError, match="k"):
        SAEConfig(kind="topk", d_in=4, d_sae=8, k=9)
