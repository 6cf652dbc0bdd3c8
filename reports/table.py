"""The tables of a loaded run (`hccl-bench table`, the report page): its cells as rows, one per
launch, shown by their kinds' tables (kinds/collective.py: the nccl-tests table users read every day)."""
from __future__ import annotations

from dataclasses import replace

from collectives.ops import bandwidths
from kinds.collective import host_cost_lines, render
from schema.results import CollectiveRow, Run
from schema.stats import median

__all__ = ["host_cost_lines", "launch_rows", "render", "rows_of"]


def rows_of(run: Run) -> list[CollectiveRow]:
    """A loaded run's collective cells as table rows, one per launch (its median round), so a
    --repeat or --ab-env run shows every launch and not only the first."""
    rows = []
    for cell in run.cells.values():
        for launch, times in sorted(cell.launches.items()):
            row = cell.rows.get(launch, cell.row)
            if not isinstance(row, CollectiveRow):
                continue
            t = median(times)
            algbw, busbw = bandwidths(row.op, cell.size, t, row.nranks, row.algo)
            rows.append(replace(row, launch=launch, side=run.side, time_us=t * 1e6, algbw_gbps=algbw, busbw_gbps=busbw))
    return rows


def launch_rows(run: Run) -> list:
    """Every cell's row of each launch (a collective's with its launch's median time), for the kinds' tables."""
    collective = rows_of(run)
    return collective + [replace(row, side=run.side) for cell in run.cells.values() for _, row in sorted(cell.rows.items())
                         if not isinstance(row, CollectiveRow)]
