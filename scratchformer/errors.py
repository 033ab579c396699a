"""Exceptions users can catch. Every one subclasses `ScratchformerError` and a builtin
(`ValueError` or `TypeError` ...) so plain ``except ValueError`` works too."""


class ScratchformerError(Exception):
    """Base of all scratchformer errors; the CLI turns these into one line and exit code 2."""


class ShapeError(ScratchformerError, ValueError):
    """An array has the wrong shape or rank."""


class ConfigError(ScratchformerError, ValueError):
    """A configuration value is invalid."""


class DataError(ScratchformerError, ValueError):
    """Input data (a file, a prompt, token ids) cannot be used."""


class CheckpointError(ScratchformerError, ValueError):
    """A checkpoint is missing, truncated or does not match."""


class CLIError(ScratchformerError, ValueError):
    """A bad combination of command-line options."""
