"""The config base: `setting(spec, default)` declares a field once; `DictConfig` checks, saves and loads it.

GPTConfig, ClassifierConfig, Seq2SeqConfig, SentenceClassifierConfig and TrainConfig are
dataclasses derived from `DictConfig` whose every field is a `setting`: the field's spec
(`scratchformer.specs`) is the one home of its type, range and choices.
"""

from __future__ import annotations

import dataclasses

from scratchformer.errors import ConfigError
from scratchformer.specs import Obj, SchemaMismatch


def setting(spec, default=dataclasses.MISSING):
    """A config field declared with the spec its values must meet: the one home of the
    setting's type, range and choices (the config checks it, the checkpoint schema and the
    command line read it). Usage: ``n_layer: int = setting(POSITIVE, 12)``."""
    return dataclasses.field(default=default, metadata={"spec": spec})


class DictConfig:
    """Base of the config dataclasses (GPTConfig, ClassifierConfig, Seq2SeqConfig, TrainConfig):
    every field declared with `setting`, checked against its spec when the config is built
    (`validate`), and `to_dict()` / a strict `from_dict(d)` for checkpoints.

    `check_together()` holds the rules that tie fields together (n_embd divisible by n_head).
    Checkpoints that spell a field the old way are upgraded before they reach `from_dict`
    (`scratchformer.training.schema.upgrade_run_files`).
    """

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise ConfigError naming the first field that breaks its declaration."""
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            try:
                self.spec(f.name).check(value, f.name)
            except SchemaMismatch as e:
                raise ConfigError(
                    f"{type(self).__name__}.{f.name} must be {e.expected}, got {value!r}"
                ) from None
        self.check_together()

    def check_together(self) -> None:
        """Rules between fields; configs override this."""

    @classmethod
    def spec(cls, name: str):
        """The declared spec of field `name`."""
        return {f.name: f for f in dataclasses.fields(cls)}[name].metadata["spec"]

    @classmethod
    def schema(cls) -> Obj:
        """The JSON object a checkpoint stores for this config: every field, with its spec;
        fields with a default may be absent (a checkpoint written before they existed)."""
        return Obj(
            {f.name: f.metadata["spec"] for f in dataclasses.fields(cls)},
            optional=tuple(f.name for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING),
        )

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict):
        """Build from a dict (e.g. a checkpoint's config). An unknown field, or a missing field
        that has no default, is a ConfigError; a missing field with a default takes the default
        (a checkpoint written before the field existed)."""
        if not isinstance(d, dict):
            raise ConfigError(f"{cls.__name__}.from_dict needs a dict, got {type(d).__name__}")
        unknown = sorted(set(d) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise ConfigError(f"unknown {cls.__name__} fields {unknown}")
        missing = [
            f.name for f in dataclasses.fields(cls) if f.name not in d and f.default is dataclasses.MISSING
        ]
        if missing:
            raise ConfigError(f"{cls.__name__} needs the fields {missing}")
        return cls(**d)


class TransformerConfig(DictConfig):
    """What the model configs share: the feed-forward's hidden size rule and the block arguments."""

    @property
    def inner_size(self) -> int:
        """The feed-forward's hidden size: n_inner, or 4 * n_embd when n_inner is None."""
        return 4 * self.n_embd if self.n_inner is None else self.n_inner

    def block_args(self) -> dict:
        """The arguments of an encoder or decoder block (nn/blocks.py) that every model config
        holds: n_embd, n_head, n_inner (`inner_size`), dropout, activation, norm_first."""
        return {
            "n_embd": self.n_embd,
            "n_head": self.n_head,
            "n_inner": self.inner_size,
            "dropout": self.dropout,
            "activation": self.activation,
            "norm_first": self.norm_first,
        }
