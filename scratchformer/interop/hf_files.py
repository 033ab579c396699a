"""Reading and writing the files of a Hugging Face model directory: safetensors weights, and
a checkpoint's weights read once (its JSON files, HF_JSON, are read together by
`scratchformer.runfiles.read_optional_jsons`, which the tokenizer readers share).

Every failure is one of the library's errors naming the file (never a raw JSON or safetensors
traceback); which error class depends on what the caller is reading (a config or a checkpoint).

safetensors files are read here, not by `safetensors.numpy` (which has no bfloat16, the dtype
most Llama checkpoints ship in). The format: 8 bytes (little-endian u64) giving the length of a
JSON header {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}},
then one byte buffer; each tensor is the C-order little-endian bytes [begin, end) of it.
bfloat16 and float16 tensors are converted to float32 (exactly: both are subsets of it).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import NamedTuple

import numpy as np

from scratchformer.errors import CheckpointError, DataError
from scratchformer.runfiles import read_optional_json, write_atomic

__all__ = [
    "read_safetensors",
    "safetensors_dtypes",
    "HALF_DTYPES",
    "weight_files",
    "HFCheckpoint",
    "read_checkpoint",
    "HF_JSON",
    "write_checkpoint",
]

# safetensors dtype -> numpy dtype of the stored bytes (little-endian)
_STORED = {
    "F64": "<f8",
    "F32": "<f4",
    "F16": "<f2",
    "BF16": "<u2",
    "I64": "<i8",
    "I32": "<i4",
    "I16": "<i2",
    "I8": "i1",
    "U8": "u1",
    "BOOL": "?",
}
HALF_DTYPES = {"F16": "float16", "BF16": "bfloat16"}  # read as float32
MAX_HEADER_BYTES = 100 << 20  # safetensors' own limit


def bfloat16_to_float32(bits: np.ndarray) -> np.ndarray:
    """uint16 bfloat16 bit patterns (any shape) -> the same values as float32: a bfloat16 is
    the high half of a float32, so the bits move into the high 16 bits of a uint32."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def _header(path: Path, f) -> tuple[dict, int]:
    """(the parsed header, the file offset where the byte buffer starts)."""
    head = f.read(8)
    if len(head) < 8:
        raise CheckpointError(f"cannot read {path}: shorter than a safetensors header (is it safetensors?)")
    n = int.from_bytes(head, "little")
    if not 2 <= n <= MAX_HEADER_BYTES:
        raise CheckpointError(
            f"cannot read {path}: its safetensors header length {n:,} is not plausible (is it safetensors?)"
        )
    raw = f.read(n)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise CheckpointError(
            f"cannot read {path}: its safetensors header is not JSON (truncated or not safetensors)"
        ) from None
    if len(raw) < n or not isinstance(header, dict):
        raise CheckpointError(f"cannot read {path}: its safetensors header is truncated or not an object")
    header.pop("__metadata__", None)
    return header, 8 + n


def safetensors_dtypes(path: str | Path) -> set[str]:
    """The safetensors dtypes ("F32", "BF16", ...) of the tensors in `path`, from its header alone."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            header, _ = _header(path, f)
    except OSError as e:
        raise CheckpointError(f"cannot read {path}: {e.strerror}") from None
    return _dtypes(header)


def _dtypes(header: dict) -> set[str]:
    """The safetensors dtypes a parsed header names."""
    return {str(v.get("dtype")) for v in header.values() if isinstance(v, dict)}


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """Every tensor of one safetensors file, as numpy arrays (bfloat16 and float16 as float32)."""
    return _read_safetensors(Path(path))[0]


def _read_safetensors(path: Path) -> tuple[dict[str, np.ndarray], set[str]]:
    """(every tensor of one safetensors file, the safetensors dtypes they were stored in), the
    file read once."""
    try:
        with open(path, "rb") as f:
            header, start = _header(path, f)
            size = path.stat().st_size - start
            buffer = (
                np.memmap(f, dtype=np.uint8, mode="r", offset=start, shape=(size,))
                if size
                else np.empty(0, np.uint8)
            )
            tensors = {}
            for name, info in header.items():
                tensors[name] = _tensor(path, name, info, buffer)
    except OSError as e:
        raise CheckpointError(f"cannot read {path}: {e.strerror or e}") from None
    return tensors, _dtypes(header)


def _tensor(path: Path, name: str, info, buffer: np.ndarray) -> np.ndarray:
    """One tensor of the header, copied out of the file's buffer."""
    where = f"cannot read {path}: tensor {name!r}"
    if not isinstance(info, dict):
        raise CheckpointError(f"{where} has no dtype/shape/data_offsets entry")
    dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
    if dtype not in _STORED:
        raise CheckpointError(f"{where} has dtype {dtype!r}; scratchformer reads {', '.join(_STORED)}")
    if not (
        isinstance(shape, list)
        and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)
    ):
        raise CheckpointError(f"{where} has a bad shape {shape!r}")
    if not (
        isinstance(offsets, list)
        and len(offsets) == 2
        and all(isinstance(o, int) for o in offsets)
        and 0 <= offsets[0] <= offsets[1] <= buffer.shape[0]
    ):
        raise CheckpointError(
            f"{where} lies outside the file (data_offsets {offsets!r}): the file is truncated"
        )
    stored = np.dtype(_STORED[dtype])
    if offsets[1] - offsets[0] != math.prod(shape) * stored.itemsize:
        raise CheckpointError(
            f"{where}: {offsets[1] - offsets[0]:,} bytes do not hold a {dtype} array of shape {shape}"
        )
    array = np.frombuffer(buffer[offsets[0] : offsets[1]], dtype=stored).reshape(shape)
    if dtype == "BF16":
        return bfloat16_to_float32(array)
    if dtype == "F16":
        return array.astype(np.float32)
    return array.astype(stored.newbyteorder("="))  # a copy in native order, free of the file


