"""Fast lane of `ops/linear.py`: the bias gradient as one BLAS sum (`fast/reductions.py`), and a
big weight's gradient added into .grad a block of rows at a time.

A GPT-2's tied head is (50257, 768): dW = dy^T x in one product is a fresh 154 MB array each
step, touched page by page, then added. In blocks of BLOCK_BYTES the products land in a small
array that stays in the process (scratchformer/allocator.py), and the peak memory of a step
drops by the size of the weight. Each element of dW is the same dot product over the rows of
dy and x either way."""

from __future__ import annotations

from scratchformer.fast.reductions import sum_leading

BLOCK_BYTES = 8 << 20  # a weight gradient above this is added in blocks of rows of about this size


def linear_backward(dy, x, weight, need_bias=True):  # the formula's parameters (ops/linear.py)
    """dy (..., out), x (..., in), weight (out, in) -> (dx (..., in), dW (out, in), db (out,) or None)."""
    dy2 = dy.reshape(-1, dy.shape[-1])  # (N, out)
    x2 = x.reshape(-1, x.shape[-1])  # (N, in)
    dx = (dy2 @ weight).reshape(x.shape)
    dweight = dy2.T @ x2
    dbias = sum_leading(dy2) if need_bias else None
    return dx, dweight, dbias


def linear_backward_into(dy, x, weight, weight_grad, bias_grad=None):  # the formula's (ops/linear.py)
    """dW added into weight_grad (out, in), db into bias_grad (out,) or None; returns dx (..., in)."""
    dy2 = dy.reshape(-1, dy.shape[-1])  # (N, out)
    x2 = x.reshape(-1, x.shape[-1])  # (N, in)
    dx = (dy2 @ weight).reshape(x.shape)
    out_features = weight.shape[0]
    rows = max(1, BLOCK_BYTES // max(weight[:1].nbytes, 1))  # rows of dW in a block
    for start in range(0, out_features, rows):  # one block when the weight is small
        block = slice(start, min(start + rows, out_features))
        weight_grad[block] += dy2[:, block].T @ x2
    if bias_grad is not None:
        bias_grad += sum_leading(dy2)
    return dx
