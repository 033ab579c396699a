"""Inside the stack, from a `scratchformer.viz.trace.Trace`: the residual stream's norm per
layer and the size of each update, the residual heatmap, feed-forward activations, and
LayerNorm input against output."""

from __future__ import annotations

import numpy as np

from scratchformer.viz import claims
from scratchformer.viz._plot import finish, heatmap, new_figure, paired_bars

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
    a.set_ylim(0, None)
    a.set_xlabel("after block")
    a.set_ylabel("mean token norm")
    a.set_title("residual stream: " + claims.residual_growth(res), fontsize=9)
    paired_bars(b, att, ff, ("attention update", "feed-forward update"))
    b.set_xticks(np.arange(len(att)))
    b.set_xlabel("block")
    b.set_ylabel("mean update norm")
    b.set_ylim(
        0, 1.25 * max(float(att.max(initial=0)), float(ff.max(initial=0)), 1e-12)
    )  # room for the legend
    b.legend(fontsize=8, loc="upper left", ncols=2)
    b.set_title("what each sub-layer writes", fontsize=10)
    return finish(fig, path)


def residual_heatmap(tr, tokens, path=None):
    """Norm of the residual stream per token (columns) after each block (rows)."""
    norms = _norms(tr.residual)
    fig = new_figure(max(6, 0.2 * norms.shape[1] + 2), 1.5 + 0.35 * len(norms))
    ax = fig.subplots()
    im = heatmap(
        ax,
        norms,
        tokens,
        ["emb"] + [f"block {i}" for i in range(len(norms) - 1)],
        annotate_max=0,
        vmin=None,
        vmax=None,
    )
    ax.set_xlabel("token")
    ax.set_ylabel("residual stream after")
    fig.colorbar(im, ax=ax, label="|x|")
    ax.set_title("residual-stream norm per token and layer", fontsize=10)
    return finish(fig, path)


DEAD_MIN_TOKENS = 200  # below this many tokens, a neuron that never fired may just not have met its input


def ff_activations(tr, layer: int = 0, path=None, more=()):
    """One block's feed-forward: hidden values before and after the activation, and the
    fraction of tokens on which each neuron fires (output > 0), sorted. more: traces of further
    inputs, whose tokens count too (a neuron's firing rate from 5 tokens says little)."""
    traces = [tr, *more]
    width, out_width = (
        tr.ff_pre[layer].shape[-1],
        tr.ff_post[layer].shape[-1],
    )  # SwiGLU: out_width = width / 2
    pre = np.concatenate([np.asarray(t.ff_pre[layer], np.float64).reshape(-1, width) for t in traces])
    post = np.concatenate([np.asarray(t.ff_post[layer], np.float64).reshape(-1, out_width) for t in traces])
    fires = np.sort((post > 0).mean(axis=0))[::-1]
    n_tokens = len(pre)
    never = int(np.sum(fires == 0))
    if n_tokens >= DEAD_MIN_TOKENS:
        verdict = f"{never} of {width} never fire"
    else:
        verdict = f"{never} of {width} never fire (too few tokens to call them dead)"
    fig = new_figure(10, 3.4)
    a, b = fig.subplots(1, 2)
    bins = np.linspace(min(pre.min(), post.min()), max(pre.max(), post.max()), 60)
    a.hist(pre.ravel(), bins=bins, alpha=0.6, label="before activation")
    a.hist(post.ravel(), bins=bins, alpha=0.6, label="after activation")
    a.set_yscale("log")
    a.legend(fontsize=8)
    a.set_xlabel("hidden value")
    a.set_ylabel("count (log scale)")
    a.set_title(f"block {layer % len(tr.ff_pre)} feed-forward values", fontsize=10)
    b.plot(fires)
    b.set_ylim(0, 1.02)
    b.set_xlabel("neuron (sorted)")
    b.set_ylabel("fraction of tokens with output > 0")
    b.set_title(f"how often each neuron fires, on {n_tokens} tokens: {verdict}", fontsize=9)
    return finish(fig, path)


def layernorm_histograms(tr, which: int | None = None, path=None):
    """One LayerNorm's input and its normalised input (x - mean) / std per token, before the gain
    and bias: what normalising does. which: the LayerNorm's index in tr.layernorms (default:
    the one whose input is farthest from normalised, so the figure shows a change)."""

    def off(x):  # how far the tokens of x are from mean 0, std 1
        x = np.asarray(x, np.float64)
        return float(np.mean(np.abs(x.mean(axis=-1))) + np.mean(np.abs(x.std(axis=-1) - 1)))

    if which is None:
        which = int(np.argmax([off(x) for _, x, _ in tr.layernorms]))
    name, x, _ = tr.layernorms[which]
    x = np.asarray(x, np.float64)
    normalised = (x - x.mean(axis=-1, keepdims=True)) / np.sqrt(x.var(axis=-1, keepdims=True) + 1e-5)
    fig = new_figure(9, 3.4)
    for ax, v, title in zip(
        fig.subplots(1, 2), (x, normalised), ("input", "normalised (before gain and bias)")
    ):
        means, stds = v.mean(axis=-1).ravel(), v.std(axis=-1).ravel()
        ax.hist(v.ravel(), bins=60, color="tab:blue" if title == "input" else "tab:orange")
        for at in (means.mean() - stds.mean(), means.mean(), means.mean() + stds.mean()):
            ax.axvline(at, color="black", lw=0.8, ls="-" if at == means.mean() else "--")
        ax.set_xlabel("value (lines: mean and mean +- std)")
        ax.set_ylabel("count")
        ax.set_title(
            f"{name} {title}\nper token: mean {means.mean():.2f} (+-{means.std():.2f}), "
            f"std {stds.mean():.2f}",
            fontsize=9,
        )
    return finish(fig, path)
