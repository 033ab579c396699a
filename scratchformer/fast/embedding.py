"""Fast lane of `ops/embedding.py`: the embedding's gradient dW[i] += sum of dy over the positions
where ids == i, in one of two forms chosen by the vocabulary's size (here, and nowhere else):

- a small vocabulary (V <= ONE_HOT_MAX_VOCAB: character vocabularies, modular addition's p + 1
  tokens): one matrix product, onehot(ids)^T (V, N) @ dy (N, D), the one-hot built a block of
  positions at a time (at most ONE_HOT_BYTES). Each product is dy times 1 or 0, so each row of
  the result is the sum of its id's rows of dy, added in the BLAS's order. At modular addition's
  step (11,493 positions, 114 ids, width 128) 3.6 ms against 9.5 ms by sorted runs and 12 ms by
  `np.add.at`, one thread; at 27-65 ids and the names / shakespeare shapes 1.1-2.8x faster than
  the runs. A non-finite dy would make 0 x inf = NaN in every row, so a block whose sums are
  not all finite is redone by sorted runs, which keep a non-finite value in its own id's row.
- otherwise, sorted runs: the positions sorted by id (stably: each id's positions stay in their
  order), each id's run of rows of dy summed with one `np.add.reduceat`, and each sum added into
  its row once (no repeated index, so plain fancy-index addition is exact). 4-6x faster than
  `np.add.at` (docs/performance.md); at 512 ids and more the one-hot product costs more than the
  runs (measured at V = 256-1,000: even at 256 and width 64, 2x slower).

Both are deterministic and equal to `np.add.at` within float rounding (a run's rows are summed
before the gradient's row is added, not one by one)."""

from __future__ import annotations

import numpy as np

ONE_HOT_MAX_VOCAB = 128  # vocabularies up to this size take the one-hot product
ONE_HOT_BYTES = 16 << 20  # the one-hot of a block of positions is at most this big


def embedding_backward_into(dy: np.ndarray, ids: np.ndarray, weight_grad: np.ndarray) -> None:
    ids = ids.reshape(-1)
    if ids.size == 0:
        return None
    vocab, width = weight_grad.shape
    dy2 = dy.reshape(-1, width)  # (N, D)
    if vocab > ONE_HOT_MAX_VOCAB:
        _add_sorted_runs(dy2, ids, weight_grad)
        return None
    rows = max(1, ONE_HOT_BYTES // (vocab * dy2.dtype.itemsize))  # positions per one-hot block
    for start in range(0, ids.size, rows):
        block = slice(start, start + rows)
        with np.errstate(invalid="ignore", over="ignore"):  # a non-finite dy is redone below
            sums = _one_hot(ids[block], vocab, dy2.dtype) @ dy2[block]  # (V, D)
        if np.isfinite(sums).all():
            weight_grad += sums
        else:  # inf or NaN in dy: 0 x inf would spread NaN to every row
            _add_sorted_runs(dy2[block], ids[block], weight_grad)
    return None


def _one_hot(ids: np.ndarray, vocab: int, dtype) -> np.ndarray:
    """(V, n): 1 at [ids[j], j], 0 elsewhere."""
    one_hot = np.zeros((vocab, ids.size), dtype=dtype)
    one_hot[ids, np.arange(ids.size)] = 1
    return one_hot


def _add_sorted_runs(dy2: np.ndarray, ids: np.ndarray, weight_grad: np.ndarray) -> None:
    """weight_grad[i] += the sum of the rows of dy2 (N, D) where ids (N,) == i, by sorted runs."""
    order = np.argsort(ids, kind="stable")  # positions of each id stay in their order
    sorted_ids = ids[order]
    starts = np.flatnonzero(np.concatenate(([True], sorted_ids[1:] != sorted_ids[:-1])))
    sums = np.add.reduceat(dy2[order], starts, axis=0)
    weight_grad[sorted_ids[starts]] += sums  # each id once: no repeated index
