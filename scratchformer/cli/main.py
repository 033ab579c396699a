"""The `scratchformer` command: train, sample, eval, predict, embed.

Every error a user can cause (bad options, bad data, a broken checkpoint) ends as one line
on stderr and exit code 2; no tracebacks.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from scratchformer.errors import ScratchformerError

# Defaults per data kind. Lines (the bundled names): makemore's transformer size (4 layers, 4
# heads, 64 channels) with its PyTorch-default init and untied head, dropout 0.1 against the
# overfitting a 200K-parameter model shows on 29K names, and enough steps to pass makemore's
# published 1.92 test loss in under 10 minutes on 2 cores (docs/results.md). Text: nanoGPT's
# CPU configuration for tinyshakespeare (its GPT-2 init, tied head and no biases included).
LM_DEFAULTS = {
    "lines": dict(model=dict(n_layer=4, n_head=4, n_embd=64, dropout=0.1, tie_weights=False, init="pytorch"),
                  train=dict(max_steps=16000, batch_size=64, lr=2e-3, min_lr=1e-4, warmup_steps=200,
                             weight_decay=0.1, beta2=0.99, grad_clip=1.0, eval_interval=1000)),
    "text": dict(model=dict(n_layer=4, n_head=4, n_embd=128, dropout=0.0, bias=False),
                 block_size=64,
                 train=dict(max_steps=2000, batch_size=12, lr=1e-3, min_lr=1e-4, warmup_steps=100,
                            weight_decay=0.1, beta2=0.99, grad_clip=1.0, eval_interval=250)),
}

MODEL_OPTIONS = ["n_layer", "n_head", "n_embd", "dropout", "activation", "positional", "norm_first",
                 "tie_weights", "bias", "init"]
TRAIN_OPTIONS = ["max_steps", "batch_size", "grad_accum", "lr", "min_lr", "warmup_steps", "decay_steps",
                 "weight_decay", "decay_embeddings", "beta1", "beta2", "grad_clip", "eval_interval", "eval_batches",
                 "log_interval", "num_samples", "seed", "time_limit"]


class CLIError(ScratchformerError, ValueError):
    """A bad combination of command-line options."""


def _positive_int(s: str) -> int:
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {s!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {s}")
    return v


def _nonneg_float(s: str) -> float:
    try:
        v = float(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {s!r}") from None
    if not v >= 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {s}")
    return v


def _probability(s: str) -> float:
    v = _nonneg_float(s)
    if not 0 < v <= 1:
        raise argparse.ArgumentTypeError(f"expected a probability in (0, 1], got {s}")
    return v


# -- parser ----------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="scratchformer",
        description="Transformers from scratch on NumPy: train, sample, evaluate.",
        epilog="Run 'scratchformer COMMAND --help' for each command's options.",
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    t = sub.add_parser(
        "train", help="train a model (default: a character-level GPT on the bundled baby names)",
        description="Train a model. With no options: a 4-layer character-level GPT on the bundled "
                    "names.txt, written to out/names/. Model and optimiser options override the "
                    "defaults for the data kind (lines: makemore-like; text: nanoGPT's CPU config).",
    )
    data = t.add_argument_group("data")
    data.add_argument("--data", metavar="PATH", help="a UTF-8 text file (default: the bundled names.txt)")
    data.add_argument("--format", choices=["lines", "text"],
                      help="lines: one item per line (like names); text: continuous text. Guessed when omitted")
    data.add_argument("--task", choices=["lm", "majority", "copy", "reverse", "sort"], default="lm",
                      help="lm (default): language model on --data; the others are toy tasks for an "
                           "encoder classifier (majority) or an encoder-decoder (copy, reverse, sort)")
    t.add_argument("--out", metavar="DIR", help="output directory (default: out/<data name or task>)")
    t.add_argument("--resume", action="store_true", help="continue the run in --out from its last checkpoint")
    t.add_argument("--no-progress", action="store_true", help="no progress bar")
    t.add_argument("--quiet", action="store_true", help="no evaluation lines or samples")
    m = t.add_argument_group("model")
    m.add_argument("--n-layer", type=_positive_int, help="number of Transformer blocks")
    m.add_argument("--n-head", type=_positive_int, help="attention heads per block (must divide --n-embd)")
    m.add_argument("--n-embd", type=_positive_int, help="model width d_model")
    m.add_argument("--block-size", type=_positive_int,
                   help="context length (default: longest line + 1, or 64 for text)")
    m.add_argument("--dropout", type=_nonneg_float, help="dropout probability in [0, 1)")
    m.add_argument("--activation", choices=["gelu", "gelu_tanh", "relu"], help="feed-forward activation (default gelu)")
    m.add_argument("--positional", choices=["learned", "sinusoidal"], help="position encoding (default learned)")
    m.add_argument("--norm", choices=["pre", "post"], help="pre-norm (GPT-2, default) or post-norm (Vaswani)")
    m.add_argument("--tie-weights", action=argparse.BooleanOptionalAction, default=None,
                   help="reuse the token embedding as the LM head (default: tied for text, untied for lines)")
    m.add_argument("--bias", action=argparse.BooleanOptionalAction, default=None,
                   help="biases in Linear and LayerNorm layers (default: on for lines, off for text as nanoGPT)")
    m.add_argument("--init", choices=["gpt2", "pytorch"],
                   help="gpt2: N(0, 0.02) weights; pytorch: each layer's PyTorch default (as makemore)")
    o = t.add_argument_group("optimisation")
    o.add_argument("--max-steps", type=_positive_int, help="optimiser steps")
    o.add_argument("--time-limit", type=_nonneg_float, metavar="SECONDS", help="stop cleanly after this long")
    o.add_argument("--batch-size", type=_positive_int, help="sequences per micro-batch")
    o.add_argument("--grad-accum", type=_positive_int, help="micro-batches per step")
    o.add_argument("--lr", type=_nonneg_float, help="peak learning rate")
    o.add_argument("--min-lr", type=_nonneg_float, help="learning rate at the end of the cosine")
    o.add_argument("--warmup-steps", type=int, help="linear warmup before the cosine decay")
    o.add_argument("--decay-steps", type=_positive_int, help="length of the cosine (default: max steps)")
    o.add_argument("--weight-decay", type=_nonneg_float, help="AdamW decoupled decay (matrices only)")
    o.add_argument("--decay-embeddings", action=argparse.BooleanOptionalAction, default=None,
                   help="weight-decay the embedding tables too, as nanoGPT does (default: off)")
    o.add_argument("--beta1", type=_nonneg_float, help="AdamW beta1")
    o.add_argument("--beta2", type=_nonneg_float, help="AdamW beta2")
    o.add_argument("--grad-clip", type=_nonneg_float, help="global gradient-norm clip (0: off)")
    o.add_argument("--eval-interval", type=_positive_int, help="steps between evaluations and checkpoints")
    o.add_argument("--eval-batches", type=_positive_int, help="evaluate on this many batches (default: all)")
    o.add_argument("--log-interval", type=_positive_int, help="steps between log.jsonl rows")
    o.add_argument("--num-samples", type=int, help="samples printed at each evaluation")
    o.add_argument("--seed", type=int, help="seed for the initial weights, the batches and dropout (default 1337)")
    data.add_argument("--split-seed", type=int, default=1337,
                      help="seed of the train/val/test split of a lines file (default 1337)")

    s = sub.add_parser("sample", help="generate text from a trained language model",
                       description="Sample from a trained language model (DIR: a run directory or a checkpoint).")
    s.add_argument("dir", nargs="?", default="out/names", metavar="DIR", help="default: out/names")
    s.add_argument("-n", "--num-samples", type=_positive_int, default=10)
    s.add_argument("--prompt", default="", help="text every sample starts with")
    s.add_argument("--max-new-tokens", type=_positive_int, help="default: up to the end of a name, or 500 characters")
    s.add_argument("--temperature", type=_nonneg_float, default=1.0, help="0 means greedy")
    s.add_argument("--top-k", type=_positive_int, help="sample among the k most likely tokens")
    s.add_argument("--top-p", type=_probability, help="nucleus sampling: smallest set with probability >= p")
    s.add_argument("--seed", type=int, default=0)

    e = sub.add_parser("eval", help="loss/perplexity (LM) or accuracy (tasks) on a split",
                       description="Evaluate a trained model on a held-out split.")
    e.add_argument("dir", nargs="?", default="out/names", metavar="DIR", help="default: out/names")
    e.add_argument("--split", choices=["val", "test"], default="test")
    e.add_argument("--json", action="store_true", help="print the result as a JSON object on the last line")
    e.add_argument("--beam", type=_positive_int, default=1, help="seq2seq: decode with beam search of this width")

    pr = sub.add_parser("predict", help="run a classifier or seq2seq checkpoint on one input",
                        description='Map one input such as "3 1 4 1 5" through a toy-task model.')
    pr.add_argument("dir", metavar="DIR")
    pr.add_argument("input", metavar="INPUT", help='space-separated digits, e.g. "3 1 4 1 5"')
    pr.add_argument("--beam", type=_positive_int, default=1, help="beam width for seq2seq (1: greedy)")

    em = sub.add_parser("embed", help="sentence embeddings with a pretrained BERT-family encoder",
                        description="Embed texts with a Hugging Face BERT-family sentence encoder "
                                    "(default: the installed all-MiniLM-L6-v2 package).")
    em.add_argument("texts", nargs="+", metavar="TEXT")
    em.add_argument("--model", metavar="DIR", help="model directory (config.json, model.safetensors, vocab.txt)")
    em.add_argument("--out", metavar="FILE.npy", help="save the (n, d) float32 array here")
    return p


# -- commands --------------------------------------------------------------------------------
def _run_dir(path: str) -> Path:
    """A run directory holds best/ and last/; a checkpoint directory holds model.safetensors."""
    d = Path(path)
    if (d / "model.safetensors").exists():
        return d
    for name in ("best", "last"):
        if (d / name / "model.safetensors").exists():
            return d / name
    raise CLIError(f"no checkpoint in {d}: train one first ('scratchformer train --out {d}') or pass a run directory")


def cmd_train(args) -> int:
    from scratchformer.training.trainer import LAST, TrainConfig, train

    if args.task != "lm":
        from scratchformer.training.tasks import task_job

        default_out = f"out/{args.task}"
    else:
        default_out = "out/names" if args.data is None else f"out/{Path(args.data).stem}"
    out = Path(args.out or default_out)
    explicit_train = {k: getattr(args, k) for k in TRAIN_OPTIONS if getattr(args, k) is not None}
    explicit_model = {k: getattr(args, k) for k in MODEL_OPTIONS if k != "norm_first" and getattr(args, k) is not None}
    if args.norm is not None:
        explicit_model["norm_first"] = args.norm == "pre"

    if args.resume:
        if explicit_model or args.block_size or args.data or args.format:
            raise CLIError("--resume continues the saved run: model and data options cannot change "
                           "(training options such as --max-steps can)")
        job = _load_job(out / LAST)
        saved = dict(job.checkpoint.extra.get("train_config", {}))
        cfg = TrainConfig.from_dict({**saved, **explicit_train})
    elif args.task != "lm":
        job, defaults = task_job(args.task, explicit_model, explicit_train.get("seed", 1337))
        cfg = TrainConfig.from_dict({**defaults, **explicit_train})
    else:
        from scratchformer.training.lm import LMJob

        fmt = args.format or _guess_file_format(args.data)
        defaults = LM_DEFAULTS[fmt]
        seed = explicit_train.get("seed", 1337)
        block = args.block_size or defaults.get("block_size")
        job = LMJob.create(args.data, fmt, seed, {**defaults["model"], **explicit_model}, block_size=block,
                           split_seed=args.split_seed)
        cfg = TrainConfig.from_dict({**defaults["train"], **explicit_train})
    model = job.model
    print(f"training {type(model).__name__} ({model.num_parameters():,} parameters) for {cfg.max_steps} steps"
          f"{f' (time limit {cfg.time_limit:g}s)' if cfg.time_limit else ''} -> {out}")
    summary = train(job, cfg, out, resume=args.resume, progress=not args.no_progress, verbose=not args.quiet)
    print(f"done: step {summary['step']}, val loss {summary['val_loss']:.4f} "
          f"(best {summary['best_val_loss']:.4f}), {summary['seconds']:.0f}s, stopped by {summary['stopped_by']}; "
          f"checkpoints in {out}/best and {out}/last")
    return 0


def _guess_file_format(path: str | None) -> str:
    if path is None:
        return "lines"
    from scratchformer.data.datasets import _read_text, guess_format

    text, _ = _read_text(Path(path))
    return guess_format(text)


def _load_job(directory: Path, load_data: bool = True):
    from scratchformer.training.checkpoint import load_checkpoint

    kind = load_checkpoint(directory).config.get("kind")
    if kind == "gpt":
        from scratchformer.training.lm import LMJob

        return LMJob.from_checkpoint(directory, load_data=load_data)
    from scratchformer.training.tasks import task_job_from_checkpoint

    return task_job_from_checkpoint(directory)


def cmd_sample(args) -> int:
    job = _load_job(_run_dir(args.dir), load_data=False)
    if job.checkpoint.config.get("kind") != "gpt":
        raise CLIError(f"{args.dir} is not a language model: use 'scratchformer predict' for task models")
    if args.top_k is not None and args.top_k > job.model.config.vocab_size:
        raise CLIError(f"--top-k {args.top_k} is larger than the vocabulary ({job.model.config.vocab_size})")
    texts = job.samples(args.num_samples, np.random.default_rng(args.seed), prompt=args.prompt,
                        max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                        top_k=args.top_k, top_p=args.top_p)
    for text in texts:
        print(text)
    return 0


def cmd_eval(args) -> int:
    job = _load_job(_run_dir(args.dir))
    metrics = job.evaluate(args.split, beam=args.beam) if args.beam > 1 else job.evaluate(args.split)
    result = {"split": args.split, **{k: float(v) for k, v in metrics.items()}}
    if args.json:
        print(json.dumps(result))
    else:
        print("  ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in result.items()))
    return 0


def cmd_predict(args) -> int:
    from scratchformer.training.tasks import predict

    job = _load_job(_run_dir(args.dir))
    print(predict(job, args.input, beam=args.beam))
    return 0


def cmd_embed(args) -> int:
    from scratchformer.interop import SentenceEncoder

    enc = SentenceEncoder(args.model)
    emb = enc.encode(list(args.texts))
    if args.out:
        np.save(args.out, emb, allow_pickle=False)
        print(f"saved {emb.shape[0]} embeddings of dimension {emb.shape[1]} to {args.out}")
    else:
        np.set_printoptions(precision=4, suppress=True, linewidth=120)
        for text, vec in zip(args.texts, emb):
            print(f"{text!r}: {vec[:8]} ... (dim {vec.shape[0]})")
    return 0


COMMANDS = {"train": cmd_train, "sample": cmd_sample, "eval": cmd_eval, "predict": cmd_predict, "embed": cmd_embed}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except (ScratchformerError, OSError, FloatingPointError) as e:
        print(f"scratchformer {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
