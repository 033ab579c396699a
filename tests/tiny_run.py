"""Test helper: the options of a tiny `scratchformer train` run, the one home of the list the
command-line tests share. A test that needs other sizes says which as `tiny(n_embd=8)`; one
that needs more options appends them (`[*TINY, "--max-steps", "2"]`)."""

TINY = [
    "--n-layer",
    "1",
    "--n-head",
    "2",
    "--n-embd",
    "16",
    "--batch-size",
    "8",
    "--eval-batches",
    "2",
    "--no-progress",
    "--quiet",
]


def tiny(**values) -> list[str]:
    """TINY with some options' values replaced, named as keywords: tiny(n_embd=8, eval_batches=1)
    is TINY with "--n-embd" "8" and "--eval-batches" "1". ValueError for an option TINY lacks."""
    args = list(TINY)
    for name, value in values.items():
        args[args.index("--" + name.replace("_", "-")) + 1] = str(value)
    return args
