"""`scratchformer sae`: train a sparse autoencoder on one hook point of a language-model run.

    scratchformer sae RUN_DIR --site blocks.1.resid_post [--kind topk|relu] [--k 16] [--out DIR]
    scratchformer sae --resume --out DIR

The run is a run (training/sae.py's job in the trainer): checkpoints in DIR/best and DIR/last,
log.jsonl with SAELens's measures at every evaluation, --resume after a stop. When it ends, the
best checkpoint is also written as SAELens saves an SAE, into DIR/saelens (interop/saelens.py),
and the measures drawn into DIR/training_curves.png.
"""

from __future__ import annotations

import sys
from pathlib import Path

from scratchformer.checks import ascii_int
from scratchformer.errors import CLIError

# The training settings `sae` offers (TrainConfig fields), with their help; the others keep
# training/sae.py's SAE_TRAIN values.
SAE_TRAIN_HELP = {
    "max_steps": "optimiser steps",
    "batch_size": "activations per step (rows of the hook point, drawn from pool x as many)",
    "lr": "peak learning rate (Adam, no weight decay)",
    "min_lr": "learning rate at the end of the cosine (given --lr alone: lr / 10)",
    "warmup_steps": "linear warmup before the cosine decay",
    "grad_clip": "global gradient-norm clip (0: off)",
    "eval_interval": "steps between evaluations (SAELens's measures) and checkpoints",
    "eval_batches": ("evaluate on this many batches of 64 held-out contexts", "the whole split"),
    "log_interval": "steps between log.jsonl rows",
    "seed": "seed of the initial weights and the batches",
    "time_limit": ("stop cleanly after this many seconds", "none"),
}
SAE_MODEL_HELP = {
    "kind": "topk: the k largest pre-activations (Gao et al. 2024); relu: an L1 penalty on the "
    "decoder-norm-weighted activations (Towards Monosemanticity, SAELens's standard SAE)",
    "d_sae": ("features in the dictionary", "8 x the hook point's width"),
    "k": "topk: features each activation keeps",
    "l1_coefficient": "relu: the penalty's coefficient (the sparsity it buys)",
    "aux_coefficient": "weight of the AuxK loss on dead features (Gao et al. 2024; 0: off)",
    "dead_window": "a feature not fired for more than this many steps is dead (AuxK trains it)",
}


def add_options(p) -> None:
    """The `sae` command's options, added to its parser (cli/main.py makes it)."""
    from scratchformer.cli.main import _add_setting
    from scratchformer.models.sae import SAEConfig
    from scratchformer.training.config import TrainConfig
    from scratchformer.training.sae import POOL, SAE_TRAIN

    p.add_argument("dir", nargs="?", metavar="RUN_DIR", help="the language-model run (default: out/names)")
    p.add_argument(
        "--site",
        metavar="HOOK",
        help="the hook point whose activations it learns: blocks.L.resid_pre / resid_mid / resid_post, "
        "blocks.L.mlp.post, blocks.L.attn.out, ... (docs/lens.md lists them; required unless --resume)",
    )
    model = p.add_argument_group("autoencoder")
    defaults = SAEConfig()
    for name, help_spec in SAE_MODEL_HELP.items():
        value = None if name == "d_sae" else getattr(defaults, name)
        _add_setting(model, name, SAEConfig.spec(name), help_spec, {"sae": value})
    model.add_argument(
        "--pool",
        type=ascii_int,
        metavar="N",
        help=f"each batch is drawn from N x --batch-size activations of fresh contexts (default: {POOL})",
    )
    run = p.add_argument_group("run")
    run.add_argument("--out", metavar="DIR", help="output directory (default: RUN_DIR-sae/SITE-KIND)")
    run.add_argument(
        "--resume", action="store_true", help="continue the run in --out from its last checkpoint"
    )
    run.add_argument(
        "--overwrite",
        action="store_true",
        help="start a new run in an --out that holds one (it is deleted first)",
    )
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    run.add_argument("--quiet", action="store_true", help="no evaluation lines")
    optimisation = p.add_argument_group("optimisation")
    resolved = TrainConfig.from_dict(SAE_TRAIN)
    for name, help_spec in SAE_TRAIN_HELP.items():
        _add_setting(optimisation, name, TrainConfig.spec(name), help_spec, {"sae": getattr(resolved, name)})


def _given(args, names) -> dict:
    return {k: getattr(args, k) for k in names if getattr(args, k, None) is not None}


def cmd_sae(args) -> int:
    from scratchformer.training.jobs import resume_job
    from scratchformer.training.rundir import check_fresh
    from scratchformer.training.sae import POOL, build_sae_job
    from scratchformer.training.trainer import train

    if args.out == "" or args.site == "":
        raise CLIError(f"--{'out' if args.out == '' else 'site'} is empty: give a value")
    model, settings = _given(args, SAE_MODEL_HELP), _given(args, SAE_TRAIN_HELP)
    if args.pool is not None and not 1 <= args.pool <= 64:
        raise CLIError(f"--pool must be an integer from 1 to 64, got {args.pool}")
    options = dict(progress=not args.no_progress, verbose=not args.quiet, announce=True)
    if args.resume:
        if args.out is None:
            raise CLIError("--resume continues the run in --out: give --out DIR")
        fixed = {
            **model,
            **({"site": args.site} if args.site else {}),
            **({"pool": args.pool} if args.pool else {}),
        }
        if args.dir is not None:
            fixed["RUN_DIR"] = args.dir
        job, cfg, checkpoint, note = resume_job(
            args.out, settings, fixed, command="sae", kind="sae", overwrite=args.overwrite
        )
        if note:
            print(note)
        out = Path(args.out)
        summary = train(job, cfg, out, resume=True, checkpoint=checkpoint, **options)
    else:
        if args.site is None:
            raise CLIError("sae needs --site HOOK, the hook point to learn (e.g. blocks.1.resid_post)")
        run = Path(args.dir or "out/names")
        kind = model.get("kind", "topk")
        out = Path(args.out or f"{run}-sae/{args.site}-{kind}")
        if not args.overwrite:
            check_fresh(out)  # before the base run is read; train() checks again, under the run's lock
        job, cfg = build_sae_job(run, args.site, model, settings, args.pool or POOL)
        summary = train(job, cfg, out, overwrite=args.overwrite, **options)
    if summary["stopped_by"] != "nothing to do":
        _finish(out, job)
    return 0


