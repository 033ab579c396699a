"""The sparse-autoencoder job: a `SparseAutoencoder` trained on one hook point of a language-model
run, its activations streamed from that run's model through the hook (lens/sae.py).

It implements the `Job` protocol (training/jobs.py), so an autoencoder run is a run: the
trainer's checkpoints, bit-exact resume, log, progress bar and one-line errors. Its own parts:

- the data: each training batch runs the base model on fresh contexts of its training split,
  drawn by the run's batch generator, reads the site's activation at every counted position
  (lens/sae.py: not padding, not a special token), and takes `batch_size` of those rows at
  random from `pool` x batch_size of them: a shuffle buffer refilled at every step, so a batch
  mixes many contexts, memory stays at pool x batch_size rows, and the batch is a function of the
  generator's state alone (a resume repeats it). The forward stops at the site.
- the evaluation: the autoencoder's loss and SAELens's measures (lens.sae.Measures: L0, L1, MSE,
  explained variance, L2 ratio, the CE loss and KL scores with the reconstruction spliced in,
  dead and dense features) on the base run's held-out split, logged at every evaluation
  (val_l0, val_explained_variance, ...), and the features dead by the training count.
- the base run: recorded by path and by the sha256 of its weights; a run whose base changed is
  refused in one line.

    job, cfg = build_sae_job("out/names", "blocks.1.resid_post", {"kind": "topk", "k": 16}, {...})
    train(job, cfg, "out/names-sae")
"""

from __future__ import annotations

import copy
import math
from pathlib import Path

import numpy as np

from scratchformer.errors import CheckpointError, ConfigError, DataError, ScratchformerError
from scratchformer.lens.sae import Measures, counted_positions, site_activations, site_width
from scratchformer.limits.estimates import check_model_fits
from scratchformer.models.sae import SAEConfig, SparseAutoencoder
from scratchformer.training.config import TrainConfig
from scratchformer.training.jobparts import TokenBatches, model_from_checkpoint
from scratchformer.training.rundir import fingerprint_file

__all__ = ["SAE_TRAIN", "SAEJob", "build_sae_job", "EXPANSION"]

EXPANSION = 8  # d_sae = EXPANSION x d_in unless given
POOL = 2  # rows a batch is drawn from: pool x batch_size
B_DEC_ROWS, B_DEC_SEED_TAG = 4096, 41  # b_dec's start: the mean of this many rows, drawn apart
EVAL_CONTEXTS = 64  # contexts per evaluation batch (an LM job's eval batch)
# The optimisation of an autoencoder run: Adam as SAELens's trainer (betas 0.9 / 0.999, no weight
# decay, gradients clipped at norm 1), warmup then cosine to lr / 10, one process (the
# firing counts live in the model), no transformer diagnostics (the measures go in the log).
SAE_TRAIN = dict(
    max_steps=2000,
    batch_size=512,
    lr=1e-3,
    min_lr=1e-4,
    warmup_steps=100,
    weight_decay=0.0,
    beta1=0.9,
    beta2=0.999,
    grad_clip=1.0,
    eval_interval=250,
    eval_batches=8,
    num_samples=0,
    workers=1,
    diag_interval=0,
)


def _special(tokenizer) -> tuple[int, ...]:
    """The ids of the tokenizer's special tokens (a names run's boundary token), left out of the
    rows as SAELens's evals leave special tokens out."""
    ids = {getattr(tokenizer, name, None) for name in ("bos_id", "eos_id")}
    return tuple(sorted(i for i in ids if i is not None))


def _base_weights(base_dir: Path) -> Path:
    from scratchformer.training.checkpoint import MODEL_FILE
    from scratchformer.training.jobs import checkpoint_dir

    return checkpoint_dir(base_dir) / MODEL_FILE


