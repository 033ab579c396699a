"""Mutation target "ops_backward": ops/'s backward functions, against the backward walk-through.

Every single-point mutant of every backward function of scratchformer/ops/ (a function whose name
holds "backward"; and the "with_grad" forwards, whose second result is the derivative an
activation's backward multiplies by) is run inside the models below, in the reference lane (the
ops' formulas; the fast lane's forms live in scratchformer/fast/ and are proven equal to them by
tests/ops/test_fast_lane.py).

Its output: for each model (one of every family and block option, float64, training mode, a
seeded dropout), every backward op the model's own backward ran, as the model's record holds it
(`nn.recording`): its name, what it returned and what it added into gradient buffers. That is
everything a backward op computes where the walk-through can see it: inside a model.

The check: `viz.backward_steps` (THOROUGH, `viz RUN --backward`'s default) on the same models; a
mutant is caught when a step of the mutated op (of `activation_backward` for a "with_grad"
forward) disagrees with finite differences of its own forward, or a step of an op it called is
red (called wrongly), on a model where that step agrees unmutated; or when the model's backward
raises. The goal: every output-changing mutant caught.

Out of scope, and not mutated: the argument checks a direct call runs (a model's call is checked
at its layer's door: `checks.DOOR`) and the functional backwards no model calls
(`relu_backward`, `gelu_backward`, ...): tests/ops covers both.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mutants import ROOT, Mutant, Target, raised, same_parts  # noqa: E402

OPS = ROOT / "scratchformer" / "ops"
SEED = 0


def _mutated(qualname: str) -> bool:
    if qualname.startswith("_"):  # argument checks and the functional backwards' factory
        return False
    return "backward" in qualname or "with_grad" in qualname


def sources():
    return [(p, _mutated) for p in sorted(OPS.glob("*.py")) if p.stem != "__init__"]


# -- the models ----------------------------------------------------------------------------------
def _models() -> list[tuple[str, object, tuple]]:
    """(name, model, its forward's inputs): every family, each block option at least once."""
    from scratchformer.data.tasks import BOS, EOS, PAD, VOCAB_SIZE, make_task
    from scratchformer.models import (
        GPT,
        ClassifierConfig,
        GPTConfig,
        Seq2SeqConfig,
        Seq2SeqTransformer,
        TransformerClassifier,
    )
    from scratchformer.models.sae import SAEConfig, SparseAutoencoder

    rng = np.random.default_rng(SEED)
    ids, targets = rng.integers(0, 11, (2, 6)), rng.integers(0, 11, (2, 6))
    targets[1, -2:] = -100  # ignored positions: cross-entropy's mask

    def gpt(**kw):
        base = dict(vocab_size=11, block_size=8, n_layer=1, n_head=2, n_embd=8, dropout=0.0)
        return GPT(GPTConfig(**{**base, **kw}), seed=0)

    def classifier(pooling):
        config = ClassifierConfig(
            vocab_size=3, n_classes=3, max_len=8, n_layer=1, n_head=2, n_embd=8, dropout=0.0, pooling=pooling
        )
        return TransformerClassifier(config, seed=0)

    def sae(kind, **kw):
        config = SAEConfig(kind=kind, d_in=6, d_sae=10, l1_coefficient=0.5, aux_coefficient=0.3, **kw)
        return SparseAutoencoder(config, seed=0)

    majority, reverse = make_task("majority", 2, rng=0), make_task("reverse", 1, rng=0)
    s2s = Seq2SeqTransformer(
        Seq2SeqConfig(
            src_vocab_size=VOCAB_SIZE,
            tgt_vocab_size=VOCAB_SIZE,
            max_len=13,
            n_layer=1,
            n_head=2,
            n_embd=8,
            pad_id=PAD,
            bos_id=BOS,
            eos_id=EOS,
            dropout=0.0,
            share_embeddings=True,
            label_smoothing=0.1,
        ),
        seed=0,
    )
    x = rng.standard_normal((5, 6))
    aux = sae("topk", k=3, dead_window=1)
    aux.steps_since_fired.data[:] = 2  # every feature dead: AuxK on
    return [
        (
            "gpt rmsnorm swiglu rope gqa",
            gpt(
                normalization="rmsnorm",
                activation="swiglu",
                positional="rope",
                n_head=4,
                n_kv_head=2,
                bias=False,
            ),
            (ids, targets),
        ),
        (
            "gpt post-norm relu alibi untied",
            gpt(norm_first=False, activation="relu", positional="alibi", tie_weights=False),
            (ids, targets),
        ),
        ("gpt gelu_tanh sinusoidal", gpt(activation="gelu_tanh", positional="sinusoidal"), (ids, targets)),
        ("gpt layernorm gelu learned dropout", gpt(dropout=0.2), (ids, targets)),
        ("classifier mean", classifier("mean"), (majority.x, majority.y)),
        ("classifier cls", classifier("cls"), (majority.x, majority.y)),
        ("seq2seq", s2s, (reverse.src, reverse.tgt_in, reverse.tgt_out)),
        ("sae relu", sae("relu"), (x,)),
        ("sae topk", sae("topk", k=3), (x,)),
        ("sae topk auxk", aux, (x,)),
    ]


_MODELS = None


def _the_models():
    global _MODELS
    if _MODELS is None:
        _MODELS = _models()
    return _MODELS


def _value(v):
    if isinstance(v, np.ndarray):
        return np.array(v, copy=True)
    if isinstance(v, tuple):
        return tuple(_value(x) for x in v)
    if isinstance(v, (float, int, np.generic)) or v is None:
        return v
    return ("a", type(v).__name__)


def _recorded(model, inputs):
    """The record of the model's forward and backward (float64, training mode, reference lane)."""
    from scratchformer import fast, nn

    m = copy.deepcopy(model).to(np.float64).train()
    nn.set_dropout_rng(m, np.random.default_rng(SEED))
    m.zero_grad()
    with fast.reference(), nn.recording(m) as record:
        m(*inputs)
        m.backward()
    return record


def _backward_ops(model, inputs) -> list:
    """Every backward op the model's backward ran: (name, what it returned, what it added)."""
    return [
        (c.name, _value(c.result_values), {k: _value(v) for k, v in sorted(c.added.items())})
        for c in _recorded(model, inputs).calls
        if c.kind == "op" and c.phase == "backward"
    ]


def _running(m: Mutant | None):
    """The models whose forward or backward ran the mutated function (every model for None)."""
    return [(n, model, inputs) for n, model, inputs in _the_models() if m is None or m.function in _RAN[n]]


def output(m: Mutant | None):
    result = {}
    for name, model, inputs in _running(m):
        try:
            with np.errstate(all="ignore"):
                if m is None:
                    result[name] = _backward_ops(model, inputs)
                else:
                    with m.patched():
                        result[name] = _backward_ops(model, inputs)
        except BaseException as e:  # noqa: BLE001 - raising is an output
            result[name] = raised(e)
    return result


# -- the check -----------------------------------------------------------------------------------
_RAN: dict = {}  # model name -> the names of every op its forward and backward ran
_DISAGREE: dict = {}  # model name -> the ops with a walk-through step that disagrees unmutated


def _red_ops(m: Mutant) -> set[str]:
    """The steps a mutant of this function must turn red."""
    return {"activation_backward"} if "with_grad" in m.function else {m.function}


def _steps(model, inputs):
    from scratchformer.viz import backward_steps

    with np.errstate(all="ignore"):
        return backward_steps(model, *inputs)


def prepare(mutants: list[Mutant]) -> None:
    """Which ops each model runs, and, on the models the mutants need, which steps agree
    unmutated: once, in the parent (every child inherits them)."""
    needed = {m.function for m in mutants}
    for name, model, inputs in _the_models():
        _RAN[name] = {c.name for c in _recorded(model, inputs).calls if c.kind == "op"}
        if _RAN[name] & needed:
            steps = _steps(model, inputs)
            _DISAGREE[name] = {s.op for s in steps if not s.ok}


def check(m: Mutant) -> tuple[bool, str]:
    red_ops = _red_ops(m)
    tried = []
    for name, model, inputs in _running(m):
        if red_ops & _DISAGREE[name]:  # it disagrees unmutated (AuxK's detached residual): no witness here
            continue
        tried.append(name)
        try:
            with m.patched():
                steps = _steps(model, inputs)
        except BaseException as e:  # noqa: BLE001 - the backward failed loudly
            return True, f"{name}: the backward raised {type(e).__name__}"
        for s in (s for s in steps if s.op in red_ops):
            inside = [t for t in steps if s.call.index < t.call.index < s.call.end and t.red]
            if not s.ok:
                said = f"disagrees through {', '.join(s.through)}" if s.through else f"red: {s.failures()[0]}"
                return True, f"{name}: {s.name} {said}"
            if inside:  # it called an op wrongly (a dropped argument): that op's step is red
                return True, f"{name}: {inside[0].name}, called by {s.name}, red: {inside[0].failures()[0]}"
    return False, f"no step of {sorted(red_ops)} red on {tried or 'any model'}"


TARGET = Target(
    name="ops_backward",
    sources=sources,
    output=output,
    check=check,
    prepare=prepare,
    same=same_parts,  # only the parts that ran the mutated code are compared
    goal=1.0,
    time_limit=120.0,
    sample=30,
    description="ops/'s backward functions, against the backward walk-through",
)
