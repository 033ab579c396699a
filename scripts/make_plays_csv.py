"""Build a labelled sentence-classification set from the bundled tinyshakespeare: which play is
this speech from?

tinyshakespeare (Karpathy's char-rnn file) is nine plays, or parts of them, one after another.
Each play's section starts at the first speech of the character who opens it (the table below);
every speech (a speaker line, then its text, then a blank line) takes the label of its section.
The Tempest is left out: the file holds only a fragment of it (140 speeches). Speeches shorter
than 60 characters ("Ay, my lord.") say nothing about their play and are left out too.

    python scripts/make_plays_csv.py OUT_DIR [--seed 1337] [--test-fraction 0.2]

writes OUT_DIR/train.csv and OUT_DIR/test.csv (columns text,label; label = the play's title),
the split drawn with `np.random.default_rng(seed)`, stratified by play. Same seed, same files.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

import numpy as np

from scratchformer.data.datasets import resolve_data

# (play, the speaker of its first speech in tinyshakespeare), in the file's order
PLAYS = [
    ("Coriolanus", None),  # the file starts with it
    ("Richard III", "GLOUCESTER"),
    ("Richard II", "KING RICHARD II"),
    ("Romeo and Juliet", "SAMPSON"),
    ("Henry VI Part 3", "WARWICK"),
    ("The Winter's Tale", "ARCHIDAMUS"),
    ("Measure for Measure", "DUKE VINCENTIO"),
    ("The Taming of the Shrew", "SLY"),
    ("The Tempest", "ALONSO"),
]
LEFT_OUT = {"The Tempest"}
MIN_CHARS = 60


def speeches(text: str) -> list[tuple[str, str]]:
    """(speech text on one line, play) for every speech of tinyshakespeare, in order."""
    play, out = 0, []
    for block in text.split("\n\n"):
        lines = block.strip("\n").split("\n")
        if len(lines) < 2 or not lines[0].endswith(":"):
            continue
        speaker = lines[0][:-1]
        if play + 1 < len(PLAYS) and speaker == PLAYS[play + 1][1]:
            play += 1
        out.append((" ".join(s.strip() for s in lines[1:]), PLAYS[play][0]))
    if play != len(PLAYS) - 1:
        raise SystemExit(f"found {play + 1} of {len(PLAYS)} plays: is this tinyshakespeare?")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path, help="directory for train.csv and test.csv")
    p.add_argument("--seed", type=int, default=1337, help="seed of the split (default: 1337)")
    p.add_argument(
        "--test-fraction", type=float, default=0.2, help="share of each play held out (default: 0.2)"
    )
    args = p.parse_args(argv)
    rows = [
        (t, play)
        for t, play in speeches(resolve_data("shakespeare").read_text(encoding="utf-8"))
        if play not in LEFT_OUT and len(t) >= MIN_CHARS
    ]
    rng = np.random.default_rng(args.seed)
    train, test = [], []
    for play, _ in PLAYS:
        mine = [r for r in rows if r[1] == play]
        order = rng.permutation(len(mine))
        n_test = round(len(mine) * args.test_fraction)
        test += [mine[i] for i in order[:n_test]]
        train += [mine[i] for i in order[n_test:]]
    args.out.mkdir(parents=True, exist_ok=True)
    for name, part in (("train.csv", train), ("test.csv", test)):
        part = [part[i] for i in rng.permutation(len(part))]
        with open(args.out / name, "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow(["text", "label"])
            w.writerows(part)
    print(
        f"{len(train)} train and {len(test)} test speeches of {len(PLAYS) - len(LEFT_OUT)} plays -> {args.out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