class SAEJob(TokenBatches):
    kind, config_class, model_class = "sae", SAEConfig, SparseAutoencoder

    def __init__(self, model: SparseAutoencoder, base, data_spec: dict):
        """base: the language-model job whose model is read; data_spec: {"base": its checkpoint
        directory, "base_sha256": of its model.safetensors, "site": the hook name, "pool"}."""
        self.model, self.base, self.data_spec = model, base, data_spec
        self.site = data_spec["site"]
        self.special = _special(base.tokenizer)
        self.base.model.eval()

    # -- building ------------------------------------------------------------------------------
    @classmethod
    def create(cls, run_kind: str, model: dict, data: dict, seed: int) -> SAEJob:
        """A fresh autoencoder on data["site"] of the run data["base"]; model: SAEConfig fields
        (d_sae None: EXPANSION x the site's width); seed: its initial weights."""
        from scratchformer.training.jobs import load_job

        base_dir = Path(data["base"])
        weights = _base_weights(base_dir)
        base = load_job(base_dir)
        _check_base(base, base_dir)
        x, _ = base.train_batch(np.random.default_rng(0), 1)
        d_in = site_width(base.model, (x,), data["site"])
        model = {**model, "d_in": d_in}
        if model.get("d_sae") is None:
            model["d_sae"] = EXPANSION * d_in
        config = SAEConfig(**model)
        check_model_fits(config, SparseAutoencoder, training=True, option="--d-sae")
        spec = {
            "base": str(weights.parent.resolve()),
            "base_sha256": fingerprint_file(weights),
            "site": data["site"],
            "pool": int(data.get("pool", POOL)),
        }
        job = cls(SparseAutoencoder(config, seed=seed), base, spec)
        # b_dec starts at the data's mean (Gao et al. 2024 start theirs at the geometric median;
        # SAELens at 0): rows drawn apart from the batches, so the batches are the same either way
        start = job._pool(np.random.default_rng([seed, B_DEC_SEED_TAG]), B_DEC_ROWS // spec["pool"])
        job.model.b_dec.data[...] = start.mean(axis=0)
        return job

    @classmethod
    def from_checkpoint(cls, ck, data=None, allow_changed_data: bool = False) -> SAEJob:
        """The job of an autoencoder checkpoint: its base run read again from the recorded
        directory, refused in one line when its weights changed since (sha256)."""
        from scratchformer.training.jobs import load_job

        if data is not None:
            raise ConfigError("--data does not apply to an autoencoder run: it reads its base run's data")
        spec = dict(ck.config["data"])
        weights = Path(spec["base"]) / "model.safetensors"
        if not weights.is_file():
            raise CheckpointError(
                f"{ck.path}: the autoencoder was trained on the run in {spec['base']}, which is not there "
                "any more: restore it"
            )
        if not allow_changed_data and fingerprint_file(weights) != spec["base_sha256"]:
            raise CheckpointError(
                f"{ck.path}: the model in {spec['base']} changed since the autoencoder was trained on it "
                "(its sha256 differs): restore it, or train a new autoencoder"
            )
        return cls(model_from_checkpoint(ck, cls), load_job(spec["base"]), spec)

    def config_dict(self) -> dict:
        return {"kind": self.kind, "model": self.model.config.to_dict(), "data": self.data_spec}

    def tokenizer_dict(self) -> None:
        return None  # the base run keeps the tokenizer

    def check_compatible(self, ck) -> None:
        saved = SAEConfig.from_dict(ck.config.get("model") or {})
        if saved != self.model.config or ck.config.get("data") != self.data_spec:
            raise CheckpointError(
                f"{ck.path}: another autoencoder (settings, base run or site); resume with the same options"
            )

    # -- training ------------------------------------------------------------------------------
    def train_batch(self, rng: np.random.Generator, batch_size: int) -> tuple[np.ndarray]:
        """(rows (batch_size, d_in),): see the module docstring. Contexts are drawn in as few
        forwards as their counted positions allow: the first draw assumes every position counts,
        each next one the share of counted positions seen so far."""
        pool = self._pool(rng, batch_size)
        return (pool[rng.choice(len(pool), size=batch_size, replace=False)],)

    def _pool(self, rng: np.random.Generator, batch_size: int) -> np.ndarray:
        """pool x batch_size rows of the site, from fresh contexts of the training split."""
        need = self.data_spec["pool"] * batch_size
        block = self.base.model.config.block_size
        rows, count, drawn = [], 0, 0
        while count < need:
            per_context = count / drawn if count else block  # counted positions a context gave so far
            n = max(1, math.ceil(1.05 * (need - count) / per_context))
            x, y = self.base.train_batch(rng, n)
            part = site_activations(self.base.model, (x,), self.site)[counted_positions(x, y, self.special)]
            rows.append(part)
            count, drawn = count + len(part), drawn + n
            if not count and drawn > 64 * block:
                raise DataError(f"the training split has no counted position to read {self.site} at")
        return np.concatenate(rows)[:need]

    def _split(self, split: str):
        try:
            return getattr(self.base.dataset, split)
        except AttributeError:
            raise DataError(f"the base run has no {split} split: use another --split") from None

    def evaluation(self, split: str = "val", batches: int | None = None, **options):
        """The loss (rows weighted) and SAELens's measures (lens.sae.Measures) over the split's
        contexts, or its first `batches` batches of EVAL_CONTEXTS; `dead_features`: the features
        not fired for more than dead_window training steps. A generator of (rows,) batches,
        sent (x_hat, loss): training/evaluation.py."""
        if options:
            raise ConfigError(f"--{next(iter(options)).replace('_', '-')} applies to seq2seq models only")
        measures, total, count = Measures(), 0.0, 0
        for i, (x, y) in enumerate(self._split(split).all_batches(EVAL_CONTEXTS)):
            if batches is not None and i >= batches:
                break
            rows = measures.add(self.base.model, self.model, self.site, x, y, self.special)
            if rows is None:
                continue
            _, loss = yield (rows.astype(self.model.dtype),)
            total, count = total + loss * len(rows), count + len(rows)
        result = measures.result()
        result.pop("positions")
        return {
            "loss": total / max(count, 1),
            **result,
            "dead_features": int(self.model.dead_features().sum()),
        }

    @property
    def default_split(self) -> str:
        return self.base.default_split

    # -- showing -------------------------------------------------------------------------------
    def samples(self, n: int, rng: np.random.Generator, **options) -> list[str]:
        """None to show at an evaluation (n = 0); more: refused (an autoencoder generates nothing)."""
        if n > 0 or options:
            raise ConfigError(
                f"an autoencoder generates nothing: sample its base run ({self.data_spec['base']}); its "
                "features are in 'scratchformer viz'"
            )
        return []

    def predict(self, text: str, **options) -> str:
        raise ConfigError(
            "predict needs a classifier or seq2seq run; an autoencoder's features are in 'scratchformer viz'"
        )

    def viz_inputs(self, text: str | None) -> dict:
        """The base run's input for `viz` (its model drawn), the autoencoder's feature pages and
        the attribution of the model's prediction after that input to the features (in float64;
        None where the site is not in the residual stream)."""
        from scratchformer.lens.sae import feature_attribution, feature_pages

        inputs = self.base.viz_inputs(text)
        batches = list(self._split(self.base.default_split).all_batches(EVAL_CONTEXTS))
        model = self.base.model
        inputs["model"] = model
        ids = np.asarray(inputs["ids"])[None]
        model64, sae64 = copy.deepcopy(model).to(np.float64), copy.deepcopy(self.model).to(np.float64)
        target = int(model64(ids)[0][0, -1].argmax())
        try:
            attribution = feature_attribution(model64, sae64, self.site, (ids,), target)
        except ConfigError:  # a site the residual stream does not add up: no direct attribution
            attribution = None
        inputs["features"] = {
            "pages": feature_pages(model, self.model, self.site, batches, self.special),
            "labels": inputs["vocab_labels"],
            "site": self.site,
            "config": self.model.config.to_dict(),
            "attribution": attribution,
            "tokens": list(inputs["tokens"]),
        }
        return inputs


def _check_base(base, base_dir: Path) -> None:
    """The base run must be a language model on a data file (its model's logits are what the
    CE score reads; its held-out split what the measures read)."""
    if base.model.unembedding() is None:
        raise ConfigError(
            f"{base_dir} holds no language model: an autoencoder trains on a GPT run's activations"
        )
    try:
        _ = base.dataset  # read now: the activations come from its splits
    except (ScratchformerError, AttributeError):
        raise ConfigError(
            f"{base_dir}: an autoencoder trains on a language model run on a data file (its data are read "
            "again for the activations); this run's data are not there"
        ) from None


def build_sae_job(
    base: str | Path, site: str, model: dict | None = None, train: dict | None = None, pool: int = POOL
) -> tuple[SAEJob, TrainConfig]:
    """A fresh autoencoder job on `site` of the run `base` and its TrainConfig: SAE_TRAIN with
    the `train` settings given on top (a peak lr given alone takes the floor lr / 10)."""
    train = dict(train or {})
    if "lr" in train and "min_lr" not in train:
        train["min_lr"] = train["lr"] / 10
    cfg = TrainConfig.from_dict({**SAE_TRAIN, **train})
    job = SAEJob.create("sae", dict(model or {}), {"base": base, "site": site, "pool": pool}, seed=cfg.seed)
    return job, cfg
