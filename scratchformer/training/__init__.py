"""Training: the loop, checkpoints (safetensors, atomic writes), JSONL logs."""

from scratchformer.training.checkpoint import Checkpoint, atomic_write_bytes, load_checkpoint, save_checkpoint

__all__ = ["Checkpoint", "atomic_write_bytes", "load_checkpoint", "save_checkpoint"]
