"""The tables of a loaded run (`hccl-bench table`, the report page): its cells as rows, one per
launch, shown by their kinds' tables (kinds/collective.py: the nccl-tests table users read every day)."""
from __future__ import annotations

import kinds
from kinds.collective import host_cost_lines, render
from schema.results import Run

__all__ = ["host_cost_lines", "launch_rows", "render", "rows_of"]


def launch_rows(run: Run) -> list:
    """Every cell's row of each launch (a collective's with its launch's median round, so a --repeat or
    --ab-env run shows every launch and not only the first), for the kinds' tables."""
    return [row for cell in run.cells.values() for row in kinds.of_series(cell.series).launch_rows(cell, run.side)]


def rows_of(run: Run) -> list:
    """A loaded run's collective (sized) cells' rows of each launch."""
    return [row for row in launch_rows(run) if kinds.sized_row(row)]
