"""Sequence reversal with the full post-norm encoder-decoder (Vaswani et al. 2017), its masks,
and two ways to decode: greedy and beam search.

Coming from the ten-part NumPy series (ending with an encoder-decoder on sequence reversal):
  - THE MASK CONVENTION IS THE OPPOSITE. The series writes 1 = masked (hidden) and adds -1e9
    there; scratchformer's masks are boolean, True = may attend, and hidden keys get -inf (weight
    exactly 0). Integer masks are refused, but a boolean mask written the series' way would
    silently attend ONLY to the keys it meant to hide. `ops.attention_forward(q, k, v, mask,
    mask_means="masked")` takes the series' convention by name (the cell below shows both).
    Its look-ahead mask (upper triangle = 1) is `causal=True` here (lower triangle True).
  - what maps to what: its LayerNormalization and post-norm Add & Norm -> `norm_first=False`;
    its encoder and decoder layers -> `EncoderBlock`, `DecoderBlock` (masked self-attention,
    encoder-decoder attention with queries from the decoder and keys/values from the encoder,
    feed-forward); its full model (embeddings x sqrt(d), positions, final linear) ->
    `Seq2SeqTransformer`; its target padding mask over the encoder output -> `memory_mask`.
    Token ids differ: it numbers PAD 0, SOS 1, EOS 2 and the symbols from 3; here the digits
    are 0-9 and PAD 10, BOS 11, EOS 12.
  - what differs, and why: its parts 7-10 run dummy layers returning random numbers and stop
    before training ("backprop is beyond scope"); here every layer is real, has a backward, and
    the model is trained to reverse held-out sequences, decoded greedily and with beam search.

What it shows:
  - the original Transformer's layout: LayerNorm *after* each residual sum (norm_first=False),
    sinusoidal positions, embeddings scaled by sqrt(n_embd) and shared between source and target;
  - the three masks (masks.png): the source padding mask (keys that are PAD are hidden from the
    encoder and from the cross-attention), the decoder's causal mask, and their combination with
    the target padding;
  - greedy decoding against beam search (width 4) on held-out sequences, and the cross-attention
    of a reversal: an anti-diagonal (the first output reads the last input).
What to notice: beam search keeps the greedy hypothesis as a candidate, so its score never falls
below greedy's; the script prints on how many held-out sequences the two decode differently. The
model trains with a warmup of 100 steps, as the original Transformer did (whether post-norm
needs one is not measured here; example a measures pre-norm against post-norm without warmup).
Run: python examples/e_reverse_beam_search.py [--quick] [--out DIR]
(full run: 60 s of CPU, 61 s wall on an AMD EPYC; docs/course.md)
"""

# %% Set-up: reverse digit sequences of length 1..8
import numpy as np
from _common import setup, train

from scratchformer import viz
from scratchformer.data.tasks import BOS, EOS, PAD, VOCAB_SIZE, encode_sources, format_digits, make_split
from scratchformer.inference import beam_search, greedy_decode
from scratchformer.models import Seq2SeqConfig, Seq2SeqTransformer
from scratchformer.nn import manual_seed

out, quick = setup("e_reverse_beam_search", __doc__)
steps = 40 if quick else 1500
train_set, held_out = make_split("reverse", 30000, 40 if quick else 300, seed=0, max_len=8)

manual_seed(0)
model = Seq2SeqTransformer(
    Seq2SeqConfig(
        src_vocab_size=VOCAB_SIZE,
        tgt_vocab_size=VOCAB_SIZE,
        max_len=9,
        n_layer=2,
        n_head=4,
        n_embd=64,
        norm_first=False,
        pad_id=PAD,
        bos_id=BOS,
        eos_id=EOS,
        share_embeddings=True,
    )
)
print(f"{model.num_parameters():,} parameters, post-norm, 2 encoder + 2 decoder blocks")

