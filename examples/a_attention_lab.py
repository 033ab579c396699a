"""The lab of Speech and Language Processing (Jurafsky & Martin), chapter 8 ("Transformers"),
with scratchformer's layers: attention, causal attention, multi-head attention, sinusoidal
positional encoding, a pre-norm block, and a tiny language model with weight tying.

Coming from the SLP chapter 8 NumPy lab:
  - what maps to what: the lab's W_Q, W_K, W_V (d x d_k each, applied as x @ W_Q) are one fused
    matrix here, `MultiHeadAttention.in_proj_weight` (3d, d) = [W_Q^T; W_K^T; W_V^T] stacked by
    rows, PyTorch's (out, in) layout, so the three projections are one matrix product (cell 3
    loads the lab's matrices into it and gets the same output); the lab's W^O is `out_proj`;
    its attention function is `scratchformer.ops.attention_forward`; its mini LM (embedding +
    sinusoidal positions, pre-norm blocks with a ReLU feed-forward, final LayerNorm, head tied
    to the embedding) is `GPT(GPTConfig(positional="sinusoidal", activation="relu",
    tie_weights=True))`, the model of cell 6.
  - what differs, and why: masked scores are -inf, not -1e9, so a hidden key's weight is exactly
    0; the lab only runs a forward on random ids, here every layer has a backward and the LM is
    trained; scratchformer's default feed-forward is GELU (GPT-2's), ReLU is one option away.
  - where the lab is wrong: "closer positions are more similar" -- the cosine of PE[0] with
    PE[k] is not monotone in k (cell 4 prints it); the dot product depends on the distance only,
    which is the exact statement; "pre-norm trains more stably" is stated there, not shown -- cell
    7 measures it over 3 seeds.

What it shows, cell by cell (figures in --out):
  1. scaled dot-product attention on 5 tokens, step by step: scores -> softmax -> output
     (attention_steps.png);
  2. the causal mask: the same scores, row by row renormalised over the past only
     (causal_vs_bidirectional.png); the first token can only attend to itself;
  3. multi-head attention: 4 heads of width 4 over a 16-wide input, each with its own weights
     (multi_head.png); every row of every head sums to 1;
  4. sinusoidal positions (sinusoidal.png, position_similarity.png): the dot product of two
     positions depends only on their distance;
  5. a pre-norm block, x + attn(LN(x)) then + ff(LN(.)): with both output projections zeroed it
     is exactly the identity -- the residual stream carries x through untouched;
  6. the lab's mini LM, 2 layers, sinusoidal positions, ReLU, a tied head (lm_head.weight IS
     wte.weight), trained briefly on the bundled names (training_curves.png), then sampled;
  7. the lab's "pre-norm trains more stably", measured: 4-layer pre-norm and post-norm LMs,
     3 seeds each, at a high learning rate without warmup (the numbers are printed, whichever
     way they fall).
What to notice: every number printed is a check you can change the code to break.
Run: python examples/a_attention_lab.py [--quick] [--out DIR]
(full run: 26 s of CPU, 26 s wall on an AMD EPYC; docs/course.md)
"""

# %% 1. Scaled dot-product attention, step by step
import numpy as np
from _common import setup, train

from scratchformer import viz
from scratchformer.data import load_dataset
from scratchformer.models import GPT, GPTConfig
from scratchformer.nn import DecoderBlock, MultiHeadAttention, manual_seed, sinusoidal_table
from scratchformer.ops import attention_forward

out, quick = setup("a_attention_lab", __doc__)
rng = np.random.default_rng(0)
tokens = ["the", "cat", "sat", "on", "it"]
x = rng.standard_normal((5, 8))  # 5 tokens, 8 features each
Wq, Wk, Wv = (rng.standard_normal((8, 8)) / np.sqrt(8) for _ in range(3))
q, k, v = x @ Wq, x @ Wk, x @ Wv  # (T, d)
out_bi, cache = attention_forward(q[None, None], k[None, None], v[None, None])  # softmax(q k^T / sqrt d) v
weights = cache["weights"][0, 0]
print("bidirectional weights, row sums:", np.round(weights.sum(axis=1), 6).tolist())
viz.attention_steps(q, k, v, tokens, causal=False, path=out / "attention_steps.png")

# %% 2. Causal attention: a token sees only itself and the past
_, cache = attention_forward(q[None, None], k[None, None], v[None, None], causal=True)
causal = cache["weights"][0, 0]
print("causal weights of the first token:", np.round(causal[0], 3).tolist(), "(only itself)")
print("upper triangle of the causal weights is zero:", bool(np.all(np.triu(causal, 1) == 0)))
viz.causal_vs_bidirectional(q, k, tokens, path=out / "causal_vs_bidirectional.png")

# %% 3. Multi-head attention: 4 heads of size 4 on a 16-wide input
manual_seed(0)
mha = MultiHeadAttention(n_embd=16, n_head=4).eval()
h = rng.standard_normal((1, 5, 16)).astype(np.float32)
y = mha(h, causal=True)  # (1, 5, 16)
w = mha.attn_weights  # (1, 4, 5, 5): one map per head
print(
    f"multi-head output {y.shape}, weights {w.shape}; every row sums to 1:",
    bool(np.allclose(w.sum(axis=-1), 1, atol=1e-5)),
)
viz.attention_grid(w, tokens, title="multi-head attention (1 layer, 4 heads)", path=out / "multi_head.png")

