"""What a Hugging Face causal-LM layout holds, declared once and checked both ways.

A `Layout` (GPT-2's in interop/gpt2.py, Llama's in interop/llama.py) declares

- `holds`: every GPTConfig setting it can represent, and which values (`ANY`, `Only`, `Rule`).
  A setting it does not name must keep its default: the default is what a checkpoint written
  before that setting existed means, so a new block option is refused until a layout declares it;
- `pieces(config)`: every parameter of the GPT of `config`, each with the Hugging Face tensors
  it is stored as (several stacked by rows, as Llama's q, k and v; transposed, as GPT-2's Conv1D);
- `buffers`: the tensors a checkpoint may hold that are no parameter (causal masks, rotary tables);
- its config.json: `config_to_hf`, `config_from_hf`, and `hf_keys`, every config.json key
  transformers' class has, each read, checked, or known to change nothing the model computes.

    problems = GPT2.cannot_hold(model)       # [] or one phrase per setting or tensor it cannot hold
    tensors = GPT2.hf_tensors(model)         # {Hugging Face name: array}, exactly the layout's set
    model = GPT2.model_from_hf(checkpoint, config, notes)   # a leftover or missing tensor: refused
    model = GPT2.load("gpt2-dir")            # config.json, then the weights

A directory whose config.json says tied while its weights hold an `lm_head.weight` different
from the embedding is read untied, as transformers 5 reads it ("both are present in the
checkpoints with different values, so we will NOT tie them"), with a note saying so.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from scratchformer.errors import CheckpointError, ConfigError
from scratchformer.interop.hf_files import HFCheckpoint, read_checkpoint
from scratchformer.models.gpt import GPT, GPTConfig
from scratchformer.runfiles import read_optional_json

__all__ = ["Layout", "Piece", "Only", "Rule", "ANY", "EVERY_VALUE", "INERT_KEYS", "DROPPED_HERE"]

# where a GPT's one dropout rate applies (models/gpt.py, nn/blocks.py, nn/feedforward.py)
DROPPED_HERE = (
    "the embeddings, the attention weights, each sub-layer's output and the feed-forward's hidden activation"
)


@dataclass(frozen=True)
class Rule:
    """The values of a setting a layout holds: those where `test(config)` is true; `has` says
    what the layout has instead, for the refusal ("one key/value head per query head")."""

    test: Callable[[GPTConfig], bool]
    has: str

    def holds(self, config: GPTConfig, name: str) -> bool:
        return self.test(config)


@dataclass(frozen=True)
class Only:
    """A setting a layout holds at these values only; `has` says what the layout has ("biases")."""

    values: tuple
    has: str

    def holds(self, config: GPTConfig, name: str) -> bool:
        return getattr(config, name) in self.values


ANY = Rule(lambda config: True, "any value")

# what every layout holds at any value: the sizes, the dropout rate, the norm's eps, the dtype, a tied
# or untied head, how the weights began, the precision of the loss (a layout may still narrow one)
EVERY_VALUE = dict.fromkeys(
    (
        "vocab_size",
        "block_size",
        "n_layer",
        "n_head",
        "n_embd",
        "n_inner",
        "dropout",
        "layer_norm_eps",
        "dtype",
        "tie_weights",
        "init",
        "loss_dtype",
    ),
    ANY,
)

# config.json keys every transformers config class has that change nothing a model computes
INERT_KEYS = (
    "architectures initializer_range use_cache bos_token_id eos_token_id pad_token_id dtype torch_dtype "
    "transformers_version _name_or_path output_hidden_states output_attentions return_dict id2label label2id "
    "problem_type is_encoder_decoder chunk_size_feed_forward"
).split()


@dataclass(frozen=True)
class Piece:
    """One parameter of the GPT and the Hugging Face tensors it is stored as."""

    ours: str  # the GPT's parameter name (state_dict)
    theirs: tuple[str, ...]  # its Hugging Face tensors, stacked by rows into ours in this order
    rows: tuple[int, ...] = ()  # each one's rows, where there are several
    transposed: bool = False  # each stored as (in, out): GPT-2's Conv1D


@dataclass(frozen=True)
class Layout:
    family: str  # "GPT-2": what messages call it
    hf_class: str  # "GPT2LMHeadModel": the transformers class that reads it
    model_type: str  # config.json's model_type
    holds: dict  # GPTConfig field -> ANY, Only(...) or Rule(...)
    pieces: Callable[[GPTConfig], list[Piece]]
    config_to_hf: Callable[[GPTConfig], dict]
    config_from_hf: Callable[..., GPTConfig]  # (config.json's dict, dtype=...) -> GPTConfig
    hf_keys: dict  # config.json key -> "read", "checked" or "inert" (changes nothing computed)
    dropped_there: str  # where transformers' class applies dropout, and from which keys
    buffers: str = r"(?!)"  # a regular expression: tensors that are no parameter (ignored when read)
    prefix: str = ""  # a prefix every parameter may lack in a checkpoint ("transformer.", openai's files)

    # -- what it holds -----------------------------------------------------------------------
    def refusals(self, config: GPTConfig) -> list[str]:
        """The settings of `config` this layout cannot hold, one phrase each: a declared one at a
        value the declaration does not hold, an undeclared one away from its default."""
        out = []
        for field in dataclasses.fields(config):
            value, rule = getattr(config, field.name), self.holds.get(field.name)
            if rule is None:
                if value != field.default:
                    out.append(
                        f"{field.name}={value!r} ({self.family} knows no {field.name}: only its "
                        f"default, {field.default!r})"
                    )
            elif not rule.holds(config, field.name):
                out.append(f"{field.name}={value!r} ({self.family} has {rule.has})")
        return out

    def cannot_hold(self, model_or_config) -> list[str]:
        """What of a GPT (or of a GPTConfig: its settings only) this layout cannot hold: the
        settings (`refusals`), then the model's parameters the layout has no place for and the
        places none of them fills. Empty: it holds it."""
        config = getattr(model_or_config, "config", model_or_config)
        problems = self.refusals(config)
        if problems or not isinstance(model_or_config, GPT):
            return problems
        want = [p.ours for p in self.pieces(config)]
        have = list(model_or_config.state_dict())
        extra = [name for name in have if name not in want]
        missing = [name for name in want if name not in have]
        if extra:
            problems.append(f"{_some(extra)} ({self.family} has no place for {_them(extra)})")
        if missing:
            problems.append(f"no parameter {_some(missing)} ({self.family} needs {_them(missing)})")
        return problems

    def check(self, model_or_config) -> None:
        """ConfigError naming everything `cannot_hold` finds, in one line."""
        problems = self.cannot_hold(model_or_config)
        if problems:
            raise ConfigError(f"{self.family} cannot represent this model: " + "; ".join(problems))

    # -- the weights, both ways ---------------------------------------------------------------
    def hf_tensors(self, model: GPT) -> dict[str, np.ndarray]:
        """{Hugging Face name: array} of `model`'s weights in this layout (its dtype kept);
        ConfigError where the layout cannot hold the model, before anything is converted."""
        self.check(model)
        state = model.state_dict()
        tensors = {}
        for piece in self.pieces(model.config):
            whole = state[piece.ours]
            parts = np.split(whole, np.cumsum(piece.rows)[:-1], axis=0) if piece.rows else [whole]
            for name, part in zip(piece.theirs, parts):
                tensors[name] = part.T if piece.transposed else part
        return tensors

    def load(self, path, dtype: str = "float32", notes: list[str] | None = None) -> GPT:
        """The GPT of a Hugging Face directory of this layout: config.json (`config_from_hf`),
        then the weights (`model_from_hf`). A missing file is a CheckpointError naming it."""
        config_file = Path(path) / "config.json"
        hf = read_optional_json(config_file, error=CheckpointError)
        if hf is None:
            raise CheckpointError(
                f"{self.family} checkpoint: {config_file} not found (need config.json and model.safetensors)"
            )
        config = self.config_from_hf(hf, dtype=dtype)
        return self.model_from_hf(read_checkpoint(path, self.family, hf), config, notes)

    def model_from_hf(
        self,
        checkpoint: HFCheckpoint,
        config: GPTConfig,
        notes: list[str] | None = None,
        rows: int | None = None,
    ) -> GPT:
        """The GPT of `config` (`config_from_hf` of the checkpoint's config.json) with the
        checkpoint's weights: every parameter's tensors present, and none left over beyond the
        declared buffers (CheckpointError naming them). A tied config whose weights hold their own
        different head is read untied, as transformers does, and `notes` gets a line saying so.
        `rows`: keep the first rows of the token embedding (and of an untied head) only, a
        vocabulary of that size (a tokenizer's, where the embedding is padded past it)."""
        where = checkpoint.weights
        tensors = self._named(checkpoint.tensors, config)
        config = self._tied_as_transformers_reads(tensors, config, where, notes)
        pieces = self.pieces(config)
        wanted = {name for piece in pieces for name in piece.theirs}
        missing = [name for piece in pieces for name in piece.theirs if name not in tensors]
        if missing:
            more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
            raise CheckpointError(f"{self.family} checkpoint {where}: tensor {missing[0]!r} not found{more}")
        leftover = [n for n in tensors if n not in wanted and not re.fullmatch(self.buffers, n)]
        if leftover:
            raise CheckpointError(
                f"{self.family} checkpoint {where} holds {_some(leftover)}, which a {self.hf_class} of its "
                "config.json has no place for: is it another architecture, or another config.json's weights?"
            )
        state = {
            piece.ours: np.concatenate(
                [tensors[name].T if piece.transposed else tensors[name] for name in piece.theirs], axis=0
            )
            for piece in pieces
        }
        if rows is not None and rows < config.vocab_size:
            config = dataclasses.replace(config, vocab_size=rows)
            for name in ("wte.weight", "lm_head.weight"):
                if name in state:
                    state[name] = state[name][:rows]
        model = GPT(config)
        try:
            model.load_state_dict(state, strict=True)
        except ValueError as e:  # a tensor of another shape than its config.json gives
            raise CheckpointError(
                f"{self.family} checkpoint {where} does not fit its config.json: {e}"
            ) from e
        return model

    def _named(self, tensors: dict[str, np.ndarray], config: GPTConfig) -> dict[str, np.ndarray]:
        """The checkpoint's tensors, each parameter under its full name: one that lacks the
        layout's optional prefix (openai's GPT-2 files) gets it."""
        if not self.prefix:
            return dict(tensors)
        full = {
            name
            for piece in self.pieces(dataclasses.replace(config, tie_weights=False))
            for name in piece.theirs
        }
        return {
            self.prefix + name if self.prefix + name in full and name not in full else name: array
            for name, array in tensors.items()
        }

    def _tied_as_transformers_reads(self, tensors, config: GPTConfig, where, notes) -> GPTConfig:
        """`config`, untied where config.json says tied but the weights hold their own head,
        different from the embedding (a head equal to it is the tied one, written twice)."""
        if not config.tie_weights:
            return config
        untied = dataclasses.replace(config, tie_weights=False)
        head = [p for p in self.pieces(untied) if p.ours == "lm_head.weight"][0].theirs[0]
        embedding = [p for p in self.pieces(untied) if p.ours == "wte.weight"][0].theirs[0]
        if head not in tensors:
            return config
        if embedding in tensors and np.array_equal(tensors[head], tensors[embedding]):
            del tensors[head]
            return config
        if notes is not None:
            notes.append(
                f"note: config.json says tie_word_embeddings but {where} holds its own {head}, "
                "different from the embedding: read untied, as transformers reads it"
            )
        return untied

    # -- dropout --------------------------------------------------------------------------------
    def dropout_note(self, config: GPTConfig, doing: str) -> list[str]:
        """One line, where `config` has dropout, on how this layout's dropout differs from the
        GPT's: what `doing` ("exported", "training") keeps of it."""
        if not config.dropout:
            return []
        return [
            f"note: {doing} with dropout {config.dropout:g}: scratchformer drops {DROPPED_HERE}; "
            f"transformers' {self.hf_class} drops {self.dropped_there}"
        ]


def _some(names: list[str]) -> str:
    """'a', 'a and b', or 'a, b, c and 4 more': the first names of a list."""
    shown = names[:3]
    rest = len(names) - len(shown)
    if rest:
        return ", ".join(shown) + f" and {rest} more"
    return " and ".join(shown) if len(shown) < 3 else ", ".join(shown[:2]) + " and " + shown[2]


def _them(names: list[str]) -> str:
    return "it" if len(names) == 1 else "them"
