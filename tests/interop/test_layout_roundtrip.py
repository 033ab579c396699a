"""Every model a run can be is either refused by `export` in one line or reloads in transformers
as the same model: the combinations are generated from GPTConfig's declared settings
(`GPTConfig.schema()`), so a setting added there joins this test with no change here.

- The settings that decide whether a layout holds a model (those some layout of HF_LAYOUTS does
  not hold at any value, an undeclared one included) are tried in every combination of their
  values: each is refused in one line with nothing written, or exported.
- For each combination some layout holds, the settings every layout holds at any value (sizes
  aside: dropout, the norm's eps, tied or untied, dtype, ...) are tried in a set of exports in
  which every pair of their values appears together (all pairs, not all products: 2,880 exports
  would take minutes). Each export reloads in transformers with logits equal to the run's
  (float32: 1e-5 of the largest logit) and the same greedy tokens and text, and reads back into
  scratchformer bit for bit, writing the same config.json again.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from scratchformer.data.tokenizer import CharTokenizer  # noqa: E402
from scratchformer.errors import ConfigError  # noqa: E402
from scratchformer.interop.hf_lm import HF_LAYOUTS, hf_layout, load_hf_causal_lm, save_hf_causal_lm  # noqa: E402
from scratchformer.interop.layout import ANY  # noqa: E402
from scratchformer.models import GPT, GPTConfig  # noqa: E402
from scratchformer.nn import eval_mode  # noqa: E402
from scratchformer.specs import Bool, Int, Maybe, Num, Str  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

TOKENIZER = CharTokenizer(list("abcdefgh .\n"), special="<eot>")  # a names-style run's: 12 ids
# the integer settings that are sizes, at a tiny model's (an integer setting not named here is an option)
SIZES = dict(vocab_size=TOKENIZER.vocab_size, block_size=16, n_layer=2, n_head=2, n_embd=8)
PROMPT = "ab"
NEW = 8


def _values(spec, default) -> tuple:
    """The values tried for one setting, from its declared spec: every choice of a string, both
    booleans, None and then each value of a Maybe, a number's default and one far from it."""
    if isinstance(spec, Maybe):
        return (None, *_values(spec.spec, None))
    if isinstance(spec, Str) and spec.choices:
        return spec.choices
    if isinstance(spec, Bool):
        return (False, True)
    if isinstance(spec, Int):
        return (spec.min or 1,) if default is None else (default, default + 1)
    if isinstance(spec, Num):
        other = default * 100 if default else 0.25 * (spec.below or spec.max or 1.0)
        return (default, other)
    raise AssertionError(f"no values for a setting of spec {type(spec).__name__}: teach _values")


def _options() -> dict[str, tuple]:
    """Every setting of GPTConfig but the sizes -> the values tried."""
    return {
        f.name: _values(GPTConfig.spec(f.name), f.default)
        for f in dataclasses.fields(GPTConfig)
        if f.name not in SIZES
    }


OPTIONS = _options()
# held at any value by every layout: varied in all pairs; the others decide what is exported
FREE = [name for name in OPTIONS if all(layout.holds.get(name) is ANY for layout in HF_LAYOUTS)]
DECIDING = [name for name in OPTIONS if name not in FREE]


def _all_pairs(values: dict[str, tuple]) -> list[dict]:
    """Rows over `values` (setting -> its values) in which every pair of values of two settings
    appears together at least once: the greedy covering, deterministic."""
    names = list(values)
    uncovered = {
        (a, va, b, vb) for a, b in itertools.combinations(names, 2) for va in values[a] for vb in values[b]
    }
    rows = []
    while uncovered:
        a, va, b, vb = min(uncovered, key=repr)
        row = {a: va, b: vb}
        for name in names:  # each other setting: the value that covers the most pairs left
            if name not in row:
                row[name] = max(
                    values[name],
                    key=lambda v: sum(
                        (n, row[n], name, v) in uncovered or (name, v, n, row[n]) in uncovered for n in row
                    ),
                )
        rows.append(row)
        uncovered -= {(x, row[x], y, row[y]) for x, y in itertools.combinations(names, 2)}
    return rows


def _config(**options) -> GPTConfig | None:
    """The tiny GPTConfig of these options, or None where the config itself refuses them."""
    try:
        return GPTConfig(**SIZES, **options)
    except ConfigError:
        return None


