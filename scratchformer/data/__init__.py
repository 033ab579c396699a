"""Character tokenizer and datasets (line items and long text); ships `names.txt`."""

from scratchformer.data.datasets import Dataset, LineDataset, TextDataset, guess_format, load_dataset
from scratchformer.data.tokenizer import IGNORE_INDEX, CharTokenizer

__all__ = [
    "IGNORE_INDEX",
    "CharTokenizer",
    "Dataset",
    "LineDataset",
    "TextDataset",
    "guess_format",
    "load_dataset",
]
