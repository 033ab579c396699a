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


class RunFileError(CheckpointError):
    """A run file (config.json, trainer_state.json, tokenizer.json, a log.jsonl row) does not
    match its schema: the message names the file and the field."""


class DataChangedError(DataError):
    """The data file differs from the one a run was trained on (its sha256 changed)."""


class RunLockedError(ScratchformerError, RuntimeError):
    """Another process is writing into the same run directory."""


class ResourceError(ScratchformerError, MemoryError):
    """A model, batch or generation would need more memory than the machine has."""


class CLIError(ScratchformerError, ValueError):
    """A bad combination of command-line options."""