def _finish(out: Path, job) -> None:
    """The best checkpoint in SAELens's layout, the training curves and SAELens's measures over
    the run (OUT/sae_measures.png)."""
    from scratchformer.cli.viz import write_training_curves
    from scratchformer.interop.saelens import save_saelens
    from scratchformer.training.checkpoint import load_checkpoint
    from scratchformer.training.trainer import BEST

    ck = load_checkpoint(out / BEST)
    best = type(job.model)(type(job.model.config).from_dict(ck.config["model"]))
    best.load_state_dict(ck.model_state)
    spec = job.data_spec
    path = save_saelens(
        best,
        out / "saelens",
        hook_name=spec["site"],
        model_name=f"scratchformer:{spec['base']}",
        context_size=job.base.model.config.block_size,
    )
    print(f"SAELens layout (cfg.json, sae_weights.safetensors): {path}")
    write_training_curves(out)
    try:  # as the training curves: a finished run never fails on a figure
        from scratchformer.viz.basics import log_rows
        from scratchformer.viz.features import sae_measures

        sae_measures(log_rows(out), path=out / "sae_measures.png")
    except Exception as e:  # noqa: BLE001 -- reported, never hidden
        print(f"warning: SAELens's measures not drawn ({type(e).__name__}: {e})", file=sys.stderr)
        return
    print(f"SAELens's measures over training: {out / 'sae_measures.png'}")


# -- `scratchformer lens RUN --sae DIR`: a logit split into the autoencoder's features ----------------
TOP_FEATURES = 8  # features the lens lists


def add_lens_option(p) -> None:
    """`lens --sae DIR` (cli/lens.py's parser)."""
    p.add_argument(
        "--sae",
        metavar="SAE_DIR",
        help="an autoencoder run (scratchformer sae) on this run: split the target's logit at the last "
        "position into its features, direct through the decoder, with a check (default: none)",
    )


def sae_for_lens(sae_dir: str, run_dir: str | None):
    """The autoencoder job of `sae_dir` and the run it reads (`run_dir`, when given, must be that
    run: CLIError otherwise); -> (sae job, the run directory to explain)."""
    from scratchformer.training.jobs import checkpoint_dir, load_job

    sae_job = load_job(sae_dir)
    if getattr(sae_job, "site", None) is None:
        raise CLIError(f"--sae {sae_dir} is not an autoencoder run (train one with 'scratchformer sae')")
    base = Path(sae_job.data_spec["base"])
    if run_dir is not None and checkpoint_dir(run_dir).resolve() != base:
        raise CLIError(f"--sae {sae_dir} was trained on the run in {base}, not on {run_dir}: give that run")
    return sae_job, str(base)


def add_lens_part(report: dict, sae_job, model, inputs: tuple, target: int, labels: list) -> None:
    """report["sae"]: the target's logit at the last position split into the features (lens.sae.
    feature_attribution, in float64), and its check line."""
    import numpy as np

    from scratchformer.lens.sae import feature_attribution

    sae = sae_job.model.to(np.float64)
    att = feature_attribution(model, sae, sae_job.site, inputs, target, position=-1)
    order = np.argsort(-np.abs(att.contributions), kind="stable")[:TOP_FEATURES]
    with_acts = sae.encode(_site_row(model, inputs, sae_job.site, att.position))
    report["sae"] = {
        "site": sae_job.site,
        "position": att.position,
        "logit": round(att.logit, 6),
        "features": [
            [
                int(att.features[i]),
                round(float(with_acts[0, att.features[i]]), 5),
                round(float(att.contributions[i]), 5),
            ]
            for i in order
        ],
        "active": len(att.features),
        "features_sum": round(float(att.contributions.sum()), 6),
        "b_dec": round(att.b_dec, 6),
        "error": round(att.error, 6),
        "rest": round(att.rest, 6),
        "bias": round(att.bias, 6),
    }
    report["checks"].append(str(att.check))


def _site_row(model, inputs, site, position):
    from scratchformer.lens.sae import site_activations

    return site_activations(model, inputs, site)[0, position][None]


def lens_text(r: dict) -> list[str]:
    """The lines `lens` prints for report["sae"]."""
    s = r["sae"]
    lines = [
        f"autoencoder features at {s['site']}, position {s['position']}: direct attribution to the logit of "
        f"{r['target']!r} ({s['logit']:.4f}), {s['active']} features active:"
    ]
    lines += [f"  feature {f:<6} activation {a:8.4f}  {c:+.5f}" for f, a, c in s["features"]]
    lines.append(
        f"  all features {s['features_sum']:+.5f}, b_dec {s['b_dec']:+.5f}, error {s['error']:+.5f}, "
        f"the rest of the stream {s['rest']:+.5f}, the norm's shift and the bias {s['bias']:+.5f}"
    )
    return lines
