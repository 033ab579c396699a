"""What several job classes do the same way (the `Job` protocol itself is in training/jobs.py).

- `TokenBatches`: batches whose first array is the input ids (B, T): `batch_tokens` counts it,
  and `evaluate` runs the job's `evaluation` on the model alone.
- `GeneratedData`: jobs whose data are generated from the run's seed (modadd, the classifier
  and seq2seq tasks): no tokenizer file, config.json names the task, a resume needs the same task
  and model config, and `eval` reads the test split.
- `task_config_dict(job)` and `refuse_data_file(data, ck)`: the run record of a task job and
  its refusal of a data file on resume, shared with the induction job (a language model whose
  data are generated too).
- `model_from_checkpoint(ck, job_class)`: the model of a read checkpoint, for every job that
  builds its model from a config alone.
"""

from __future__ import annotations

from scratchformer.errors import CheckpointError, ConfigError
from scratchformer.limits.estimates import check_model_fits
from scratchformer.training.evaluation import run_evaluation


def model_from_checkpoint(ck, job_class):
    """The model (`job_class.model_class`) of a read checkpoint: its config checked
    (`from_dict`: unknown fields are a ConfigError) and its memory estimated before the weights
    are built and loaded."""
    config = job_class.config_class.from_dict(ck.config["model"])
    check_model_fits(config, job_class.model_class, training=False)
    model = job_class.model_class(config)
    model.load_state_dict(ck.model_state)
    return model


def task_config_dict(job) -> dict:
    """config.json of a job whose data are generated: {"kind", "task", "model", "data"}."""
    return {
        "kind": job.kind,
        "task": job.task,
        "model": job.model.config.to_dict(),
        "data": job.data_spec,
    }


def refuse_data_file(data, ck) -> None:
    """A resume of a run whose data are generated (checkpoint `ck`) takes no data file."""
    if data is not None:
        raise ConfigError(
            "--data applies to language models on a file: the "
            f"{ck.config.get('task')} task generates its data from the recorded seed"
        )


class TokenBatches:
    """`batch_tokens` and `evaluate` of a job whose batches start with the input ids."""

    @staticmethod
    def batch_tokens(batch) -> int:
        return int(batch[0].size)

    def evaluate(self, split: str = "val", batches: int | None = None, **options) -> dict:
        return run_evaluation(self.evaluation(split, batches, **options), self.model)


class GeneratedData(TokenBatches):
    """What the jobs share whose data are generated from the recorded seed (`task` names the
    generator; `data_spec` holds its arguments)."""

    default_split = "test"  # the split `eval` reads when none is named

    def config_dict(self) -> dict:
        return task_config_dict(self)

    def tokenizer_dict(self) -> None:
        return None  # the vocabulary is fixed by the task

    def check_compatible(self, ck) -> None:
        saved = type(self.model.config).from_dict(ck.config.get("model") or {}).to_dict()
        if saved != self.model.config.to_dict() or ck.config.get("task") != self.task:
            raise CheckpointError(
                f"{ck.path}: a different task or model config; resume with the same options"
            )
