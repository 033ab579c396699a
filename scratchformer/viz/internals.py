"""Inside the stack, from a `scratchformer.viz.trace.Trace`: the residual stream's norm per
layer and the size of each update, the residual heatmap, feed-forward activations, and
LayerNorm input against output."""

from __future__ import annotations

import numpy as np

from scratchformer.viz._plot import finish, heatmap, new_figure

__all__ = ["residual_norms", "residual_heatmap", "ff_activations", "layernorm_histograms"]


def _norms(arrays) -> np.ndarray:
    """n arrays (1, T, C) -> (n, T) L2 norm per token."""
    return np.stack([np.linalg.norm(np.asarray(a, np.float64)[0], axis=-1) for a in arrays])


def residual_norms(tr, path=None):
    """Left: mean |x| of the residual stream after each block. Right: mean |update| added by
    each attention and each feed-forward sub-layer."""
    res = _norms(tr.residual).mean(axis=1)
    att, ff = _norms(tr.attn_update).mean(axis=1), _norms(tr.ff_update).mean(axis=1)
    fig = new_figure(9, 3.6)
    a, b = fig.subplots(1, 2)
    a.plot(range(len(res)), res, marker="o")
    a.set_xticks(range(len(res)), ["emb"] + [str(i) for i in range(len(res) - 1)])
    a.set_xlabel("after block")
    a.set_ylabel("mean token norm")
    a.set_title("residual stream grows layer by layer", fontsize=10)
    x = np.arange(len(att))
    b.bar(x - 0.2, att, width=0.4, label="attention update")
    b.bar(x + 0.2, ff, width=0.4, label="feed-forward update")
    b.set_xticks(x)
    b.set_xlabel("block")
    b.set_ylabel("mean update norm")
    b.legend(fontsize=8)
    b.set_title("what each sub-layer writes", fontsize=10)
    return finish(fig, path)


def residual_heatmap(tr, tokens, path=None):
    """Norm of the residual stream per token (columns) after each block (rows)."""
    norms = _norms(tr.residual)
    fig = new_figure(max(6, 0.2 * norms.shape[1] + 2), 1.5 + 0.35 * len(norms))
    ax = fig.subplots()
    im = heatmap(ax, norms, tokens, ["emb"] + [f"block {i}" for i in range(len(norms) - 1)],
                 annotate_max=0, vmin=None, vmax=None)
    fig.colorbar(im, ax=ax, label="|x|")
    ax.set_title("residual-stream norm per token and layer", fontsize=10)
    return finish(fig, path)


def ff_activations(tr, layer: int = 0, path=None):
    """One block's feed-forward: hidden values before and after the activation, and the
    fraction of tokens on which each neuron fires (output > 0), sorted."""
    pre = np.asarray(tr.ff_pre[layer], np.float64).reshape(-1, tr.ff_pre[layer].shape[-1])
    post = np.asarray(tr.ff_post[layer], np.float64).reshape(pre.shape)
    fires = np.sort((post > 0).mean(axis=0))[::-1]
    fig = new_figure(10, 3.4)
    a, b = fig.subplots(1, 2)
    bins = np.linspace(min(pre.min(), post.min()), max(pre.max(), post.max()), 60)
    a.hist(pre.ravel(), bins=bins, alpha=0.6, label="before activation")
    a.hist(post.ravel(), bins=bins, alpha=0.6, label="after activation")
    a.set_yscale("log")
    a.legend(fontsize=8)
    a.set_title(f"block {layer % len(tr.ff_pre)} feed-forward values", fontsize=10)
    b.plot(fires)
    b.set_ylim(0, 1.02)
    b.set_xlabel("neuron (sorted)")
    b.set_ylabel("fraction of tokens with output > 0")
    b.set_title("how often each neuron fires", fontsize=10)
    return finish(fig, path)


def layernorm_histograms(tr, which: int = 0, path=None):
    """One LayerNorm's input and output values: any scale in, mean 0 / std ~1 (times gain) out."""
    name, x, y = tr.layernorms[which]
    fig = new_figure(9, 3.4)
    for ax, v, title in zip(fig.subplots(1, 2), (x, y), ("input", "output")):
        v = np.asarray(v, np.float64).ravel()
        ax.hist(v, bins=60, color="tab:blue" if title == "input" else "tab:orange")
        ax.set_title(f"LayerNorm {name} {title}: mean {v.mean():.2f}, std {v.std():.2f}", fontsize=9)
    return finish(fig, path)
