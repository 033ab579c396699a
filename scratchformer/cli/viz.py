"""`scratchformer viz`: the figures and report.html of a trained run, or of a BERT directory.

    scratchformer viz RUN_DIR [--text TEXT] [--out FIGDIR] [--all] [--backward]
    scratchformer viz --bert [PATH] --text "A sentence." [--out FIGDIR] [--all]

The run is read once with `load_job`; the input is checked here, at the door (characters in
the vocabulary, length within the model's context, digits the task knows), and then handed to
`scratchformer.viz.report`, which writes the PNGs and report.html. `cmd_train` calls
`write_training_curves` when a training ends.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from scratchformer.errors import CLIError, DataError

# The figures drawn by default: the ones that say most about a trained model, kept lean so that
# `viz` on the default names model takes a few seconds. --all draws every figure that applies.
DEFAULT_FIGURES = (
    "grokking",
    "attention_grid",
    "attention_seq2seq",
    "classifier_attention",
    "attention_steps",
    "embedding_pca",
    "residual_norms",
    "training_curves",
    "sae_measures",
)


def add_options(v) -> None:
    """The `viz` command's options, added to its parser (cli/main.py makes it)."""
    from scratchformer.training.lm import EXAMPLE_NAME
    from scratchformer.training.tasks import ClassifierJob, Seq2SeqJob

    v.add_argument(
        "dir", nargs="?", metavar="RUN_DIR", help="run or checkpoint directory (default: out/names)"
    )
    v.add_argument(
        "--text",
        help=f"the input: a prompt or name for a GPT (default for a names run: "
        f"{EXAMPLE_NAME!r}); digits for a task model as 'predict' takes them "
        f"(default: {Seq2SeqJob.example_input!r}, majority: "
        f"{ClassifierJob.example_input!r}); a sentence for --bert (required)",
    )
    v.add_argument(
        "--out", metavar="FIGDIR", help="where to write (default: RUN_DIR/viz; out/viz-bert with --bert)"
    )
    v.add_argument(
        "--bert",
        nargs="?",
        const=True,
        metavar="PATH",
        help="a BERT directory (config.json, model.safetensors, vocab.txt) instead of a run; "
        "no PATH: the installed all-MiniLM-L6-v2",
    )
    v.add_argument(
        "--compare-init",
        action="store_true",
        help="also draw the attention grid, positions, embedding PCA and residual stream of the run's "
        "initial weights as NAME_init.png: its untrained model (its config and seed), or the "
        "pretrained directory an --init-from run started from (default: off)",
    )
    v.add_argument(
        "--backward",
        action="store_true",
        help="the backward walk-through alone (with --all: as well): every step of the backward on the "
        "input and its loss, op by op, each checked by finite differences; printed, drawn as "
        "backward.png and shown in report.html's Backward part",
    )
    v.add_argument(
        "--all",
        action="store_true",
        help="draw every figure that applies (default: those among "
        + ", ".join(DEFAULT_FIGURES)
        + " that apply to the model)",
    )


def cmd_viz(args) -> int:
    only = None if args.all else ("backward",) if args.backward else DEFAULT_FIGURES
    if args.out == "":
        raise CLIError(
            "--out is empty: give a directory, or omit --out (default: RUN_DIR/viz; out/viz-bert with --bert)"
        )
    if args.bert == "":
        raise CLIError(
            "--bert is empty: give a BERT directory, or --bert alone for the installed all-MiniLM-L6-v2"
        )
    if args.bert is not None:
        if args.dir is not None:
            raise CLIError(f"give a run directory ({args.dir}) or --bert, not both")
        if args.text is None:
            raise CLIError('--bert needs --text, e.g. --text "A sentence."')
        if args.compare_init:
            raise CLIError(
                "--compare-init needs a run directory (a pretrained BERT has no untrained weights to show)"
            )
        from scratchformer.viz import report_bert

        def draw(out):
            return report_bert(
                out,
                args.text,
                None if args.bert is True else args.bert,
                only=only,
                on_note=lambda note: print(f"note: --text is {note}", file=sys.stderr),
            )

        paths = _into(args.out or "out/viz-bert", draw)
    else:
        paths = _report_run(Path(args.dir or "out/names"), args.text, args.out, only, args.compare_init)
    steps = next((p for p in paths if p.name == "backward.txt"), None)
    if args.backward and steps is not None:
        print(steps.read_text(encoding="utf-8"), end="")
    elif args.backward:  # a one-token input has no loss; a model too big for the float64 copy
        print(
            "note: no backward walk-through for this input and model (a loss needs at least two tokens; "
            "models of up to 5,000,000 parameters)",
            file=sys.stderr,
        )
    for p in paths:
        print(p)
    return 0


