"""Fields with their load checks, for every record read from JSON (the rows of schema/results.py,
the run metadata, the calibration): a field declared with `column(check, default)` carries its
check, and `load_fields` applies them all, naming the record and field it refuses."""
from __future__ import annotations

import math
from dataclasses import MISSING, field, fields
from typing import Any


class ResultError(ValueError):
    """A result file or log that cannot be used; the message says which, where and why."""


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


CHECKS = {   # check -> (what a refusal says the value must be, the test)
    "text": ("a string", lambda v: isinstance(v, str)),
    "flag": ("true or false", lambda v: isinstance(v, bool)),
    "whole": ("a whole number >= 0", lambda v: _whole(v) and v >= 0),
    "count": ("a whole number >= 1", lambda v: _whole(v) and v >= 1),
    "amount": ("a finite number >= 0", lambda v: _number(v) and math.isfinite(v) and v >= 0),
    "real": ("a finite number", lambda v: _number(v) and math.isfinite(v)),
    "ratio": ("a finite number or null", lambda v: v is None or (_number(v) and math.isfinite(v))),
    "list": ("a list", lambda v: isinstance(v, list)),
    "object": ("an object", lambda v: isinstance(v, dict)),
}


def column(check: str, default: Any = None, **meta):
    """A row field with its load check ("whole", "amount", ...); required when it has no default."""
    if default is MISSING:
        return field(metadata={"check": check, **meta})
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(), metadata={"check": check, **meta})
    return field(default=default, metadata={"check": check, **meta})


def load_fields(cls: type, data: dict, where: str) -> dict:
    """`cls`'s fields present in `data`, each checked; a None of an optional field (default None)
    is "not recorded" and left out, as are unknown keys. ResultError names `where` and the field."""
    values = {}
    for f in fields(cls):
        if f.name not in data:
            if f.default is MISSING and f.default_factory is MISSING:
                raise ResultError(f"{where}.{f.name} is missing")
            continue
        value, check = data[f.name], f.metadata["check"]
        if value is None and f.default is None:
            continue
        if not CHECKS[check][1](value):
            raise ResultError(f"{where}.{f.name} must be {CHECKS[check][0]}, found {str(value)[:40]}")
        values[f.name] = value
    return values
