"""GPT: a decoder-only Transformer language model (GPT-2 / nanoGPT layout).

    idx (B, T) int -> wte(idx) + wpe[0:T] -> drop -> h[0] ... h[n_layer-1] -> ln_f -> lm_head
    logits (B, T, vocab_size)

With ``positional="rope"`` there is no `wpe` (it is None): each block's self-attention rotates
its queries and keys instead (rotary embeddings). ``positional="alibi"`` has no `wpe` either:
each self-attention adds ALiBi's linear distance penalties to its scores (Press et al. 2022).
``normalization="rmsnorm"`` makes every norm an RMSNorm and ``activation="swiglu"`` the
feed-forward gated; with ``bias=False`` the three together are the Llama architecture
(scratchformer/interop/llama.py loads its checkpoints).

Each block of `h` is a `DecoderBlock(cross_attention=False)`: causal self-attention then a
feed-forward, pre-norm by default (GPT-2), post-norm with ``norm_first=False``. `ln_f` is
applied in both cases (it is an extra, harmless normalisation after post-norm blocks).

Usage::

    model = GPT(GPTConfig(vocab_size=65, block_size=64, n_layer=4, n_head=4, n_embd=128), seed=0)
    logits, loss = model(idx, targets)          # loss is None without targets
    model.zero_grad(); model.backward()         # fills (adds into) every Parameter.grad
    out = model.generate(idx, 100, temperature=0.8, top_k=40, rng=np.random.default_rng(0))

Weight tying (``tie_weights=True``, the default, as GPT-2): ``lm_head`` is a bias-free
`Linear` whose ``weight`` attribute *is* ``wte.weight`` (the same `Parameter` object). So
``parameters()`` / ``state_dict()`` list it once, under ``wte.weight`` (there is no
``lm_head.weight`` key), and the head's backward and the embedding's backward both add into
the one ``.grad``. Untied models have their own ``lm_head.weight``.

Initialisation (GPT-2 / nanoGPT): every Linear / Embedding / attention projection weight
~ N(0, 0.02^2), biases 0, LayerNorm 1 / 0, and the residual projections
(``self_attn.out_proj.weight`` and ``ff.fc2.weight``) ~ N(0, (0.02 / sqrt(2 n_layer))^2).

Generation keeps one KV cache per block so each new token costs O(T) work; see `generate`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from scratchformer.checks import (
    FLOAT_DTYPES,
    as_array,
    check_heads,
    check_int_in_range,
    check_token_ids,
)
from scratchformer.errors import ConfigError, DataError, ShapeError
from scratchformer.inference.sampling import as_rng, check_sampling_args, sample_next
from scratchformer.models.base import (
    Example,
    Head,
    Model,
    Sizes,
    block_params,
    label_list,
    linear_params,
    norm_params,
)
from scratchformer.nn import (
    FEEDFORWARD_ACTIVATIONS,
    NORMALIZATIONS,
    DecoderBlock,
    Dropout,
    Embedding,
    LearnedPositionalEmbedding,
    Linear,
    NoNorm,
    SinusoidalPositionalEncoding,
    make_norm,
)
from scratchformer.nn import init as nn_init
from scratchformer.nn.feedforward import GATED_ACTIVATIONS
from scratchformer.nn.hooks import HookPoint
from scratchformer.nn.module import eval_mode, trusted_calls
from scratchformer.ops import cross_entropy_forward
from scratchformer.settings import TransformerConfig, setting
from scratchformer.specs import POSITIVE, PROBABILITY, Bool, Maybe, Num, Str

__all__ = ["GPT", "GPTConfig"]


@dataclass
class GPTConfig(TransformerConfig):
    """Hyper-parameters of a `GPT`. Defaults are GPT-2 small (124M) with nanoGPT's choices:
    pre-norm, learned positions, exact GELU, tied LM head, biases, no dropout.

    bias: biases in every Linear and LayerNorm; False drops them all, as nanoGPT's bias=False.
    activation: the feed-forward's: "gelu", "gelu_tanh", "relu", or "swiglu" (gated, Llama's).
    positional: "learned" (GPT-2's table), "sinusoidal" (fixed, added to the input), "rope"
        (rotary, inside each self-attention; rope_theta is its base) or "alibi" (linear biases on
        each self-attention's scores, no parameters; block_size stays the longest context).
    normalization: "layernorm", "rmsnorm" (Llama's: no centring, no bias) or "none" (no norm
        anywhere, ln_f included: Nanda et al.'s grokking model); layer_norm_eps is the eps of either.
    n_kv_head: key/value heads of each self-attention; None means n_head, fewer is grouped-query
        attention (each key/value head serves n_head / n_kv_head query heads).
    n_inner: hidden size of the feed-forward; None means 4 * n_embd, or 8 * n_embd // 3 with a
        gated activation, whose three matrices then hold as many weights as two (LLaMA, section 2)
        (see `inner_size`).
    attn_only: True builds attention-only blocks (no feed-forward sub-layer and no ff_norm), the
        toy models of the induction-heads papers; activation and n_inner are then unused.
    dtype: "float32" (default) or "float64" (gradient checks).
    init: "gpt2" (default): weights N(0, 0.02), residual projections N(0, 0.02 / sqrt(2 n_layer)),
        zero biases. "pytorch": each layer's PyTorch default (Linear U(+-1/sqrt(in)), Embedding
        and learned positions N(0, 1)), as makemore's transformer; with a tiny vocabulary and an
        untied head it trains faster (measured on names.txt, docs/results.md). "grokking": the
        grokking paper's (Nanda et al. 2023): every weight N(0, 1 / n_embd), the untied
        unembedding N(0, 1 / vocab_size), zero biases.
    loss_dtype: the dtype the cross-entropy is computed in; None (default) means the model's.
        "float64" keeps a loss near zero from float32 rounding, as the grokking paper computes
        its log-softmax; the gradient handed back to the logits is in the model's dtype.

    Each field's `setting` declares its type, range and choices: the one place to add a choice
    (then the CLI offers it and checkpoints accept it; see docs/architecture.md).
    """

    vocab_size: int = setting(POSITIVE, 50257)
    block_size: int = setting(POSITIVE, 1024)
    n_layer: int = setting(POSITIVE, 12)
    n_head: int = setting(POSITIVE, 12)
    n_embd: int = setting(POSITIVE, 768)
    dropout: float = setting(PROBABILITY, 0.0)
    bias: bool = setting(Bool(), True)
    norm_first: bool = setting(Bool(), True)
    activation: str = setting(Str(FEEDFORWARD_ACTIVATIONS), "gelu")
    positional: str = setting(Str(("learned", "sinusoidal", "rope", "alibi")), "learned")
    tie_weights: bool = setting(Bool(), True)
    n_inner: int | None = setting(Maybe(POSITIVE), None)
    layer_norm_eps: float = setting(Num(above=0.0), 1e-5)
    dtype: str = setting(Str(FLOAT_DTYPES), "float32")
    init: str = setting(Str(("gpt2", "pytorch", "grokking")), "gpt2")
    normalization: str = setting(Str(tuple(NORMALIZATIONS)), "layernorm")
    rope_theta: float = setting(Num(above=0.0), 10000.0)  # base of the rotary frequencies (positional="rope")
    n_kv_head: int | None = setting(Maybe(POSITIVE), None)
    attn_only: bool = setting(Bool(), False)  # attention-only blocks: no feed-forward (Olsson et al. 2022)
    loss_dtype: str | None = setting(Maybe(Str(FLOAT_DTYPES)), None)

    def __post_init__(self) -> None:
        if isinstance(self.dtype, (np.dtype, type)):  # GPTConfig(dtype=np.float64) is stored by name
            self.dtype = np.dtype(self.dtype).name
        self.validate()

    @property
    def inner_size(self) -> int:
        """The feed-forward's hidden size: n_inner; when None, 4 * n_embd, or 8 * n_embd // 3
        for a gated activation (the same number of weights in its three matrices)."""
        if self.n_inner is not None:
            return self.n_inner
        return 8 * self.n_embd // 3 if self.activation in GATED_ACTIVATIONS else 4 * self.n_embd

    def check_together(self) -> None:
        check_heads(self.n_embd, self.n_head)
        if self.positional == "rope" and (self.n_embd // self.n_head) % 2:
            raise ConfigError(
                f"positional='rope' rotates pairs of channels: the head size n_embd / n_head = "
                f"{self.n_embd // self.n_head} must be even"
            )
        if self.n_kv_head is not None and self.n_head % self.n_kv_head:
            raise ConfigError(f"n_kv_head must divide n_head={self.n_head}, got {self.n_kv_head}")


class GPT(Model):
    """Decoder-only Transformer language model. See the module docstring.

    `GPT(config, seed=None)`: config a GPTConfig; seed: see `Model._take_config`.
    """

    family = "gpt"
    config_class = GPTConfig
    generates = True

    def __init__(self, config: GPTConfig, seed: int | None = None):
        super().__init__()
        c = self._take_config(config, seed)
        dtype = np.dtype(c.dtype)
        self.wte = Embedding(c.vocab_size, c.n_embd, dtype=dtype)
        if c.positional == "learned":
            self.wpe = LearnedPositionalEmbedding(c.block_size, c.n_embd, dtype=dtype)
        elif c.positional == "sinusoidal":
            self.wpe = SinusoidalPositionalEncoding(c.block_size, c.n_embd, dtype=dtype)
        elif c.positional in ("rope", "alibi"):  # the positions enter inside each self-attention
            self.wpe = None
        else:
            raise ConfigError(f"GPT does not build positional={c.positional!r}")
        self.drop = Dropout(c.dropout)
        self.h = [
            DecoderBlock(
                **c.block_args(),
                cross_attention=False,
                eps=c.layer_norm_eps,
                bias=c.bias,
                dtype=dtype,
                normalization=c.normalization,
                rope_theta=c.rope_theta if c.positional == "rope" else None,
                n_kv_head=c.n_kv_head,
                alibi=c.positional == "alibi",
                feedforward=not c.attn_only,
            )
            for _ in range(c.n_layer)
        ]
        self.ln_f = make_norm(c.normalization, c.n_embd, c.layer_norm_eps, c.bias, dtype)
        self.lm_head = Linear(c.n_embd, c.vocab_size, bias=False, dtype=dtype)
        # hook points (scratchformer.lens): token embeddings (B, T, C), ln_f's output (B, T, C)
        self.hook_embed, self.hook_ln_final = HookPoint(), HookPoint()
        if c.tie_weights:
            self.lm_head.weight = self.wte.weight  # one Parameter, reached first as wte.weight
        self._init_weights()

    # -- the model contract (models/base.py) ----------------------------------------------------
    def stacks(self) -> dict[str, list]:
        return {"": self.h}

    def final_norm(self, prefix: str = ""):
        return None if isinstance(self.ln_f, NoNorm) else self.ln_f  # normalization="none": no norm

    def unembedding(self) -> Head:
        return Head(
            "", self.lm_head.weight.data, None if self.lm_head.bias is None else self.lm_head.bias.data
        )

    def token_embedding(self, prefix: str = ""):
        return self.wte

    def positions(self, prefix: str = ""):
        return self.wpe  # None: the positions enter inside each self-attention

    def causal(self, prefix: str = "") -> bool:
        return True

    def _example(self, ids, tokens, vocab_labels, target, **_) -> Example:
        """The text's last block_size tokens (as generation reads a longer prompt); its loss:
        each token predicts the next; explained: the token after the text (`target`, else the
        prediction)."""
        bs = self.config.block_size
        x, tokens = ids[None, -bs:], tokens[-bs:]
        loss = (x[:, :-1], x[:, 1:]) if x.shape[1] > 1 else None
        labels = label_list(vocab_labels, self.config.vocab_size)
        return Example((x,), loss, (x,), target, {"": tokens}, tokens, labels)

    def named_hook_points(self) -> dict:
        points = {"embed": self.hook_embed}
        if self.wpe is not None:
            points["pos_embed"] = self.wpe.hook_pos_embed
        return {**points, "ln_final": self.hook_ln_final}

    @classmethod
    def param_count(cls, config: GPTConfig) -> int:
        """The parameters `GPT(config)` holds: the token table, the learned positions (if any),
        n_layer blocks (SwiGLU's third matrix and grouped-query key/value heads included),
        ln_f, and an untied head; attention-only blocks hold no feed-forward and no ff_norm."""
        c = config
        gated = c.activation in GATED_ACTIVATIONS
        block = block_params(
            c.n_embd,
            c.n_head,
            c.inner_size,
            gated,
            c.bias,
            c.normalization,
            c.n_kv_head,
            feedforward=not c.attn_only,
        )
        positions = c.block_size * c.n_embd if c.positional == "learned" else 0
        head = 0 if c.tie_weights else linear_params(c.n_embd, c.vocab_size, False)
        return (
            c.vocab_size * c.n_embd
            + positions
            + c.n_layer * block
            + norm_params(c.normalization, c.n_embd, c.bias)
            + head
        )

    @classmethod
    def sizes(cls, config: GPTConfig) -> Sizes:
        c = config
        return Sizes(cls.param_count(c), c.n_layer, c.n_embd, c.n_head, c.block_size, c.vocab_size)

    # -- construction -----------------------------------------------------------------------
    def _init_weights(self) -> None:
        if self.config.init == "pytorch":  # keep the layers' own (PyTorch-default) weights
            if isinstance(self.wpe, LearnedPositionalEmbedding):
                self.wpe.weight.data[...] = nn_init.get_rng().standard_normal(self.wpe.weight.shape)
            return
        rng, std = nn_init.get_rng(), 0.02
        resid_std = std / math.sqrt(2 * self.config.n_layer)
        if self.config.init == "grokking":  # every weight reads a width-n_embd stream at unit scale
            std = resid_std = 1.0 / math.sqrt(self.config.n_embd)

        def normal(p, s):
            p.data[...] = rng.standard_normal(p.shape) * s

        normal(self.wte.weight, std)
        if isinstance(self.wpe, LearnedPositionalEmbedding):
            normal(self.wpe.weight, std)
        for block in self.h:
            attn, ff = block.self_attn, block.ff
            normal(attn.in_proj_weight, std)
            normal(attn.out_proj.weight, resid_std)
            if ff is not None:  # attention-only blocks have none
                normal(ff.fc1.weight, std)
                normal(ff.fc2.weight, resid_std)
            for p in (
                attn.in_proj_bias,
                attn.out_proj.bias,
                *((ff.fc1.bias, ff.fc2.bias) if ff is not None else ()),
            ):
                if p is not None:
                    p.data[...] = 0
        if not self.config.tie_weights:
            grokking = self.config.init == "grokking"
            normal(self.lm_head.weight, 1.0 / math.sqrt(self.config.vocab_size) if grokking else std)

    def to(self, dtype) -> GPT:
        """Convert the weights (Module.to) and record the dtype in a copy of the config: a config
        object other models share is never changed."""
        super().to(dtype)
        self.config = dataclasses.replace(self.config, dtype=np.dtype(dtype).name)
        return self

    # -- forward / backward -------------------------------------------------------------------
    def check_input(self, idx, targets=None) -> None:
        check_token_ids(idx, "idx", self.config.vocab_size, max_len=self.config.block_size)
        if targets is not None:
            targets = as_array(targets, "targets")
            if targets.shape != np.shape(idx):
                raise ShapeError(f"targets must have the shape of idx {np.shape(idx)}, got {targets.shape}")
            if not np.issubdtype(targets.dtype, np.integer):
                raise DataError(f"targets must hold integer token ids, got dtype {targets.dtype}")

    def _trunk(self, idx: np.ndarray, caches=None, offset: int = 0) -> np.ndarray:
        """idx (B, T) -> final hidden states after ln_f, (B, T, n_embd)."""
        x = self.hook_embed(self.wte(idx))
        if self.wpe is not None:  # learned or sinusoidal positions (rotary and ALiBi act inside attention)
            x = self.wpe(x, offset=offset)
        x = self.drop(x)
        for i, block in enumerate(self.h):
            x = block(x, cache=None if caches is None else caches[i])
        return self.hook_ln_final(self.ln_f(x))

    def forward(self, idx, targets=None):
        """idx (B, T) int -> (logits (B, T, vocab_size), loss or None).

        targets: (B, T) int next-token ids; entries equal to IGNORE_INDEX (-100, the data
        pipeline's padding) do not count. The loss is their mean cross-entropy. In training
        mode, what `backward()` needs is kept (logits are computed once).
        """
        logits = self.lm_head(self._trunk(np.asarray(idx)))  # (B, T, V)
        loss, ce_cache = None, None
        if targets is not None:
            wide = self.config.loss_dtype is not None and logits.dtype != self.config.loss_dtype
            loss, ce_cache = cross_entropy_forward(
                logits.astype(self.config.loss_dtype) if wide else logits, np.asarray(targets)
            )
        self._save(loss=ce_cache, out_shape=logits.shape)
        return logits, loss

    def loss_terms(self, idx, targets=None) -> int:
        """The targets forward(idx, targets) averages over: those not IGNORE_INDEX."""
        return self._counted(targets)

    def backward(self, dloss: float = 1.0, grad_output: np.ndarray | None = None) -> None:
        """Backpropagate dloss * the loss of the last training-mode forward (or dloss *
        grad_output, a gradient of the logits (B, T, V)): models/base.py's contract.
        Gradients are *added* into each Parameter.grad (call zero_grad() first)."""
        _, dlogits = self._start_backward(dloss, grad_output)
        dx = self.lm_head.backward(dlogits)
        dx = self.ln_f.backward(dx)
        for block in reversed(self.h):
            dx, _ = block.backward(dx)
        dx = self.drop.backward(dx)
        if self.wpe is not None:
            dx = self.wpe.backward(dx)
        self.wte.backward(self.hook_embed.backward(dx))

    # -- generation ---------------------------------------------------------------------------
    def new_caches(self, capacity: int = 0) -> list:
        """One fresh KV cache (a list with one KVCache) per block; capacity: positions to
        allocate up front (a hint; the cache grows if it is exceeded)."""
        return [block.new_cache(capacity) for block in self.h]

    def _last_logits(self, idx: np.ndarray, caches=None, offset: int = 0) -> np.ndarray:
        """Logits for the last position only, (B, vocab_size): the head GEMM on one row each."""
        x = self._trunk(idx, caches, offset)[:, -1, :]
        return x @ self.lm_head.weight.data.T

    def generate(
        self,
        idx,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_k: int | None = None,
        top_p: float | None = None,
        rng=None,
        eos_id: int | None = None,
        use_cache: bool = True,
    ) -> np.ndarray:
        """Autoregressive sampling. idx (B, T) int prompt -> (B, T + max_new_tokens) int64:
        the prompt followed by the new tokens, as nanoGPT and transformers return.

        temperature / top_k / top_p: see `scratchformer.inference.sample_next` (temperature 0
        or top_k=1 is greedy). rng: a numpy Generator or an int seed (None: fresh entropy).
        eos_id: once a sequence samples it, that sequence keeps eos_id (padding) and the loop
        stops early when every sequence has finished; the shape is still (B, T + max_new_tokens).

        KV cache (use_cache=True): the prompt is run once, then each step feeds only the new
        token at position `offset` (O(T) attention work per token instead of a full forward).
        A prompt longer than block_size is cropped to its last block_size tokens for context
        (the returned sequence still starts with the whole prompt). Learned absolute positions
        cannot slide, so once the context would exceed block_size the cache is dropped and each
        further step recomputes the last block_size tokens from scratch (nanoGPT's crop);
        use_cache=False always does that. Both pick identical tokens. The model runs in eval
        mode and its previous train/eval mode is restored afterwards.
        """
        idx = check_token_ids(idx, "prompt", self.config.vocab_size)
        check_int_in_range("max_new_tokens", max_new_tokens, 0, 2**31)
        if eos_id is not None:
            check_int_in_range("eos_id", eos_id, 0, self.config.vocab_size)
        check_sampling_args(temperature, top_k, top_p)
        rng = as_rng(rng)
        B, T0 = idx.shape
        bs = self.config.block_size
        out = np.empty((B, T0 + max_new_tokens), dtype=np.int64)
        out[:, :T0] = idx
        if eos_id is not None:
            out[:, T0:] = eos_id
        finished = np.zeros(B, dtype=bool)
        with eval_mode(self), trusted_calls():
            caches, cached_len = None, 0  # cached_len: tokens held in the caches
            for step in range(max_new_tokens):
                pos = T0 + step  # tokens so far
                if caches is not None and cached_len < bs:
                    # feed only the newest token, at position cached_len of the cached window
                    logits = self._last_logits(out[:, pos - 1 : pos], caches, offset=cached_len)
                    cached_len += 1
                else:
                    # first step, or the window is full: run the last (at most) block_size tokens.
                    # Only a first window shorter than block_size is worth caching.
                    window = out[:, max(0, pos - bs) : pos]
                    prefill = use_cache and step == 0 and window.shape[1] < bs
                    caches = self.new_caches(min(bs, window.shape[1] + max_new_tokens)) if prefill else None
                    cached_len = window.shape[1] if prefill else 0
                    logits = self._last_logits(window, caches)
                nxt = sample_next(logits, rng, temperature=temperature, top_k=top_k, top_p=top_p)
                if eos_id is not None:
                    nxt = np.where(finished, eos_id, nxt)
                    finished |= nxt == eos_id
                out[:, pos] = nxt
                if eos_id is not None and finished.all():
                    break
        return out
