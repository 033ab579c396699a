"""`scratchformer lens`: experiments inside a trained run (or the installed MiniLM) on one input.

    scratchformer lens RUN_DIR --text TEXT [--target TOKEN] [--corrupt TEXT] [--json]
    scratchformer lens --hf HF_DIR --text TEXT [...]       (a Hugging Face GPT-2 or Llama directory)
    scratchformer lens --bert [PATH] --text TEXT --text2 TEXT [--json]

Prints the logit-lens table, the heads whose ablation changes the loss most, the saliency of
the target per input token, the patching result when --corrupt is given, and every analysis's
check line. The input is checked at the door by the run's job (`Job.viz_inputs`).
"""

from __future__ import annotations

import json

import numpy as np

from scratchformer.checks import ascii_int
from scratchformer.cli.sae import add_lens_option as add_sae_lens_option
from scratchformer.errors import CLIError, DataError
from scratchformer.lens.analyses import MAX_STEPS

TOP_HEADS = 5  # heads listed by ablation


def add_options(p) -> None:
    """The `lens` command's options, added to its parser (cli/main.py makes it)."""
    p.add_argument(
        "dir", nargs="?", metavar="RUN_DIR", help="run or checkpoint directory (default: out/names)"
    )
    p.add_argument(
        "--text",
        help="the input, as `viz` takes it (a name or prompt for a GPT, digits for a "
        "task model, a sentence for --bert) (default: the run's example input)",
    )
    p.add_argument(
        "--target",
        help="the token whose logit is explained: a character for a GPT, a digit for "
        "seq2seq, a class for a classifier (default: the model's prediction)",
    )
    p.add_argument(
        "--corrupt",
        help="a second input of the same length: activation patching from --text into it "
        "(default: no patching)",
    )
    p.add_argument(
        "--bert",
        nargs="?",
        const="",
        metavar="PATH",
        help="a BERT directory instead of a run; no PATH: the installed all-MiniLM-L6-v2",
    )
    p.add_argument(
        "--hf",
        metavar="HF_DIR",
        help="a Hugging Face GPT-2 or Llama directory (config.json, model.safetensors, tokenizer.json "
        "or vocab.json + merges.txt) instead of a run (default: none)",
    )
    p.add_argument("--text2", help="with --bert: the second sentence (required)")
    p.add_argument(
        "--show",
        action="append",
        metavar="NAME",
        help="also print the activation NAME (docs/lens.md; '*' allowed, repeatable) on --text "
        "(default: none)",
    )
    p.add_argument(
        "--steps",
        type=ascii_int,
        default=32,
        help=f"integrated-gradients quadrature nodes, 1 to {MAX_STEPS} (default: 32)",
    )
    p.add_argument(
        "--baseline",
        choices=("zero", "mean"),
        help="integrated gradients start from zero embeddings or, at every position, the mean "
        "embedding of the vocabulary's tokens (default: zero where the model adds a position "
        "table to its token embeddings; mean where positions live inside attention (rotary, "
        "ALiBi): there every position of a zero baseline is the same zero vector, a point where "
        "the first norm divides by almost nothing)",
    )
    p.add_argument(
        "--baseline-text",
        metavar="TEXT",
        help="integrated gradients start from the embeddings of TEXT, of --text's length in tokens "
        "(default: --baseline)",
    )
    p.add_argument(
        "--json", action="store_true", help="print one JSON object instead of tables (default: tables)"
    )
    add_sae_lens_option(p)


def cmd_lens(args) -> int:
    if not 1 <= args.steps <= MAX_STEPS:
        raise CLIError(f"--steps must be in [1, {MAX_STEPS}], got {args.steps}")
    if args.baseline_text is not None and args.baseline is not None:
        raise CLIError("give --baseline or --baseline-text, not both")
    if args.bert is not None:
        if args.sae is not None:
            raise CLIError("--sae applies to a run, not to --bert")
        if args.dir is not None or args.hf is not None:
            raise CLIError("give a run directory, --hf or --bert, not two of them")
        if not args.text or not args.text2:
            raise CLIError('--bert needs --text and --text2, e.g. --text "A cat sits." --text2 "A dog sits."')
        if args.show or args.target or args.corrupt or args.baseline_text or args.baseline is not None:
            raise CLIError(
                "--show, --target, --corrupt, --baseline and --baseline-text apply to a run, not to --bert"
            )
        report = _bert_report(args)
    else:
        if args.text2 is not None:
            raise CLIError("--text2 applies to --bert only")
        sae_job = None
        if args.sae is not None:  # the autoencoder's run names the run it reads
            from scratchformer.cli.sae import sae_for_lens

            if args.hf is not None:
                raise CLIError("--sae applies to a run, not to --hf")
            sae_job, args.dir = sae_for_lens(args.sae, args.dir)
        report = _run_report(_job(args), args, sae_job)
    print(json.dumps(_finite(report), indent=1, allow_nan=False) if args.json else _text(report))
    return 0


