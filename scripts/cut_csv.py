"""A seeded sample of a labelled CSV's rows: the smaller training sets behind docs/results.md's
"Below 2,000 rows the default is the probe" (the plays cut to 300 and 1,000 rows).

    python scripts/cut_csv.py IN.csv N OUT.csv [--seed 0]

keeps the header row and N of the other rows, chosen by `np.random.default_rng(seed).choice`
without replacement and written in the file's order. Same seed, same file.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

import numpy as np


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("source", type=Path, help="the CSV to sample (a header row, then one row a text)")
    p.add_argument("n", type=int, help="rows to keep, header not counted")
    p.add_argument("out", type=Path, help="the CSV to write")
    p.add_argument("--seed", type=int, default=0, help="seed of the sample (default: 0)")
    args = p.parse_args(argv)
    try:
        with open(args.source, newline="", encoding="utf-8") as f:
            rows = list(csv.reader(f))
    except (OSError, UnicodeDecodeError) as e:
        print(f"cut_csv.py: cannot read {args.source}: {e}", file=sys.stderr)
        return 2
    head, body = rows[0] if rows else [], rows[1:]
    if not 1 <= args.n <= len(body):
        print(
            f"cut_csv.py: N must be 1 to {len(body)} (the rows of {args.source}), got {args.n}",
            file=sys.stderr,
        )
        return 2
    pick = sorted(np.random.default_rng(args.seed).choice(len(body), args.n, replace=False))
    with open(args.out, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(head)
        writer.writerows(body[i] for i in pick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
