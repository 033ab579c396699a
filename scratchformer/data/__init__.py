"""Character and byte-level BPE tokenizers, and datasets (line items and long text); ships `names.txt` and
`tinyshakespeare.txt` (see `datasets.resolve_data`)."""

from scratchformer.data.bpe import BPETokenizer
from scratchformer.data.datasets import (
    DEFAULT_SEED,
    DataFile,
    Dataset,
    LineDataset,
    TextDataset,
    guess_format,
    load_dataset,
    read_data,
    read_text,
)
from scratchformer.data.tokenizer import IGNORE_INDEX, CharTokenizer

__all__ = [
    "DEFAULT_SEED",
    "BPETokenizer",
    "IGNORE_INDEX",
    "CharTokenizer",
    "DataFile",
    "Dataset",
    "LineDataset",
    "TextDataset",
    "guess_format",
    "load_dataset",
    "read_data",
    "read_text",
]
