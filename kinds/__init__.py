"""The bench kinds, one module each: a new kind is its module (exposing KIND) and one line in _MODULES.
Everything that iterates kinds reads KINDS and asks the kind; no other module knows what a kind holds."""
from __future__ import annotations

import importlib
from typing import Optional, cast

from kinds.base import Case, Kind
from schema.results import CollectiveRow, Row, Series

_MODULES = (   # kinds/<name>.py, each exposing KIND; the order is the tables' and the sweep's
    "collective",
    "overhead",
    "linear",
    "pipeline",
    "overlap",
    "bucket",
    "compress",
    "expert",
    "hybrid",
)
KINDS: tuple[Kind, ...] = tuple(importlib.import_module(f"kinds.{name}").KIND for name in _MODULES)
# a named bench -> the row type its cells hold, for whoever reads result files (schema.results.row_from_json)
ROW_TYPES: dict[str, type[Row]] = {bench: k.row_type for k in KINDS for bench in getattr(k.row_type, "BENCHES", ())}


def of_case(case: Case) -> Kind:
    """The kind whose cases `case` is one of."""
    return next(k for k in KINDS if isinstance(case, k.case_type))


def sized(series: Series) -> bool:
    """Do the series' cells span message sizes (Kind.sized)? False for rows no kind here makes (tuning)."""
    return any(k.sized for k in KINDS if k.name == series.bench)


def of_series(series: Series) -> Kind:
    """The kind whose cells the series' are (a bare Kind for rows no kind here makes: tuning)."""
    return next((k for k in KINDS if k.name == series.bench), Kind())


def sized_row(row: Row) -> Optional[CollectiveRow]:
    """`row` where its cells span message sizes (the collective sweep's row), else None."""
    return cast(CollectiveRow, row) if sized(Series.of(row)) else None


def rows_of(kind: Kind, rows: list) -> list:
    """The rows among `rows` that are this kind's (its row type, and its bench where the type is shared)."""
    return [r for r in rows if isinstance(r, kind.row_type) and getattr(r, "bench", kind.name) == kind.name]


def tables(rows: list, kinds: tuple[Kind, ...] = KINDS) -> list[str]:
    """Each kind's table section of `rows`, in KINDS order, the kinds without rows left out."""
    return [text for kind in kinds if (mine := rows_of(kind, rows)) and (text := kind.table(mine).strip("\n"))]
