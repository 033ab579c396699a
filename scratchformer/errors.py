"""Exceptions users can catch. Every one subclasses `ScratchformerError` and a builtin
(`ValueError`, `TypeError` or `RuntimeError`) so a plain ``except ValueError`` works too.
No module of the package raises a bare builtin error for bad input: it raises one of these,
with a message naming the argument and the allowed values."""


class ScratchformerError(Exception):
    """Base of all scratchformer errors; the CLI turns these into one line and exit code 2."""


class ShapeError(ScratchformerError, ValueError):
    """An array has the wrong shape or rank."""


class DTypeError(ScratchformerError, TypeError):
    """An argument has the wrong type or dtype (e.g. float token ids, an int array for a layer)."""


class ConfigError(ScratchformerError, ValueError):
    """A configuration value or an argument (temperature, top_k, eos_id ...) is invalid."""


class DataError(ScratchformerError, ValueError):
    """Input data (a file, a prompt, token ids, logits) cannot be used."""


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


class StateDictError(ScratchformerError, ValueError):
    """A state dict does not fit the module (keys or shapes)."""


class BackwardError(ScratchformerError, RuntimeError):
    """backward() was called without a matching training-mode forward."""


class ParallelWorkerError(ScratchformerError, RuntimeError):
    """A worker process of training.parallel.DataParallel failed or stopped."""


class TrainingDivergedError(ScratchformerError, ArithmeticError):
    """The loss or the gradient norm became NaN or infinite: training stopped before the bad
    step touched the weights or a checkpoint."""


class TrainingInterrupted(KeyboardInterrupt):
    """Training stopped on request -- Ctrl-C, SIGTERM or a closed stdout -- after a checkpoint
    of the current step was written (the message says where). Not a ScratchformerError: the
    CLI exits with `exit_code` (130 for Ctrl-C, 143 for SIGTERM, 141 for a closed stdout), as
    the shell reports a process stopped by that signal."""

    def __init__(self, message: str = "", exit_code: int = 130):
        super().__init__(message)
        self.exit_code = exit_code


class HookError(ScratchformerError, ValueError):
    """A hook name no model activation has (the message lists the closest names), or a hook
    that returned a replacement of the wrong shape."""
