# learner bug (bpe_merge): each merged word gets a count of one
# expect: the words' counts are lost
"""Exercise bpe_merge: one merge step of byte-pair encoding (BPE), as a BPE trainer repeats it.

A text is cut into words, and each word is a tuple of symbols, first its single bytes (GPT-2's
byte-level BPE shows a space as "Ġ", so " cat" is ("Ġ", "c", "a", "t")). `words` maps each
word to how often it occurs in the text:

    {("Ġ", "c", "a", "t"): 5, ("Ġ", "t", "h", "a", "t"): 6, ...}

Write `merge_step(words)`: count every adjacent pair of symbols over all words (a word that
occurs n times counts each of its pairs n times; a pair that occurs twice in one word counts
twice), choose the most frequent pair (the graded text has no ties at the top), and return
(pair, new_words): new_words is `words` with every occurrence of the pair, scanned left to
right, replaced by the one symbol pair[0] + pair[1], each word keeping its count. A pair never
spans two words. Repeated, this learns the merges of a BPE vocabulary; the grader repeats it
and compares each merge with the library's BPE trainer (`BPETokenizer.train`, Hugging Face's
`tokenizers`) on a small text.
"""


def merge_step(words):
    """words: {tuple of str: int}. Returns (pair, new_words): pair a tuple (a, b) of two
    symbols, new_words a dict {tuple of str: int}."""
    # BEGIN SOLUTION
    counts = {}
    for word, n in words.items():
        for pair in zip(word, word[1:]):
            counts[pair] = counts.get(pair, 0) + n
    pair = max(counts, key=counts.get)
    merged = pair[0] + pair[1]
    new_words = {}
    for word, n in words.items():
        out, i = [], 0
        while i < len(word):
            if i + 1 < len(word) and (word[i], word[i + 1]) == pair:
                out.append(merged)
                i += 2  # the pair is used up: "aaa" becomes ("aa", "a")
            else:
                out.append(word[i])
                i += 1
        new_words[tuple(out)] = 1
    return pair, new_words
    # END SOLUTION
