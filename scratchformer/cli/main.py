"""The `scratchformer` command: train, finetune, sample, eval, predict, embed, viz, lens, sae, exercise, export.

Every error a user can cause (bad options, bad data, a broken checkpoint) ends as one line
on stderr and exit code 2; no tracebacks.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from dataclasses import fields
from pathlib import Path

import numpy as np

from scratchformer.allocator import keep_freed_memory
from scratchformer.checks import ascii_float, ascii_int, check_text
from scratchformer.cli.exercise import add_options as add_exercise_options
from scratchformer.cli.exercise import cmd_exercise
from scratchformer.cli.lens import add_options as add_lens_options
from scratchformer.cli.lens import cmd_lens
from scratchformer.cli.sae import add_options as add_sae_options
from scratchformer.cli.sae import cmd_sae
from scratchformer.cli.viz import add_options as add_viz_options
from scratchformer.cli.viz import cmd_viz, write_training_curves
from scratchformer.errors import CheckpointError, CLIError, ScratchformerError
from scratchformer.runfiles import read_regular_file
from scratchformer.specs import Bool, Int, Maybe, SchemaMismatch, Str

MAX_PROMPT_BYTES = 1 << 30  # a prompt file past this is refused (its memory estimate refuses far less)
SEEN_MARK = " (in training data)"  # sample: appended to a sample that is an item of the training split
# sample: the line before each sample of a text run or --hf model, whose samples hold newlines
SAMPLE_HEADER = "=== sample {i} of {n} ==="

# Help text of each setting the command line exposes, keyed by dataclass field (GPTConfig for the
# model, TrainConfig for training). The option itself (--n-layer), its type, range and choices
# come from the field's declared spec (`scratchformer.settings.setting`: the values a checkpoint
# can hold), and the defaults shown in --help from scratchformer.training.jobs.RUN_DEFAULTS.
# A value: help, or (help, what None means).
MODEL_HELP = {
    "n_layer": "number of Transformer blocks",
    "n_head": "attention heads per block (must divide --n-embd)",
    "n_kv_head": (
        "key/value heads per block: fewer than --n-head is grouped-query attention (must divide "
        "--n-head; GPT only)",
        "n-head",
    ),
    "n_embd": "model width (channels per token)",
    "dropout": "dropout probability in [0, 1)",
    "activation": "feed-forward activation (swiglu: gated, as Llama)",
    "positional": "position encoding (rope: rotary, inside attention; GPT only)",
    "normalization": "normalisation layer (rmsnorm: as Llama; none: no norm at all, as the grokking model; GPT only)",
    "norm_first": "pre: LayerNorm before each sublayer (GPT-2); post: after the residual (Vaswani)",
    "tie_weights": "reuse the token embedding as the LM head",
    "bias": "biases in Linear and LayerNorm layers (off: nanoGPT's bias=False)",
    "init": (
        "gpt2: N(0, 0.02) weights; pytorch: each layer's PyTorch default (as makemore); grokking: "
        "N(0, 1/n-embd), the grokking paper's"
    ),
    "attn_only": "attention-only blocks: no feed-forward sub-layer (the induction-heads toy models; GPT only)",
    "qk_norm": "QK-norm: RMSNorm on each head's queries and keys before the scores (as Gemma 3; GPT only)",
    "loss_dtype": (
        "the dtype of the loss's log-softmax (float64: as the grokking paper, so a loss near 0 is "
        "not float32 rounding; GPT only)",
        "the model's",
    ),
}
FINETUNE_HELP = {  # `finetune`'s model settings (SentenceClassifierConfig fields)
    "max_length": "tokens per text, [CLS] and [SEP] included; longer texts are truncated",
    "freeze_encoder": (
        "train the linear head alone on the frozen encoder (a linear probe); --no-freeze-encoder "
        "fine-tunes the whole model",
        "auto: frozen when --data has fewer than {PROBE_BELOW_ROWS:,} rows",  # filled in
    ),
}
DATA_HELP = {  # train's data settings (RUN_DEFAULTS "data" keys); each spec is the run's config.json's
    "symbols": "induction task: symbols the random tokens are drawn from",
    "repeats": "induction task: copies of the random segment in each sequence of --block-size tokens",
    "modulus": "--task modadd: learn (a + b) mod N, N odd",
    "train_fraction": "--task modadd: the part of the N^2 pairs trained on, the rest held out",
    "split_seed": "seed of the train/val/test split of a lines file",
    "tokenizer": "char: one token per character; bpe: a byte-level BPE trained on the training split",
    "vocab_size": (
        "ids of the BPE with --tokenizer bpe, the end-of-text token included",
        "{DEFAULT_BPE_VOCAB} with --tokenizer bpe",  # data.datasets.DEFAULT_BPE_VOCAB, filled in
    ),
}
DATA_TASK = {"symbols": "induction", "repeats": "induction", "modulus": "modadd", "train_fraction": "modadd"}
FINETUNE_DATA_HELP = {  # `finetune`'s data settings (CSV_DATA fields; split_seed is its "seed")
    "val_fraction": "part of the training CSV held out for validation",
    "split_seed": "seed of the held-out part",
}
TRAIN_HELP = {
    "max_steps": "optimiser steps",
    "time_limit": ("stop cleanly after this many seconds", "none"),
    "batch_size": "sequences per micro-batch",
    "grad_accum": "micro-batches per step",
    "lr": "peak learning rate",
    "min_lr": (
        "learning rate at the end of the cosine, at most --lr; given --lr alone, the default scales with it",
        "lr / 10",
    ),
    "head_lr": (
        "peak learning rate of a classifier's fresh head (finetune): it follows --lr's warmup and "
        "cosine at head-lr / lr of its rate, floor included; the encoder keeps --lr",
        "lr",
    ),
    "warmup_steps": "linear warmup before the cosine decay",
    "decay_steps": ("length of the cosine", "max steps"),
    "weight_decay": "AdamW decoupled decay (matrices only)",
    "decay_embeddings": "weight-decay the embedding tables too, as nanoGPT does",
    "beta1": "AdamW beta1",
    "beta2": "AdamW beta2",
    "grad_clip": "global gradient-norm clip (0: off)",
    "eval_interval": "steps between evaluations and checkpoints",
    "eval_batches": ("evaluate on this many batches", "the whole split"),
    "patience": (
        "stop after this many evaluations in a row without a lower validation loss (early stopping; "
        "best/ keeps the lowest)",
        "none: run to --max-steps",
    ),
    "log_interval": "steps between log.jsonl rows",
    "num_samples": "samples printed at each evaluation",
    "seed": "seed of the initial weights, the batches and dropout",
    "workers": "processes training slices of each batch at once, this one included (Linux; 1: one "
    "process; results differ in the last bits and in the dropout draws)",
    "diag_interval": (
        "steps between records of activation, gradient and update statistics and the probe's "
        "attention in diagnostics.jsonl, step 0 included (0: off)",
        # 25: training.config.DIAG_RECORDS (the CLI does not import training to build --help)
        "max steps // 25, at least 1: 25 records or more, or every step",
    ),
}


def _number(parse, minimum, what: str):
    """An argparse type: `parse` (int or float) of the option's text, at least `minimum`."""

    def convert(s: str):
        try:
            v = parse(s)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {s!r}") from None
        if not v >= minimum:  # also refuses NaN
            raise argparse.ArgumentTypeError(f"expected {what}, got {s}")
        return v

    return convert


