"""Fields with their load checks, for every record read from JSON (the rows of schema/results.py,
the run metadata, the calibration): a field declared with `column(check, default)` carries its
check, and `load_fields` applies them all, naming the record and field it refuses."""
from __future__ import annotations

import math
from dataclasses import MISSING, field, fields
from typing import Any


class ResultError(ValueError):
    """A result file or log that cannot be used; the message says which, where and why."""


CHECKS = {
    "text": "a string",
    "flag": "true or false",
    "whole": "a whole number >= 0",
    "count": "a whole number >= 1",
    "amount": "a finite number >= 0",
    "real": "a finite number",
    "ratio": "a finite number or null",
    "list": "a list",
    "object": "an object",
}


def column(check: str, default: Any = None, **meta):
    """A row field with its load check ("whole", "amount", ...); required when it has no default."""
    if default is MISSING:
        return field(metadata={"check": check, **meta})
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(), metadata={"check": check, **meta})
    return field(default=default, metadata={"check": check, **meta})


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


_CHECKS = {
    "text": lambda v: isinstance(v, str),
    "flag": lambda v: isinstance(v, bool),
    "whole": lambda v: _whole(v) and v >= 0,
    "count": lambda v: _whole(v) and v >= 1,
    "amount": lambda v: _number(v) and math.isfinite(v) and v >= 0,
    "real": lambda v: _number(v) and math.isfinite(v),
    "ratio": lambda v: v is None or (_number(v) and math.isfinite(v)),
    "list": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
}


def _valid(check: str, value) -> bool:
    return _CHECKS[check](value)




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
        if not _valid(check, value):
            raise ResultError(f"{where}.{f.name} must be {CHECKS[check]}, found {str(value)[:40]}")
        values[f.name] = value
    return values
