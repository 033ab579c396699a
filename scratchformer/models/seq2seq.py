"""Encoder-decoder Transformer (Vaswani et al. 2017) trained with teacher forcing.

    logits, loss = model(src, tgt_in, tgt_out)   # src (B, S), tgt_in/tgt_out (B, T) int ids
    model.backward()

- Embeddings (source and target, optionally one shared table) are scaled by sqrt(n_embd)
  (section 3.4) and initialised N(0, 1/n_embd), so the scaled embedding has unit variance,
  the same scale as the sinusoidal positions (section 3.5) added to it.
- Source padding mask: (B, 1, 1, S) from src != pad_id, used by the encoder's self-attention
  and by every decoder cross-attention. Target self mask: key padding (B, 1, 1, T) from
  tgt_in != pad_id, combined with the causal mask inside DecoderBlock.
- Teacher forcing: tgt_in = [BOS, y1, ..., yn] and tgt_out = [y1, ..., yn, EOS] (shifted by
  one); positions where tgt_out is pad_id or IGNORE_INDEX (-100) are ignored by the loss. Optional label
  smoothing (torch's definition).
- Backward: the decoder runs first; every cross-attention returns a gradient for the memory
  and their sum is the gradient of the encoder output, which then flows through the encoder.
- Pre-norm (`norm_first=True`) stacks end in a final LayerNorm each (`enc_norm`, `dec_norm`),
  as torch.nn.Transformer(norm_first=True).

Inference: `encode(src)` -> memory; `decode(tgt_prefix, memory, src_mask)` -> logits for every
prefix position (no cache); `decode_step(tokens, memory, src_mask, caches, offset)` -> logits of
the newest position, with a KV cache (see scratchformer.inference.beam).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from scratchformer.checks import as_array, check_heads, check_int_in_range, check_token_ids
from scratchformer.errors import ConfigError, DataError, ShapeError
from scratchformer.models.base import (
    IGNORE_INDEX,
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
    DecoderBlock,
    Dropout,
    Embedding,
    EncoderBlock,
    KVCache,
    LayerNorm,
    Linear,
    SinusoidalPositionalEncoding,
    init,
)
from scratchformer.nn.hooks import HookPoint
from scratchformer.nn.module import door
from scratchformer.ops import ACTIVATIONS, cross_entropy_forward
from scratchformer.settings import TransformerConfig, setting
from scratchformer.specs import NON_NEGATIVE, POSITIVE, PROBABILITY, Bool, Maybe, Str


@dataclass
class Seq2SeqConfig(TransformerConfig):
    """Hyper-parameters of a `Seq2SeqTransformer`; each field's `setting` declares its type,
    range and choices (the one place to add one)."""

    src_vocab_size: int = setting(POSITIVE)
    tgt_vocab_size: int = setting(POSITIVE)
    max_len: int = setting(POSITIVE, 64)  # longest source and longest decoder input
    n_layer: int = setting(POSITIVE, 2)  # encoder and decoder layers, unless given separately
    n_head: int = setting(POSITIVE, 4)
    n_embd: int = setting(POSITIVE, 64)
    n_inner: int | None = setting(Maybe(POSITIVE), None)  # feed-forward hidden size; None: 4 * n_embd
    dropout: float = setting(PROBABILITY, 0.0)
    norm_first: bool = setting(Bool(), True)
    activation: str = setting(Str(tuple(ACTIVATIONS)), "gelu")
    share_embeddings: bool = setting(Bool(), False)  # one table for source and target (equal vocab sizes)
    label_smoothing: float = setting(PROBABILITY, 0.0)
    pad_id: int = setting(NON_NEGATIVE, 0)
    bos_id: int = setting(NON_NEGATIVE, 1)
    eos_id: int = setting(NON_NEGATIVE, 2)
    n_encoder_layers: int | None = setting(Maybe(POSITIVE), None)  # None: n_layer (filled in when built)
    n_decoder_layers: int | None = setting(Maybe(POSITIVE), None)  # None: n_layer (filled in when built)

    def __post_init__(self) -> None:
        for name in ("n_encoder_layers", "n_decoder_layers"):  # default: n_layer each
            if getattr(self, name) is None:
                setattr(self, name, self.n_layer)
        self.validate()

    def check_together(self) -> None:
        check_heads(self.n_embd, self.n_head)
        if self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise ConfigError(
                "share_embeddings needs src_vocab_size == tgt_vocab_size, got "
                f"{self.src_vocab_size} and {self.tgt_vocab_size}"
            )
        for name in ("pad_id", "bos_id", "eos_id"):
            check_int_in_range(name, getattr(self, name), 0, self.tgt_vocab_size)


class Seq2SeqTransformer(Model):
    """Parameters: `src_emb`, `tgt_emb` (the same weight when shared), `encoder.i`, `enc_norm`,
    `decoder.i`, `dec_norm` (the norms only with pre-norm), `lm_head` (n_embd -> tgt vocab).

    `Seq2SeqTransformer(config, seed=None)`: config a Seq2SeqConfig; seed: see `Model._take_config`.
    """

    _targets_name = "tgt_out"
    family = "seq2seq"
    config_class = Seq2SeqConfig
    decodes = True

    def __init__(self, config: Seq2SeqConfig, seed: int | None = None):
        super().__init__()
        c = self._take_config(config, seed)
        std = c.n_embd**-0.5
        self.src_emb = Embedding(c.src_vocab_size, c.n_embd)
        self.src_emb.weight.data[...] = init.normal(
            self.src_emb.weight.shape, std, self.src_emb.weight.data.dtype
        )
        self.tgt_emb = Embedding(c.tgt_vocab_size, c.n_embd)
        if c.share_embeddings:
            self.tgt_emb.weight = self.src_emb.weight  # one Parameter, two lookups
        else:
            self.tgt_emb.weight.data[...] = init.normal(
                self.tgt_emb.weight.shape, std, self.tgt_emb.weight.data.dtype
            )
        self.emb_scale = math.sqrt(c.n_embd)
        self.src_pos = SinusoidalPositionalEncoding(c.max_len, c.n_embd)
        self.tgt_pos = SinusoidalPositionalEncoding(c.max_len, c.n_embd)
        self.src_drop, self.tgt_drop = Dropout(c.dropout), Dropout(c.dropout)
        self.encoder = [EncoderBlock(**c.block_args()) for _ in range(c.n_encoder_layers)]
        self.decoder = [
            DecoderBlock(**c.block_args(), cross_attention=True) for _ in range(c.n_decoder_layers)
        ]
        if c.norm_first:
            self.enc_norm = LayerNorm(c.n_embd)
            self.dec_norm = LayerNorm(c.n_embd)
        self.lm_head = Linear(c.n_embd, c.tgt_vocab_size)
        # hook points (scratchformer.lens): the scaled embeddings (B, T, C) and each stack's
        # output (after enc_norm / dec_norm when pre-norm)
        self.hook_src_embed, self.hook_tgt_embed = HookPoint(), HookPoint()
        self.hook_enc_final, self.hook_dec_final = HookPoint(), HookPoint()

    # -- the model contract (models/base.py) ----------------------------------------------------
    def stacks(self) -> dict[str, list]:
        return {"encoder.": self.encoder, "decoder.": self.decoder}

    def final_norm(self, prefix: str = "encoder."):
        if not self.config.norm_first:
            return None
        return self.dec_norm if prefix == "decoder." else self.enc_norm

    def unembedding(self) -> Head:
        return Head("decoder.", self.lm_head.weight.data, self.lm_head.bias.data)

    def token_embedding(self, prefix: str = "encoder."):
        return self.tgt_emb if prefix == "decoder." else self.src_emb

    def positions(self, prefix: str = "encoder."):
        return self.tgt_pos if prefix == "decoder." else self.src_pos

    def _example(self, ids, tokens, vocab_labels, target, tgt_ids=None, tgt_tokens=None, **_) -> Example:
        """The source and a decoding: `tgt_ids` (default: BOS and the model's greedy answer),
        drawn whole; its loss teacher-forced (the decoding shifted by one); explained: the
        decoding's last token, from the tokens before it."""
        from scratchformer.inference.beam import greedy_decode

        c = self.config
        if tgt_ids is None:
            answer = greedy_decode(self, ids[None])[0]
            tgt_ids = np.concatenate([[c.bos_id], answer])[: c.max_len]
        dec = np.asarray(tgt_ids, dtype=np.int64).reshape(-1)
        special = {c.bos_id: "<bos>", c.eos_id: "<eos>", c.pad_id: "<pad>"}
        if tgt_tokens is None:  # vocab_labels, else the ids, with BOS / EOS / PAD named
            tgt_tokens = [
                vocab_labels[i] if vocab_labels is not None else special.get(i, str(i)) for i in dec
            ]
        dec_tokens = list(tgt_tokens)
        x, d = ids[None], dec[None]
        loss = (x, d[:, :-1], d[:, 1:]) if d.shape[1] > 1 else None
        return Example(
            (x, d),
            loss,
            (x, d[:, :-1]) if d.shape[1] > 1 else (x, d),
            target,
            {"encoder.": tokens, "decoder.": dec_tokens},
            dec_tokens[:-1] if d.shape[1] > 1 else dec_tokens,
            label_list(vocab_labels, c.tgt_vocab_size),
            dec_tokens[1:],
        )

    def causal(self, prefix: str = "encoder.") -> bool:
        return prefix == "decoder."

    def named_hook_points(self) -> dict:
        return {
            "encoder.embed": self.hook_src_embed,
            "encoder.pos_embed": self.src_pos.hook_pos_embed,
            "encoder.ln_final": self.hook_enc_final,
            "decoder.embed": self.hook_tgt_embed,
            "decoder.pos_embed": self.tgt_pos.hook_pos_embed,
            "decoder.ln_final": self.hook_dec_final,
        }

    @classmethod
    def param_count(cls, config: Seq2SeqConfig) -> int:
        c = config
        C, F = c.n_embd, c.inner_size
        tables = c.src_vocab_size * C + (0 if c.share_embeddings else c.tgt_vocab_size * C)
        blocks = c.n_encoder_layers * block_params(C, c.n_head, F) + c.n_decoder_layers * block_params(
            C, c.n_head, F, cross_attention=True
        )
        norms = 2 * norm_params("layernorm", C, True) if c.norm_first else 0
        return tables + blocks + norms + linear_params(C, c.tgt_vocab_size, True)

    @classmethod
    def sizes(cls, config: Seq2SeqConfig) -> Sizes:
        c = config  # a decoder layer attends twice (self and cross): counted as two layers
        return Sizes(
            cls.param_count(c),
            c.n_encoder_layers + 2 * c.n_decoder_layers,
            c.n_embd,
            c.n_head,
            c.max_len,
            c.src_vocab_size + c.tgt_vocab_size,
        )

    def decoding_sizes(self) -> dict:
        """What a beam search's memory depends on (inference/beam.py): the decoder's layers,
        width, feed-forward width and target vocabulary; the source vocabulary, the longest
        sequence and the bos/eos/pad ids."""
        c = self.config
        return {
            "n_layer": c.n_decoder_layers,
            "n_embd": c.n_embd,
            "n_inner": c.inner_size,
            "vocab_size": c.tgt_vocab_size,
            "src_vocab_size": c.src_vocab_size,
            "max_len": c.max_len,
            "bos_id": c.bos_id,
            "eos_id": c.eos_id,
            "pad_id": c.pad_id,
        }

    # -- helpers -----------------------------------------------------------------------------
    def _check_ids(self, ids, name: str, vocab_size: int) -> np.ndarray:
        return check_token_ids(ids, name, vocab_size, max_len=self.config.max_len)

    def src_mask(self, src: np.ndarray) -> np.ndarray:
        """(B, 1, 1, S) bool, True at real (non-pad) source tokens."""
        return (np.asarray(src) != self.config.pad_id)[:, None, None, :]

    # -- encoder / decoder: doors when a user (or beam search) calls them, trusted from forward --
    @door(lambda self, src, *_, **__: self._check_ids(src, "src", self.config.src_vocab_size))
    def encode(self, src, src_mask=None) -> np.ndarray:
        """src (B, S) ids -> memory (B, S, n_embd). src_mask defaults to src != pad_id."""
        src = np.asarray(src)
        if src_mask is None:
            src_mask = self.src_mask(src)
        h = self.src_drop(self.src_pos(self.hook_src_embed(self.src_emb(src) * self.emb_scale)))
        for blk in self.encoder:
            h = blk(h, mask=src_mask)
        if self.config.norm_first:
            h = self.enc_norm(h)
        return self.hook_enc_final(h)

    @door(lambda self, tgt_in, *_, **__: self._check_ids(tgt_in, "tgt_in", self.config.tgt_vocab_size))
    def decode(self, tgt_in, memory, src_mask=None, tgt_padding=True) -> np.ndarray:
        """tgt_in (B, T) ids (starting with BOS) -> logits (B, T, tgt_vocab), no cache."""
        tgt_in = np.asarray(tgt_in)
        self_mask = (tgt_in != self.config.pad_id)[:, None, None, :] if tgt_padding else None
        h = self.tgt_drop(self.tgt_pos(self.hook_tgt_embed(self.tgt_emb(tgt_in) * self.emb_scale)))
        for blk in self.decoder:
            h = blk(h, memory, self_mask=self_mask, memory_mask=src_mask)
        if self.config.norm_first:
            h = self.dec_norm(h)
        return self.lm_head(self.hook_dec_final(h))

    def new_caches(self) -> list[list[KVCache]]:
        return [blk.new_cache() for blk in self.decoder]

    @door(lambda self, tokens, *_, **__: self._check_ids(tokens, "tokens", self.config.tgt_vocab_size))
    def decode_step(self, tokens, memory, src_mask, caches: list[list[KVCache]], offset: int) -> np.ndarray:
        """Incremental decoding (eval mode): tokens (B, 1) at position `offset` -> logits (B, V).

        `caches` (from `new_caches()`) holds the keys/values of positions < offset."""
        h = self.tgt_pos(self.tgt_emb(np.asarray(tokens)) * self.emb_scale, offset=offset)
        for blk, cache in zip(self.decoder, caches):
            h = blk(h, memory, memory_mask=src_mask, cache=cache)
        if self.config.norm_first:
            h = self.dec_norm(h)
        return self.lm_head(h[:, -1])

    # -- training ----------------------------------------------------------------------------
    def check_input(self, src, tgt_in, tgt_out=None) -> None:
        src = self._check_ids(src, "src", self.config.src_vocab_size)
        tgt_in = self._check_ids(tgt_in, "tgt_in", self.config.tgt_vocab_size)
        if src.shape[0] != tgt_in.shape[0]:
            raise ShapeError(f"src and tgt_in batch sizes differ: {src.shape[0]} vs {tgt_in.shape[0]}")
        if tgt_out is not None:
            tgt_out = as_array(tgt_out, "tgt_out")
            if tgt_out.shape != tgt_in.shape:
                raise ShapeError(f"tgt_out must have the shape of tgt_in {tgt_in.shape}, got {tgt_out.shape}")
            if not np.issubdtype(tgt_out.dtype, np.integer):
                raise DataError(f"tgt_out must hold integer token ids, got dtype {tgt_out.dtype}")

    def forward(self, src, tgt_in, tgt_out=None):
        """Returns (logits (B, T, tgt_vocab), loss float or None).

        tgt_out positions equal to pad_id or IGNORE_INDEX (-100) are ignored by the loss."""
        src, tgt_in = np.asarray(src), np.asarray(tgt_in)
        src_mask = self.src_mask(src)
        memory = self.encode(src, src_mask)
        logits = self.decode(tgt_in, memory, src_mask)
        loss, loss_cache = None, None
        if tgt_out is not None:
            tgt_out = np.asarray(tgt_out)
            # pad_id is padding, not a class to learn: ignored as IGNORE_INDEX is
            targets = np.where(tgt_out == self.config.pad_id, IGNORE_INDEX, tgt_out)
            loss, loss_cache = cross_entropy_forward(
                logits, targets, label_smoothing=self.config.label_smoothing
            )
        self._save(loss=loss_cache, out_shape=logits.shape)
        return logits, loss

    def loss_terms(self, src, tgt_in, tgt_out=None) -> int:
        """The targets forward(src, tgt_in, tgt_out) averages over: neither pad_id nor IGNORE_INDEX."""
        return self._counted(tgt_out, (self.config.pad_id,))

    def backward(self, dloss: float = 1.0, grad_output: np.ndarray | None = None) -> None:
        """Backpropagate dloss * the loss of the last training-mode forward (or dloss *
        grad_output, a gradient of the logits (B, T, tgt_vocab)): models/base.py's contract."""
        c, grad_logits = self._start_backward(dloss, grad_output)
        dh = self.lm_head.backward(grad_logits)
        if self.config.norm_first:
            dh = self.dec_norm.backward(dh)
        dmemory = None
        for blk in reversed(self.decoder):
            dh, dm = blk.backward(dh)
            dmemory = dm if dmemory is None else dmemory + dm
        dh = self.tgt_pos.backward(self.tgt_drop.backward(dh))
        self.tgt_emb.backward(self.hook_tgt_embed.backward(dh) * self.emb_scale)
        # the encoder output feeds every cross-attention: its gradient is the sum
        dh = dmemory
        if self.config.norm_first:
            dh = self.enc_norm.backward(dh)
        for blk in reversed(self.encoder):
            dh = blk.backward(dh)
        dh = self.src_pos.backward(self.src_drop.backward(dh))
        self.src_emb.backward(self.hook_src_embed.backward(dh) * self.emb_scale)
