"""One training step of scratchformer and PyTorch side by side: the training section of the
suite (benchmarks/suite.py, which this file used to duplicate), kept under its old name.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/bench_train_step.py --configs names

Any option of suite.py works here too; `--only train` is implied.
"""

import sys

from suite import main

if __name__ == "__main__":
    main(["--only", "train", *sys.argv[1:]])
