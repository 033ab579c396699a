"""Training: the loop, checkpoints (safetensors, atomic writes), JSONL logs, and the jobs
(`scratchformer.training.jobs`: the Job protocol, the JOBS registry, the RUN_DEFAULTS table)."""

from scratchformer.training.checkpoint import Checkpoint, load_checkpoint, save_checkpoint

__all__ = ["Checkpoint", "load_checkpoint", "save_checkpoint"]
