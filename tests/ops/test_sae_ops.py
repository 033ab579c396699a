"""ops/sae.py: the sparse autoencoders' hand-written backward, checked by float64 finite
differences and against PyTorch's autograd of SAELens's training code (tests/torch_sae.py)."""

import numpy as np
import pytest
import torch
from torch_sae import torch_sae_loss

from scratchformer.errors import ConfigError
from scratchformer.gradcheck import numerical_gradient, relative_error
from scratchformer.ops import sae as S

pytestmark = pytest.mark.usefixtures("lane")

N, D, F = 6, 5, 12  # rows, d_in, features


def _params(seed=0, dtype=np.float64):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((N, D))
    W_enc = rng.standard_normal((D, F)) * 0.5
    b_enc = rng.standard_normal(F) * 0.1
    W_dec = rng.standard_normal((F, D)) * 0.5
    b_dec = rng.standard_normal(D) * 0.1
    return [a.astype(dtype) for a in (x, W_enc, b_enc, W_dec, b_dec)]


NAMES = ("x", "W_enc", "b_enc", "W_dec", "b_dec")


@pytest.mark.parametrize("kind", S.SAE_KINDS)
def test_loss_backward_matches_finite_differences(kind):
    """Every input's gradient of the loss (mse, and the relu kind's penalty) in float64."""
    arrays = _params(1)

    def loss():
        return S.sae_loss_forward(*arrays, kind=kind, k=4, l1_coefficient=0.3)[2]

    cache = S.sae_loss_forward(*arrays, kind=kind, k=4, l1_coefficient=0.3)[4]
    grads = S.sae_loss_backward(cache, dloss=1.0)
    for name, a, g in zip(NAMES, arrays, grads):
        err = relative_error(g, numerical_gradient(loss, a))
        assert err < 1e-7, (kind, name, err)


@pytest.mark.parametrize("kind", S.SAE_KINDS)
def test_auxk_backward_matches_finite_differences(kind):
    """AuxK with its residual held constant: the gradients of the hidden activations and of W_dec
    (directly and through the decoder's norms, the topk kind's rescaling)."""
    x, W_enc, b_enc, W_dec, b_dec = _params(2)
    hidden = np.random.default_rng(3).standard_normal((N, F))
    residual = np.random.default_rng(4).standard_normal((N, D))
    dead = np.zeros(F, bool)
    dead[[1, 4, 5, 9]] = True  # k_aux = min(D // 2, 4) = 2

    def aux():
        norms = S.decoder_norms(W_dec) if kind == "topk" else None
        return S.auxk_forward(hidden, dead, residual, W_dec, norms, 0.7)[0]

    norms = S.decoder_norms(W_dec) if kind == "topk" else None
    _, cache = S.auxk_forward(hidden, dead, residual, W_dec, norms, 0.7)
    dhidden, dW_dec, dnorms = S.auxk_backward(cache, 1.0)
    if dnorms is not None:
        dW_dec = dW_dec + S.decoder_norms_backward(dnorms, W_dec, norms)
    assert relative_error(dhidden, numerical_gradient(aux, hidden)) < 1e-7
    assert relative_error(dW_dec, numerical_gradient(aux, W_dec)) < 1e-7
    assert not dhidden[:, ~dead].any()  # only dead features get the auxiliary gradient


@pytest.mark.parametrize("kind", S.SAE_KINDS)
@pytest.mark.parametrize("dead_ids", [[6], [0, 3, 7]])  # one dead: k_aux 1, scale 1/2; three: k_aux 2
def test_training_loss_equals_pytorch_autograd(kind, dead_ids):
    """The whole loss with AuxK on (its residual detached, as SAELens does), in float64: the
    value, each term and every gradient against torch.autograd of SAELens's formulas."""
    arrays = _params(5)
    dead = np.zeros(F, bool)
    dead[dead_ids] = True
    x_hat, acts, loss, terms, cache = S.sae_loss_forward(
        *arrays, kind=kind, k=4, l1_coefficient=0.2, dead=dead, aux_coefficient=0.5
    )
    grads = S.sae_loss_backward(cache, dloss=1.0)
    t = [torch.tensor(a, requires_grad=True) for a in arrays]
    tx_hat, tacts, tloss, tterms = torch_sae_loss(
        *t, kind=kind, k=4, l1=0.2, dead=torch.tensor(dead), aux=0.5
    )
    tloss.backward()
    assert terms["aux"] > 0
    assert abs(loss - tloss.item()) < 1e-12 * max(1.0, abs(loss))
    for name in ("mse", "l1", "aux"):
        assert abs(terms[name] - tterms[name].item()) < 1e-12, name
    np.testing.assert_allclose(x_hat, tx_hat.detach().numpy(), rtol=0, atol=1e-12)
    np.testing.assert_allclose(acts, tacts.detach().numpy(), rtol=0, atol=1e-12)
    for name, g, ta in zip(NAMES, grads, t):
        assert relative_error(g, ta.grad.numpy()) < 1e-12, name


def test_topk_keeps_k_features_and_their_relu():
    hidden = np.array([[3.0, -1.0, 2.0, 0.5], [-3.0, -1.0, -2.0, 0.5]])
    acts, keep = S.topk_relu_forward(hidden, 2)
    np.testing.assert_array_equal(acts, [[3.0, 0, 2.0, 0], [0, 0, 0, 0.5]])  # -1 chosen, relu'd to 0
    assert keep.sum() == 3


def test_a_direct_call_checks_its_arguments():
    arrays = _params(0)
    with pytest.raises(ConfigError, match="kind must be one of"):
        S.sae_forward(*arrays, kind="jumprelu")
    with pytest.raises(ConfigError, match="k must be in"):
        S.sae_forward(*arrays, kind="topk", k=F + 1)
    with pytest.raises(Exception, match="do not fit"):
        S.sae_forward(arrays[0][:, :3], *arrays[1:], kind="relu")
