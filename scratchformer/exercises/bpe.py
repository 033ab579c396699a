"""Grading the BPE merge-step exercise (`solutions/bpe_merge.py`) against the library's trainer.

The learner's `merge_step(words) -> (pair, new_words)` is applied MERGES times to the words of
TEXT (cut and mapped to symbols by GPT-2's byte-level pre-tokenizer, as `BPETokenizer.train`
cuts them). Each step's pair must be the trainer's merge of that rank (`BPETokenizer.train` with
a vocabulary of the 257 base ids plus MERGES: its first MERGES merges), and its new words the
words with that pair merged. TEXT has one most frequent pair at each of those steps, so the
trainer's tie-breaking never decides (`tests/exercises/test_exercises_more.py` checks it), and it is chosen
so that counting each word once, or each pair once per word, picks another pair within MERGES.
"""

from __future__ import annotations

import functools
from collections import Counter

from scratchformer.exercises.catalogue import BPE_ACROSS, BPE_OVERLAP, Verdict

MERGES = 8
TEXT = (
    "low then sat potato aaaa that cat wider wider banana tattoo lower cat bandana aaaa lower then that "
    "cat then aaaa the aaaa potato llama lower banana aaaa lower an lower bandana tattoo mama potato bandana "
    "papaya mama llama cat llama mat papaya llama wider lowest tattoo llama newer then sat that tattoo "
    "bandana cat banana then bandana mama llama tattoo that papaya banana that tattoo lower lowest"
)


def text_words(text: str = TEXT) -> dict[tuple[str, ...], int]:
    """{word as a tuple of byte-level symbols: count}, cut as the trainer cuts the text."""
    from scratchformer.data.bpe import _hf

    pre = _hf().pre_tokenizers.ByteLevel(add_prefix_space=False)
    return dict(Counter(tuple(piece) for piece, _ in pre.pre_tokenize_str(text)))


@functools.lru_cache(maxsize=4)
def trainer_merges(text: str = TEXT, merges: int = MERGES) -> list[tuple[str, str]]:
    """The library's trainer's first `merges` merges on `text`, in order (once per process)."""
    from scratchformer.data.bpe import MIN_VOCAB, BPETokenizer

    listed = BPETokenizer.train([text], MIN_VOCAB + merges).to_json()["hf"]["model"]["merges"]
    return [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in listed]


def prepare() -> None:
    """Train before the child that grades starts (it inherits the merges)."""
    trainer_merges()


def pair_counts(words: dict) -> Counter:
    """{(a, b): how often b follows a within a word, over every occurrence of every word}."""
    counts = Counter()
    for word, n in words.items():
        for pair in zip(word, word[1:]):
            counts[pair] += n
    return counts


def merged(words: dict, pair: tuple[str, str]) -> dict:
    """`words` with each occurrence of `pair`, left to right, made one symbol."""
    out = Counter()
    for word, n in words.items():
        new, i = [], 0
        while i < len(word):
            if i + 1 < len(word) and (word[i], word[i + 1]) == pair:
                new.append(word[i] + word[i + 1])
                i += 2
            else:
                new.append(word[i])
                i += 1
        out[tuple(new)] += n
    return dict(out)


def _word_and_count(word, n) -> bool:
    """A tuple of str, and an int count."""
    return (
        isinstance(word, tuple)
        and all(isinstance(s, str) for s in word)
        and isinstance(n, int)
        and not isinstance(n, bool)
    )


def _letters(words: dict) -> int:
    return sum(len("".join(w)) * n for w, n in words.items() if isinstance(w, tuple))


def _cause(before: dict, right: dict, got: dict) -> str | None:
    """What the learner's new words show: letters doubled (a symbol in two merges), or the
    same letters cut into other symbols than any merge of the pair gives (a string replace)."""
    if _letters(got) > _letters(right):
        return BPE_OVERLAP
    joined = {"".join(w) for w in got if isinstance(w, tuple)}
    if set(got) != set(right) and joined == {"".join(w) for w in right} and len(got) == len(right):
        return BPE_ACROSS
    return None


def _times(n: int) -> str:
    return "once" if n == 1 else f"{n} times"


def _show(word) -> str:
    return "(" + ", ".join(repr(s) for s in word) + ("," if len(word) == 1 else "") + ")"


def grade(merge_step, progress) -> Verdict:
    """Apply the learner's `merge_step` MERGES times; the first step that differs is the finding."""
    progress("the trainer's merges")
    expected = list(trainer_merges())
    words = text_words()
    for k, want in enumerate(expected, 1):
        progress(f"your merge_step, merge {k}")
        given = {w: n for w, n in words.items()}
        result = merge_step(given)
        if not (isinstance(result, tuple) and len(result) == 2 and isinstance(result[1], dict)):
            return Verdict(
                False,
                f"merge {k}: merge_step returned {type(result).__name__}"
                f"{' of ' + str(len(result)) if isinstance(result, tuple) else ''}; "
                "it must return (pair, new_words), new_words a dict",
                None,
            )
        pair, new_words = result
        pair = tuple(pair) if isinstance(pair, (tuple, list)) else pair
        if not (isinstance(pair, tuple) and len(pair) == 2 and all(isinstance(x, str) for x in pair)):
            return Verdict(
                False,
                f"merge {k}: merge_step returned the pair {pair!r}; it must be a tuple of two "
                "symbols (str), as they appear in the words",
            )
        bad = next((w for w, n in new_words.items() if not _word_and_count(w, n)), None)
        if bad is not None:
            return Verdict(
                False,
                f"merge {k}: new_words maps {bad!r} to {new_words[bad]!r}; it must map each word, a "
                "tuple of symbols (str), to its count (int)",
            )
        counts = pair_counts(words)
        if pair != want:
            theirs = f" (it occurs {_times(counts[pair])})" if pair in counts else " (no word holds it)"
            return Verdict(
                False,
                f"merge {k}: you merged {pair!r}{theirs}; the trainer merged {want!r}, "
                f"the most frequent pair ({_times(counts[want])})",
            )
        right = merged(words, want)
        if new_words != right:
            return Verdict(
                False,
                f"merge {k} of {want!r}: " + _first_difference(words, want, right, new_words),
                _cause(words, right, new_words),
            )
        words = right
    return Verdict(
        True,
        f"your {MERGES} merges are the trainer's ({', '.join(map(repr, expected))}), "
        f"each with the words it makes, on a text of {sum(text_words().values())} words",
    )


def _first_difference(before: dict, pair: tuple[str, str], right: dict, got: dict) -> str:
    """The first word (in the text's order) whose merged form or count differs, in words."""
    for word in before:
        ((new, _),) = merged({word: 1}, pair).items()
        if got.get(new) == right[new]:
            continue
        if new in got:
            return f"the word {_show(new)} occurs {_times(right[new])} in the text; yours says {got[new]}"
        same = [w for w in got if "".join(w) == "".join(new)]
        if same:
            becomes = "stays" if new == word else f"becomes {_show(new)}"
            return f"the word {_show(word)} {becomes}; yours has {_show(same[0])}"
        return f"the word {_show(word)} becomes {_show(new)} ({_times(right[new])}); new_words lacks it"
    extra = sorted(set(got) - set(right), key=str)
    return (
        f"new_words holds {_show(extra[0])}, which is no word of the text" if extra else "new_words differs"
    )


UNKNOWN = "run your merge_step on {('a', 'a', 'a', 'a'): 2, ('b', 'a'): 3} by hand and compare"
