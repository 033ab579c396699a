"""Test helper: the values a generated test tries for each setting of a config class, read from
the setting's declared spec (`XConfig.spec(name)`), so a setting added to a config joins every
generated test with no change to the test.

    setting_values(GPTConfig.spec("positional"), "learned")   # every choice of the string
    variations(GPTConfig, base)     # configs of `base` with one setting changed, each value once
"""

from __future__ import annotations

import dataclasses

from scratchformer.errors import ConfigError
from scratchformer.specs import Bool, Int, Maybe, Num, Str


def setting_values(spec, default) -> tuple:
    """The values tried for one setting: every choice of a string, both booleans, None and then
    each value of a Maybe, an integer's default and the next one (1 without a default), a
    number's default and one far from it."""
    if isinstance(spec, Maybe):
        return (None, *setting_values(spec.spec, None))
    if isinstance(spec, Str) and spec.choices:
        return spec.choices
    if isinstance(spec, Bool):
        return (False, True)
    if isinstance(spec, Int):
        return (spec.min or 1,) if default is None else (default, default + 1)
    if isinstance(spec, Num):
        other = default * 100 if default else 0.25 * (spec.below or spec.max or 1.0)
        return (default, other)
    raise AssertionError(f"no values for a setting of spec {type(spec).__name__}: teach setting_values")


def variations(config_class, base: dict) -> list:
    """`config_class(**base)` with each setting set to each of its values (from its spec, around
    base's value or the field's default), one setting at a time; a combination the config itself
    refuses is left out; a size the config refuses at value + 1 (n_head + 1 heads that do not
    divide n_embd) is tried at twice its value."""
    out = []
    for field in dataclasses.fields(config_class):
        here = base.get(field.name, field.default)
        for value in setting_values(config_class.spec(field.name), here):
            size = type(here) is int and value == here + 1
            tries = (value, 2 * here) if size else (value,)
            for tried in tries:
                try:
                    out.append(config_class(**{**base, field.name: tried}))
                    break
                except ConfigError:
                    pass
    return out
