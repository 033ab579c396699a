# learner bug (topk_sae): the gradient sent to every feature, kept or not
# expect: the gradient passes through features the TopK did not keep
"""Exercise topk_sae: the backward of a TopK sparse autoencoder (Gao et al. 2024), as SAELens
trains it: each feature read as if its decoder row had unit norm.

    norms  = ||W_dec[s]||                                   (S,)   a row's Euclidean norm
    pre    = (x - b_dec) W_enc + b_enc                      (N, S)
    hidden = pre * norms
    acts   = relu of the k largest entries of each row of hidden, 0 elsewhere
    x_hat  = (acts / norms) W_dec + b_dec                   (N, D)

x: (N, D) activations, W_enc (D, S), b_enc (S,), W_dec (S, D), b_dec (D,). Write `backward`:
given dy = dL/dx_hat, ADD the gradients into W_enc.grad, b_enc.grad, W_dec.grad and b_dec.grad
(never overwrite) and return dx. W_dec is used three times (in the product and in the norms,
twice), b_dec twice; only the chosen, positive features pass a gradient. (What do the norms' two
terms add up to for a kept feature? The rescaling decides which features are kept, and nothing
else.)
"""

import numpy as np

from scratchformer.nn import Parameter


class TopKSAE:
    """x: (N, d_in) -> x_hat: (N, d_in). Parameters: W_enc (d_in, d_sae), b_enc (d_sae,),
    W_dec (d_sae, d_in), b_dec (d_in,)."""

    def __init__(self, d_in, d_sae, k):
        self.k = k
        self.W_enc = Parameter(np.zeros((d_in, d_sae)))  # .data and .grad
        self.b_enc = Parameter(np.zeros(d_sae))
        self.W_dec = Parameter(np.zeros((d_sae, d_in)))
        self.b_dec = Parameter(np.zeros(d_in))

    def forward(self, x):
        norms = np.sqrt((self.W_dec.data**2).sum(axis=1))  # (S,)
        u = x - self.b_dec.data
        pre = u @ self.W_enc.data + self.b_enc.data
        hidden = pre * norms
        top = np.argsort(-hidden, axis=1, kind="stable")[:, : self.k]  # each row's k largest
        chosen = np.zeros(hidden.shape, dtype=bool)
        np.put_along_axis(chosen, top, True, axis=1)
        keep = chosen & (hidden > 0)  # chosen and through the relu
        acts = np.where(keep, hidden, 0.0)
        # kept for the backward
        self.u, self.pre, self.norms, self.keep, self.acts = u, pre, norms, keep, acts
        return (acts / norms) @ self.W_dec.data + self.b_dec.data

    def backward(self, dy):
        """dy: (N, d_in). Adds into every parameter's .grad; returns dx: (N, d_in)."""
        W_enc, W_dec, norms = self.W_enc.data, self.W_dec.data, self.norms
        decoded = self.acts / norms  # (N, S)
        # x_hat = decoded W_dec + b_dec
        self.b_dec.grad += dy.sum(axis=0)
        self.W_dec.grad += decoded.T @ dy
        ddecoded = dy @ W_dec.T
        # decoded = acts / norms
        dacts = ddecoded / norms
        dnorms = -(ddecoded * decoded).sum(axis=0) / norms
        # acts = hidden where kept, else 0
        dhidden = dacts  # every feature, kept or not
        # hidden = pre * norms
        dpre = dhidden * norms
        dnorms += (dhidden * self.pre).sum(axis=0)
        # pre = u W_enc + b_enc,  u = x - b_dec
        self.b_enc.grad += dpre.sum(axis=0)
        self.W_enc.grad += self.u.T @ dpre
        du = dpre @ W_enc.T
        self.b_dec.grad -= du.sum(axis=0)
        # norms = sqrt(sum_d W_dec^2): d norms[s] / d W_dec[s, d] = W_dec[s, d] / norms[s]. For a kept
        # feature decoded = pre, so the two terms of dnorms cancel: this adds zero (to rounding)
        self.W_dec.grad += (dnorms / norms)[:, None] * W_dec
        return du