def _weights(model: GPT, seed: int) -> GPT:
    """Weights far larger than the 0.02 init: logits far from ties, so float32 greedy choices agree."""
    rng = np.random.default_rng(seed)
    for name, p in model.named_parameters():
        norm = name.endswith("norm.weight") or name == "ln_f.weight"
        scale = 0.1 if name.endswith("bias") else 0.3
        p.data[...] = (1.0 if norm else 0.0) + rng.normal(0, scale, p.shape)
    return model


def test_the_schema_gives_the_options_and_every_setting_is_tried():
    """The generated lists are what the schema declares: a setting added to GPTConfig is tried."""
    assert set(OPTIONS) | set(SIZES) == set(GPTConfig.schema().fields)
    assert {"positional", "normalization", "activation", "bias", "n_kv_head", "attn_only"} <= set(DECIDING)
    assert {"tie_weights", "dropout", "dtype", "layer_norm_eps"} <= set(FREE)
    rows = _all_pairs({name: OPTIONS[name] for name in FREE})
    for a, b in itertools.combinations(FREE, 2):
        for va, vb in itertools.product(OPTIONS[a], OPTIONS[b]):
            assert any(r[a] == va and r[b] == vb for r in rows), (a, va, b, vb)
    assert len(rows) < 0.1 * np.prod([len(OPTIONS[n]) for n in FREE])


def _deciding_combinations():
    for values in itertools.product(*(OPTIONS[name] for name in DECIDING)):
        config = _config(**dict(zip(DECIDING, values)))
        if config is not None:
            yield config


def test_every_combination_is_refused_in_one_line_or_held(tmp_path):
    held, refused = [], 0
    for i, config in enumerate(_deciding_combinations()):
        model = GPT(config, seed=0)
        try:
            layout = hf_layout(model)
        except ConfigError as e:
            refused += 1
            out = tmp_path / f"refused{i}"
            with pytest.raises(ConfigError) as again:
                save_hf_causal_lm(model, TOKENIZER, out)
            assert str(again.value) == str(e) and "\n" not in str(e) and not out.exists()
            continue
        held.append((layout.family, config))
    assert refused > 10 * len(held) > 0
    assert {family for family, _ in held} == {layout.family for layout in HF_LAYOUTS}


def _held():
    """Each combination of the deciding settings some layout holds, once."""
    out = []
    for config in _deciding_combinations():
        if any(not layout.cannot_hold(config) for layout in HF_LAYOUTS):
            out.append({name: getattr(config, name) for name in DECIDING})
    return out


@pytest.mark.parametrize("deciding", _held(), ids=lambda d: "-".join(f"{v}" for v in d.values()))
def test_each_export_reloads_in_transformers_as_the_same_model(tmp_path, deciding):
    rows = _all_pairs({name: OPTIONS[name] for name in FREE})
    ids = TOKENIZER.hf_form().encode_prompt(PROMPT)[None, :]
    for i, free in enumerate(rows):
        config = _config(**deciding, **free)
        if config is None:
            continue
        model = _weights(GPT(config, seed=0), seed=i)
        out = save_hf_causal_lm(model, TOKENIZER, tmp_path / f"hf{i}")
        with eval_mode(model):
            ours = model(ids)[0]
            greedy = model.generate(ids, NEW, temperature=0)
        hf = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=getattr(torch, config.dtype)).eval()
        with torch.no_grad():
            theirs = hf(torch.tensor(ids)).logits.numpy()
            their_greedy = hf.generate(
                torch.tensor(ids),
                attention_mask=torch.ones(ids.shape, dtype=torch.long),  # the start token is no padding
                do_sample=False,
                max_new_tokens=NEW,
                eos_token_id=None,
                pad_token_id=0,
            ).numpy()
        where = f"{deciding} {free}"
        assert np.abs(theirs - ours).max() <= 1e-5 * np.abs(ours).max(), where
        np.testing.assert_array_equal(their_greedy, greedy, err_msg=where)
        tok = transformers.AutoTokenizer.from_pretrained(out)
        assert tok.decode(their_greedy[0], skip_special_tokens=True) == TOKENIZER.decode(greedy[0]), where
        # and back into scratchformer: bit for bit, and written again the same
        back, _ = load_hf_causal_lm(out, dtype=config.dtype)
        with eval_mode(back):
            np.testing.assert_array_equal(back(ids)[0], ours, err_msg=where)
        again = save_hf_causal_lm(back, TOKENIZER, tmp_path / f"again{i}")
        assert json.loads((again / "config.json").read_text()) == json.loads(
            (out / "config.json").read_text()
        )
