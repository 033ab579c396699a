"""The minimal encoder-decoder on the copy task, trained with hand-written gradients.

Coming from the minimal PyTorch encoder-decoder (the copy-task tutorial):
  - each PyTorch call, and scratchformer's:
      nn.Embedding(V, d) -> nn.Embedding(V, d);  nn.Linear(i, o) -> nn.Linear(i, o), weight (o, i) as PyTorch;
      nn.LayerNorm(d) -> nn.LayerNorm(d);  nn.Dropout(p) -> nn.Dropout(p);  nn.GELU() -> FeedForward(activation="gelu");
      its W_Q, W_K, W_V, W_O Linears -> MultiHeadAttention's fused in_proj_weight (3d, d) and out_proj;
      F.softmax(scores.masked_fill(mask == 0, -inf)) -> ops.attention_forward(q, k, v, mask) (the same
      convention: True / 1 = may attend);  torch.tril(torch.ones(T, T)) -> causal=True;
      nn.CrossEntropyLoss()(out.view(-1, V), tgt.view(-1)) -> logits, loss = model(src, tgt_in, tgt_out);
      loss.backward() -> model.backward();  optim.Adam(model.parameters(), lr) -> optim.AdamW(param_groups(model, wd), lr);
      optimizer.step(), optimizer.zero_grad() -> opt.step(), opt.zero_grad();  torch.manual_seed -> nn.manual_seed.
  - what differs, and why: the tutorial is post-norm (LayerNorm after each residual sum); this
    example is pre-norm, which trains without a warmup (post-norm is example e); the tutorial adds
    no positional encoding although its text says one is added, here sinusoidal positions are;
    it trains on one batch of 2 sequences and reports that batch's loss, here 20,000 training
    sequences and 300 held-out ones, judged by decoding them.
  - its bug, run here: its decoder calls cross_attn(x, src_mask), so the cross-attention reads the
    decoder's own stream and never the encoder's output: the "encoder-decoder" cannot see the
    source. This script trains the same model a second time with that very call (a decoder block
    whose second attention is cross_attn(x) over its own stream, not causal) and prints both
    held-out scores and final training losses. (The tutorial's training loss fell to 0.0025: the
    disguised self-attention is not causal, so with teacher forcing it reads the next target
    token; a held-out decode, where no next token exists yet, shows the failure.)

What it shows:
  - one pre-norm encoder block and one decoder block (n_embd 32, 2 heads) learning `copy`;
  - the gradient reaches the encoder: its parameters get non-zero gradients from the loss;
  - the cross-attention is not uniform: each target position reads mainly the source position
    it copies (a diagonal in seq2seq_attention.png's bottom row);
  - changing one source digit changes the output at that place: the answer comes from the source.
What to notice: the decoder self-attention is lower-triangular (causal), the encoder's is not.
Run: python examples/c_copy_encoder_decoder.py [--quick] [--out DIR]
(full run: 22 s of CPU, 22 s wall on an AMD EPYC; docs/course.md)
"""  # noqa: E501

# %% Set-up: copy digit sequences of length 1..6
import numpy as np
from _common import setup, train

from scratchformer import viz
from scratchformer.data.tasks import BOS, EOS, PAD, VOCAB_SIZE, format_digits, make_split
from scratchformer.inference import greedy_decode
from scratchformer.models import Seq2SeqConfig, Seq2SeqTransformer
from scratchformer.nn import DecoderBlock, manual_seed
from scratchformer.nn.blocks import residual_forward

out, quick = setup("c_copy_encoder_decoder", __doc__)
steps = 40 if quick else 1200
train_set, held_out = make_split("copy", 20000, 300, seed=0, max_len=6)

manual_seed(0)
model = Seq2SeqTransformer(
    Seq2SeqConfig(
        src_vocab_size=VOCAB_SIZE,
        tgt_vocab_size=VOCAB_SIZE,
        max_len=7,
        n_layer=1,
        n_head=2,
        n_embd=32,
        pad_id=PAD,
        bos_id=BOS,
        eos_id=EOS,
        share_embeddings=True,
    )
)
print(f"{model.num_parameters():,} parameters: 1 encoder block, 1 decoder block (self- and cross-attention)")


def batch(rng):
    return train_set.subset(rng.integers(0, len(train_set), size=64))  # (src, tgt_in, tgt_out)


# %% The gradient reaches the encoder (the tutorial's version left it at zero)
model.train()
model(*batch(np.random.default_rng(1)))
model.backward()
enc = sum(float(np.abs(p.grad).sum()) for n, p in model.named_parameters() if n.startswith("encoder."))
print(f"encoder gradient after one backward: sum |grad| = {enc:.3f} (> 0: the encoder learns from the loss)")
assert enc > 0
model.zero_grad()