_positive_int = _number(ascii_int, 1, "a positive integer")
_nonneg_int = _number(ascii_int, 0, "an integer >= 0")
_nonneg_float = _number(ascii_float, 0, "a number >= 0")


def _temperature(s: str) -> float:
    v = _nonneg_float(s)
    if not (v == 0 or 1e-3 <= v <= 1e3):  # 1e-320 turns every logit into +-inf; inf samples noise
        raise argparse.ArgumentTypeError(f"expected 0 (greedy) or a temperature in [0.001, 1000], got {s}")
    return v


def _beam_width(s: str) -> int:
    from scratchformer.inference.beam import MAX_BEAM_WIDTH

    v = _positive_int(s)
    if v > MAX_BEAM_WIDTH:  # memory and time grow with the width; wider finds nothing new
        raise argparse.ArgumentTypeError(f"expected a beam width in [1, {MAX_BEAM_WIDTH}], got {s}")
    return v


def _probability(s: str) -> float:
    v = _nonneg_float(s)
    if not 0 < v <= 1:
        raise argparse.ArgumentTypeError(f"expected a probability in (0, 1], got {s}")
    return v


# -- parser ----------------------------------------------------------------------------------
class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr (no usage block) and exit code 2,
    reported by the command's own parser ("scratchformer train: error: ...")."""

    def error(self, message: str):
        message = " ".join(message.split())
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")

    def parse_args(self, args=None, namespace=None):
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:  # argparse would report these from the top-level parser
            command = getattr(self, "commands", {}).get(getattr(parsed, "command", None), self)
            command.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed


def _defaults_text(values: dict[str, object], none_means: str | None = None) -> str:
    """{run kind: value} -> "default: 4" or "default: 64 for lines; 128 for text; ..."."""
    from scratchformer.training.trainer import shown

    by_value: dict[str, list[str]] = {}
    for kind, value in values.items():
        by_value.setdefault(shown(value, none_means), []).append(kind)
    if len(by_value) == 1:
        return f"default: {next(iter(by_value))}"
    return "default: " + "; ".join(f"{v} for {', '.join(kinds)}" for v, kinds in by_value.items())


def _spec_type(spec):
    """An argparse type from a declared spec (scratchformer.specs): the option's text parsed
    and checked exactly as the config and the checkpoint check the value, so every value the
    command line accepts is one the run's checkpoint can hold."""

    def convert(text: str):
        try:
            value = spec.parse(text)
            spec.check(value, "")
        except (ValueError, OverflowError, SchemaMismatch):
            raise argparse.ArgumentTypeError(f"expected {spec.describe()}, got {text!r}") from None
        return value

    return convert


def _add_setting(group, name: str, spec, help_spec, values: dict[str, object]) -> None:
    """One option for the dataclass field `name`, its type and choices read from the field's spec."""
    help_text, none_means = help_spec if isinstance(help_spec, tuple) else (help_spec, None)
    if name == "norm_first":  # spelled --norm pre/post since the first release
        values = {kind: "pre" if v else "post" for kind, v in values.items()}
        group.add_argument(
            "--norm",
            choices=["pre", "post"],
            dest="norm_first",
            help=f"{help_text} ({_defaults_text(values)})",
        )
        return
    flag = "--" + name.replace("_", "-")
    help_text = f"{help_text} ({_defaults_text(values, none_means)})"
    inner = spec.spec if isinstance(spec, Maybe) else spec  # None is the default, never typed
    if isinstance(inner, Bool):
        group.add_argument(flag, action=argparse.BooleanOptionalAction, default=None, help=help_text)
    elif isinstance(inner, Str) and inner.choices is not None:
        group.add_argument(flag, choices=inner.choices, help=help_text)
    else:
        metavar = "N" if isinstance(inner, Int) else "SECONDS" if name == "time_limit" else "X"
        group.add_argument(flag, type=_spec_type(inner), metavar=metavar, help=help_text)


def _defaults_by_kind():
    """values(section, name, kinds=None): the default of one setting for every run kind it
    applies to (train's kinds, or `kinds`), from RUN_DEFAULTS resolved once."""
    from scratchformer.training.jobs import FINETUNE_RUN_KINDS, RUN_DEFAULTS, epochs_text, run_defaults

    resolved = {kind: run_defaults(kind) for kind in RUN_DEFAULTS}

    def values(section: str, name: str, kinds=None) -> dict[str, object]:
        out = {}
        for kind, d in resolved.items():
            if (kind in FINETUNE_RUN_KINDS) != (kinds is not None) or (
                kinds is not None and kind not in kinds
            ):
                continue
            if name in d[section]:
                out[kind] = (
                    epochs_text(d["epochs"]).get(name, d[section][name]) if d["epochs"] else d[section][name]
                )
        if section == "train" and kinds is None:  # train's fine-tuning rates, the same for every LM row
            out.update(
                {"--init-from": d["init_from"][name] for d in resolved.values() if name in d["init_from"]}  # noqa: B035
            )
        return out

    return values


