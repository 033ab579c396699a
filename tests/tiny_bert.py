"""A tiny random BERT directory saved by transformers, and a small labelled CSV, for the
fine-tuning command's tests (tests/cli/test_finetune_cli.py, tests/cli/test_bad_inputs.py)."""

import csv
from pathlib import Path

WORDS = ["the", "king", "queen", "sword", "love", "night", "war", "rose", "crown", "heart", "blood", "sweet"]
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
LETTERS = "abcdefghijklmnopqrstuvwxyz"
VOCAB = SPECIAL + WORDS + list(LETTERS) + ["##" + c for c in LETTERS] + [",", ".", "!", "?"]


def make_bert_dir(path: Path) -> Path:
    """config.json + model.safetensors (random, seeded) + vocab.txt: 2 layers, width 16."""
    import torch
    import transformers

    path.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    cfg = transformers.BertConfig(
        vocab_size=len(VOCAB),
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=32,
    )
    transformers.BertModel(cfg, add_pooling_layer=False).save_pretrained(path, safe_serialization=True)
    (path / "vocab.txt").write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    return path


def make_csv(path: Path, n: int = 60, long_every: int = 0, labels=("love", "war")) -> Path:
    """n rows, columns text,label: texts of the label's words (learnable), a few commas quoted;
    every `long_every`-th text is 40 words long (longer than a short max_length)."""
    topics = {
        "love": ["love", "rose", "sweet", "heart"],
        "war": ["war", "sword", "blood", "crown"],
        "night": ["night", "queen", "the", "king"],
    }
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["text", "label"])
        for i in range(n):
            label = labels[i % len(labels)]
            words = topics[label]
            length = 40 if long_every and i % long_every == 0 else 3 + i % 4
            w.writerow([", ".join(words[(i + j) % 4] for j in range(length)), label])
    return path