def weight_files(path: str | Path, family: str) -> list[Path]:
    """The safetensors files of a Hugging Face model directory: model.safetensors, or the shards
    model.safetensors.index.json lists (as save_pretrained writes a large model). A missing file
    is a CheckpointError naming it and the `family` ("GPT-2", "Llama")."""
    path = Path(path)
    single, index_file = path / "model.safetensors", path / "model.safetensors.index.json"
    if single.is_file() or not index_file.is_file():
        if not single.is_file():
            raise CheckpointError(
                f"{family} checkpoint: {single} not found (need config.json and model.safetensors, "
                "or its shards and model.safetensors.index.json)"
            )
        return [single]
    index = read_optional_json(index_file, error=CheckpointError)
    weight_map = index.get("weight_map")
    if (
        not isinstance(weight_map, dict)
        or not weight_map
        or not all(isinstance(f, str) for f in weight_map.values())
    ):
        raise CheckpointError(f"{index_file} has no weight_map of tensor names to shard files")
    shards = []
    for name in dict.fromkeys(weight_map.values()):  # each shard once, in the index's order
        shard = path / name
        if Path(name).name != name or not shard.is_file():
            raise CheckpointError(
                f"{family} checkpoint: shard {shard} (listed in {index_file.name}) not found"
            )
        shards.append(shard)
    return shards


class HFCheckpoint(NamedTuple):
    """A Hugging Face model directory's config and weights, each file read once."""

    config: dict  # config.json's object
    tensors: dict[str, np.ndarray]  # every tensor of the weight files (half precision as float32)
    weights: Path  # where they are, for messages: model.safetensors, or the directory of shards
    half_dtypes: tuple[str, ...]  # "bfloat16", "float16": the half precisions the files held


def read_checkpoint(path: str | Path, family: str, config: dict) -> HFCheckpoint:
    """The weights of a Hugging Face model directory, each file read once, with `config`
    (config.json's object, which the caller has read); a missing weight file is a
    CheckpointError naming it and the `family` ("GPT-2", "Llama")."""
    path = Path(path)
    files = weight_files(path, family)
    tensors: dict[str, np.ndarray] = {}
    stored: set[str] = set()
    for f in files:
        file_tensors, dtypes = _read_safetensors(f)
        tensors.update(file_tensors)
        stored |= dtypes
    half = tuple(sorted({HALF_DTYPES[d] for d in stored if d in HALF_DTYPES}))
    return HFCheckpoint(config, tensors, files[0] if len(files) == 1 else path, half)


def write_checkpoint(
    path: str | Path, hf_cfg: dict, tensors: dict[str, np.ndarray], token_ids: dict[str, int] | None
) -> Path:
    """Write a Hugging Face model directory: `tensors` as model.safetensors and `hf_cfg`, with
    `token_ids` ({"bos_token_id": ..., ...}) added, as config.json. Returns the directory."""
    from safetensors.numpy import save

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tensors = {k: np.ascontiguousarray(v) for k, v in tensors.items()}
    write_atomic(path / "model.safetensors", save(tensors, metadata={"format": "pt"}))
    write_atomic(
        path / "config.json", (json.dumps({**hf_cfg, **(token_ids or {})}, indent=2) + "\n").encode()
    )
    return path


# the JSON files of a Hugging Face model directory scratchformer reads (runfiles.read_optional_jsons,
# each once), and the error class a damaged one raises (the weights' config, the tokenizer's files)
HF_JSON = {
    "config.json": CheckpointError,
    "tokenizer_config.json": DataError,
    "generation_config.json": DataError,
}
