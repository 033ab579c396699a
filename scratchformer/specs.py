"""Value specs: which JSON values a setting or a run-file field may hold (`Int`, `Num`, `Str`, ...).

A spec says which values one setting may hold. The same spec object checks the setting when a
config is built (`scratchformer.settings`: a ConfigError naming the field), when a run file is
read or written (training/schema.py: a RunFileError naming the file and the field) and when the
command line parses the option (`parse` + `check`: one line naming the option). So a value the
command line accepts is always a value the checkpoint can hold, and a choice added to a
config's declaration is accepted everywhere at once.
"""

from __future__ import annotations

import json
import math

import numpy as np

from scratchformer.checks import ascii_float, ascii_int, is_int, is_number

BIG = 2**31 - 1  # upper bound for sizes, counts and step numbers: far beyond any run that fits


class SchemaMismatch(Exception):
    """Raised by a spec with the field path, what was expected and the value."""

    def __init__(self, where: str, expected: str, value):
        super().__init__(f"{where} must be {expected}, got {value!r}")
        self.where, self.expected, self.value = where, expected, value


class Int:
    """An integer (not a bool) in [min, max]."""

    def __init__(self, min: int | None = None, max: int | None = BIG):
        self.min, self.max = min, max

    def describe(self) -> str:
        lo = "" if self.min is None else f" >= {self.min}"
        hi = "" if self.max is None else f" <= {self.max}"
        return f"an integer{lo}{' and' if lo and hi else ''}{hi}"

    def parse(self, text: str) -> int:
        return ascii_int(text)

    def check(self, value, where: str) -> None:
        if not is_int(value):
            raise SchemaMismatch(where, self.describe(), value)
        if (self.min is not None and value < self.min) or (self.max is not None and value > self.max):
            raise SchemaMismatch(where, self.describe(), value)


class Num:
    """An int or float in [min, max] (and > above, < below, when given); NaN and infinity only
    where finite=False."""

    def __init__(
        self,
        min: float | None = None,
        max: float | None = None,
        finite: bool = True,
        above: float | None = None,
        below: float | None = None,
    ):
        self.min, self.max, self.finite, self.above, self.below = min, max, finite, above, below

    def describe(self) -> str:
        parts = [f">= {self.min:g}"] if self.min is not None else []
        parts += [f"> {self.above:g}"] if self.above is not None else []
        parts += [f"<= {self.max:g}"] if self.max is not None else []
        parts += [f"< {self.below:g}"] if self.below is not None else []
        return (
            "a "
            + ("finite " if self.finite else "")
            + "number"
            + (" " + " and ".join(parts) if parts else "")
        )

    def parse(self, text: str) -> float:
        return ascii_float(text)

    def check(self, value, where: str) -> None:
        if not is_number(value):
            raise SchemaMismatch(where, self.describe(), value)
        if self.finite and not math.isfinite(value):
            raise SchemaMismatch(where, self.describe(), value)
        if (
            (self.min is not None and not value >= self.min)
            or (self.max is not None and not value <= self.max)
            or (self.above is not None and not value > self.above)
            or (self.below is not None and not value < self.below)
        ):
            raise SchemaMismatch(where, self.describe(), value)


class Str:
    """A string, optionally one of `choices` (a config's choices: the CLI offers exactly these)."""

    def __init__(self, choices: tuple[str, ...] | None = None, max_len: int = 4096):
        self.choices, self.max_len = (None if choices is None else tuple(choices)), max_len

    def describe(self) -> str:
        return "one of " + ", ".join(map(repr, self.choices)) if self.choices else "a string"

    def parse(self, text: str) -> str:
        return text

    def check(self, value, where: str) -> None:
        if not isinstance(value, str) or len(value) > self.max_len:
            raise SchemaMismatch(where, self.describe(), value)
        if self.choices is not None and value not in self.choices:
            raise SchemaMismatch(where, self.describe(), value)


class Bool:
    def describe(self) -> str:
        return "true or false"

    def check(self, value, where: str) -> None:
        if not isinstance(value, (bool, np.bool_)):
            raise SchemaMismatch(where, self.describe(), value)


class Maybe:
    """None (JSON null), or a value matching spec."""

    def __init__(self, spec):
        self.spec = spec

    def describe(self) -> str:
        return f"null or {self.spec.describe()}"

    def parse(self, text: str):
        return self.spec.parse(text)

    def check(self, value, where: str) -> None:
        if value is not None:
            self.spec.check(value, where)


class List:
    def __init__(self, item, max_len: int = 2**20, unique: bool = False):
        self.item, self.max_len, self.unique = item, max_len, unique

    def describe(self) -> str:
        return f"a list of {self.item.describe()}" + (" without repeats" if self.unique else "")

    def check(self, value, where: str) -> None:
        if not isinstance(value, list) or len(value) > self.max_len:
            raise SchemaMismatch(where, self.describe(), value)
        for i, v in enumerate(value):
            self.item.check(v, f"{where}[{i}]")
        if self.unique and len(set(map(json.dumps, value))) != len(value):
            raise SchemaMismatch(where, self.describe(), value)


class Obj:
    """A JSON object with exactly these keys (`optional` ones may be absent; `extra`: a spec
    for any other key, or None to reject other keys)."""

    def __init__(self, fields: dict, optional: tuple[str, ...] = (), extra=None):
        self.fields, self.optional, self.extra = fields, set(optional), extra

    def describe(self) -> str:
        return "an object"

    def check(self, value, where: str) -> None:
        if not isinstance(value, dict):
            raise SchemaMismatch(where, "an object {...}", value)
        prefix = f"{where}." if where else ""
        for name, spec in self.fields.items():
            if name in value:
                spec.check(value[name], prefix + name)
            elif name not in self.optional:
                raise SchemaMismatch(prefix + name, f"present ({spec.describe()})", "missing")
        for name in value.keys() - self.fields.keys():
            if self.extra is None:
                raise SchemaMismatch(prefix + name, "absent (not a known field)", value[name])
            self.extra.check(value[name], prefix + name)


class Tagged:
    """An object whose schema is picked by the value of one key, e.g. config.json's "kind"."""

    def __init__(self, key: str, variants: dict[str, Obj]):
        self.key, self.variants = key, variants

    def describe(self) -> str:
        return "an object"

    def check(self, value, where: str) -> None:
        if not isinstance(value, dict):
            raise SchemaMismatch(where, "an object {...}", value)
        tag_where = f"{where}.{self.key}" if where else self.key
        Str(tuple(self.variants)).check(value.get(self.key), tag_where)
        self.variants[value[self.key]].check(value, where)


# The specs many settings share.
POSITIVE = Int(min=1)
NON_NEGATIVE = Int(min=0)
PROBABILITY = Num(min=0.0, below=1.0)  # a dropout rate or a label-smoothing weight
SEED = Int(min=0, max=2**63 - 1)  # numpy seeds any non-negative int; the bound keeps seed + 1 an int64
