"""scratchformer: the Transformer built from scratch on NumPy, with hand-written backward passes."""

__version__ = "0.1.0"

from scratchformer.errors import (  # noqa: E402
    BackwardError,
    CheckpointError,
    ConfigError,
    DataError,
    DTypeError,
    ScratchformerError,
    ShapeError,
    StateDictError,
)
from scratchformer.fast import use_reference  # noqa: E402  (the one switch: docs/reading-path.md)

__all__ = [
    "BackwardError",
    "CheckpointError",
    "ConfigError",
    "DataError",
    "DTypeError",
    "ScratchformerError",
    "ShapeError",
    "StateDictError",
    "__version__",
    "use_reference",
]
