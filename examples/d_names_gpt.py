"""A decoder-only character model on baby names (makemore's transformer, made with scratchformer),
and what its embeddings and residual stream look like.

Coming from the decoder-only NumPy blog post (the "baby names" one, run on "Welcome to the world of AI"):
  - what maps to what: W_tok, W_pos -> `wte`, `wpe`; its fused W_qkv (d, 3d), applied as
    x @ W_qkv, -> `in_proj_weight` (3d, d) = W_qkv^T (PyTorch's (out, in) layout); W_o ->
    `out_proj`; W1, W2 -> `ff.fc1`, `ff.fc2` (transposed likewise); the dict of intermediates
    each block returns -> `viz.trace.trace(model, ids)` (residual stream, attention and
    feed-forward updates, LayerNorm inputs and outputs, feed-forward values); its vocabulary
    numbered from 1 -> `<eot>` is id 0, a real token that starts and ends each name.
  - what it gets wrong, fixed here: its pre-norm block computes LN(x) and then attends to x (here
    attention reads LN(x), as GPT-2); it has no final LayerNorm (here `ln_f`); its "generation"
    ('Welco e fo ohe world of A') is the argmax at every position of one teacher-forced pass --
    with a tied head and tiny updates, an echo of each input character, not a prediction --
    while `generate` here samples one character at a time and feeds it back; its residual
    stream "barely changes" (1.4255 -> 1.4268) because its W_o starts at 0.002 x N(0, 1), so
    attention adds almost nothing to an untrained model. residual_init_vs_trained.png draws that
    init's stream beside this model's, untrained and trained (the numbers are printed): most of
    the difference in scale is the init (PyTorch's N(0, 1) embeddings against its N(0, 1/d));
    the growth from block to block is what the sub-layers add.

The full run here is SHORT (500 steps of 32 names; `scratchformer train` takes 16,000 steps of
64), so the validation loss ends near 2.2 instead of a full run's 1.9; the pictures already
show the structure.

What it shows:
  - a 4-layer, 4-head, 64-wide GPT (PyTorch-default init, untied head, as makemore), trained on
    names.txt framed as <eot> name <eot>; validation loss and a few sampled names;
  - embedding_pca.png: PCA of the token embeddings, of the learned positions, and of token +
    position for one name; whether the vowels sit closer to each other than to the consonants
    is measured (cosine similarity in the full 64 dimensions, not only the two plotted) and
    printed with a verdict;
  - residual_norms.png / residual_heatmap.png: the residual stream's norm block by block and what
    each attention and feed-forward sub-layer writes into it;
  - attention_grid.png: every layer x head on one name.
What to notice: how much attention the first position (<eot>, "a name starts here") gets, against
what a uniform head would give it: the script prints both and says whether heads use it as a
resting place.
Run: python examples/d_names_gpt.py [--quick] [--out DIR]
(full run: 15 s of CPU, 15 s wall on an AMD EPYC; docs/course.md)
"""

# %% Data: names.txt, one name per line, split with the default seed
import numpy as np
from _common import setup, train

from scratchformer import viz
from scratchformer.data import load_dataset
from scratchformer.models import GPT, GPTConfig

out, quick = setup("d_names_gpt", __doc__)
ds = load_dataset(None, "lines")
tok = ds.tokenizer
print(
    f"{len(ds.train)} training names, vocabulary {tok.vocab_size} (26 letters + <eot>), block {ds.block_size}"
)

# %% The model and a short training
model = GPT(
    GPTConfig(
        vocab_size=tok.vocab_size,
        block_size=ds.block_size,
        n_layer=4,
        n_head=4,
        n_embd=64,
        tie_weights=False,
        init="pytorch",
    ),
    seed=0,
)
steps = 20 if quick else 500
rows = train(
    model,
    lambda r: ds.train.batch(r, 32),
    steps,
    lr=2e-3,
    weight_decay=0.1,
    warmup=100,
    held_out=next(ds.val.all_batches(500)),
)
val_loss = float(np.mean([model(x, y)[1] for x, y in ds.val.all_batches(500)]))
print(
    f"{model.num_parameters():,} parameters; after {steps} steps: val loss {val_loss:.3f} "
    f"(uniform guessing {np.log(tok.vocab_size):.3f}; a full 16,000-step run reaches about 1.9)"
)
start = np.zeros((10, 1), dtype=np.int64)  # <eot>: "a name starts here"
names = [
    tok.decode(s[1:])
    for s in model.generate(start, ds.block_size - 1, rng=np.random.default_rng(0), eos_id=tok.eos_id)
]
known = {tok.decode(x[x > 0]) for x, _ in ds.train.all_batches(len(ds.train))}
print(f"samples: {names}; {sum(n not in known for n in names)}/10 are not in the training set")