def _job(args):
    """The run directory's job, or (--hf) a language-model job around a Hugging Face directory."""
    from pathlib import Path

    from scratchformer.training.jobs import load_job

    if args.hf is not None:
        from scratchformer.interop.hf_lm import load_hf_causal_lm
        from scratchformer.training.lm import LMJob

        if args.dir is not None:
            raise CLIError(f"give either a run directory ({args.dir}) or --hf {args.hf}, not both")
        model, tokenizer = load_hf_causal_lm(args.hf)
        return LMJob(model, None, {"path": None, "format": "text"}, tokenizer)
    run = Path(args.dir or "out/names")
    if (run / "config.json").is_file() and not (run / "trainer_state.json").exists() and _is_hf_dir(run):
        raise CLIError(
            f"{run} is a Hugging Face model directory, not a run: use 'scratchformer lens --hf {run}'"
        )
    return load_job(run)


def _is_hf_dir(path) -> bool:
    from scratchformer.errors import CheckpointError
    from scratchformer.runfiles import read_optional_json

    try:
        cfg = read_optional_json(path / "config.json", error=CheckpointError)
    except CheckpointError:
        return False
    return isinstance(cfg, dict) and "model_type" in cfg and "kind" not in cfg


def _finite(value):
    """The report with every NaN or infinity as null: JSON has no NaN, and a number that is not
    one is not a result."""
    if isinstance(value, float):
        return value if np.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


# -- the experiments ------------------------------------------------------------------------------
def _vocab_id(labels: list[str], target: str) -> int:
    if target not in labels:
        shown = " ".join(repr(x) for x in labels[:40]) + (" ..." if len(labels) > 40 else "")
        raise DataError(
            f"--target {target!r} is not in the model's vocabulary ({len(labels)} tokens: {shown})"
        )
    return labels.index(target)


def _run_report(job, args, sae_job=None) -> dict:
    """Every analysis of a run's model on --text (`lens.report.lens_report`: the logit lens and
    attribution of a language model, head ablation, saliency, head scores, the activations
    --show names and, with --corrupt, patching; with --sae, the target's logit split into the
    autoencoder's features), as a dict; each analysis's check line in "checks"."""
    from scratchformer.lens.report import BASELINE_TEXT, lens_report

    model = job.model.to(np.float64)  # the checks are exact in float64
    v = job.viz_inputs(args.text)
    ids, tokens, labels = np.asarray(v["ids"]), list(v["tokens"]), list(v["vocab_labels"])
    example = model.example(ids, tokens, labels)
    if args.target is not None:  # the example's loss may follow the target (a classifier's class)
        target = _vocab_id(example.output_labels or [], args.target)
        example = model.example(ids, tokens, labels, target=target)
    r = lens_report(
        model,
        example,
        k=1,
        steps=args.steps,
        baseline=_baseline(job, args, model, example),
        show=args.show,
        corrupt=_corrupt(job, args.corrupt, example),
    )
    label = example.output_labels.__getitem__
    report: dict = {"tokens": tokens, "checks": r.checks}
    if example.answer is not None:
        report["answer"] = example.answer
    report["target"] = label(r.target)
    if r.logit_lens is not None:
        report["logit_lens"] = {
            "layers": r.logit_lens.layers,
            "top1": [[label(i) for i in row] for row in r.logit_lens.top_ids[:, :, 0]],
            "prob": r.logit_lens.top_probs[:, :, 0].round(4).tolist(),
            "positions": example.positions,
        }
    if r.attribution is not None:
        dla = r.attribution
        order = np.argsort(-np.abs(dla.contributions))[:TOP_HEADS]
        report["attribution"] = [[dla.labels[i], round(float(dla.contributions[i]), 5)] for i in order]
    if sae_job is not None:  # its check line after the lens report's
        from scratchformer.cli.sae import add_lens_part

        add_lens_part(report, sae_job, model, example.explained, r.target, example.output_labels)
    if r.ablation is not None:
        report["ablation"] = {"baseline_loss": round(r.ablation.baseline, 6), "top": _top_heads(r.ablation)}
    report["saliency"] = {
        "of": f"logit of {report['target']!r} at the last position",
        "baseline": f"the embeddings of {args.baseline_text!r}"
        if r.baseline is None
        else BASELINE_TEXT[r.baseline],
        "grad_x_input": r.saliency.grad_x_input[0].round(6).tolist(),
        "integrated_gradients": r.integrated_gradients.attributions[0].round(6).tolist(),
    }
    if args.show:
        report["activations"] = {
            name: np.round(x[0] if x.ndim > 2 else x, 5).tolist() for name, x in r.activations.items()
        }
    if r.patching is not None:
        report["patching"] = _patching(r.patching, label(r.target), label(r.other))
    return report