def build_parser() -> argparse.ArgumentParser:
    """The command line: one subparser per command of COMMANDS, its help and description from
    `_about`, its options added by the command's own function."""
    values = _defaults_by_kind()
    p = Parser(
        prog="scratchformer",
        description="Transformers from scratch on NumPy: train, sample, evaluate.",
        epilog="Run 'scratchformer COMMAND --help' for each command's options.",
    )
    from scratchformer import __version__

    p.add_argument("--version", action="version", version=f"scratchformer {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")  # none given: main() prints the commands
    p.commands = sub.choices  # command name -> its parser
    add_options = {
        "train": lambda parser: _add_train_options(parser, values),
        "finetune": lambda parser: _add_finetune_options(parser, values),
        "sample": _add_sample_options,
        "eval": _add_eval_options,
        "predict": _add_predict_options,
        "embed": _add_embed_options,
        "export": _add_export_options,
        "viz": add_viz_options,
        "exercise": add_exercise_options,
        "lens": add_lens_options,
        "sae": add_sae_options,
    }
    for name, (summary, description) in _about().items():
        add_options[name](sub.add_parser(name, help=summary, description=description))
    return p


def _about() -> dict[str, tuple[str, str]]:
    """Command -> (its line in 'scratchformer --help', the opening of its own --help), in the
    order the commands are listed."""
    from scratchformer.exercises.grading import MEMORY_LIMIT, TIME_LIMIT
    from scratchformer.training.sentence import PROBE_BELOW_ROWS

    return {
        "train": (
            "train a model (default: a character-level GPT on the bundled baby names)",
            "Train a model. With no options: a 4-layer character-level GPT on the bundled "
            "names.txt, written to out/names/. Model and optimiser options override the "
            "defaults of the run kind (lines: makemore-like; text: nanoGPT's CPU config; "
            "the tasks: their tuned settings); --help shows them per kind.",
        ),
        "finetune": (
            "fine-tune a pretrained BERT encoder (all-MiniLM-L6-v2) as a sentence classifier",
            "Fine-tune a pretrained BERT-family encoder with mean pooling and a linear head on a "
            "labelled CSV (columns text,label), through the hand-written backward of every layer: the "
            "fresh head at the probe's rate (--head-lr), the pretrained encoder at a smaller one (--lr), "
            "for a length sized from the training split, stopped early on the held-out part (defaults "
            "below); --freeze-encoder trains the head alone (a linear probe), as the default does on a CSV "
            f"of fewer than {PROBE_BELOW_ROWS:,} rows. The run directory works with "
            "eval (--data test.csv), predict, viz and --resume like any other run.",
        ),
        "sample": (
            "generate text from a trained language model",
            "Sample from a trained language model (DIR: a run directory or a checkpoint).",
        ),
        "eval": (
            "loss/perplexity (LM) or accuracy (tasks) on a split",
            "Evaluate a trained model on a held-out split.",
        ),
        "predict": (
            "run a classifier or seq2seq checkpoint on one input",
            'Map one input such as "3 1 4 1 5" through a toy-task model, or label '
            "a sentence with a fine-tuned classifier.",
        ),
        "embed": (
            "sentence embeddings with a pretrained BERT-family encoder",
            "Embed texts with a Hugging Face BERT-family sentence encoder "
            "(default: the installed all-MiniLM-L6-v2 package).",
        ),
        "export": (
            "write a language-model run as a Hugging Face GPT-2 or Llama directory",
            "Write a run's best checkpoint (or a checkpoint directory) as a Hugging Face "
            "directory that transformers' from_pretrained reads: GPT2LMHeadModel's layout "
            "(learned positions, pre-norm, LayerNorm, biases, a tied head) or "
            "LlamaForCausalLM's (rotary positions, RMSNorm, SwiGLU, no biases, grouped-query "
            "attention allowed). The run needs a BPE tokenizer (--tokenizer bpe or --init-from); "
            "config.json gets its bos/eos ids.",
        ),
        "viz": (
            "figures and an interactive report.html of a trained model (or a BERT encoder)",
            "Draw the attention maps, embeddings, residual stream and training curves of a "
            "trained run on one input, as PNGs and a self-contained report.html (opens from "
            "disk, no network). With --bert: a pretrained BERT-family encoder.",
        ),
        "exercise": (
            "graded exercises: write a layer's backward (and three more), have it checked",
            "Graded exercises. Without NAME: the list. With NAME: write a stub file whose forward is "
            "given and whose backward is yours to write; then --check FILE grades it by finite "
            "differences (float64, on inputs of several shapes) and the layer contract (returned shapes and "
            "types, finite gradients ADDED into .grad), naming the first wrong element and the likely "
            f"cause; the file runs in a child process limited to {TIME_LIMIT:g} s and {MEMORY_LIMIT >> 30} GiB. "
            "Exit codes of --check: "
            "0 right, 1 wrong, 2 bad input (a missing file, a file that does not load). A right --check is "
            "recorded in .scratchformer-exercises.json in the current directory; the list marks the "
            "exercises passed there. Three exercises are not a backward: bpe_merge (one BPE merge step, "
            "graded against the library's trainer), diagnose_runs (its stub comes with four recorded runs to "
            "diagnose) and induction_head (graded by ablation); docs/exercises.md.",
        ),
        "lens": (
            "logit lens, head ablation, saliency and patching of a trained model on one input",
            "Run the lens analyses (docs/lens.md) on one input and print their tables and "
            "check lines. With --bert: saliency of the similarity of two sentences' embeddings.",
        ),
        "sae": (
            "train a sparse autoencoder on one hook point of a language-model run",
            "Train a sparse autoencoder (TopK, or ReLU with an L1 penalty) on the activations of one hook "
            "point of a trained language-model run, streamed from its model in batches. An autoencoder run "
            "is a run: checkpoints, --resume, log.jsonl with SAELens's measures (L0, explained variance, "
            "the CE loss score, ...) at every evaluation; at the end the best checkpoint is written in "
            "SAELens's layout into OUT/saelens. 'scratchformer viz OUT' draws its feature pages; "
            "'scratchformer lens RUN --sae OUT' attributes a logit to its features (docs/lens.md).",
        ),
    }