# %% Train, then decode the held-out sequences greedily
rows = train(model, batch, steps, lr=3e-3, held_out=(held_out.src, held_out.tgt_in, held_out.tgt_out))
pred = greedy_decode(model, held_out.src)
exact = float(np.mean([format_digits(p) == format_digits(t) for p, t in zip(pred, held_out.tgt_out)]))
print(f"held-out exact match: {exact:.4f} after {steps} steps")


# %% The tutorial's bug, run as it is written: its decoder calls cross_attn(x, src_mask)
class TutorialDecoderBlock(DecoderBlock):
    """The tutorial's decoder block. Its "cross-attention" is cross_attn(x, src_mask): attention of
    the decoder's own stream over itself, with no causal mask, so it never reads the encoder's
    output (memory) and each position may read the target tokens after it."""

    def forward(self, x, memory=None, self_mask=None, memory_mask=None, cache=None):
        self._memory_shape = memory.shape
        self_cache, cross_cache = (cache + [None])[:2] if cache is not None else (None, None)
        x = residual_forward(
            x,
            self.attn_norm,
            self.self_attn,
            self.attn_dropout,
            self.norm_first,
            mask=self_mask,
            causal=True,
            kv_cache=self_cache,
        )
        x = residual_forward(
            x, self.cross_norm, self.cross_attn, self.cross_dropout, self.norm_first, kv_cache=cross_cache
        )  # the bug: no context=memory, and not causal
        return residual_forward(x, self.ff_norm, self.ff, self.ff_dropout, self.norm_first)

    def backward(self, dy):
        dx, _ = super().backward(dy)  # the "cross-attention" took no memory: no gradient for it
        return dx, np.zeros(self._memory_shape, dy.dtype)


manual_seed(0)
c = model.config
buggy = Seq2SeqTransformer(c)
buggy.decoder = [
    TutorialDecoderBlock(
        c.n_embd,
        c.n_head,
        c.inner_size,
        cross_attention=True,
        dropout=c.dropout,
        activation=c.activation,
        norm_first=c.norm_first,
    )
    for _ in range(c.n_decoder_layers)
]
buggy_rows = train(buggy, batch, steps, lr=3e-3)
buggy_pred = greedy_decode(buggy, held_out.src)
buggy_exact = float(
    np.mean([format_digits(p) == format_digits(t) for p, t in zip(buggy_pred, held_out.tgt_out)])
)
print(
    f"held-out exact match with the tutorial's bug (cross_attn(x, src_mask)): {buggy_exact:.4f}, "
    f"final train loss {buggy_rows[-1]['train_loss']:.3f}; fixed: {exact:.4f}, final train loss "
    f"{rows[-1]['train_loss']:.3f}"
)
buggy_loss = buggy_rows[-1]["train_loss"]
if buggy_exact < exact and buggy_loss < 0.1:
    print(
        f"verdict: the bug trains to a near-zero loss ({buggy_loss:.1e}: with teacher forcing its non-causal "
        "attention reads the next target token) and fails on held-out decoding, where no next token exists"
    )
elif buggy_exact < exact:
    print("verdict: the bug fails on held-out decoding; its training loss has not fallen near zero yet")
else:
    print("verdict: at this length of training the bug does not show in held-out decoding")

# %% Does the output depend on the source? Change one digit and decode again
src = np.array([[3, 1, 4, 1, 5, 9]])
changed = src.copy()
changed[0, 2] = (changed[0, 2] + 5) % 10
a, b = format_digits(greedy_decode(model, src)[0]), format_digits(greedy_decode(model, changed)[0])
print(
    f"source {format_digits(src[0])} -> {a}; source {format_digits(changed[0])} -> {b}; "
    f"output changed: {a != b}"
)

# %% The cross-attention reads the encoder: how far from uniform is it?
tgt_in = np.concatenate([[BOS], greedy_decode(model, src)[0]])[:7]
maps = viz.trace.attention_maps(model, src[0], tgt_in)
cross = maps["cross"][-1].mean(axis=0)  # (T_target, S), averaged over heads
print(
    f"cross-attention: largest weight per target row {[round(float(v), 2) for v in cross.max(axis=1)]} "
    f"(uniform would be {1 / src.shape[1]:.2f})"
)
tgt_tokens = ["<bos>"] + [str(t) if t < 10 else "<eos>" for t in tgt_in[1:]]
viz.seq2seq_attention(maps, [str(t) for t in src[0]], tgt_tokens, path=out / "seq2seq_attention.png")
viz.training_curves(rows, path=out / "training_curves.png")
print(f"figures in {out}")