def _into(out, draw) -> list[Path]:
    """draw(out) into --out, created if needed; the directories this call created are removed
    again when drawing fails before writing anything into them."""
    out = Path(out)
    created = [d for d in (out, *out.parents) if not d.exists()]  # deepest first
    out = _writable(out)
    try:
        return draw(out)
    except BaseException:
        for d in created:
            try:
                d.rmdir()  # only when empty: never removes a figure
            except OSError:
                break
        raise


def _report_run(run: Path, text: str | None, out: str | None, only, compare_init: bool = False) -> list[Path]:
    from scratchformer.training.jobs import load_job
    from scratchformer.viz import report

    job = load_job(run)
    root = run.parent if (run / "model.safetensors").exists() else run  # a checkpoint's run directory
    log = root / "log.jsonl"
    inputs = job.viz_inputs(text)  # each kind checks and labels its own input
    model = inputs.pop("model", job.model)  # a sentence classifier shows its encoder
    if compare_init and model is not job.model:
        raise CLIError(
            "--compare-init needs a model trained from scratch; a fine-tuned classifier starts from "
            "pretrained weights"
        )
    init_model, init_source = _initial_model(run, job) if compare_init else (None, None)
    return _into(
        out or root / "viz",
        lambda out_dir: report(
            model,
            out_dir,
            log=log if log.is_file() else None,
            only=only,
            init_model=init_model,
            init_source=init_source,
            **inputs,
        ),
    )


def _initial_model(run: Path, job):
    """(the run's model before training, what it is): for a run trained from scratch its config
    built with the run's seed, as training did (what: None); for a run that started from a
    pretrained directory (`train --init-from`), that directory's model, if it still holds the
    run's configuration; CLIError in one line when the initial weights are not there."""
    from scratchformer.data import DEFAULT_SEED
    from scratchformer.training.checkpoint import load_checkpoint
    from scratchformer.training.jobs import checkpoint_dir

    init_from = (job.config_dict().get("data") or {}).get("init_from")
    if init_from is not None:
        return _pretrained_start(Path(init_from), job.model), f"pretrained, {init_from}"
    saved = load_checkpoint(checkpoint_dir(run)).extra.get("train_config") or {}
    config = job.model.config
    return type(job.model)(
        type(config).from_dict(config.to_dict()), seed=saved.get("seed", DEFAULT_SEED)
    ), None


def _pretrained_start(path: Path, trained):
    """The pretrained model a --init-from run started from, read again from its directory."""
    from scratchformer.interop.hf_lm import load_hf_causal_lm

    none = f"--compare-init: this run started from the pretrained weights in {path}"
    if not path.is_dir():
        raise CLIError(
            f"{none}, which is not there any more: there are no initial weights to draw (restore the "
            "directory, or leave out --compare-init)"
        )
    model, _ = load_hf_causal_lm(path)

    def shapes(m):
        return {n: v.shape for n, v in m.state_dict().items()}

    if model.config.to_dict() != trained.config.to_dict() or shapes(model) != shapes(trained):
        raise CLIError(
            f"{none}, which now holds a different model: there are no initial weights to draw (restore "
            "the directory, or leave out --compare-init)"
        )
    return model


def _writable(out) -> Path:
    """--out, created if needed; one clear error when it cannot be written."""
    out = Path(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise DataError(f"cannot create --out {out}: {e.strerror or e}; choose another directory") from None
    if not os.access(out, os.W_OK):
        raise DataError(f"cannot write into --out {out} (permission denied): choose another directory")
    return out


def write_training_curves(run_dir) -> Path | None:
    """RUN_DIR/training_curves.png from RUN_DIR/log.jsonl, at the end of `train`. A finished
    training never fails on a figure: a problem (matplotlib missing, a full disk) is one
    warning line on stderr."""
    path = Path(run_dir) / "training_curves.png"
    try:
        from scratchformer.viz import training_curves

        training_curves(run_dir, path=path)
    except Exception as e:  # noqa: BLE001 -- reported, never hidden
        print(f"warning: training curves not drawn ({type(e).__name__}: {e})", file=sys.stderr)
        return None
    print(f"training curves: {path}")
    return path
