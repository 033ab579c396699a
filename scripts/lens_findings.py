"""The lens findings of docs/results.md, measured on trained runs.

    python scripts/lens_findings.py reverse RUN_DIR   # cross attention: the anti-diagonal heads, ablated
    python scripts/lens_findings.py names RUN_DIR     # the layer at which the logit lens first gets the next letter

reverse: each decoder cross-attention head's mean weight on the anti-diagonal (query i on
source position n-1-i, the digit it writes) over the validation inputs of length 8; then the
exact match of greedy decoding on the whole validation split with the most anti-diagonal head
zero-ablated (its output before the out projection), against the least anti-diagonal one.
names: over the validation names, at every position where the model ranks the true next
character first, the first layer whose logit lens (residual -> ln_f -> lm_head) already does.
"""

from __future__ import annotations

import argparse

import numpy as np

from scratchformer.data.tasks import exact_match
from scratchformer.inference.beam import greedy_decode
from scratchformer.lens import head_scores, hooked, logit_lens
from scratchformer.training.jobs import load_job


def reverse(run: str, n: int | None) -> None:
    job = load_job(run)
    model, val = job.model, job.splits["val"]
    val = val.subset(slice(0, n))
    c = model.config
    length = (val.src != c.pad_id).sum(1)
    rows = np.flatnonzero(length == 8)
    src = val.src[rows][:, :8]
    tgt_in = np.concatenate([np.full((len(rows), 1), c.bos_id), val.tgt_out[rows][:, :7]], axis=1)
    scores = head_scores(model, (src, tgt_in))
    print(scores.check)
    cross = [i for i, label in enumerate(scores.labels) if label.startswith("cross")]
    anti = scores.scores["anti_diagonal"][cross]  # (layers, heads)
    for row, i in enumerate(cross):
        print(f"{scores.labels[i]}: anti-diagonal weight per head {np.round(anti[row], 3).tolist()}")
    best = np.unravel_index(np.nanargmax(anti), anti.shape)
    worst = np.unravel_index(np.nanargmin(anti), anti.shape)

    def exact(layer=None, head=None):
        hooks = {}
        if layer is not None:

            def zero(x, name):
                x = x.copy()
                x[:, head] = 0
                return x

            hooks = {f"decoder.blocks.{layer}.cross_attn.head_out": zero}
        with hooked(model, hooks):
            return float(exact_match(greedy_decode(model, val.src), val.tgt_out).mean())

    print(f"exact match on {len(val.src)} validation inputs: {exact():.4f}")
    for name, (layer, head) in (("most anti-diagonal", best), ("least anti-diagonal", worst)):
        print(
            f"  without the {name} head (cross L{layer} H{head}, weight {anti[layer, head]:.3f}): "
            f"{exact(layer, head):.4f}"
        )
    for layer in range(anti.shape[0]):
        print(
            f"  cross L{layer}, each head ablated in turn: "
            f"{[round(exact(layer, h), 4) for h in range(anti.shape[1])]}"
        )


def names(run: str, n: int | None) -> None:
    job = load_job(run)
    model, tok = job.model.to(np.float64), job.tokenizer
    lines = job.dataset.val.lines[:n]
    n_layers = model.config.n_layer + 1
    first = np.zeros(n_layers, dtype=int)
    right = total = 0
    for name in lines:
        ids = np.concatenate([[tok.bos_id], tok.encode(name), [tok.bos_id]])  # <eot> name <eot>
        lens = logit_lens(model, (ids[None, :-1],), k=1)
        assert lens.check.ok, lens.check
        top = lens.top_ids[:, :, 0]  # (layers, T)
        target = ids[1:]
        total += len(target)
        for t in np.flatnonzero(top[-1] == target):
            right += 1
            first[np.argmax(top[:, t] == target[t])] += 1
    print(
        f"{len(lines)} validation names, {total} next characters; the model ranks {right} "
        f"({right / total:.1%}) first"
    )
    for label, n in zip(lens.layers, first):
        print(f"  first ranked first after {label:>5}: {n:5d} ({n / max(right, 1):.1%})")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("what", choices=("reverse", "names"))
    p.add_argument("run", metavar="RUN_DIR")
    p.add_argument("--n", type=int, default=None, help="the first N validation examples (default: all)")
    args = p.parse_args()
    {"reverse": reverse, "names": names}[args.what](args.run, args.n)
