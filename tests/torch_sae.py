"""Test helper: the same sparse autoencoders in PyTorch, written from SAELens's training code
(sae_lens/saes/standard_sae.py, topk_sae.py, sae.py: TrainingSAE.training_forward_pass and
TopKTrainingSAE.calculate_topk_aux_loss, version 6.51.1), with autograd doing the backward.
A reference for tests only: scratchformer's SAE is ops/sae.py and models/sae.py."""

from __future__ import annotations

import torch


def torch_sae_loss(x, W_enc, b_enc, W_dec, b_dec, kind, k=None, l1=0.0, dead=None, aux=0.0):
    """(x_hat, acts, loss, {"mse", "l1", "aux"}) as SAELens's TrainingSAE computes them."""
    sae_in = x - b_dec  # apply_b_dec_to_input
    hidden_pre = sae_in @ W_enc + b_enc
    norms = W_dec.norm(dim=-1)
    if kind == "topk":  # rescale_acts_by_decoder_norm=True
        hidden_pre = hidden_pre * norms
        values, indices = torch.topk(hidden_pre, k=k, dim=-1, sorted=False)
        acts = torch.zeros_like(hidden_pre).scatter(-1, indices, values.relu())
        x_hat = (acts * (1 / norms)) @ W_dec + b_dec
    else:
        acts = torch.relu(hidden_pre)
        x_hat = acts @ W_dec + b_dec
    mse = (x_hat - x).pow(2).sum(dim=-1).mean()
    terms = {"mse": mse, "l1": torch.zeros((), dtype=x.dtype), "aux": torch.zeros((), dtype=x.dtype)}
    if kind == "relu":
        terms["l1"] = (l1 * (acts * norms).norm(p=1, dim=-1)).mean()
    if dead is not None and int(dead.sum()) > 0 and aux:
        n_dead = int(dead.sum())
        residual = (x - x_hat).detach()
        k_aux = x.shape[-1] // 2
        scale = min(n_dead / k_aux, 1.0)
        k_aux = min(k_aux, n_dead)
        latents = torch.where(dead[None], hidden_pre, -torch.inf)
        top = latents.topk(k_aux, sorted=False)
        a = torch.zeros_like(hidden_pre).scatter(-1, top.indices, top.values)
        recons = (a * (1 / norms)) @ W_dec if kind == "topk" else a @ W_dec
        terms["aux"] = aux * scale * (recons - residual).pow(2).sum(dim=-1).mean()
    return x_hat, acts, terms["mse"] + terms["l1"] + terms["aux"], terms
