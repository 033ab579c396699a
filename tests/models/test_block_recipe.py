"""docs/architecture.md's recipe for a new block option is complete: an option defined here, in
this module only, works with the tools as they are.

The toy option is ScaleNorm (Nguyen & Salazar 2019, "Transformers without Tears", section 2.2):
each block norm becomes y = g x / ||x||, one learned scalar g per norm (started at sqrt(C)).
It follows the recipe: the math beside its backward (`ScaleNorm`), the layer with its hook
points (`in`, `out`, as every norm's), one setting in a config (`ToyConfig.scale_norm`), the
model that builds it (`ToyGPT`) and counts it (`param_count`). Then, with nothing else changed:

- the backward walk-through (scratchformer.viz.backward) checks every step of its backward;
- the lens (hook names, `run_with_cache`, the lens report and its checks) reads it;
- `export` refuses it in one line, writing nothing (no layout declares `scale_norm`), and
  writes the same model class with the option off.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest

from scratchformer.data.tokenizer import CharTokenizer
from scratchformer.errors import ConfigError
from scratchformer.models import GPT, GPTConfig
from scratchformer.models.base import norm_params
from scratchformer.nn.hooks import HookPoint
from scratchformer.nn.module import Module, Parameter
from scratchformer.settings import setting
from scratchformer.specs import Bool

TOKENIZER = CharTokenizer(list("abcdefgh"), special="<eot>")
SIZES = dict(vocab_size=TOKENIZER.vocab_size, block_size=8, n_layer=2, n_head=2, n_embd=8)
IDS = np.array([[1, 2, 3, 1, 2, 4]])


# -- the option, by the recipe -------------------------------------------------------------------
def scalenorm_forward(x: np.ndarray, g: np.ndarray):
    """y = g * x / ||x|| over the last axis. x (..., C), g (1,) -> (y, xhat = x / ||x||, inverse norm (..., 1))."""
    inv = 1.0 / np.sqrt((x * x).sum(axis=-1, keepdims=True))
    xhat = x * inv
    return g * xhat, xhat, inv


def scalenorm_backward(dy: np.ndarray, xhat: np.ndarray, inv: np.ndarray, g: np.ndarray):
    """(dx, dg): d xhat / dx = (I - xhat xhat^T) / ||x||, so dx = g / ||x|| (dy - xhat (dy . xhat))."""
    dg = np.array([(dy * xhat).sum()])
    dx = g * inv * (dy - xhat * (dy * xhat).sum(axis=-1, keepdims=True))
    return dx, dg


class ScaleNorm(Module):
    """(..., C) -> (..., C): g x / ||x||, one learned scalar `scale`. Hook points: `in`, `out`."""

    def __init__(self, n_embd: int, dtype=np.float32):
        super().__init__()
        self.scale = Parameter(np.full(1, math.sqrt(n_embd), dtype=dtype))
        self.hook_in, self.hook_out = HookPoint(), HookPoint()

    def forward(self, x: np.ndarray) -> np.ndarray:
        y, xhat, inv = scalenorm_forward(self.hook_in(x), self.scale.data)
        self._save(xhat=xhat, inv=inv)
        return self.hook_out(y)

    def backward(self, dy: np.ndarray) -> np.ndarray:
        c = self._pop_cache()
        dx, dg = scalenorm_backward(dy, c["xhat"], c["inv"], self.scale.data)
        self.scale.grad += dg
        return dx


@dataclass
class ToyConfig(GPTConfig):
    scale_norm: bool = setting(Bool(), False)  # ScaleNorm in place of every block norm


class ToyGPT(GPT):
    """A GPT whose block norms are ScaleNorms with `scale_norm` (the final norm stays)."""

    config_class = ToyConfig

    def __init__(self, config: ToyConfig, seed: int | None = None):
        super().__init__(config, seed)
        if config.scale_norm:
            for block in self.h:
                block.attn_norm = ScaleNorm(config.n_embd, self.dtype)
                if block.ff_norm is not None:
                    block.ff_norm = ScaleNorm(config.n_embd, self.dtype)

    @classmethod
    def param_count(cls, config: ToyConfig) -> int:
        """GPT's count, with each block norm's weights (and bias) replaced by one scalar."""
        count = super().param_count(config)
        if config.scale_norm:
            norms = config.n_layer * (1 if config.attn_only else 2)
            count += norms * (1 - norm_params(config.normalization, config.n_embd, config.bias))
        return count


def toy(**options) -> ToyGPT:
    model = ToyGPT(ToyConfig(**SIZES, scale_norm=True, dtype="float64", **options), seed=0)
    rng = np.random.default_rng(1)
    for _, p in model.named_parameters():  # weights far from their init: every gradient of some size
        p.data[...] += rng.normal(0, 0.3, p.shape)
    return model


# -- the recipe's steps hold ------------------------------------------------------------------------
def test_the_option_is_built_and_counted():
    model = toy()
    assert isinstance(model.h[1].ff_norm, ScaleNorm)
    assert "h.0.attn_norm.scale" in model.state_dict()
    assert ToyGPT.param_count(model.config) == model.num_parameters()


# -- the tools, unchanged ----------------------------------------------------------------------------
@pytest.mark.parametrize("lane", ["reference", "fast"])
def test_the_backward_walkthrough_checks_every_step(lane):
    from scratchformer.viz.backward import backward_steps

    ids = IDS[:, :-1]
    steps = backward_steps(toy(), ids, IDS[:, 1:], lane=lane)
    wrong = [f"{s.name}: {s.failures()[:1]}" for s in steps if not s.ok]
    assert not wrong, wrong
    assert any("attn_norm" in s.name for s in steps)  # the new layer is a step of its own


def test_the_walkthrough_finds_a_wrong_backward_of_the_option(monkeypatch):
    """The check above is no formality: the option's gradient of g off by 1% turns its steps red."""
    from scratchformer.viz.backward import backward_steps

    right = scalenorm_backward

    def off_by_one_percent(dy, xhat, inv, g):
        dx, dg = right(dy, xhat, inv, g)
        return dx, dg * 1.01

    monkeypatch.setitem(globals(), "scalenorm_backward", off_by_one_percent)
    steps = backward_steps(toy(), IDS[:, :-1], IDS[:, 1:])
    assert {s.name for s in steps if not s.ok} >= {"h.0.attn_norm", "h.1.ff_norm"}


