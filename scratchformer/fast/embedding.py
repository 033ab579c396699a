"""Fast lane of `ops/embedding.py`: the embedding's gradient by sorted runs instead of
`np.add.at`. The positions are sorted by id (stably: each id's positions stay in their order),
each id's run of rows of dy is summed with one `np.add.reduceat`, and each sum is added into its
row once (no repeated index, so plain fancy-index addition is exact). 4-6x faster than
`np.add.at` (docs/performance.md) and deterministic; equal to it within float rounding (a run's
rows are summed before the gradient's row is added, not one by one)."""

from __future__ import annotations

import numpy as np


def embedding_backward_into(dy: np.ndarray, ids: np.ndarray, weight_grad: np.ndarray) -> None:
    ids = ids.reshape(-1)
    if ids.size == 0:
        return None
    order = np.argsort(ids, kind="stable")  # positions of each id stay in their order
    sorted_ids = ids[order]
    starts = np.flatnonzero(np.concatenate(([True], sorted_ids[1:] != sorted_ids[:-1])))
    sums = np.add.reduceat(dy.reshape(-1, weight_grad.shape[-1])[order], starts, axis=0)
    weight_grad[sorted_ids[starts]] += sums  # each id once: no repeated index
    return None