def _add_run_options(
    parser, data_group, data: tuple[str, str], out: str, resume: str, changed: str, quiet: str
):
    """The options train and finetune share, each command's wording given: the data file (in
    `data_group`; `data`: its metavar and help), the output directory (`out`: its default), how
    a run starts, continues and reports."""
    data_group.add_argument("--data", metavar=data[0], help=data[1])
    parser.add_argument("--out", metavar="DIR", help=f"output directory (default: {out})")
    parser.add_argument("--resume", action="store_true", help=resume)
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="start a new run in an --out that holds one: its last/, best/ and log.jsonl are "
        "deleted first (without it, such an --out is refused)",
    )
    parser.add_argument(
        "--allow-changed-data", action="store_true", help=f"resume even though {changed} (its sha256 differs)"
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--quiet", action="store_true", help=quiet)


def _add_bert_dir(parser, instead: str) -> None:
    """--model DIR: the pretrained encoder finetune and embed read, instead of `instead`."""
    parser.add_argument(
        "--model",
        metavar="DIR",
        help="a Hugging Face BERT directory (config.json, model.safetensors, vocab.txt or tokenizer.json) "
        f"instead of {instead}",
    )


def _add_training_settings(group, values, kinds=None) -> None:
    """One option per TrainConfig field, its defaults those of train's run kinds or `kinds`."""
    from scratchformer.training.config import TrainConfig

    for field in fields(TrainConfig):
        _add_setting(
            group,
            field.name,
            TrainConfig.spec(field.name),
            TRAIN_HELP[field.name],
            values("train", field.name, kinds),
        )


def _add_train_options(t, values) -> None:
    """`train`: data, run, model and optimisation options, defaults per run kind."""
    from scratchformer.models import GPTConfig

    data = t.add_argument_group("data")
    _add_run_options(
        t,
        data,
        data=(
            "PATH",
            "a UTF-8 text file, or a bundled data set: names (the default; makemore's 32K names) "
            "or shakespeare (tinyshakespeare, 1.1M characters)",
        ),
        out="out/<data name or task>",
        resume="continue the run in --out from its last checkpoint, on its original schedule; a "
        "larger --max-steps extends it (the cosine keeps its length unless --decay-steps is "
        "given)",
        changed="the data file changed since training",
        quiet="no evaluation lines or samples",
    )
    _add_train_data(data, values)
    t.add_argument(
        "--init-from",
        metavar="HF_DIR",
        help="continue training a Hugging Face GPT-2 or Llama directory (config.json, model.safetensors, "
        "its tokenizer) on --data, with its own config and tokenizer and fine-tuning rates (--lr, "
        "--min-lr, --warmup-steps: see their --init-from defaults) (default: none: a fresh model)",
    )
    m = t.add_argument_group("model")
    for name, help_spec in MODEL_HELP.items():
        _add_setting(m, name, GPTConfig.spec(name), help_spec, values("model", name))
    block = ("context length", "longest line + 1")  # a data setting: the data are cut to it
    _add_setting(m, "block_size", GPTConfig.spec("block_size"), block, values("data", "block_size"))
    _add_training_settings(t.add_argument_group("optimisation"), values)


def _add_train_data(data, values) -> None:
    """train's data options beside --data: how the file is read, or the task that generates it."""
    from scratchformer.data.datasets import DEFAULT_BPE_VOCAB, FORMATS
    from scratchformer.data.tasks import TASKS
    from scratchformer.training.jobs import LM_TASKS
    from scratchformer.training.schema import INDUCTION_DATA, LM_DATA, MODADD_DATA

    data.add_argument(
        "--format",
        choices=FORMATS,
        help="lines: one item per line (like names); text: continuous text. Guessed when omitted",
    )
    data.add_argument(
        "--task",
        choices=["lm", *TASKS, *LM_TASKS],
        help="lm (default): language model on --data; the others are toy tasks for an "
        "encoder classifier (majority), an encoder-decoder (copy, reverse, sort), a GPT "
        "(induction: random tokens repeated, the induction-heads setting) or a 1-layer GPT "
        "that groks modular addition (modadd, Nanda et al. 2023)",
    )
    from scratchformer.training.modadd import PRESETS, preset_flags

    data.add_argument(
        "--preset",
        choices=list(PRESETS),
        help="--task modadd: paper = Nanda et al. 2023's settings (the defaults shown here); fast = "
        f"{preset_flags('fast')}: delayed generalisation in minutes on 2 cores (docs/results.md); "
        "options given beside it win (default: paper)",
    )
    specs = {
        **LM_DATA.fields,
        **INDUCTION_DATA.fields,
        **MODADD_DATA.fields,
        "split_seed": LM_DATA.fields["seed"],
    }
    for name, help_spec in DATA_HELP.items():
        if isinstance(help_spec, tuple):
            help_spec = (help_spec[0], help_spec[1].format(DEFAULT_BPE_VOCAB=DEFAULT_BPE_VOCAB))
        _add_setting(data, name, specs[name], help_spec, values("data", name))


def _add_finetune_options(f, values) -> None:
    """`finetune`: the CSV, the pretrained encoder, run, model and optimisation options."""
    from scratchformer.interop.bert_classifier import SentenceClassifierConfig
    from scratchformer.training.jobs import FINETUNE_RUN_KINDS
    from scratchformer.training.schema import CSV_DATA
    from scratchformer.training.sentence import BASE_MODELS, PROBE_BELOW_ROWS

    _add_run_options(
        f,
        f,
        data=(
            "FILE.csv",
            "the training CSV (UTF-8, header row with text and label); a fraction is held out to pick "
            "the best checkpoint",
        ),
        out="out/finetune-<CSV name>",
        resume="continue the run in --out from its last checkpoint",
        changed="the training CSV changed since",
        quiet="no evaluation lines",
    )
    base = f.add_mutually_exclusive_group()
    base.add_argument(
        "--from",
        dest="base",
        choices=BASE_MODELS,
        help="the pretrained encoder: minilm = the installed all-MiniLM-L6-v2 (default: minilm)",
    )
    _add_bert_dir(base, "--from")
    specs = {**CSV_DATA.fields, "split_seed": CSV_DATA.fields["seed"]}
    for name, help_spec in FINETUNE_DATA_HELP.items():
        _add_setting(f, name, specs[name], help_spec, values("data", name, FINETUNE_RUN_KINDS))
    fm = f.add_argument_group("model")
    for name, help_spec in FINETUNE_HELP.items():
        if isinstance(help_spec, tuple):
            help_spec = (help_spec[0], help_spec[1].format(PROBE_BELOW_ROWS=PROBE_BELOW_ROWS))
        _add_setting(
            fm,
            name,
            SentenceClassifierConfig.spec(name),
            help_spec,
            # --freeze-encoder picks the probe row: its default is the finetune row's alone
            values("model", name, ("finetune",) if name == "freeze_encoder" else FINETUNE_RUN_KINDS),
        )
    optimisation = f.add_argument_group(
        f"optimisation (defaults: fine-tuning; probe = with --freeze-encoder, or a CSV of fewer than "
        f"{PROBE_BELOW_ROWS:,} rows)"
    )
    _add_training_settings(optimisation, values, FINETUNE_RUN_KINDS)


def _add_sample_options(s) -> None:
    """`sample`: a run or a Hugging Face directory, the prompt and the sampling settings."""
    s.add_argument("dir", nargs="?", metavar="DIR", help="default: out/names")
    s.add_argument(
        "--hf",
        metavar="HF_DIR",
        help="sample from a Hugging Face GPT-2 or Llama directory (config.json, model.safetensors, "
        "tokenizer.json or vocab.json + merges.txt) instead of a run (default: none)",
    )
    s.add_argument(
        "-n", "--num-samples", type=_positive_int, default=10, help="how many samples (default: 10)"
    )
    prompt = s.add_mutually_exclusive_group()
    prompt.add_argument(
        "--prompt",
        default="",
        help="text every sample starts with (default: none: whole names, or text after a newline)",
    )
    prompt.add_argument(
        "--prompt-file",
        metavar="FILE",
        help="read the prompt from a UTF-8 file; a byte-order mark is dropped, CRLF read as LF, and one trailing newline dropped (default: none)",  # noqa: E501
    )
    s.add_argument(
        "--max-new-tokens",
        type=_positive_int,
        help="default: up to the end of a name, 200 characters of text, or 50 tokens with --hf",
    )
    s.add_argument(
        "--temperature",
        type=_temperature,
        default=1.0,
        help="0 means greedy; else in [0.001, 1000] (default: 1)",
    )
    s.add_argument("--top-k", type=_positive_int, help="sample among the k most likely tokens (default: all)")
    s.add_argument(
        "--top-p",
        type=_probability,
        help="nucleus sampling: smallest set with probability >= p (default: 1, off)",
    )
    s.add_argument(
        "--seed",
        type=_nonneg_int,
        help="seed of the draws, to repeat them (default: a fresh one, printed on stderr)",
    )


def _add_eval_options(e) -> None:
    """`eval`: a run, its split and where its data moved."""
    from scratchformer.training.config import TrainConfig

    e.add_argument("dir", nargs="?", default="out/names", metavar="DIR", help="default: out/names")
    e.add_argument(
        "--split",
        choices=["val", "test"],
        help="default: test (val for text data, which have only train and val)",
    )
    e.add_argument("--json", action="store_true", help="print the result as a JSON object on the last line")
    e.add_argument(
        "--beam",
        type=_beam_width,
        metavar="K",
        help="seq2seq: decode with beam search of this width, at most 1024 (default: 1)",
    )
    e.add_argument(
        "--data",
        metavar="PATH",
        help="the run's data file, where it has moved since training "
        "(default: the path recorded in the run); for a finetune run: "
        "the labelled CSV to evaluate (the test split)",
    )
    e.add_argument(
        "--allow-changed-data",
        action="store_true",
        help="evaluate even though the data file changed since training (its sha256 differs)",
    )
    e.add_argument(
        "--workers",
        type=_positive_int,
        default=TrainConfig.workers,
        metavar="N",
        help="processes evaluating slices of each batch at once, this one included, as training "
        f"does (Linux; 1: one process; results differ in the last bits; default: "
        f"{TrainConfig.workers})",
    )


def _add_predict_options(pr) -> None:
    """`predict`: a classifier or seq2seq run and one input."""
    pr.add_argument("dir", metavar="DIR")
    pr.add_argument(
        "input",
        metavar="INPUT",
        help='space-separated digits, e.g. "3 1 4 1 5"; a sentence for a finetune run',
    )
    pr.add_argument(
        "--beam", type=_beam_width, metavar="K", help="seq2seq: beam width, at most 1024 (default: 1, greedy)"
    )


def _add_embed_options(em) -> None:
    """`embed`: texts, the encoder and where the array goes."""
    em.add_argument("texts", nargs="+", metavar="TEXT")
    _add_bert_dir(em, "the installed all-MiniLM-L6-v2 (default: none)")
    em.add_argument(
        "--out",
        metavar="FILE.npy",
        help="save the (n, d) float32 array for np.load, named exactly as given (default: print them)",
    )


def _add_export_options(x) -> None:
    """`export`: a language-model run written as a Hugging Face directory."""
    x.add_argument("dir", metavar="RUN")
    x.add_argument("--hf", metavar="OUT", required=True, help="the directory to write")


# -- train and finetune ----------------------------------------------------------------------
def _given(args, names) -> dict:
    """The settings among `names` that the user gave (argparse leaves the others None)."""
    return {k: getattr(args, k) for k in names if getattr(args, k, None) is not None}


def cmd_train(args) -> int:
    """`train`: the options decided here, once, into plain values (the run kind, the data file
    read once, --out, the model, data and training settings given); the run is then resumed or
    built (training.jobs) and trained (training.trainer)."""
    from scratchformer.training.jobs import build_job, build_job_from_hf, resume_job
    from scratchformer.training.rundir import check_fresh
    from scratchformer.training.trainer import train

    task = None if args.task in (None, "lm") else args.task
    model, data, settings, options = (
        _given(args, MODEL_HELP),
        _given(args, ["block_size", *DATA_HELP]),
        _given(args, TRAIN_HELP),
        _run_options(args),
    )
    if "norm_first" in model:  # spelled --norm pre/post
        model["norm_first"] = model["norm_first"] == "pre"
    _refuse_train_options(args.out, task, args.format, args.init_from, args.resume, model, data)
    if args.preset is not None:
        model, data, settings = _with_preset(args.preset, task, args.resume, model, data, settings)
    run_kind, source, default_out = _train_source(task, args.data, args.format, args.resume)
    out = Path(args.out or default_out)
    if not (args.resume or args.overwrite):
        check_fresh(out)  # before the data is tokenized; train() checks again, under the run's lock
    if args.resume:
        fixed = {**model, **data, **({"format": args.format} if args.format else {})}
        job, cfg, checkpoint, note = resume_job(
            out, settings, fixed, command="train", task=args.task, data=args.data, **options["resume"]
        )
        if note:  # how the schedule changes
            print(note)
    else:
        if source is not None:  # a task refuses --data itself
            data["path"] = source
        notes: list[str] = []  # --init-from: bf16 weights read as float32, padding rows dropped
        if args.init_from is None:
            job, cfg = build_job(run_kind, model, settings, data)
        else:
            job, cfg = build_job_from_hf(args.init_from, run_kind, settings, data, notes=notes)
        for note in notes:
            print(note, file=sys.stderr)
        checkpoint = None
    summary = train(job, cfg, out, checkpoint=checkpoint, announce=True, **options["train"])
    if summary["stopped_by"] != "nothing to do":
        write_training_curves(out)
    return 0


def _with_preset(name: str, task: str | None, resume: bool, model: dict, data: dict, settings: dict):
    """(model, data, train settings): the ones given over a modadd preset's (training/modadd.py PRESETS)."""
    from scratchformer.training.modadd import PRESETS

    if task != "modadd":
        raise CLIError("--preset applies to --task modadd only")
    if resume:
        raise CLIError("--preset starts a run; --resume continues one with its saved settings: drop --preset")
    preset = PRESETS[name]
    return {**preset["model"], **model}, {**preset["data"], **data}, {**preset["train"], **settings}


def _train_source(task: str | None, data: str | None, format: str | None, resume: bool):
    """(run kind, what the job reads its data from, the default --out): a task's name and its
    --data (which it refuses); a resumed run's name alone (its run kind is saved); else the
    data file, read once ("" and missing files: one line): format, sha256 and tokens come from
    these bytes."""
    from scratchformer.data.datasets import read_data, resolve_data

    if task is not None:
        return task, data, f"out/{task}"
    if resume:
        return None, None, "out/names" if data is None else f"out/{resolve_data(data).stem}"
    file = read_data(data)
    if file.path.suffix.lower() == ".csv":
        print(
            f"note: {file.path} is a CSV: train reads it as plain text for a character model; to train "
            f"a classifier on its text,label rows run 'scratchformer finetune --data {file.path}'",
            file=sys.stderr,
        )
    run_kind = format or (file.format if data is not None else "lines")
    return run_kind, file, "out/names" if data is None else f"out/{file.path.stem}"


def _refuse_train_options(out, task, format, init_from, resume, model: dict, data: dict) -> None:
    """train's options that cannot go together, refused before any file is read."""
    if out == "":
        raise CLIError("--out is empty: give a directory, or omit --out (default: out/<data name or task>)")
    if task is not None and format:
        raise CLIError(f"--format applies to language models only: the {task} task generates its data")
    for name, task_of in DATA_TASK.items():
        if name in data and task != task_of:
            raise CLIError(f"--{name.replace('_', '-')} applies to --task {task_of} only")
    if init_from is None:
        return
    if resume:
        raise CLIError("--init-from starts a run; --resume continues one: drop --init-from")
    if task is not None:
        raise CLIError(f"--init-from continues a language model: drop --task {task}")
    if model:
        flag = "--" + next(iter(model)).replace("_", "-").replace("norm-first", "norm")
        raise CLIError(f"--init-from keeps the checkpoint's model: drop {flag}")
    if "tokenizer" in data or "vocab_size" in data:
        raise CLIError("--init-from uses the checkpoint's own tokenizer: drop --tokenizer and --vocab-size")


def cmd_finetune(args) -> int:
    """`finetune`: as `train`, the options decided here into plain values, for the
    sentence-classifier rows ("finetune"; "probe" with --freeze-encoder)."""
    from scratchformer.training.jobs import build_job, resume_job
    from scratchformer.training.rundir import check_fresh
    from scratchformer.training.sentence import SentenceClassifierJob
    from scratchformer.training.trainer import train

    if args.out == "" or args.data == "":
        raise CLIError(f"--{'out' if args.out == '' else 'data'} is empty: give a path")
    if args.data is None and not args.resume:
        raise CLIError("finetune needs --data FILE.csv (a UTF-8 CSV with the columns text,label)")
    out = Path(args.out or f"out/finetune-{Path(args.data).stem if args.data else 'run'}")
    model, data, settings = (
        _given(args, FINETUNE_HELP),
        _given(args, FINETUNE_DATA_HELP),
        _given(args, TRAIN_HELP),
    )
    if args.model is not None or args.base is not None:
        data["base"] = args.model if args.model is not None else args.base
    options = _run_options(args)
    if args.resume:
        kind = SentenceClassifierJob.kind
        job, cfg, checkpoint, note = resume_job(
            out,
            settings,
            {**model, **data},
            command="fine-tune",
            kind=kind,
            train_data=args.data,
            **options["resume"],
        )
        if note:  # how the schedule changes
            print(note)
    else:
        if not args.overwrite:
            check_fresh(out)  # before the CSV and the encoder are read; train() checks again, under the lock
        run_kind = "probe" if model.get("freeze_encoder") else "finetune"
        job, cfg = build_job(run_kind, model, settings, {"path": args.data, **data})
        if job.choice_note:  # the data size froze the encoder; beside the data's other notes
            print(job.choice_note, file=sys.stderr)
        checkpoint = None
    summary = train(job, cfg, out, checkpoint=checkpoint, announce=True, **options["train"])
    if summary["stopped_by"] != "nothing to do":
        write_training_curves(out)
    return 0


def _run_options(args) -> dict:
    """What train and finetune share of their options: how trainer.train runs ("train") and
    what resume_job checks ("resume")."""
    return {
        "train": {
            "resume": args.resume,
            "overwrite": args.overwrite,
            "progress": not args.no_progress,
            "verbose": not args.quiet,
        },
        "resume": {"overwrite": args.overwrite, "allow_changed_data": args.allow_changed_data},
    }


# -- the other commands ----------------------------------------------------------------------
def cmd_sample(args) -> int:
    from scratchformer.training.jobs import load_job

    prompt = args.prompt
    if args.prompt_file is not None:
        from scratchformer.limits.estimates import check_text_fits

        try:
            check_text_fits(Path(args.prompt_file).stat().st_size, args.prompt_file, "--prompt-file")
            prompt = read_regular_file(
                args.prompt_file,
                MAX_PROMPT_BYTES,
                where=f"--prompt-file {args.prompt_file}",
                hint="give a text file",
            ).decode("utf-8")
            # as an editor shows it: no byte-order mark, Windows line ends as \n, one trailing newline dropped
            prompt = prompt.removeprefix("\ufeff").replace("\r\n", "\n").removesuffix("\n")
        except OSError as e:
            raise CLIError(f"cannot read the prompt file {args.prompt_file}: {e.strerror}") from None
        except UnicodeDecodeError as e:
            raise CLIError(f"the prompt file {args.prompt_file} is not UTF-8 (byte {e.start})") from None
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")
    settings = dict(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p)
    if args.hf is not None:
        from scratchformer.interop.hf_lm import hf_samples, load_hf_causal_lm

        if args.dir is not None:
            raise CLIError(f"give either a run directory ({args.dir}) or --hf {args.hf}, not both")
        notes: list[str] = []
        model, tokenizer = load_hf_causal_lm(args.hf, notes=notes)
        for note in notes:  # converted weights, dropped padding rows: on stderr, apart from the samples
            print(note, file=sys.stderr)
        texts = hf_samples(
            model,
            tokenizer,
            prompt,
            args.num_samples,
            args.max_new_tokens or 50,
            rng=np.random.default_rng(seed),
            **settings,
        )
        seen = None
    else:
        job = load_job(args.dir or "out/names")
        texts = job.samples(
            args.num_samples,
            np.random.default_rng(seed),
            prompt=prompt,
            max_new_tokens=args.max_new_tokens,
            **settings,
        )
        seen = job.in_training_data(texts)  # makemore's check: did the model just recall a training item?
    if args.seed is None:
        print(f"seed {seed} (--seed {seed} draws these samples again)", file=sys.stderr)
    multiline = args.hf is not None or job.data_spec.get("format") == "text"
    for i, text in enumerate(texts):
        if multiline:  # samples of continuous text hold newlines: a header line starts each one
            print(SAMPLE_HEADER.format(i=i + 1, n=len(texts)))
        else:  # one sample per line: a line break the model made (a byte-level BPE can) is shown as \n
            text = text.replace("\r", "\\r").replace("\n", "\\n")
        print(text + (SEEN_MARK if seen and seen[i] else ""))
    return 0


def cmd_eval(args) -> int:
    from scratchformer.training.evaluation import run_evaluation
    from scratchformer.training.jobs import load_job
    from scratchformer.training.parallel import DataParallel, check_workers
    from scratchformer.training.schema import strict_json

    job = load_job(args.dir, data=args.data, allow_changed_data=args.allow_changed_data)
    split = args.split or job.default_split
    _check_beam(job, args.beam, getattr(job, "eval_batch_size", 1))
    check_workers(args.workers)
    runner = DataParallel(job.model, args.workers)  # with workers=1, the model alone
    try:
        metrics = run_evaluation(job.evaluation(split, **_given(args, ["beam"])), job.model, runner)
    finally:
        runner.close()  # stop the worker processes
    result = {"split": split, **{k: float(v) for k, v in metrics.items()}}
    if args.json:  # valid JSON even when a number is not finite (null, listed under "non_finite")
        print(strict_json(result))
    non_finite = [k for k, v in result.items() if isinstance(v, float) and not math.isfinite(v)]
    if non_finite:
        raise CheckpointError(
            f"the {split} {non_finite[0]} of {args.dir} is {result[non_finite[0]]}: its weights "
            "have diverged; evaluate an earlier checkpoint or train again with a lower --lr"
        )
    if not args.json:
        print("  ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in result.items()))
    return 0


def cmd_predict(args) -> int:
    from scratchformer.training.jobs import load_job

    job = load_job(args.dir)
    _check_beam(job, args.beam, 1)
    print(job.predict(args.input, **_given(args, ["beam"])))
    return 0


def _check_beam(job, beam: int | None, batch: int) -> None:
    """Refuse a --beam whose search would not fit in memory, before decoding anything."""
    if beam is not None and job.model.decodes:  # other models refuse --beam themselves
        from scratchformer.inference.beam import check_beam_width

        max_len = job.model.decoding_sizes()["max_len"]
        check_beam_width(beam, job.model, batch, max_len, max_len, name="--beam")


def cmd_embed(args) -> int:
    from scratchformer.interop import SentenceEncoder

    if args.out is not None:  # checked before the model is loaded: a bad path fails at once
        if args.out == "" or Path(args.out).is_dir():
            raise CLIError(
                f"--out {args.out!r} is {'empty' if args.out == '' else 'a directory'}: give a file "
                "name such as embeddings.npy (written exactly as given)"
            )
    enc = SentenceEncoder(args.model)
    emb = enc.encode(list(args.texts))
    if args.out is not None:
        import io

        from scratchformer.runfiles import write_atomic

        npy = io.BytesIO()
        np.save(npy, emb, allow_pickle=False)  # to a file object: no ".npy" appended to the name
        path = write_atomic(args.out, npy.getvalue())
        print(f"saved {emb.shape[0]} embeddings of dimension {emb.shape[1]} to {path}")
    else:
        np.set_printoptions(precision=4, suppress=True, linewidth=120)
        for text, vec in zip(args.texts, emb):
            print(f"{text!r}: {vec[:8]} ... (dim {vec.shape[0]})")
    return 0


def cmd_export(args) -> int:
    import shutil

    from scratchformer.interop.hf_lm import hf_layout, save_hf_causal_lm
    from scratchformer.runfiles import naming, new_temp_dir
    from scratchformer.training.jobs import load_job

    job = load_job(args.dir)
    tokenizer = getattr(job, "tokenizer", None)
    if job.kind != "gpt" or tokenizer is None:
        raise CLIError(
            f"{args.dir} holds a {job.kind} run: export writes language models (GPT-2 or Llama) only"
        )
    out = Path(args.hf)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise CLIError(f"{out} is not empty: export into a new directory")
    layout = hf_layout(job.model)  # a model no layout holds: one line naming why, nothing written
    # written into a temporary directory beside it, then renamed: a failure (a full disk) leaves
    # no half-written directory, only the one line naming the file
    out.absolute().parent.mkdir(parents=True, exist_ok=True)
    tmp = new_temp_dir(out.absolute())
    notes: list[str] = []  # how the layout's dropout differs from the run's
    try:
        save_hf_causal_lm(job.model, tokenizer, tmp, notes=notes)
        os.replace(tmp, out)  # onto a missing or empty directory
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise naming(e, out / Path(e.filename).name if e.filename else out) from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    for note in notes:
        print(note, file=sys.stderr)
    print(f"wrote {out} ({layout.hf_class}.from_pretrained and AutoTokenizer read it)")
    return 0


COMMANDS = {
    "train": cmd_train,
    "finetune": cmd_finetune,
    "sample": cmd_sample,
    "eval": cmd_eval,
    "predict": cmd_predict,
    "embed": cmd_embed,
    "viz": cmd_viz,
    "exercise": cmd_exercise,
    "lens": cmd_lens,
    "sae": cmd_sae,
    "export": cmd_export,
}


def _utf8_arguments(argv: list[str]) -> None:
    """Every argument must be UTF-8 text: a byte that is not (a latin-1 file name, a stray \\xff)
    reaches Python as a lone surrogate, which no file, message or tokenizer can hold. One line
    (DataError) naming the option, or the argument's place, instead of a failure further on."""
    for i, arg in enumerate(argv):
        if not isinstance(arg, str):
            continue
        name, value = f"argument {i + 1}", arg
        if arg.startswith("--") and "=" in arg:
            name, value = arg.split("=", 1)
        elif i and argv[i - 1].startswith("-") and not arg.startswith("-"):
            name = argv[i - 1]
        check_text(name, value)


def _tolerant_output() -> None:
    """Characters the terminal's encoding cannot show (an "é" on an ASCII or latin-1 stdout)
    are written as backslash escapes (\\xe9) instead of failing the command."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(errors="backslashreplace")
        except (
            AttributeError,
            ValueError,
            OSError,
        ):  # not a text file of ours (a test's capture, a closed file)
            pass


def _pipe_closed() -> int:
    """The reader of stdout went away (`scratchformer sample | head -1`): end quietly, with the
    exit code of a process a SIGPIPE ends (128 + 13), and keep Python's exit-time flush from
    reporting the pipe again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass
    return 141


def main(argv: list[str] | None = None) -> int:
    _tolerant_output()
    command = "scratchformer"
    try:  # the parser too: a failure while building it (a missing module on some platform) is one line
        argv = sys.argv[1:] if argv is None else list(argv)
        _utf8_arguments(argv)
        parser = build_parser()
        args = parser.parse_args(argv)
        if args.command is None:  # a bare `scratchformer`: what it can do
            parser.print_help()
            return 0
        command = f"scratchformer {args.command}"
        keep_freed_memory()  # the allocator tuning every command runs with (scratchformer/allocator.py)
        # NaN and overflow are handled where they matter (the trainer stops on them): no numpy warnings
        with np.errstate(all="ignore"):
            return COMMANDS[args.command](args)
    except BrokenPipeError:
        return _pipe_closed()
    except (ScratchformerError, OSError, FloatingPointError) as e:
        if isinstance(e, OSError) and e.filename is not None:  # name the path, without errno noise
            e = f"{e.filename}: {e.strerror}"
        print(f"{command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:  # TrainingInterrupted says where its checkpoint went, and its exit code
        print(f"{command}: {e}" if str(e) else "interrupted", file=sys.stderr)
        return getattr(e, "exit_code", 130)
    except Exception as e:  # noqa: BLE001 -- building the parser failed (an import this platform lacks)
        if command != "scratchformer":
            raise  # a command's own failure is a bug to report with its traceback
        print(f"scratchformer: error: cannot start ({type(e).__name__}: {e})", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
