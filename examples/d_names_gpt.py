"""A decoder-only character model on baby names (makemore's transformer, made with scratchformer),
and what its embeddings and residual stream look like.

The full run here is SHORT (500 steps of 32 names; `scratchformer train` takes 16,000 steps of
64), so the validation loss ends near 2.2 instead of a full run's 1.9; the pictures already
show the structure.

What it shows:
  - a 4-layer, 4-head, 64-wide GPT (PyTorch-default init, untied head, as makemore), trained on
    names.txt framed as <eot> name <eot>; validation loss and a few sampled names;
  - embedding_pca.png: PCA of the token embeddings (vowels drift together), of the learned
    positions, and of token + position for one name;
  - residual_norms.png / residual_heatmap.png: the residual stream's norm block by block and what
    each attention and feed-forward sub-layer writes into it;
  - attention_grid.png: every layer x head on one name.
What to notice: the first position (<eot>, "a name starts here") gets a lot of attention --
many heads use it as a resting place when nothing else is relevant.
Run: python examples/d_names_gpt.py [--quick] [--out DIR]   (full: about a minute)
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
print(f"{len(ds.train)} training names, vocabulary {tok.vocab_size} (26 letters + <eot>), block {ds.block_size}")

# %% The model and a short training
model = GPT(GPTConfig(vocab_size=tok.vocab_size, block_size=ds.block_size, n_layer=4, n_head=4, n_embd=64,
                      tie_weights=False, init="pytorch"), seed=0)
steps = 20 if quick else 500
rows = train(model, lambda r: ds.train.batch(r, 32), steps, lr=2e-3, weight_decay=0.1, warmup=100)
val_loss = float(np.mean([model(x, y)[1] for x, y in ds.val.all_batches(500)]))
print(f"{model.num_parameters():,} parameters; after {steps} steps: val loss {val_loss:.3f} "
      f"(uniform guessing {np.log(tok.vocab_size):.3f}; a full 16,000-step run reaches about 1.9)")
start = np.zeros((10, 1), dtype=np.int64)  # <eot>: "a name starts here"
names = [tok.decode(s[1:]) for s in model.generate(start, ds.block_size - 1, rng=np.random.default_rng(0),
                                                   eos_id=tok.eos_id)]
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
viz.embedding_pca(viz.trace.token_table(model), viz.trace.position_table(model), ids, tokens, vocab,
                  path=out / "embedding_pca.png")
viz.residual_norms(tr, path=out / "residual_norms.png")
viz.residual_heatmap(tr, tokens, path=out / "residual_heatmap.png")
viz.attention_grid(viz.trace.attention_maps(model, ids)["encoder"], tokens, title=f"names GPT on {name!r}",
                   path=out / "attention_grid.png")
viz.training_curves(rows, path=out / "training_curves.png")
print(f"figures in {out}")
