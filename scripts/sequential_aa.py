"""The A/A false-positive rate of the sequential A/B procedure, measured on real launches.

    python scripts/sequential_aa.py results/<an --ab-until-decided A/A run> [--trials 400]

In an A/A (side B sets a variable nothing reads) the two sides of a launch are exchangeable, so
swapping them in a random half of the launches draws another A/A from the same machine, with its
real drift, outliers and descheduled launches. Each draw is judged by the same looks as the
session (reports/sequential.py, the run's own budget); the script prints how many draws confirmed
any regression or improvement. The procedure promises at most alpha (0.05). A cell stopped early
by the live run has fewer launches; draws use what each cell has.
"""
from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from reports.compare import ALPHA  # noqa: E402
from reports.gate import recorded_min_effect  # noqa: E402
from reports.result_files import load  # noqa: E402
from reports.sequential import run_looks  # noqa: E402
from schema.judgement import IMPROVEMENT, REGRESSION  # noqa: E402
from schema.results import Cell, Run  # noqa: E402


def swapped(a: Run, b: Run, flip: set[int]) -> tuple[Run, Run]:
    """Sides A and B with launches in `flip` exchanged (rows and round times)."""
    def side(mine: Run, other: Run) -> Run:
        cells = {}
        for key, cell in mine.cells.items():
            theirs = other.cells[key]
            launches = {i: (theirs if i in flip else cell).launches[i] for i in cell.launches if i in theirs.launches}
            rows = {i: (theirs if i in flip else cell).rows[i] for i in launches}
            cells[key] = Cell(cell.series, cell.size, cell.row, launches, rows)
        return replace(mine, cells=cells)
    shared = set(a.cells) & set(b.cells)
    a, b = replace(a, cells={k: a.cells[k] for k in shared}), replace(b, cells={k: b.cells[k] for k in shared})
    return side(a, b), side(b, a)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", help="an --ab-until-decided A/A run (results.json or its folder)")
    parser.add_argument("--trials", type=int, default=400)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    a, b = load(args.run, side="A"), load(args.run, side="B")
    budget = int(a.meta.options and a.meta.options.repeat or 0)
    launches = sorted({i for c in a.cells.values() for i in c.launches})
    rng = np.random.default_rng(args.seed)
    flagged, decided = 0, []
    for _ in range(args.trials):
        flip = {i for i in launches if rng.random() < 0.5}
        seq = run_looks(*swapped(a, b, flip), budget, min_effect=recorded_min_effect(b))
        flagged += any(c.outcome.kind in (REGRESSION, IMPROVEMENT) for c in seq.comparison.cells)
        decided.append(len(seq.decided_at))
    cells = len(set(a.cells) & set(b.cells))
    print(f"# {args.run}: {cells} cells, {len(launches)} launches recorded, budget {budget}")
    print(f"# A/A false-positive rate: {flagged} of {args.trials} side-swapped draws confirmed a regression or an "
          f"improvement ({flagged / args.trials:.1%}; the procedure promises <= {ALPHA:.0%})")
    print(f"# cells decided per draw: median {np.median(decided):.0f} of {cells}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
