"""`SparseAutoencoder`: a dictionary of features learned on one hook point's activations.

The math is ops/sae.py (the two kinds, relu and topk, their losses and the AuxK term for dead
features); this module holds the parameters in SAELens's layout and the one piece of state a
training step keeps besides them: for each feature, the steps since it last fired, which says
which features are dead (SAELens's `n_forward_passes_since_fired` and `dead_feature_window`).

    sae = SparseAutoencoder(SAEConfig(kind="topk", d_in=64, d_sae=512, k=16), seed=0)
    x_hat, loss = sae(x)              # x (N, d_in) activations; training mode: counts firing
    sae.backward()                    # gradients of the loss added into every .grad
    acts = sae.encode(x)              # (N, d_sae) feature activations
    x_hat = sae.decode(acts)          # (N, d_in)

Initialisation, as SAELens's TrainingSAE: W_dec's rows point in uniformly random directions
(Kaiming-uniform draws) with norm `decoder_init_norm` 0.1 (Anthropic's April 2024 update),
W_enc = W_dec^T, b_enc = b_dec = 0 (training/sae.py's job then starts b_dec at the data's mean).

The loss: in training mode, the training objective (mse, the relu kind's penalty, AuxK over
the features dead at the start of the step); in eval mode, mse and the penalty (AuxK is a
training aid: it depends on the steps counted so far, not on the batch).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from scratchformer.checks import FLOAT_DTYPES, check_backward_args, check_float_array
from scratchformer.errors import ConfigError, ShapeError
from scratchformer.models.base import Model, Sizes
from scratchformer.nn import Parameter
from scratchformer.nn import init as nn_init
from scratchformer.ops.sae import (
    SAE_KINDS,
    decoder_norms,
    sae_backward,
    sae_forward,
    sae_loss_backward,
    sae_loss_forward,
)
from scratchformer.settings import DictConfig, setting
from scratchformer.specs import POSITIVE, Maybe, Num, Str

__all__ = ["SAEConfig", "SparseAutoencoder", "DECODER_INIT_NORM"]

DECODER_INIT_NORM = 0.1  # SAELens's decoder_init_norm: Anthropic's April 2024 "heuristic" initialisation


@dataclass
class SAEConfig(DictConfig):
    """The autoencoder's settings.

    kind: "relu" (an L1 penalty on the decoder-norm-weighted activations) or "topk" (the k
    largest pre-activations, scaled by the decoder's norms). d_in: the hook point's width;
    d_sae: the features. k: features a topk row keeps (unused by relu). l1_coefficient: the relu
    kind's penalty (unused by topk). aux_coefficient: AuxK's weight (0: off). dead_window: a
    feature that has not fired for more than this many training steps is dead (AuxK's features).
    """

    kind: str = setting(Str(SAE_KINDS), "topk")
    d_in: int = setting(POSITIVE, 64)
    d_sae: int = setting(POSITIVE, 512)
    k: int | None = setting(Maybe(POSITIVE), 16)
    l1_coefficient: float = setting(Num(min=0.0), 1.0)
    aux_coefficient: float = setting(Num(min=0.0), 1.0 / 32)
    dead_window: int = setting(POSITIVE, 200)
    dtype: str = setting(Str(FLOAT_DTYPES), "float32")

    def check_together(self) -> None:
        if self.kind == "topk" and (self.k is None or self.k > self.d_sae):
            raise ConfigError(
                f"a topk autoencoder keeps k of its {self.d_sae} features: give k (--k) from 1 to "
                f"{self.d_sae}, got {self.k}"
            )


class SparseAutoencoder(Model):
    """x (N, d_in) -> (x_hat (N, d_in), loss). Parameters: W_enc (d_in, d_sae), b_enc (d_sae,),
    W_dec (d_sae, d_in), b_dec (d_in,); state: steps_since_fired (d_sae,), not trained."""

    family = "sae"
    config_class = SAEConfig
    _targets_name = None  # its loss needs no targets: the input is its own target

    def __init__(self, config: SAEConfig, seed: int | None = None):
        super().__init__()
        c = self._take_config(config, seed)
        dtype = np.dtype(c.dtype)
        rng = nn_init.get_rng()
        bound = math.sqrt(6.0 / c.d_in)  # kaiming_uniform_ of a (d_sae, d_in) matrix, gain sqrt(2)
        W_dec = rng.uniform(-bound, bound, size=(c.d_sae, c.d_in))
        W_dec *= DECODER_INIT_NORM / np.linalg.norm(W_dec, axis=1, keepdims=True)
        self.W_enc = Parameter(W_dec.T.astype(dtype))
        self.b_enc = Parameter(np.zeros(c.d_sae, dtype))
        self.W_dec = Parameter(W_dec.astype(dtype))
        self.b_dec = Parameter(np.zeros(c.d_in, dtype))
        # steps since each feature last fired: a count kept in the checkpoint beside the weights
        # (a float: Parameters are float arrays; exact to 2^24 steps), never trained
        self.steps_since_fired = Parameter(np.zeros(c.d_sae, dtype))

    # -- the model contract (models/base.py) ----------------------------------------------------
    @classmethod
    def param_count(cls, config: SAEConfig) -> int:
        """W_enc, b_enc, W_dec, b_dec and the firing counts."""
        return 2 * config.d_in * config.d_sae + 2 * config.d_sae + config.d_in

    @classmethod
    def sizes(cls, config: SAEConfig) -> Sizes:
        """One layer as wide as the features; a row is one activation (context 1) and its output
        the reconstruction (d_in wide)."""
        return Sizes(cls.param_count(config), 1, config.d_sae, 1, 1, config.d_in)

    def trainable_parameters(self) -> list[Parameter]:
        return [self.W_enc, self.b_enc, self.W_dec, self.b_dec]

    def loss_terms(self, x) -> int:
        return int(np.shape(x)[0])

    def to(self, dtype) -> SparseAutoencoder:
        super().to(dtype)
        self.config = type(self.config).from_dict({**self.config.to_dict(), "dtype": np.dtype(dtype).name})
        return self

    # -- forward / backward -------------------------------------------------------------------
    def check_input(self, x) -> None:
        check_float_array(x, "x", ndim=2)
        if x.shape[1] != self.config.d_in:
            raise ShapeError(
                f"the autoencoder reads activations of width {self.config.d_in}, got shape {x.shape}"
            )

    def dead_features(self) -> np.ndarray:
        """(d_sae,) bool: the features that have not fired for more than dead_window steps."""
        return self.steps_since_fired.data > self.config.dead_window

    def _params(self):
        return self.W_enc.data, self.b_enc.data, self.W_dec.data, self.b_dec.data

    def forward(self, x):
        """x (N, d_in) -> (x_hat (N, d_in), loss): the module docstring's loss."""
        x = np.asarray(x, dtype=self.dtype)
        c = self.config
        dead = self.dead_features() if self.training else None
        x_hat, acts, loss, terms, cache = sae_loss_forward(
            x, *self._params(), c.kind, c.k, c.l1_coefficient, dead, c.aux_coefficient
        )
        if self.training:  # SAELens's count: +1 for every feature, 0 for those that fired in the batch
            fired = (acts > 0).any(axis=0)
            self.steps_since_fired.data += 1
            self.steps_since_fired.data[fired] = 0
        else:
            loss -= terms["aux"]
        self.terms = terms  # the loss's parts: {"mse", "l1", "aux"}
        self._save(cache=cache, out_shape=x_hat.shape)
        return x_hat, loss

    def backward(self, dloss: float = 1.0, grad_output: np.ndarray | None = None) -> None:
        """Add the gradients of dloss * the last training forward's loss (or of dloss *
        sum(grad_output * x_hat), grad_output (N, d_in)) into W_enc, b_enc, W_dec, b_dec."""
        cache, grad = self._start_backward_sae(dloss, grad_output)
        if grad is None:
            _, dW_enc, db_enc, dW_dec, db_dec = sae_loss_backward(cache["cache"], float(dloss))
        else:
            _, dW_enc, db_enc, dW_dec, db_dec = sae_backward(grad, cache["cache"])
        self.W_enc.grad += dW_enc
        self.b_enc.grad += db_enc
        self.W_dec.grad += dW_dec
        self.b_dec.grad += db_dec

    def _start_backward_sae(self, dloss, grad_output):
        """(the cache, consumed; dloss * grad_output or None for the loss), arguments checked first."""
        check_backward_args(
            dloss, grad_output, (getattr(self, "_cache", None) or {}).get("out_shape"), "grad_output"
        )
        cache = self._pop_cache()
        if grad_output is None:
            return cache, None
        return cache, np.asarray(grad_output).astype(self.dtype, copy=False) * float(dloss)

    # -- inference ------------------------------------------------------------------------------
    def encode(self, x: np.ndarray) -> np.ndarray:
        """x (N, d_in) -> the feature activations (N, d_sae)."""
        return sae_forward(np.asarray(x, self.dtype), *self._params(), self.config.kind, self.config.k)[1]

    def decode(self, acts: np.ndarray) -> np.ndarray:
        """acts (N, d_sae) -> x_hat (N, d_in): through the unit directions for the topk kind."""
        W_dec = self.W_dec.data
        decoded = acts / decoder_norms(W_dec) if self.config.kind == "topk" else acts
        return decoded @ W_dec + self.b_dec.data

    def directions(self) -> np.ndarray:
        """(d_sae, d_in): what one unit of each feature's activation adds to x_hat (the topk
        kind's unit rows, the relu kind's rows as they are)."""
        W_dec = self.W_dec.data
        return W_dec / decoder_norms(W_dec)[:, None] if self.config.kind == "topk" else W_dec

    def reconstruct(self, x: np.ndarray) -> np.ndarray:
        """x (..., d_in) -> x_hat of the same shape (any leading axes: a hook's activation)."""
        x = np.asarray(x)
        flat = x.reshape(-1, x.shape[-1])
        return self.decode(self.encode(flat)).reshape(x.shape).astype(x.dtype, copy=False)
