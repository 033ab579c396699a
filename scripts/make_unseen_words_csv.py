"""Build a small labelled set whose test words never occur in training: what kind of thing
does the sentence mention (animal, clothing, food, vehicle)?

Each text is a plain sentence about one noun ("My sister mentioned the old goat at dinner.");
its label is the noun's category. The test split's nouns are other nouns of the same
categories, in other sentence frames, so no word that decides a test label is ever seen in
training: a classifier passes only by what the pretrained encoder already knows about words,
not by remembering the training nouns. The script checks that no test noun occurs in a
training text.

    python scripts/make_unseen_words_csv.py OUT_DIR [--seed 1337] [--n-train 300] [--n-test 120]

writes OUT_DIR/train.csv and OUT_DIR/test.csv (columns text,label), drawn with
`np.random.default_rng(seed)`, the four labels equally often. Same seed, same files.
"""

from __future__ import annotations

import argparse
import csv
import re
import sys
from itertools import product
from pathlib import Path

import numpy as np

# category -> (training nouns, test nouns): disjoint, each a single common English word
NOUNS = {
    "animal": (
        "dog cat horse cow sheep goat pig rabbit mouse lion tiger bear wolf fox deer",
        "elephant giraffe zebra monkey camel donkey squirrel kangaroo leopard hamster",
    ),
    "clothing": (
        "shirt jacket coat dress skirt sweater hat scarf sock shoe boot glove belt tie jeans",
        "blouse cardigan hoodie vest sandal sneaker mitten raincoat trousers pyjamas",
    ),
    "food": (
        "bread cheese rice pasta soup apple banana orange cake pizza salad butter egg potato carrot",
        "sandwich cookie noodles yogurt pancake grape cucumber tomato muffin omelette",
    ),
    "vehicle": (
        "car bus truck lorry bicycle motorcycle van taxi tractor boat ship airplane helicopter scooter tram",
        "ambulance jeep yacht canoe limousine minivan sailboat subway rocket wagon",
    ),
}
# sentence frames, {a} an adjective and {n} the noun; the test frames are not the training ones
TRAIN_FRAMES = [
    "I saw the {a} {n} near the house yesterday.",
    "She bought the {a} {n} last week.",
    "He talked about the {a} {n} for an hour.",
    "My sister mentioned the {a} {n} at dinner.",
    "We looked at the {a} {n} for a while.",
    "Nobody noticed the {a} {n} at first.",
]
TEST_FRAMES = [
    "Everyone kept staring at the {a} {n}.",
    "The teacher drew the {a} {n} on the board.",
    "Someone wrote about the {a} {n} in a letter.",
    "They could not forget the {a} {n}.",
]
ADJECTIVES = ["old", "small", "big", "new", "strange", "lovely", "dirty", "famous"]


def rows(split: int, n: int, rng: np.random.Generator) -> list[tuple[str, str]]:
    """n (text, label) rows of split 0 (train) or 1 (test), labels in turn, shuffled."""
    frames = (TRAIN_FRAMES, TEST_FRAMES)[split]
    out = []
    for i, label in enumerate(sorted(NOUNS) * (n // len(NOUNS) + 1)):  # noqa: B007
        if len(out) == n:
            break
        choices = list(product(NOUNS[label][split].split(), frames, ADJECTIVES))
        noun, frame, adj = choices[rng.integers(len(choices))]
        out.append((frame.format(a=adj, n=noun), label))
    return [out[i] for i in rng.permutation(len(out))]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path, help="directory for train.csv and test.csv")
    p.add_argument("--seed", type=int, default=1337, help="seed of the draws (default: 1337)")
    p.add_argument("--n-train", type=int, default=300, help="training rows (default: 300)")
    p.add_argument("--n-test", type=int, default=120, help="test rows (default: 120)")
    args = p.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    train, test = rows(0, args.n_train, rng), rows(1, args.n_test, rng)
    seen = {w for text, _ in train for w in re.findall(r"[a-z]+", text.lower())}
    leaked = sorted(seen & {n for _, test_nouns in NOUNS.values() for n in test_nouns.split()})
    if leaked:  # a test noun that is also a word of a training sentence
        raise SystemExit(f"test nouns occur in training: {leaked}")
    args.out.mkdir(parents=True, exist_ok=True)
    for name, part in (("train.csv", train), ("test.csv", test)):
        with open(args.out / name, "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow(["text", "label"])
            w.writerows(part)
    print(
        f"{len(train)} train and {len(test)} test sentences of {len(NOUNS)} categories, the test nouns unseen "
        f"in training -> {args.out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
