"""Sparse autoencoders: dictionary learning on a model's activations, forward beside backward.

Shapes: N rows (one activation vector each), D = d_in (the hook point's width), S = d_sae (the
features). The parameters are laid out as SAELens lays them out: W_enc (D, S), b_enc (S,),
W_dec (S, D), b_dec (D,); a feature's decoder direction is a row W_dec[s].

Two kinds, each SAELens's training form:

    relu  (SAELens's "standard" SAE: Towards Monosemanticity, with Anthropic's April 2024 update)
        pre    = (x - b_dec) @ W_enc + b_enc            the decoder bias subtracted at the input
        acts   = relu(pre)
        x_hat  = acts @ W_dec + b_dec
        loss   = mean_n sum_d (x_hat - x)^2  +  l1 * mean_n sum_s acts[n, s] * ||W_dec[s]||
                 (the decoder's norms folded into the penalty: no constraint on W_dec)

    topk  (Gao et al. 2024; SAELens's TopK with rescale_acts_by_decoder_norm)
        norms  = ||W_dec[s]||                            (S,)
        hidden = ((x - b_dec) @ W_enc + b_enc) * norms   each feature as if its row had unit norm
        acts   = relu of the k largest entries of hidden in each row, 0 elsewhere
        x_hat  = (acts / norms) @ W_dec + b_dec          decoded through the unit directions
        loss   = mean_n sum_d (x_hat - x)^2              (the norms folded into encoder and decoder)

Dead features, both kinds: Gao et al.'s auxiliary loss AuxK, as SAELens's TopK writes it. A
feature is dead when it has not fired for more than a window of steps (the model counts):

    e      = x - x_hat, a constant (no gradient flows through it: SAELens's .detach())
    k_aux  = min(D // 2, n_dead)      scale = min(n_dead / (D // 2), 1)
    a      = the k_aux largest entries of hidden among the dead features in each row (no relu)
    e_hat  = (a / norms) @ W_dec   (topk)      a @ W_dec   (relu)      no bias
    aux    = aux_coefficient * scale * mean_n sum_d (e_hat - e)^2

`sae_loss_forward` / `sae_loss_backward` put the pieces together as a training step does; each
piece is its own pair below, and every backward restates the line of the forward it inverts.
"""

from __future__ import annotations

import numpy as np

from scratchformer import fast
from scratchformer.checks import DOOR, op_fits, op_float
from scratchformer.errors import ConfigError
from scratchformer.ops.detach import detach

__all__ = [
    "SAE_KINDS",
    "auxk_backward",
    "auxk_forward",
    "decoder_norms",
    "decoder_norms_backward",
    "mse_backward",
    "mse_forward",
    "l1_penalty_backward",
    "l1_penalty_forward",
    "sae_backward",
    "sae_forward",
    "sae_loss_backward",
    "sae_loss_forward",
    "topk_relu_forward",
]

SAE_KINDS = ("relu", "topk")


def _check_params(fn: str, x, W_enc, b_enc, W_dec, b_dec) -> None:
    op_float(fn, "x", x, ndim=2)
    op_float(fn, "W_enc", W_enc, ndim=2)
    op_float(fn, "b_enc", b_enc, ndim=1)
    op_float(fn, "W_dec", W_dec, ndim=2)
    op_float(fn, "b_dec", b_dec, ndim=1)
    D, S = W_enc.shape
    op_fits(
        fn,
        x.shape[1] == D and b_enc.shape == (S,) and W_dec.shape == (S, D) and b_dec.shape == (D,),
        x=x,
        W_enc=W_enc,
        b_enc=b_enc,
        W_dec=W_dec,
        b_dec=b_dec,
    )


def _check_kind(kind: str, k, S: int) -> None:
    if kind not in SAE_KINDS:
        raise ConfigError(f"the sparse autoencoder's kind must be one of {list(SAE_KINDS)}, got {kind!r}")
    if kind == "topk" and (isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= S):
        raise ConfigError(f"a TopK autoencoder keeps k features of its {S}: k must be in [1, {S}], got {k!r}")


# -- the decoder's row norms -------------------------------------------------------------------------
@fast.lane()
def decoder_norms(W_dec: np.ndarray) -> np.ndarray:
    """W_dec (S, D) -> norms (S,): norms[s] = sqrt(sum_d W_dec[s, d]^2)."""
    return np.sqrt((W_dec * W_dec).sum(axis=1))