# %% Inside the model on one name
name = "emma"
ids = np.concatenate([[tok.bos_id], tok.encode(name)])  # what the model sees: <eot> e m m a
tokens = ["<eot>"] + list(name)
vocab = [tok.decode([i]) or "<eot>" for i in range(tok.vocab_size)]
tr = viz.trace.trace(model, ids)
norms = [float(np.linalg.norm(r[0], axis=-1).mean()) for r in tr.residual]
print(f"residual-stream norm after the embedding and each block: {[round(n, 2) for n in norms]}")
viz.embedding_pca(
    viz.trace.token_table(model),
    viz.trace.position_table(model),
    ids,
    tokens,
    vocab,
    path=out / "embedding_pca.png",
)
vowels = [tok.encode(c)[0] for c in "aeiou"]
consonants = [tok.encode(c)[0] for c in "bcdfghjklmnpqrstvwxyz"]
emb = viz.trace.token_table(model)
emb = emb / np.linalg.norm(emb, axis=1, keepdims=True)


def mean_cos(a, b):
    """Mean cosine similarity of the embeddings of ids a against ids b (pairs of an id with itself left out)."""
    sims = emb[a] @ emb[b].T
    return float(sims[~np.equal.outer(a, b)].mean())


within_v, within_c, across = (
    mean_cos(vowels, vowels),
    mean_cos(consonants, consonants),
    mean_cos(vowels, consonants),
)
print(
    f"token embeddings, mean cosine similarity: vowel-vowel {within_v:.3f}, consonant-consonant {within_c:.3f}, "
    f"vowel-consonant {across:.3f}"
)
print(
    "verdict: the vowels sit closer to each other than to the consonants"
    if within_v > across
    else "verdict: the vowels are not closer to each other than to the consonants in this model"
)
viz.residual_norms(tr, path=out / "residual_norms.png")
viz.residual_heatmap(tr, tokens, path=out / "residual_heatmap.png")
maps = viz.trace.attention_maps(model, ids)["encoder"]  # (n_layer, n_head, T, T), causal
first = maps[:, :, 1:, 0]  # weight of each later query on position 0
uniform = (1 / np.arange(2, len(ids) + 1))[None, None, :]  # what a uniform causal row gives position 0
print(
    f"attention on the first position (<eot>) from later queries on {name!r}: mean {first.mean():.2f} "
    f"against {uniform.mean():.2f} for uniform heads; heads above uniform: "
    f"{int((first.mean(-1) > uniform.mean()).sum())} of {first.shape[0] * first.shape[1]}"
)
print(
    "verdict: most heads rest on the first position"
    if (first.mean(-1) > uniform.mean()).mean() > 0.5
    else "verdict: most heads do not rest on the first position"
)
viz.attention_grid(maps, tokens, title=f"names GPT on {name!r}", path=out / "attention_grid.png")
viz.training_curves(rows, path=out / "training_curves.png")

# %% The tutorial's "barely changes": its init (W_o x 0.002), untrained, beside the trained model
tutorial = GPT(model.config, seed=0)
rng = np.random.default_rng(0)
for pname, p in tutorial.named_parameters():
    d = model.config.n_embd
    if pname in ("wte.weight", "wpe.weight"):
        p.data[...] = rng.standard_normal(p.shape) / np.sqrt(d)  # its W_tok, W_pos
    elif pname.endswith("out_proj.weight"):
        p.data[...] = rng.standard_normal(p.shape) * 0.002  # its W_o
    elif pname.endswith(("in_proj_weight", "fc1.weight", "fc2.weight")):
        p.data[...] = rng.standard_normal(p.shape) * 0.02  # its W_qkv, W1, W2
    elif pname.endswith("bias") and "norm" not in pname:
        p.data[...] = 0
init_norms = [float(np.linalg.norm(r[0], axis=-1).mean()) for r in viz.trace.trace(tutorial, ids).residual]
ours = [
    float(np.linalg.norm(r[0], axis=-1).mean())
    for r in viz.trace.trace(GPT(model.config, seed=0), ids).residual
]
print(
    f"residual-stream norm with the tutorial's init, untrained: {[round(n, 3) for n in init_norms]}; "
    f"with this model's init, untrained: {[round(n, 2) for n in ours]}; trained here: {[round(n, 2) for n in norms]}"
)
from matplotlib.figure import Figure  # noqa: E402 -- a comparison no library figure draws

fig = Figure(figsize=(6.4, 3.6), layout="constrained")
ax = fig.subplots()
where = ["emb"] + [f"block {i}" for i in range(len(norms) - 1)]
ax.plot(where, init_norms, marker="o", label="tutorial's init (W_o x 0.002), untrained")
ax.plot(where, ours, marker="o", label="this model's init (PyTorch's), untrained")
ax.plot(where, norms, marker="o", label=f"this model trained ({steps} steps)")
ax.set_ylim(0, None)
ax.set_xlabel("residual stream after")
ax.set_ylabel(f"mean token norm on {name!r}")
ax.legend(fontsize=8)
ax.set_title(
    f"residual-stream norm: tutorial's init {init_norms[0]:.2f} -> {init_norms[-1]:.2f}, "
    f"trained {norms[0]:.2f} -> {norms[-1]:.2f}",
    fontsize=9,
)
fig.savefig(out / "residual_init_vs_trained.png", dpi=100)
print(f"figures in {out}")