def _top_heads(abl) -> list:
    """The TOP_HEADS heads whose ablation changes the measure most: [["L0 H1", change], ...]."""
    flat = [
        (abl.labels[r], h, float(abl.change[r, h]))
        for r in range(len(abl.labels))
        for h in range(abl.change.shape[1])
        if np.isfinite(abl.change[r, h])
    ]
    flat.sort(key=lambda x: -abs(x[2]))
    return [[f"{a} H{h}", round(c, 6)] for a, h, c in flat[:TOP_HEADS]]


def _corrupt(job, corrupt: str | None, example):
    """--corrupt's ids (1, T) (None without it); it must give as many tokens as --text."""
    if corrupt is None:
        return None
    cids = np.asarray(job.viz_inputs(corrupt)["ids"])[None]
    T = example.explained[0].shape[1]
    if cids.shape[1] != T:
        raise DataError(
            f"--corrupt gives {cids.shape[1]} tokens and --text {T}: patching needs inputs of the same length"
        )
    return cids


def _patching(patch, target: str, other: str) -> dict:
    """Activation patching from --text into --corrupt, on the logit difference between the
    target and the corrupted run's own answer (its runner-up when they agree)."""
    out = {
        "metric": f"logit {target!r} - logit {other!r}",
        "clean": round(patch.clean_diff, 6),
        "corrupt": round(patch.corrupt_diff, 6),
    }
    if not patch.defined:
        out["undefined"] = "clean and corrupted runs give the same metric: nothing to recover"
        return out
    out["residual"] = patch.residual.round(4).tolist()
    out["heads"] = {
        f"{lab} H{h}": round(float(patch.heads[r, h]), 4)
        for r, lab in enumerate(patch.head_labels)
        for h in range(patch.heads.shape[1])
        if np.isfinite(patch.heads[r, h])
    }
    if patch.encoder_residual is not None:
        out["encoder_residual"] = patch.encoder_residual.round(4).tolist()
    return out


def _baseline(job, args, model, example):
    """Integrated gradients' start: --baseline (None: the model's default), or the embeddings of
    --baseline-text."""
    from scratchformer import lens

    if args.baseline_text is None:
        return args.baseline
    bids = np.asarray(job.viz_inputs(args.baseline_text)["ids"])[None]
    T = example.explained[0].shape[1]
    if bids.shape[1] != T:
        raise DataError(
            f"--baseline-text gives {bids.shape[1]} tokens and --text {T}: the baseline needs the same number"
        )
    return lens.token_embeddings(model, (bids,) + example.explained[1:])


