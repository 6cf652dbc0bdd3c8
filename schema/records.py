"""A record's load check, as the rows have theirs (schema/results.py): each field declared with
`_field(check, default)` carries its check, applied when a JSON object is read."""
from __future__ import annotations

from dataclasses import MISSING, fields

from schema.results import CHECKS, ResultError, _valid


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
