"""Which launches of a history ran with ranks 0 and 1's cores where they usually are (near, far or
moved, from each case's `cores_rt_ns`), so a night's point comes from one placement. The method and
what it cannot tell apart: docs/results.md (Where the cores were: reports/placement.py)."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace

from schema.stats import median

FAR = 1.6          # a round trip past this many times the near level is another placement (VM: 2.2x apart)
NEAR_MODE = 1.25   # the near level's own mode: a VM's round trips fall in modes (one host: 375-425 ns, 500-600,
#                    675-725, 825-875), and FAR's near takes in the second; --estimator fastest wants one in the first


@dataclass(frozen=True)
class Placement:
    """A history's placements: its near level (ns), which one is usual, and how many cases ran in each."""
    near_ns: float
    usual: str                  # "near" or "far"
    cases: dict[str, int]       # "near" / "far" / "moved" -> cases (cells x launches) with the round trip
    fastest: bool = False       # near judged because it is the fastest (--estimator fastest), not the most common

    def state(self, round_trips: list) -> str:
        """near, far or moved for one case's [before, after] round trips."""
        limit = FAR * self.near_ns
        if max(round_trips) <= limit:
            return "near"
        return "far" if min(round_trips) > limit else "moved"

    def kept(self, cell) -> list[int]:
        """The cell's launches to judge: those in the usual placement (one without the round trip, in a
        history that has it, is in no known placement and left out too)."""
        if not any(_probed(row) for row in cell.rows.values()) and not _probes_expected(cell.row):
            return sorted(cell.rows)   # a case the ranks never probe (a layer, ranks 0 and 1 on two hosts)
        kept = [i for i, row in sorted(cell.rows.items()) if _probed(row) and self.state(row.cores_rt_ns) == self.usual]
        if self.fastest and not any(max(cell.rows[i].cores_rt_ns) <= NEAR_MODE * self.near_ns for i in kept):
            return []   # no launch in the near level's own mode: the fastest would be one placement slower
        return kept

    def judged(self, cell):
        """The cell with only its kept launches (None: it has none)."""
        if not (kept := self.kept(cell)):
            return None
        return replace(cell, row=cell.rows[kept[0]], launches={i: cell.launches[i] for i in kept},
                       rows={i: cell.rows[i] for i in kept}, waited={i: w for i, w in cell.waited.items() if i in kept})

    @property
    def left_out(self) -> int:
        return sum(n for state, n in self.cases.items() if state != self.usual)

    def record(self) -> dict:
        return {"near_ns": self.near_ns, "far_ratio": FAR, "usual": self.usual, "cases": self.cases}

    def text(self) -> str:
        """One line: where ranks 0 and 1's cores usually were, and what ran elsewhere."""
        other, where = {"near": "far", "far": "near"}[self.usual], "near (fastest)" if self.fastest else "usually " + self.usual
        return (f"placement: ranks 0 and 1's cores {where} (cache-line round trip "
                f"{'<=' if self.usual == 'near' else '>'} {FAR * self.near_ns:.0f} ns); {self.cases.get(other, 0)} "
                f"case launches {other} and {self.cases.get('moved', 0)} moved during the case left out, of "
                f"{sum(self.cases.values())}")


def _probes_expected(row) -> bool:
    """A case the ranks probe when it is recorded now: a sized kind's on one node (collectives/placement.py)."""
    return type(row).SIZED and len(getattr(row, "hosts", None) or {}) <= 1


def round_trip_ns(cell) -> float | None:
    """Where ranks 0 and 1's cores were for a cell: the median of its launches' faster round trips (ns), or None."""
    fastest = sorted(float(min(row.cores_rt_ns)) for row in cell.rows.values() if _probed(row))
    return median(fastest) if fastest else None


def _probed(row) -> bool:
    return _probed_rt(getattr(row, "cores_rt_ns", None))


def _probed_rt(rt) -> bool:
    return isinstance(rt, list) and len(rt) == 2 and all(isinstance(v, (int, float)) and v > 0 for v in rt)


def of(runs: list, near_judged: bool = False) -> Placement | None:
    """The placements of `runs`' cases, the usual one where most of them ran (docs/results.md says why), or near
    where `near_judged` (--estimator fastest) and any ran near; None when none carries the round trip or ran near or far."""
    probes = [row.cores_rt_ns for run in runs for cell in run.cells.values() for row in cell.rows.values() if _probed(row)]
    if not probes:
        return None
    fastest = sorted(float(min(p)) for p in probes)
    near = fastest[min(len(fastest) - 1, max(1, len(fastest) // 100))]
    counts = Counter(map(Placement(near, "near", {}).state, probes))
    if not counts["near"] + counts["far"]:
        return None
    usual = "far" if counts["far"] > counts["near"] and not (near_judged and counts["near"]) else "near"
    return Placement(near, usual, {s: counts.get(s, 0) for s in ("near", "far", "moved")}, near_judged and usual == "near")


@dataclass(frozen=True)
class TopUp:
    """Before a --top-up launch: the cells of tonight's run still short of launches in the usual placement."""
    short: frozenset       # cell keys to launch again
    stopped: str = ""      # why no top-up launch runs any more ("" while they do)
    usual: str = ""        # the history's usual placement: "near" or "far"
    probed: frozenset = frozenset()   # tonight's cells whose ranks 0 and 1 are probed (one node, a collective)

    def why_not(self, key: tuple, wanted: int) -> str:
        """Why a top-up launch does not run this cell ('' when it does)."""
        if self.stopped:
            return f"top-ups stopped: {self.stopped}"
        if key in self.short:
            return ""
        if key not in self.probed:
            return "no launch of it probed its cores tonight (none ran, or ranks 0 and 1 are on different hosts)"
        return f"{wanted} launches with ranks 0 and 1's cores {self.usual} (their usual placement) already"


def top_up(runs: list, tonight, wanted: int, last_top_up: list | None = None) -> TopUp:
    """Tonight's cells (in `runs`, the history) with fewer than `wanted` launches in the usual placement;
    top-ups stop once the last one (`last_top_up`: its cases' round trips) landed none there."""
    placement = of(runs)
    if placement is None:
        return TopUp(frozenset(), "no case carries its cores' round trip")
    if last_top_up and not any(_probed_rt(rt) and placement.state(rt) == placement.usual for rt in last_top_up):
        return TopUp(frozenset(), f"the last one ran none of its {len(last_top_up)} cases with the cores "
                                  f"{placement.usual} (their usual placement): the host has moved them for now")
    probed = frozenset(key for key, cell in tonight.cells.items() if _probes_expected(cell.row))
    return TopUp(frozenset(key for key in probed if len(placement.kept(tonight.cells[key])) < wanted),
                 usual=placement.usual, probed=probed)
