"""Sequential A/B (--ab-until-decided): look at planned points, stop measuring a cell once it is
decided, keep the false-positive rate at any stopping time (docs/statistics.md, "Until decided")."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from itertools import accumulate
from typing import Optional

from reports.compare import ALPHA, CellResult, Comparison, budget, compare, conclude
from schema.calibration import Calibration
from schema.judgement import DEFAULT_ESTIMATOR, DEFAULT_MIN_EFFECT, Direction, Verdict
from schema.results import Cell, Run, key_order

DECIDED = (Direction.REGRESSION, Direction.IMPROVEMENT, Direction.NO_CHANGE)

# launches after which a look is planned; none before 6 (docs/statistics.md, "Sequential A/B")
LOOK_POINTS = (6, 8, 12, 16, 24, 32, 48, 64, 96, 128)


def planned_looks(max_launches: int) -> list[int]:
    """The launch counts a look comes after: the planned points below the budget, then the budget."""
    return [n for n in LOOK_POINTS if n < max_launches] + [max_launches]


def look_alpha(launches: int, max_launches: int, alpha: float = ALPHA) -> float:
    """The share of alpha spent at the look after `launches` launches (0 where none is planned):
    linear in the launches since the previous look."""
    looks = planned_looks(max_launches)
    if launches not in looks:
        return 0.0
    i = looks.index(launches)
    return alpha * (launches - (looks[i - 1] if i else 0)) / max_launches


@dataclass
class Look:
    launches: int                 # launches the look rests on
    alpha: float                  # the level it judged at
    decided: dict[str, int]       # direction ("regression", "improvement", "no change") -> cells decided at this look
    remaining: int                # cells still undecided after it

    def text(self, total: int, spent: float) -> str:
        newly = ", ".join(f"{n} {v}" for v, n in self.decided.items() if n) or "none"
        return (f"# A/B look after {self.launches} launches (alpha {self.alpha:.4f}, spent {spent:.4f}): "
                f"decided {total - self.remaining} of {total} cells (new: {newly}), {self.remaining} remaining")


@dataclass
class Sequential:
    comparison: Comparison        # every cell, with the verdict of the look that decided it or of the last look
    looks: list[Look] = field(default_factory=list)
    decided_at: dict[tuple, int] = field(default_factory=dict)   # cell key -> launches when decided
    max_launches: int = 0
    alpha: float = ALPHA
    estimator: str = DEFAULT_ESTIMATOR
    progress: list[str] = field(default_factory=list)   # a line per look: what it decided, the alpha spent so far

    @property
    def undecided(self) -> list[tuple]:
        return [c.key for c in self.comparison.cells if c.key not in self.decided_at]

    @property
    def launches_used(self) -> int:
        return max((look.launches for look in self.looks), default=0)

    def record(self) -> dict:
        """What the result file keeps of the procedure (the verdicts are replayed from the data)."""
        return {"max_launches": self.max_launches, "alpha": self.alpha, "launches_used": self.launches_used,
                "estimator": self.estimator, "looks": [vars(look) for look in self.looks],
                "decided_at": {f"{k[0].label()} {k[1]} B": n for k, n in self.decided_at.items()}}


def _upto(run: Run, launches: int, keys: set[tuple]) -> Run:
    """The run as it stood after `launches` launches, only `keys`' cells."""
    cells = {}
    for key, cell in run.cells.items():
        kept = {i: v for i, v in cell.launches.items() if i < launches}
        if key in keys and kept:
            rows = {i: r for i, r in cell.rows.items() if i < launches}
            cells[key] = Cell(cell.series, cell.size, rows[min(rows)], kept, rows)
    return replace(run, cells=cells)


def launches_in(run: Run) -> int:
    return 1 + max((i for c in run.cells.values() for i in c.launches), default=-1)


def run_looks(base: Run, cand: Run, max_launches: int, min_effect: float = DEFAULT_MIN_EFFECT,
              alpha: float = ALPHA, calibration: Optional[Calibration] = None, estimator: str = DEFAULT_ESTIMATOR) -> Sequential:
    """Replay every look the recorded launches allow (base = side A, cand = side B), judging each
    launch by `estimator` (reports/estimators.py)."""
    keys = set(base.cells) & set(cand.cells)
    done = min(launches_in(base), launches_in(cand), max_launches)
    upto = _upto(base, done, keys), _upto(cand, done, keys)   # every launch the looks rest on
    rank = {key: i for i, key in enumerate(sorted(keys, key=key_order))}
    settled: dict[tuple, CellResult] = {}
    out = Sequential(Comparison(base.path, cand.path, [], estimator=estimator), max_launches=max_launches, alpha=alpha,
                     estimator=estimator)
    last: Comparison | None = None
    looks = [n for n in planned_looks(max_launches) if n <= done] if keys else []
    for n in looks or [done]:   # before the first planned look (or with no shared cell): one comparison, every cell open
        active = keys - set(settled)
        if settled and not active:
            break
        a_look = look_alpha(n, max_launches, alpha) if looks else alpha
        last = compare(_upto(base, n, active), _upto(cand, n, active), calibration=calibration, min_effect=min_effect,
                       alpha=a_look, settled=list(settled.values()), estimator=estimator)
        if not looks:
            for c in last.cells:
                c.outcome, c.note = Verdict(), f"{done} launches: before the first look"
            break
        decided = {d.value: 0 for d in DECIDED}
        for c in last.cells:
            if c.outcome.confirmed:   # a regression, an improvement or no change, confirmed at this look's level
                settled[c.key] = c
                out.decided_at[c.key] = n
                decided[c.outcome.direction.value] += 1
        out.looks.append(Look(n, a_look, decided, len(keys) - len(settled)))
    assert last is not None   # the first pass always compares
    cells = {c.key: c for c in last.cells if c.key not in settled}
    cells.update(settled)
    out.comparison = replace(last, base=base.path, cand=cand.path, cells=sorted(cells.values(), key=lambda c: rank[c.key]))
    out.comparison.only_base = sorted(set(base.cells) - keys, key=key_order)
    out.comparison.only_cand = sorted(set(cand.cells) - keys, key=key_order)
    spent = accumulate(look.alpha for look in out.looks)
    out.progress = [look.text(len(out.comparison.cells), alpha_spent) for look, alpha_spent in zip(out.looks, spent)]
    out.comparison.budget = budget(*upto)
    conclude(out.comparison)
    return out