# %% The masks, for a batch of two sources of different lengths (True = may attend)
src = encode_sources(["3 1 4 1 5 9", "2 7"])  # (2, 6), the second row padded with PAD
tgt_in = np.array([[BOS, 9, 5, 1, 4, 1, 3], [BOS, 7, 2, PAD, PAD, PAD, PAD]])
src_mask = model.src_mask(src)[:, 0, 0]  # (B, S): the keys the encoder may read
T = tgt_in.shape[1]
causal = np.tril(np.ones((T, T), dtype=bool))  # query i sees keys j <= i
tgt_mask = causal[None] & (tgt_in != PAD)[:, None, :]  # (B, T, T): causal and not padding
fig_masks = [
    ("source padding (row 2)", np.broadcast_to(src_mask[1], (src.shape[1], src.shape[1]))),
    ("decoder causal", causal),
    ("causal & target padding (row 2)", tgt_mask[1]),
]
print("source mask of row 2:", src_mask[1].astype(int).tolist())

# %% The series' convention (1 = hidden) against this one (True = may attend), on one attention
from scratchformer.ops import attention_forward  # noqa: E402

rng = np.random.default_rng(0)
q, k, v = (
    rng.standard_normal((1, 1, 2, 4)),
    rng.standard_normal((1, 1, 3, 4)),
    rng.standard_normal((1, 1, 3, 4)),
)
series_mask = np.array(
    [[0, 0, 1], [0, 1, 1]]
)  # the series' way: hide key 2 from query 0, keys 1-2 from query 1
_, as_is = attention_forward(q, k, v, mask=series_mask.astype(bool))  # read as True = may attend: inverted
_, named = attention_forward(q, k, v, mask=series_mask, mask_means="masked")
print(
    f"weight on the keys the series' mask hides: {float(as_is['weights'][0, 0][series_mask == 1].sum()):.2f} "
    f"if passed as a bool mask as it is, {float(named['weights'][0, 0][series_mask == 1].sum()):.2f} with "
    'mask_means="masked"'
)


def batch(rng):
    return train_set.subset(rng.integers(0, len(train_set), size=64))


# %% Train (post-norm: a warmup of 100 steps), then decode greedily and with beam search
rows = train(
    model, batch, steps, lr=1e-3, warmup=100, held_out=(held_out.src, held_out.tgt_in, held_out.tgt_out)
)


def exact(pred):
    return float(np.mean([format_digits(p) == format_digits(t) for p, t in zip(pred, held_out.tgt_out)]))


greedy = greedy_decode(model, held_out.src)
beam = beam_search(model, held_out.src, beam_width=4)
print(
    f"held-out exact match after {steps} steps: greedy {exact(greedy):.4f}, beam search (4) {exact(beam):.4f}"
)
differ = sum(format_digits(g) != format_digits(b) for g, b in zip(greedy, beam))
print(f"greedy and beam search decode {differ} of {len(greedy)} held-out sequences differently")
print(
    "verdict: "
    + (
        "beam search matches more held-out sequences than greedy"
        if exact(beam) > exact(greedy)
        else "greedy and beam search match equally many"
        if exact(beam) == exact(greedy)
        else "greedy matches more held-out sequences (beam search maximises the model's score, not accuracy)"
    )
)
example = encode_sources(["3 1 4 1 5 9 2 6"])
print(
    f"reverse(3 1 4 1 5 9 2 6): greedy {format_digits(greedy_decode(model, example)[0])}, "
    f"beam {format_digits(beam_search(model, example, beam_width=4)[0])}"
)

# %% Figures: the masks, the three attentions of the last layer, the training curves
from matplotlib.figure import Figure  # noqa: E402 -- only this example draws a figure by hand

fig = Figure(figsize=(10, 3.4), layout="constrained")
for ax, (title, m) in zip(fig.subplots(1, 3), fig_masks):
    ax.imshow(m, cmap="Greys_r", vmin=0, vmax=1)
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("key")
    ax.set_ylabel("query")
fig.suptitle("masks: white = may attend")
fig.savefig(out / "masks.png", dpi=100)
tgt = np.concatenate([[BOS], greedy_decode(model, example)[0]])[:9]
maps = viz.trace.attention_maps(model, example[0], tgt)
labels = {BOS: "<bos>", EOS: "<eos>", PAD: "<pad>"}
viz.seq2seq_attention(
    maps,
    [str(t) for t in example[0]],
    [labels.get(int(t), str(t)) for t in tgt],
    path=out / "seq2seq_attention.png",
)
viz.training_curves(rows, path=out / "training_curves.png")
print(f"figures in {out}")
