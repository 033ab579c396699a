"""scratchformer: the Transformer built from scratch on NumPy, with hand-written backward passes."""

__version__ = "0.1.0"

from scratchformer.errors import (  # noqa: E402
    CheckpointError,
    ConfigError,
    DataError,
    ScratchformerError,
    ShapeError,
)

__all__ = ["CheckpointError", "ConfigError", "DataError", "ScratchformerError", "ShapeError", "__version__"]
