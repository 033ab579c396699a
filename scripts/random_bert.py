"""Write a randomly initialised BERT directory in the Hugging Face layout: the from-scratch
baselines of `scratchformer finetune` (docs/results.md). The weights follow BERT's
initialisation: N(0, 0.02) matrices and embeddings, zero biases, LayerNorm weights 1.

    python scripts/random_bert.py OUT_DIR [--hidden-size 128] [--layers 2] [--heads 4] [--seed 1337]
    python scripts/random_bert.py OUT_DIR --chars-of train.csv     # a character-level model

The vocabulary is the installed all-MiniLM-L6-v2's WordPiece vocabulary, or with `--chars-of
CSV` one token per character: every character of the CSV's texts (lower-cased and stripped of
accents, as BERT's uncased tokenizer reads them), alone and as a word's continuation ("##e").
WordPiece then cannot find any longer piece, so it spells each word out letter by letter:
"Romeo," -> [CLS] r ##o ##m ##e ##o , [SEP]. A character the CSV does not have is [UNK].

Then `scratchformer finetune --model OUT_DIR --data train.csv` trains it from scratch.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import unicodedata
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

from scratchformer.data.labelled import read_labelled_csv
from scratchformer.interop.sentence import default_model_dir

TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]  # [PAD] first: pad_token_id 0


def character_vocab(csv_path: Path) -> list[str]:
    """The special tokens, then each character of the CSV's texts as BERT's uncased tokenizer
    sees them (lower case, accents stripped, whitespace gone), alone and as "##" + character."""
    texts, _ = read_labelled_csv(csv_path)
    text = unicodedata.normalize("NFD", "".join(texts).lower())
    chars = sorted({c for c in text if not c.isspace() and unicodedata.category(c) != "Mn"})
    return SPECIAL_TOKENS + chars + ["##" + c for c in chars]


def random_bert(
    out: Path, hidden: int, layers: int, heads: int, seed: int, chars_of: Path | None = None
) -> None:
    source = default_model_dir()
    vocab = character_vocab(chars_of) if chars_of is not None else None
    vocab_size = (
        len(vocab)
        if vocab
        else json.loads((source / "config.json").read_text(encoding="utf-8"))["vocab_size"]
    )
    config = {
        "model_type": "bert",
        "architectures": ["BertModel"],
        "vocab_size": vocab_size,
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "intermediate_size": 4 * hidden,
        "hidden_act": "gelu",
        "max_position_embeddings": 512,
        "type_vocab_size": 2,
        "layer_norm_eps": 1e-12,
        "pad_token_id": 0,
    }
    rng = np.random.default_rng(seed)

    def normal(*shape):
        return (0.02 * rng.standard_normal(shape)).astype(np.float32)

    w = {
        "embeddings.word_embeddings.weight": normal(config["vocab_size"], hidden),
        "embeddings.position_embeddings.weight": normal(512, hidden),
        "embeddings.token_type_embeddings.weight": normal(2, hidden),
        "embeddings.LayerNorm.weight": np.ones(hidden, np.float32),
        "embeddings.LayerNorm.bias": np.zeros(hidden, np.float32),
    }
    w["embeddings.word_embeddings.weight"][config["pad_token_id"]] = 0  # padding_idx, as BertModel
    for i in range(layers):
        p = f"encoder.layer.{i}."
        for name, (n_out, n_in) in {
            "attention.self.query": (hidden, hidden),
            "attention.self.key": (hidden, hidden),
            "attention.self.value": (hidden, hidden),
            "attention.output.dense": (hidden, hidden),
            "intermediate.dense": (4 * hidden, hidden),
            "output.dense": (hidden, 4 * hidden),
        }.items():
            w[p + name + ".weight"], w[p + name + ".bias"] = normal(n_out, n_in), np.zeros(n_out, np.float32)
        for norm in ("attention.output.LayerNorm", "output.LayerNorm"):
            w[p + norm + ".weight"], w[p + norm + ".bias"] = (
                np.ones(hidden, np.float32),
                np.zeros(hidden, np.float32),
            )
    out.mkdir(parents=True, exist_ok=True)
    save_file(w, str(out / "model.safetensors"))
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    for name in TOKENIZER_FILES:
        (out / name).unlink(missing_ok=True)  # a directory written before holds no stale tokenizer
    if vocab:  # vocab.txt and BERT's uncased settings: WordPieceTokenizer.from_dir builds the rest
        (out / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
        (out / "tokenizer_config.json").write_text(
            json.dumps({"do_lower_case": True}) + "\n", encoding="utf-8"
        )
        return
    for name in TOKENIZER_FILES:
        if (source / name).is_file():
            shutil.copyfile(source / name, out / name)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path)
    p.add_argument("--hidden-size", type=int, default=128, help="default: 128")
    p.add_argument("--layers", type=int, default=2, help="default: 2")
    p.add_argument("--heads", type=int, default=4, help="default: 4")
    p.add_argument("--seed", type=int, default=1337, help="default: 1337")
    p.add_argument(
        "--chars-of",
        type=Path,
        metavar="CSV",
        help="a character vocabulary from this CSV's texts (default: MiniLM's WordPiece vocabulary)",
    )
    a = p.parse_args(argv)
    random_bert(a.out, a.hidden_size, a.layers, a.heads, a.seed, a.chars_of)
    kind = f"character-level ({a.chars_of.name}) " if a.chars_of else ""
    print(f"wrote a random {kind}{a.layers}-layer BERT of width {a.hidden_size} to {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