# the lab's separate W_Q, W_K, W_V are the rows of one fused in_proj_weight (out, in): [W_Q^T; W_K^T; W_V^T]
lab = MultiHeadAttention(n_embd=8, n_head=1, bias=False, dtype=np.float64).eval()
lab.in_proj_weight.data[...] = np.concatenate([Wq.T, Wk.T, Wv.T])  # (24, 8)
lab.out_proj.weight.data[...] = np.eye(8)  # the lab's cell 1 has no W^O
print(
    f"the lab's x @ W_Q, W_K, W_V as in_proj_weight {lab.in_proj_weight.shape}: same output as cell 1:",
    bool(np.allclose(lab(x[None]), out_bi[0, 0])),
)

# %% 4. Sinusoidal positional encoding: similarity depends only on the distance
pe = sinusoidal_table(50, 64)  # (positions, n_embd): the lab's 50 x 64 table
dots = pe @ pe.T
spread = max(np.ptp(np.diag(dots, d)) for d in range(1, 10))  # same distance, different positions
print(f"PE[p] . PE[p + d] varies with p by at most {spread:.1e} for d < 10 (depends on d only)")
cos = (pe @ pe[0]) / (np.linalg.norm(pe, axis=1) * np.linalg.norm(pe[0]))  # cos(PE[0], PE[k])
rises = (np.flatnonzero(np.diff(cos) > 0) + 1).tolist()  # k where cos(PE[0], PE[k]) > cos(PE[0], PE[k-1])
print(
    "cos(PE[0], PE[k]) for k = 1, 5, 10, 25 (the lab's table and its k):",
    [round(float(cos[k]), 4) for k in (1, 5, 10, 25)],
    f"-- not monotone, it rises again at k = {rises}" if rises else "-- falls with k",
)
viz.sinusoidal_encoding(50, 64, path=out / "sinusoidal.png")
viz.position_similarity(pe, path=out / "position_similarity.png")

# %% 5. A pre-norm block: the residual stream passes x through
block = DecoderBlock(n_embd=16, n_head=4, n_inner=64, cross_attention=False, norm_first=True).eval()
for linear in (block.self_attn.out_proj, block.ff.fc2):  # silence both sub-layers
    linear.weight.data[...] = 0
    linear.bias.data[...] = 0
print("pre-norm block with zeroed output projections is the identity:", bool(np.array_equal(block(h), h)))

# %% 6. The lab's mini LM (sinusoidal positions, ReLU, tied head), trained on the bundled names
ds = load_dataset(None, "lines")  # names.txt, split by the default seed
config = dict(
    vocab_size=ds.tokenizer.vocab_size,
    block_size=ds.block_size,
    n_layer=2,
    n_head=4,
    n_embd=32,
    positional="sinusoidal",
    activation="relu",
)
lm = GPT(GPTConfig(**config, tie_weights=True), seed=0)
untied = GPT(GPTConfig(**config, tie_weights=False), seed=0)
print(
    f"tied head: lm_head.weight is wte.weight: {lm.lm_head.weight is lm.wte.weight}; "
    f"{lm.num_parameters():,} parameters against {untied.num_parameters():,} untied"
)
steps = 20 if quick else 800
val_x, val_y = next(ds.val.all_batches(500))
rows = train(lm, lambda r: ds.train.batch(r, 32), steps, lr=3e-3, weight_decay=0.1, held_out=(val_x, val_y))
print(
    f"after {steps} steps: train loss {rows[-1]['train_loss']:.3f}, val loss {lm(val_x, val_y)[1]:.3f} "
    f"(uniform guessing: {np.log(ds.tokenizer.vocab_size):.3f})"
)
start = np.zeros((5, 1), dtype=np.int64)  # the start-of-name token
samples = lm.generate(
    start, ds.block_size - 1, temperature=0.8, rng=np.random.default_rng(0), eos_id=ds.tokenizer.eos_id
)
print("samples:", [ds.tokenizer.decode(s[1:]) for s in samples])
viz.training_curves(rows, path=out / "training_curves.png")

# %% 7. "Pre-norm trains more stably": the lab's claim, measured over seeds (no warmup, a high lr)
pre_post = {}
for norm_first in (True, False):
    for seed in range(3):
        net = GPT(GPTConfig(**{**config, "n_layer": 4}, tie_weights=True, norm_first=norm_first), seed=seed)
        curve = train(
            net, lambda r: ds.train.batch(r, 32), 10 if quick else 300, lr=1e-2, warmup=0, log_every=10
        )
        pre_post.setdefault("pre" if norm_first else "post", []).append(
            (float(net(val_x, val_y)[1]), max(r["train_loss"] for r in curve[1:]))
        )
for name, runs in pre_post.items():
    val = np.array([v for v, _ in runs])
    print(
        f"{name}-norm, 4 layers, lr 1e-2 without warmup, 3 seeds: val loss {np.round(val, 3).tolist()} "
        f"(mean {val.mean():.3f}, spread {np.ptp(val):.3f}); worst train loss after step 0: "
        f"{max(p for _, p in runs):.3f}"
    )
pre, post = (np.array([v for v, _ in pre_post[k]]) for k in ("pre", "post"))
if pre.max() < post.min():
    verdict = "pre-norm reached a lower val loss than post-norm in every seed"
elif pre.mean() < post.mean():
    verdict = "pre-norm is lower on average, but the seeds overlap: no clear difference at this size"
else:
    verdict = "pre-norm is not better here: the lab's claim does not show at this size and learning rate"
print(f"verdict: {verdict}")
print(f"figures in {out}")