def _bert_report(args) -> dict:
    from scratchformer import lens
    from scratchformer.interop.sentence import SentenceEncoder

    enc = SentenceEncoder(args.bert or None, dtype=np.float64)
    pieces = enc.tokenizer.tokenize(enc._prepare([args.text])[0])
    if len(pieces) + 2 > enc.max_length:
        raise DataError(
            f"--text gives {len(pieces) + 2} tokens, the model reads at most {enc.max_length}: "
            "give a shorter text"
        )
    batch = enc.tokenize([args.text])
    ids = batch["input_ids"]
    other = enc.encode([args.text2])[0].astype(np.float64)
    objective = lens.similarity_objective(other)
    model = enc.encoder
    sal = lens.saliency(model, (ids,), objective)
    ig = lens.integrated_gradients(model, (ids,), objective, steps=args.steps)
    tokens = [enc.tokenizer.decode([int(i)], skip_special_tokens=False).replace(" ", "") for i in ids[0]]
    abl = lens.head_ablation(model, (ids,), metric=lambda out: objective(out)[0])
    flat = sorted(
        (
            (abl.labels[r], h, float(abl.change[r, h]))
            for r in range(len(abl.labels))
            for h in range(abl.change.shape[1])
        ),
        key=lambda x: -abs(x[2]),
    )
    hs = lens.head_scores(model, (ids,))
    return {
        "tokens": tokens,
        "target": f"cosine similarity to {args.text2!r}",
        "similarity": round(sal.value, 6),
        "ablation": {
            "baseline_similarity": round(abl.baseline, 6),
            "top": [[f"{a} H{h}", round(c, 6)] for a, h, c in flat[:TOP_HEADS]],
        },
        "saliency": {
            "of": f"cosine similarity to {args.text2!r}",
            "grad_x_input": sal.grad_x_input[0].round(6).tolist(),
            "integrated_gradients": ig.attributions[0].round(6).tolist(),
        },
        "checks": [str(sal.check), str(ig.check), str(abl.check), str(hs.check)],
    }


# -- printing ------------------------------------------------------------------------------------
def _text(r: dict) -> str:
    lines = [f"target: {r['target']}"]
    if "answer" in r:
        lines.append("answer: " + " ".join(r["answer"]))
    if "logit_lens" in r:
        ll = r["logit_lens"]
        cols = [_show(t) for t in ll["positions"]]
        w = max(3, *(len(c) for c in cols), *(len(_show(t)) for row in ll["top1"] for t in row))
        lines.append("logit lens (top-1 next token after each layer; columns: input positions):")
        lines.append(" " * 7 + " ".join(c.rjust(w) for c in cols))
        for name, row in zip(ll["layers"], ll["top1"]):
            lines.append(f"{name:>6} " + " ".join(_show(t).rjust(w) for t in row))
    if "attribution" in r:
        lines.append(
            "largest direct contributions to the target's logit: "
            + ", ".join(f"{n} {c:+.4f}" for n, c in r["attribution"])
        )
    if "sae" in r:
        from scratchformer.cli.sae import lens_text

        lines += lens_text(r)
    if "ablation" in r:
        a = r["ablation"]
        base = next(k for k in a if k.startswith("baseline"))
        lines.append(
            f"heads that matter most (zero-ablation, change of the {base[9:].replace('_', ' ')} "
            f"{a[base]:.4f}):"
        )
        lines += [f"  {name:<12} {change:+.5f}" for name, change in a["top"]]
    s = r["saliency"]
    start = f", from {s['baseline']}" if "baseline" in s else ""
    lines.append(
        f"saliency of the {s['of']} per input token (gradient x input, integrated gradients{start}):"
    )
    lines += [
        f"  {_show(t):>10} {_num(g, '+.5f')} {_num(i, '+.5f')}"
        for t, g, i in zip(r["tokens"], s["grad_x_input"], s["integrated_gradients"])
    ]
    if "patching" in r:
        p = r["patching"]
        head = f"patching --text into --corrupt ({p['metric']}: clean {p['clean']:.4f}, corrupted {p['corrupt']:.4f})"
        if "undefined" in p:
            lines.append(f"{head}: fraction recovered undefined: {p['undefined']}")
        else:
            lines.append(f"{head}; fraction recovered by the residual entering each block:")
            two = "encoder_residual" in p
            for side, key in (("encoder ", "encoder_residual"), ("decoder " if two else "", "residual")):
                for i, row in enumerate(p.get(key, [])):
                    lines.append(f"  {side}L{i}: " + " ".join(_num(x, "+.2f") for x in row))
            best = sorted(p["heads"].items(), key=lambda kv: -abs(kv[1]))[:TOP_HEADS]
            lines.append("  heads: " + ", ".join(f"{k} {v:+.2f}" for k, v in best))
    for name, values in r.get("activations", {}).items():
        arr = np.asarray(values)
        lines.append(f"{name} {arr.shape} (first sequence):")
        lines.append(
            np.array2string(arr, precision=4, suppress_small=True, max_line_width=120, threshold=400)
        )
    lines += r["checks"]
    return "\n".join(lines)


def _num(x, fmt: str) -> str:
    """A number, or "undefined" for one that is not (NaN, infinite)."""
    return format(x, fmt) if x is not None and np.isfinite(x) else "undefined"


def _show(token: str) -> str:
    return {" ": "\u2423", "\n": "\u21b5", "": "\u2205"}.get(token, token)
