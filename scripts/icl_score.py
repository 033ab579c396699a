"""Olsson et al. 2022's in-context learning score of a text run, and its heads' prefix matching
(docs/results.md, "In-context learning on tinyshakespeare"):

    python scripts/icl_score.py RUN_DIR/last [--windows N] [--stride S] [--early 50] [--late 500]

The score (training/induction.py `icl_score`): the loss on the 500th token of a context minus the
loss on its 50th, averaged over windows of the run's validation text, each block-size + 1 tokens
long (the model reads block-size tokens of each), starting every S tokens (default: a quarter of
the context, so that the average holds more than the few hundred disjoint windows a small split
has: the loss on one token of one window varies by about a nat), the first N of them (default:
all).
The heads: each head's prefix-matching score (lens.head_scores "induction": attention from a
token to the token after its earlier occurrence, what an induction head does) on 16 sequences of
a random block of REPEATED tokens read twice, drawn with --seed; the best head is printed.
"""

from __future__ import annotations

import numpy as np
from _oneline import run  # scripts/_oneline.py: a library error is one line, exit code 2
from threadpoolctl import threadpool_limits

from scratchformer import lens
from scratchformer.cli.main import Parser
from scratchformer.errors import DataError
from scratchformer.training.checkpoint import load_checkpoint
from scratchformer.training.induction import ICL_EARLY, ICL_LATE, icl_score
from scratchformer.training.jobs import checkpoint_dir, job_class

REPEATED = 100  # tokens of the random block the heads are scored on (read twice)


def main() -> None:
    ap = Parser(description=__doc__.splitlines()[0])  # a usage error: one line, exit code 2
    ap.add_argument("dir")
    ap.add_argument("--windows", type=int, default=None, help="windows read (default: all the split holds)")
    ap.add_argument(
        "--stride",
        type=int,
        default=None,
        help="tokens between window starts (default: a quarter of the context)",
    )
    ap.add_argument("--early", type=int, default=ICL_EARLY, help=f"default: {ICL_EARLY}")
    ap.add_argument("--late", type=int, default=ICL_LATE, help=f"default: {ICL_LATE}")
    ap.add_argument("--seed", type=int, default=0, help="seed of the repeated random tokens (default: 0)")
    args = ap.parse_args()
    for name in ("windows", "stride", "early", "late"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            ap.error(f"--{name} must be at least 1")
    threadpool_limits(1, user_api="blas")  # small products: OpenBLAS's second thread costs more than it saves
    ck = load_checkpoint(checkpoint_dir(args.dir))  # RUN/last: the step the run has reached
    job = job_class(ck).from_checkpoint(ck)
    model, T = job.model, job.model.config.block_size
    ids = job.dataset.val.ids
    stride = args.stride or max(1, T // 4)
    starts = range(0, len(ids) - T, stride)[: args.windows]
    if not starts:
        raise DataError(f"the validation text holds no window of {T + 1} tokens")
    windows = np.stack([ids[i : i + T + 1] for i in starts])
    n = len(windows)
    score = icl_score(model, windows, args.early, args.late)
    print(
        f"{args.dir} (step {ck.step}): in-context learning score "
        f"{score['icl_score']:+.3f} nats (loss on token {args.late} {score['loss_late']:.3f} minus on token "
        f"{args.early} {score['loss_early']:.3f}, {n} windows of {T} tokens, every {stride}); "
        + prefix_matching(model, args.seed)
    )


def prefix_matching(model, seed: int, half: int | None = None) -> str:
    """The best head's prefix-matching score and each layer's best, as text: lens.head_scores
    "induction" on 16 random blocks of `half` tokens (default: REPEATED, at most half the
    context) read twice."""
    half = half or min(model.config.block_size // 2, REPEATED)
    block = np.random.default_rng(seed).integers(0, model.config.vocab_size, size=(16, half))
    scores = lens.head_scores(model, (np.concatenate([block, block], axis=1),)).scores["induction"]
    layer, head = np.unravel_index(int(np.nanargmax(scores)), scores.shape)
    return (
        f"best prefix-matching head ({half} tokens read twice) L{layer}H{head} {scores[layer, head]:.2f} (per layer: "
        + ", ".join(f"L{i} {np.nanmax(row):.2f}" for i, row in enumerate(scores))
        + ")"
    )


if __name__ == "__main__":
    run(main)