@fast.lane(derivative_of=decoder_norms, grads=("W_dec",))
def decoder_norms_backward(dnorms: np.ndarray, W_dec: np.ndarray, norms: np.ndarray) -> np.ndarray:
    # norms[s] = sqrt(sum_d W_dec[s, d]^2)  =>  d norms[s] / d W_dec[s, d] = W_dec[s, d] / norms[s]
    return (dnorms / norms)[:, None] * W_dec


# -- TopK ----------------------------------------------------------------------------------------------
@fast.lane()
def topk_relu_forward(hidden: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """hidden (N, S) -> (acts (N, S), keep (N, S) bool): each row keeps its k largest entries,
    through a relu; keep marks the entries that pass (chosen and > 0), where the gradient flows."""
    chosen = np.zeros(hidden.shape, dtype=bool)
    top = np.argpartition(-hidden, k - 1, axis=1)[:, :k]  # (N, k): the k largest, in no order
    np.put_along_axis(chosen, top, True, axis=1)
    keep = chosen & (hidden > 0)
    return np.where(keep, hidden, 0).astype(hidden.dtype, copy=False), keep


# -- the autoencoder ---------------------------------------------------------------------------------
@fast.lane()
def sae_forward(
    x: np.ndarray,
    W_enc: np.ndarray,
    b_enc: np.ndarray,
    W_dec: np.ndarray,
    b_dec: np.ndarray,
    kind: str,
    k: int | None = None,
) -> tuple[np.ndarray, np.ndarray, dict]:
    """x (N, D) -> (x_hat (N, D), acts (N, S), cache): encoder, activation and decoder of the
    kind (the module docstring). cache: what `sae_backward` (and the losses) need."""
    if not DOOR.inside:  # a direct call: check the arguments (a layer's call was checked at its door)
        _check_params("sae_forward", x, W_enc, b_enc, W_dec, b_dec)
        _check_kind(kind, k, W_enc.shape[1])
    norms = decoder_norms(W_dec)  # (S,): the relu kind's penalty weights, the topk kind's rescaling
    u = x - b_dec  # (N, D): the decoder bias subtracted at the input
    pre = u @ W_enc + b_enc  # (N, S)
    if kind == "topk":
        hidden = pre * norms
        acts, keep = topk_relu_forward(hidden, k)
        decoded = acts / norms  # (N, S): the coefficients of W_dec's rows
    else:
        hidden = pre
        keep = pre > 0
        acts = np.where(keep, pre, 0).astype(pre.dtype, copy=False)
        decoded = acts
    x_hat = decoded @ W_dec + b_dec
    cache = dict(kind=kind, u=u, pre=pre, hidden=hidden, keep=keep, acts=acts, decoded=decoded, norms=norms)
    cache.update(W_enc=W_enc, W_dec=W_dec)
    return x_hat, acts, cache


@fast.lane(
    derivative_of=sae_forward,
    grads=("x", "W_enc", "b_enc", "W_dec", "b_dec"),
    also={"dacts": (1,), "dhidden": (2, "hidden"), "dnorms": (2, "norms")},
)
def sae_backward(
    dx_hat: np.ndarray,
    cache: dict,
    dacts: np.ndarray | None = None,
    dhidden: np.ndarray | None = None,
    dnorms: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The gradients of the forward's inputs (dx, dW_enc, db_enc, dW_dec, db_dec) from dx_hat
    (N, D), plus what other terms of a loss send to acts (the penalty), to hidden (AuxK) and to
    the decoder's norms (the penalty, AuxK)."""
    W_enc, W_dec, norms = cache["W_enc"], cache["W_dec"], cache["norms"]
    topk = cache["kind"] == "topk"
    dnorms = np.zeros_like(norms) if dnorms is None else dnorms.copy()
    # x_hat = decoded @ W_dec + b_dec
    db_dec = dx_hat.sum(axis=0)
    dW_dec = cache["decoded"].T @ dx_hat
    ddecoded = dx_hat @ W_dec.T  # (N, S)
    if topk:
        # decoded = acts / norms
        dacts_all = ddecoded / norms
        dnorms -= (ddecoded * cache["decoded"]).sum(axis=0) / norms
    else:
        dacts_all = ddecoded  # decoded = acts
    if dacts is not None:
        dacts_all = dacts_all + dacts
    # acts = hidden where keep, else 0 (relu of the chosen entries)
    dhid = np.where(cache["keep"], dacts_all, 0).astype(dacts_all.dtype, copy=False)
    if dhidden is not None:
        dhid = dhid + dhidden
    if topk:
        # hidden = pre * norms. (For a kept feature decoded = pre, so this term cancels the decoder's
        # above: the norms only choose the features. Both are written, as each line's derivative.)
        dpre = dhid * norms
        dnorms += (dhid * cache["pre"]).sum(axis=0)
    else:
        dpre = dhid  # hidden = pre
    # pre = u @ W_enc + b_enc,  u = x - b_dec
    db_enc = dpre.sum(axis=0)
    dW_enc = cache["u"].T @ dpre
    du = dpre @ W_enc.T
    db_dec = db_dec - du.sum(axis=0)
    dW_dec += decoder_norms_backward(dnorms, W_dec, norms)
    return du, dW_enc, db_enc, dW_dec, db_dec


# -- the loss's terms ---------------------------------------------------------------------------------
@fast.lane()
def mse_forward(x_hat: np.ndarray, x: np.ndarray) -> float:
    """SAELens's MSE loss: the squared error summed over the D channels, averaged over the N rows."""
    return float(((x_hat - x) ** 2).sum(axis=1).mean())


@fast.lane(derivative_of=mse_forward, grads=("x_hat",), received="dloss")
def mse_backward(x_hat: np.ndarray, x: np.ndarray, dloss: float = 1.0) -> np.ndarray:
    # loss = (1/N) sum_n sum_d (x_hat - x)^2  =>  d loss / d x_hat = 2 (x_hat - x) / N   (d/dx: minus it)
    return (2.0 * dloss / x.shape[0]) * (x_hat - x)


@fast.lane()
def l1_penalty_forward(acts: np.ndarray, norms: np.ndarray, coefficient: float) -> float:
    """The relu kind's sparsity penalty: coefficient * mean_n sum_s acts[n, s] * norms[s]
    (acts >= 0, so this is SAELens's L1 norm of the norm-weighted activations)."""
    return float(coefficient * (acts * norms).sum(axis=1).mean())


@fast.lane(derivative_of=l1_penalty_forward, grads=("acts", "norms"), received="dloss")
def l1_penalty_backward(acts: np.ndarray, norms: np.ndarray, coefficient: float, dloss: float = 1.0):
    """(dacts (N, S), dnorms (S,))."""
    # penalty = (c / N) sum_n sum_s acts[n, s] * norms[s]
    scale = dloss * coefficient / acts.shape[0]
    dacts = np.broadcast_to(scale * norms, acts.shape).astype(acts.dtype)
    dnorms = scale * acts.sum(axis=0)
    return dacts, dnorms


@fast.lane()
def auxk_forward(
    hidden: np.ndarray,
    dead: np.ndarray,
    residual: np.ndarray,
    W_dec: np.ndarray,
    norms: np.ndarray | None,
    coefficient: float,
) -> tuple[float, dict | None]:
    """AuxK (the module docstring): hidden (N, S), dead (S,) bool, residual e = x - x_hat (N, D)
    taken as a constant, norms (S,) for the topk kind (None: the relu kind decodes a as it is).
    Returns (loss, cache); no dead feature: (0.0, None)."""
    n_dead = int(dead.sum())
    if n_dead == 0 or coefficient == 0:
        return 0.0, None
    half = residual.shape[1] // 2  # Gao et al., appendix B.1: k_aux = d_in / 2
    k_aux, scale = min(half, n_dead), min(n_dead / max(half, 1), 1.0)
    if k_aux == 0:
        return 0.0, None
    among_dead = np.where(dead, hidden, -np.inf)
    top = np.argpartition(-among_dead, k_aux - 1, axis=1)[:, :k_aux]  # (N, k_aux), all dead
    chosen = np.zeros(hidden.shape, dtype=bool)
    np.put_along_axis(chosen, top, True, axis=1)
    a = np.where(chosen, hidden, 0).astype(hidden.dtype, copy=False)
    decoded = a if norms is None else a / norms
    e_hat = decoded @ W_dec
    weight = coefficient * scale
    loss = float(weight * ((e_hat - residual) ** 2).sum(axis=1).mean())
    cache = dict(chosen=chosen, decoded=decoded, e_hat=e_hat, residual=residual, weight=weight, norms=norms)
    cache["W_dec"] = W_dec
    return loss, cache


@fast.lane(derivative_of=auxk_forward, grads=("hidden", "W_dec", "norms"), received="dloss")
def auxk_backward(cache: dict, dloss: float = 1.0):
    """(dhidden (N, S), dW_dec (S, D), dnorms (S,) or None for the relu kind)."""
    e_hat, W_dec, norms, decoded = cache["e_hat"], cache["W_dec"], cache["norms"], cache["decoded"]
    # aux = w * (1/N) sum_n sum_d (e_hat - e)^2,   e a constant
    de_hat = (2.0 * dloss * cache["weight"] / e_hat.shape[0]) * (e_hat - cache["residual"])
    # e_hat = decoded @ W_dec
    dW_dec = decoded.T @ de_hat
    ddecoded = de_hat @ W_dec.T
    dnorms = None
    if norms is not None:
        # decoded = a / norms
        da = ddecoded / norms
        dnorms = -(ddecoded * decoded).sum(axis=0) / norms
    else:
        da = ddecoded
    # a = hidden where chosen, else 0 (no relu)
    dhidden = np.where(cache["chosen"], da, 0).astype(da.dtype, copy=False)
    return dhidden, dW_dec, dnorms


# -- a training step's loss ---------------------------------------------------------------------------
@fast.lane()
def sae_loss_forward(
    x: np.ndarray,
    W_enc: np.ndarray,
    b_enc: np.ndarray,
    W_dec: np.ndarray,
    b_dec: np.ndarray,
    kind: str,
    k: int | None = None,
    l1_coefficient: float = 0.0,
    dead: np.ndarray | None = None,
    aux_coefficient: float = 0.0,
) -> tuple[np.ndarray, np.ndarray, float, dict, dict]:
    """The training loss of a batch x (N, D): mse, the relu kind's l1 penalty (its
    `l1_coefficient`), and AuxK over the `dead` features (S,) bool (None: none).
    Returns (x_hat, acts, loss, {"mse", "l1", "aux"}, cache)."""
    x_hat, acts, cache = sae_forward(x, W_enc, b_enc, W_dec, b_dec, kind, k)
    terms = {"mse": mse_forward(x_hat, x), "l1": 0.0, "aux": 0.0}
    if kind == "relu":
        terms["l1"] = l1_penalty_forward(acts, cache["norms"], l1_coefficient)
    aux_cache = None
    if dead is not None:
        residual = detach(x - x_hat)  # a constant to the auxiliary loss
        norms = cache["norms"] if kind == "topk" else None
        terms["aux"], aux_cache = auxk_forward(cache["hidden"], dead, residual, W_dec, norms, aux_coefficient)
    cache.update(x=x, x_hat=x_hat, l1_coefficient=l1_coefficient, aux=aux_cache)
    return x_hat, acts, terms["mse"] + terms["l1"] + terms["aux"], terms, cache


@fast.lane(
    derivative_of=sae_loss_forward,
    grads=("x", "W_enc", "b_enc", "W_dec", "b_dec"),
    received="dloss",
    output=2,
)
def sae_loss_backward(cache: dict, dloss: float = 1.0) -> tuple[np.ndarray, ...]:
    """(dx, dW_enc, db_enc, dW_dec, db_dec) of dloss * the loss of `sae_loss_forward`. With AuxK
    on (dead features), it is the derivative with AuxK's residual held constant (`detach`, as
    SAELens's .detach()), as a finite difference of the recorded forward holds it."""
    x, x_hat = cache["x"], cache["x_hat"]
    dx_hat = mse_backward(x_hat, x, dloss)
    dacts = dnorms = dhidden = None
    if cache["kind"] == "relu":
        dacts, dnorms = l1_penalty_backward(cache["acts"], cache["norms"], cache["l1_coefficient"], dloss)
    dW_dec_aux = None
    if cache["aux"] is not None:
        dhidden, dW_dec_aux, dnorms_aux = auxk_backward(cache["aux"], dloss)
        if dnorms_aux is not None:
            dnorms = dnorms_aux if dnorms is None else dnorms + dnorms_aux
    du, dW_enc, db_enc, dW_dec, db_dec = sae_backward(dx_hat, cache, dacts, dhidden, dnorms)
    if dW_dec_aux is not None:
        dW_dec += dW_dec_aux
    dx = du - dx_hat  # mse's own x; the auxiliary loss's residual is a constant
    return dx, dW_enc, db_enc, dW_dec, db_dec