def test_the_lens_reads_it():
    from scratchformer.lens import hook_names, run_with_cache
    from scratchformer.lens.report import lens_report

    model = toy()
    names = hook_names(model)
    assert {"blocks.0.attn_norm.in", "blocks.0.attn_norm.out", "blocks.1.ff_norm.out"} <= set(names)
    _, cache = run_with_cache(model, IDS)
    x, g = cache["blocks.0.attn_norm.in"], model.h[0].attn_norm.scale.data
    np.testing.assert_allclose(
        cache["blocks.0.attn_norm.out"], g * x / np.linalg.norm(x, axis=-1, keepdims=True)
    )
    report = lens_report(model, model.example(IDS[0]), steps=8)
    assert report.checks and all(line.endswith(" ok") for line in report.checks), report.checks


def test_export_refuses_it_in_one_line_and_writes_it_off(tmp_path):
    from scratchformer.interop.hf_lm import load_hf_causal_lm, save_hf_causal_lm

    with pytest.raises(ConfigError) as refused:
        save_hf_causal_lm(toy(), TOKENIZER, tmp_path / "on")
    message = str(refused.value)
    assert "\n" not in message and "scale_norm=True" in message and not (tmp_path / "on").exists()
    off = ToyGPT(ToyConfig(**SIZES), seed=0)
    back, _ = load_hf_causal_lm(save_hf_causal_lm(off, TOKENIZER, tmp_path / "off"))
    np.testing.assert_array_equal(back.eval()(IDS)[0], off.eval()(IDS)[0])
