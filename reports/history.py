"""Nightly guard: each cell's history across runs and the newest change point in it (ARCHITECTURE.md,
Comparing runs; the method, the canary and the machine-alert rule: docs/statistics.md, "Nightly")."""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Optional

import numpy as np

from reports import compare
from reports.canary import CanaryView, coinciding
from reports.canary import judge as judge_canary
from reports.change_points import MIN_RUNS, MIN_SEGMENT, change_points
from reports.compare import ALPHA, CellResult, Comparison, assign_verdicts, band_key, by_series, conclude, fdr
from reports.estimators import launch_value
from reports.placement import Placement
from reports.placement import of as placements
from reports.provenance_diff import provenance_diff, run_provenance
from reports.result_files import load
from schema.calibration import Calibration
from schema.judgement import CHANGES, DEFAULT_ESTIMATOR, DEFAULT_MIN_EFFECT, REGRESSION, Cause, Direction, Samples, Verdict
from schema.results import NoCells, ResultError, Run, Series, key_order

NEWEST_UNDECIDED = Verdict(cause=Cause.HISTORY, newest=True)   # the newest night, before it is judged against its level
PLATFORM = ("nranks", "hosts")   # what makes a night another platform (a night that lost a backend is not)
DEFAULT_WINDOW = 7       # a change fails the job only if it began within the last N runs
POWER = 0.8              # what "could have seen" means: the change found this often
MACHINE_NIGHTS = MIN_SEGMENT + 1   # a machine alert: the step held this many nights, the newest among them
MACHINE_MIN_EFFECT = 0.10          # ... and at least this large (Greyhound's floor for an alert; Conbench waits for 5 sigma)
MACHINE_ALPHA = 0.01   # ... and its p x the sweep's cells below this (one alarm night in 100: docs/statistics.md)


@dataclass(frozen=True)
class Step:
    """A judged cell's newest change, as run indices: one record, so nothing reads four maps in step."""
    at: int = -1        # the run where the change begins (-1: no change point)
    level_from: int = 0   # for the change to be the machine's, the stack stayed the same from this run (MIN_SEGMENT
    level_to: int = 0     # judged nights before the change) up to this one (MIN_SEGMENT past its first night)
    held: int = 0       # the newest judged nights on its new level, none back


NO_STEP = Step()


@dataclass
class History:
    """Verdicts per cell (compare.CellResult.outcome) on each cell's newest change; `suspected`: the
    newest run's departures from its level, until a same-night A/B confirms them."""
    runs: list[Run]                                          # oldest first
    judged: Comparison                                       # per cell: level before vs after its newest change
    suspected: Comparison
    steps: dict[tuple, Step] = field(default_factory=dict)   # cell key -> its newest change (step(key) for any key)
    too_short: int = 0                                       # cells with fewer than MIN_RUNS runs: not judged
    window: int = DEFAULT_WINDOW
    canary: CanaryView = field(default_factory=CanaryView)
    left_out: dict[int, str] = field(default_factory=dict)  # run index -> why its cells were left out (a noisy night)
    estimator: str = DEFAULT_ESTIMATOR
    began: dict[Series, int] = field(default_factory=dict)   # series the first run lacks -> the run it began in
    ended: dict[Series, int] = field(default_factory=dict)   # series the newest run lacks -> the last run it was in
    below_alert: dict[tuple, str] = field(default_factory=dict)   # cell key -> why its machine step raised no alert
    placement: Optional[Placement] = None   # where ranks 0 and 1's cores were, case by case (reports/placement.py)
    placed_out: dict[tuple, int] = field(default_factory=dict)    # cell key -> nights with no launch in the usual placement
    nights: dict[tuple, tuple[list[int], np.ndarray]] = field(default_factory=dict)   # cell key -> its points (History.points)
    tonight_elsewhere: int = 0   # cells whose newest night (not noisy) had no launch in the usual placement
    budget: dict = field(default_factory=dict)      # what the verdict rests on: every night's launches (compare.budget)
    cpu_wait: list[str] = field(default_factory=list)   # the nights' launches that lost rounds to a CPU wait
    changes: dict[int, list[tuple[str, list[str]]]] = field(default_factory=dict)   # run -> what changed since the run before

    def step(self, key: tuple) -> Step:
        """The cell's newest change; NO_STEP for a cell the history did not judge."""
        return self.steps.get(key, NO_STEP)

    def points(self, key: tuple) -> tuple[list[int], np.ndarray]:
        """A cell's nights (run indices) and their points (night_values): nights the canary left out
        and nights with no launch in the usual placement are not among them."""
        kept = {i: self.placement.kept(run.cells[key]) if self.placement else None
                for i, run in enumerate(self.runs) if key in run.cells and i not in self.left_out}
        idx = [i for i, launches in kept.items() if launches != []]
        return idx, np.array([night_values(self.runs[i], key, self.estimator, kept[i]) for i in idx])

    @property
    def regressed(self) -> bool:
        """A confirmed change of the software stack (machine changes are not)."""
        return self.judged.regressed

    @property
    def machine_changed(self) -> bool:
        """A change within the window that the canary made too: the machine's, not the stack's."""
        return any(c.outcome.machine for c in self.judged.cells)

    @property
    def machine_regressed(self) -> bool:
        """A machine change that made cells slower: what may fail a job (exit 7), unlike an improvement."""
        return any(c.outcome.machine and c.outcome.direction is Direction.REGRESSION for c in self.judged.cells)

    def screened(self, alpha: float = ALPHA) -> list[CellResult]:
        """The newest night's moved cells, each on its own p (no correction across the sweep): what a
        same-day A/B's line counts as suspected."""
        return [c for c in self.suspected.cells if c.outcome.suspected or departs(c, c.p, alpha)]


def departs(c: CellResult, p: float, alpha: float = ALPHA) -> bool:
    """The newest night off its level: p below alpha, past the minimum effect, its interval on one side of 1."""
    worse = c.ratio > 1
    return p < alpha and max(c.ratio, 1 / c.ratio) > 1 + c.min_effect and (c.low > 1 if worse else c.high < 1)


def night(run: Run) -> str:
    """A history's run as its lines name it: its label and when it started."""
    return f"{run.label} ({run.started[:16]})"


def platform(run: Run) -> dict:
    """What makes a night another platform (PLATFORM of its setup)."""
    setup = run.setup
    return {k: setup[k] for k in PLATFORM}


def is_run(folder: Path) -> bool:
    """A run's folder: a session wrote its results.json, or its cases.jsonl so far."""
    return (folder / "results.json").exists() or (folder / "cases.jsonl").exists()


def run_folders(folder: Path) -> list[Path]:
    """The run folders in a --results folder, oldest name first."""
    return sorted(d for d in folder.glob("*/") if is_run(d))


def load_runs(paths: list[str]) -> tuple[list[Run], list[str]]:
    """Runs from result files, run directories, or --results folders of them; files holding no cells
    (a run that failed whole, an --ab-env run) are skipped with the reason."""
    runs, skipped = [], []
    for arg in paths:
        path = Path(arg)
        files = [path] if path.is_file() or is_run(path) else run_folders(path)
        if not files:
            raise ResultError(f"{arg}: no results.json or cases.jsonl in it or in its subdirectories")
        for f in files:
            try:
                runs.append(load(f))
            except NoCells as exc:
                skipped.append(str(exc))
    return runs, skipped


def too_few(runs: list[Run], ab: bool = False) -> str:
    """Why nothing can be judged yet, or "" when there are enough runs or a same-night A/B to judge by
    (`ab`: one is given or about to run; or a run records one)."""
    if len(runs) >= MIN_RUNS or ab or any(recorded_ab(run) for run in runs):
        return ""
    how_many = f"{len(runs)} run{'' if len(runs) == 1 else 's'}"
    return f"# history: {how_many}; a change needs {MIN_SEGMENT} runs on each side, nothing to judge yet"


def night_values(run: Run, key: tuple, estimator: str = DEFAULT_ESTIMATOR, launches: list[int] | None = None) -> float:
    """A night's point for one cell: the mean log of its launches' (or `launches'`) `estimator` times (fastest: the least)."""
    cell = run.cells[key]
    chosen = cell.launches if launches is None else {i: cell.launches[i] for i in launches}
    logs = [np.log(launch_value(v, estimator)) for v in chosen.values()]
    return float(min(logs) if estimator == "fastest" else np.mean(logs))


def detectable_change(y: np.ndarray, cuts: list[int], alpha: float = ALPHA, min_effect: float = DEFAULT_MIN_EFFECT) -> float:
    """The change this cell's history could have seen (80% power): a new level held MIN_SEGMENT nights,
    against the pooled sd within the levels between `cuts` and the split search's threshold; inf
    when the spread cannot be told."""
    from scipy import stats as sps
    from scipy.optimize import brentq
    edges = [0, *cuts, y.size]
    resid = np.concatenate([y[a:b] - y[a:b].mean() for a, b in zip(edges[:-1], edges[1:]) if b > a])
    dof = y.size - (len(edges) - 1)
    if dof < 1:
        return float("inf")
    sd = float(np.sqrt((resid ** 2).sum() / dof))
    n_level, total = y.size - edges[-2], y.size + MIN_SEGMENT
    splits, dof = total - 2 * MIN_SEGMENT + 1, total - 2
    t_crit = float(sps.t.isf(alpha / (4 * splits), dof))
    # the noncentrality at which the step's t passes t_crit 80% of the time (with ~10 nights the
    # normal approximation, t_crit + z_0.8, falls short by a tenth)
    ncp = brentq(lambda d: sps.nct.sf(t_crit, dof, d) - POWER, 0.0, t_crit + 20.0)
    return max(min_effect, float(np.expm1(ncp * sd * np.sqrt(1 / n_level + 1 / MIN_SEGMENT))))


def _level_shift(before: np.ndarray, after: np.ndarray) -> tuple[float, float, float]:
    """Shift of mean log time with its pooled-t 95% CI (the Bonferroni p accounts for the search)."""
    from scipy import stats as sps
    n, m = before.size, after.size
    shift = after.mean() - before.mean()
    dof = n + m - 2
    var = ((before.var(ddof=1) * (n - 1) if n > 1 else 0.0) + (after.var(ddof=1) * (m - 1) if m > 1 else 0.0)) / max(dof, 1)
    half = sps.t.ppf(0.975, max(dof, 1)) * np.sqrt(var * (1 / n + 1 / m))
    return shift, shift - half, shift + half


def analyse(runs: list[Run], calibration: Optional[Calibration] = None, min_effect: float = DEFAULT_MIN_EFFECT,
            window: int = DEFAULT_WINDOW, alpha: float = ALPHA, estimator: str = DEFAULT_ESTIMATOR) -> History:
    """`runs` in any order; they are put in time order. Setup mismatches are in judged.mismatch.
    Nights the canary marks noisy are left out of every cell; a change with a canary step is the machine's."""
    from scipy import stats as sps
    runs = sorted(runs, key=lambda r: r.started)
    newest = runs[-1]
    sn = newest.setup
    hist = History(runs, Comparison(runs[0].path, newest.path, [], estimator=estimator),
                   Comparison(runs[-2].path if len(runs) > 1 else "", newest.path, [], estimator=estimator),
                   window=window, estimator=estimator)
    hist.canary = judge_canary(runs, alpha)
    hist.left_out = dict(hist.canary.noisy)
    hist.placement = placements(runs, near_judged=estimator == "fastest")
    # a night that lost a whole backend (every case failed) still belongs to the history: only the
    # rank counts and hosts make a different platform
    hist.judged.mismatch = sorted({f"{k}: {r.path} has {s[k]}, the newest run {sn[k]}"
                                   for r in runs[:-1] for s in [r.setup] for k in PLATFORM if s[k] != sn[k]})
    hist.began, hist.ended = series_changes(runs)
    cal = calibration if calibration and calibration.samples is Samples.LAUNCHES else None
    if calibration:
        hist.judged.calibration = ("A/A calibration (launches) applied" if cal and cal.bands else
                                   "A/A calibration not applied: it was made from paired launches, a history is separate runs")
    tonight, elsewhere = len(runs) - 1, set()   # cells whose newest night left by placement (a noisy one leaves every cell)
    for key in sorted(newest.cells, key=key_order):   # the cells in the order every writer lists them
        cell, (idx, y) = newest.cells[key], hist.points(key)
        hist.nights[key] = idx, y
        placed_out = sum(1 for i, r in enumerate(runs) if key in r.cells and i not in hist.left_out) - len(idx)
        if placed_out:
            hist.placed_out[key] = placed_out
            if tonight not in hist.left_out and (not idx or idx[-1] != tonight):
                elsewhere.add(key)
        if len(idx) < MIN_RUNS:
            hist.too_short += 1
            continue
        effect = max(min_effect, cal.min_effect(band_key(cell.series, cell.size)) if cal else 0.0)
        cps = change_points(y, alpha)
        start = cps[-2][0] if len(cps) > 1 else 0
        at, p = cps[-1] if cps else (len(y) - MIN_SEGMENT, 1.0)   # no change: the latest runs against the rest
        shift, low, high = _level_shift(y[start:at], y[at:])
        ratio, low, high = np.exp([shift, low, high]).tolist()
        hist.judged.cells.append(CellResult(key, cell.series, cell.size, ratio, low, high, p,
                                            samples=Samples.RUNS, n_base=at - start, n_cand=len(y) - at, min_effect=effect,
                                            detectable=detectable_change(y, [c for c, _ in cps], alpha, effect)))
        # the newest night must be among those that held: a left-out (noisy) newest night holds nothing
        hist.steps[key] = Step(at=idx[at] if cps else -1, level_from=idx[max(start, at - MIN_SEGMENT)],
                               level_to=idx[min(len(idx) - 1, at + MIN_SEGMENT)],
                               held=held_nights(y[start:at].mean(), y[at:]) if idx[-1] == len(runs) - 1 else 0)
        level = y[cps[-1][0] if cps else 0:-1]   # the newest run against the level it should be on
        sd = level.std(ddof=1) * np.sqrt(1 + 1 / level.size) if level.size >= MIN_SEGMENT else 0.0
        if sd > 0 and idx[-1] == len(runs) - 1:   # a noisy newest night raises no suspicion
            shift, dof = y[-1] - level.mean(), level.size - 1
            half = sps.t.ppf(0.975, dof) * sd
            ratio, low, high = np.exp([shift, shift - half, shift + half]).tolist()
            hist.suspected.cells.append(CellResult(key, cell.series, cell.size, ratio, low, high,
                                                   float(2 * sps.t.sf(abs(shift) / sd, dof)), samples=Samples.NEWEST_RUN,
                                                   min_effect=effect, outcome=NEWEST_UNDECIDED))
    hist.budget, hist.cpu_wait = compare.budget(*runs), compare.cpu_wait_lines(runs)
    fdr(hist.judged.cells)
    fdr(hist.suspected.cells)
    hist.tonight_elsewhere = len(elsewhere)
    assign_verdicts(hist.judged.cells, alpha, cause=Cause.HISTORY, unmeasured=frozenset(elsewhere))
    for c in hist.judged.cells:
        if c.outcome.direction not in CHANGES:
            continue
        mine = hist.steps[c.key]
        if mine.at < 0:
            c.outcome, c.note = Verdict(cause=Cause.HISTORY), "no change point: the latest runs drift within the history's noise"
        elif mine.at < len(runs) - window:
            c.outcome = replace(c.outcome, standing=True)
        elif step := coinciding(hist.canary, mine.at, worse=c.ratio > 1):
            c.outcome, c.note = replace(c.outcome, cause=Cause.CANARY), step.text(night(runs[step.at]))
        elif stack_kept(runs, mine.level_from, mine.level_to, declared=True):
            first, last = runs[mine.level_from], runs[mine.level_to]
            since = "every night since" if mine.level_to == len(runs) - 1 else \
                f"every night to {night(last)}, {MIN_SEGMENT} after the step began,"
            c.outcome, c.note = replace(c.outcome, cause=Cause.KEPT_STACK), (
                f"the stack stayed that of {night(first)}: {since} ran the stack of the "
                "night before (its --previous-stack changed nothing) and nothing recorded changed: not the software stack")
    for c in hist.suspected.cells:
        if departs(c, c.q, alpha):
            c.outcome = Verdict(Direction.REGRESSION if c.ratio > 1 else Direction.IMPROVEMENT, cause=Cause.HISTORY,
                                newest=True)
    return settle(hist)


def settle(hist: History) -> History:
    """The lines the writers read (compare.conclude), each flagged range's run of change and what
    changed at the runs they name. Call it again after a verdict changes."""
    conclude(hist.suspected)
    for kind, ranges in conclude(hist.judged).ranges.items():
        if kind.direction in CHANGES:
            hist.judged.ranges[kind] = [replace(r, since=Counter(
                hist.step(c.key).at for c in hist.judged.cells if c.series == r.series and r.first <= c.size <= r.last
            ).most_common(1)[0][0]) for r in ranges]
    runs = hist.runs
    named = {r.since for ranges in hist.judged.ranges.values() for r in ranges} | {*hist.began.values()} | {
        at + 1 for at in hist.ended.values()}
    hist.changes = {at: provenance_diff([run_provenance(runs[at - 1]), run_provenance(runs[at])]) for at in named if at > 0}
    return hist


def held_nights(before: float, after: np.ndarray) -> int:
    """How many of the newest nights sit nearer the new level than the old, counted back from the
    newest: a step a later night undoes holds 0."""
    nearer = np.abs(after[::-1] - after.mean()) < np.abs(after[::-1] - before)
    return int(np.argmin(nearer)) if not nearer.all() else nearer.size


def alert_rule(hist: History, alpha: float = MACHINE_ALPHA) -> None:
    """The machine-alert rule (docs/statistics.md): a machine change that fails a part of it becomes
    inconclusive, saying which. Applied once, last, after every same-night A/B (gate.judge_history)."""
    cells = hist.judged.cells
    why: dict[int, str] = {}
    for c in cells:
        if not (c.outcome.machine and c.outcome.direction in CHANGES):
            continue
        effect = max(c.min_effect, MACHINE_MIN_EFFECT)
        step = max(c.ratio, 1 / c.ratio)
        if (held := hist.step(c.key).held) < MACHINE_NIGHTS:
            why[id(c)] = f"held {held} nights, an alert needs {MACHINE_NIGHTS} with the newest"
        elif step < 1 + effect:
            why[id(c)] = f"a step of {step - 1:.1%}, an alert needs {effect * 100:g}%"
        elif step < 1 + c.detectable:
            seen = f"{c.detectable:.0%}" if np.isfinite(c.detectable) else "no spread could be told"
            why[id(c)] = f"a step of {step - 1:.1%}, inside what its nights could have seen ({seen})"
        elif c.p * len(cells) >= alpha:
            why[id(c)] = f"p {c.p:.2g} x {len(cells)} cells of the sweep is not below {alpha:g}"
    passes = lambda c: c.outcome.machine and c.outcome.direction in CHANGES and id(c) not in why  # noqa: E731
    for series in by_series(cells):   # neighbours as assign_verdicts has them: the series' judged sizes
        lone = [c for i, c in enumerate(series) if passes(c) and not any(
            passes(nb) and nb.outcome.direction is c.outcome.direction for nb in series[max(0, i - 1):i] + series[i + 1:i + 2])]
        for c in lone:
            why[id(c)] = "no neighbouring size made the same step"
    for i, c in enumerate(cells):
        if id(c) in why:
            hist.below_alert[c.key] = f"x{c.ratio:.3f} [{c.low:.3f}, {c.high:.3f}]: {why[id(c)]}"
            cells[i] = replace(c, outcome=Verdict(cause=Cause.HISTORY),
                               note=f"a machine step below the machine-alert rule: {hist.below_alert[c.key]}")


def confirm_with_ab(hist: History, ab: Comparison, at: int | None = None) -> tuple[int, int]:
    """A same-day interleaved A/B of night `at` (default the newest; base: the stack before it) settles
    what the history alone cannot, night by night, oldest first (docs/statistics.md). Returns (cells
    confirmed, regressions not reproduced)."""
    at = len(hist.runs) - 1 if at is None else at
    by_key = {c.key: c for c in ab.cells}
    judged = {c.key: i for i, c in enumerate(hist.judged.cells)}
    unexplained = 0
    for i, c in enumerate(hist.judged.cells):
        a, began = by_key.get(c.key), hist.step(c.key).at
        if c.outcome.kind == REGRESSION and a is not None and a.outcome.direction is Direction.NO_CHANGE and 0 < began <= at \
                and stack_kept(hist.runs, hist.step(c.key).level_from, at - 1, declared=False):
            note = (f"the same-night A/B against the previous stack found no change "
                    f"(x{a.ratio:.3f} [{a.low:.3f}, {a.high:.3f}]): not the software stack")
            hist.judged.cells[i] = replace(c, outcome=replace(c.outcome, cause=Cause.STACKS_ALIKE), note=note)
            unexplained += 1
    suspects = {s.key: s for s in hist.suspected.cells} if at == len(hist.runs) - 1 else {}
    confirmed = 0
    for a in ab.cells:
        direction = a.outcome.direction
        if not (direction in CHANGES and a.outcome.confirmed):
            continue
        if a.key not in judged:
            if a.key not in hist.runs[-1].cells:
                continue   # a cell the newest night no longer runs
            # too few usable nights for the history (a new history, nights in another placement):
            # the interleaved A/B compared the two stacks on its own, and its verdict is the cell's
            hist.judged.cells.append(a)
            judged[a.key] = len(hist.judged.cells) - 1
            hist.too_short = max(0, hist.too_short - 1)
        else:
            held, began = hist.judged.cells[judged[a.key]].outcome, hist.step(a.key).at
            if (held.direction is direction and held.confirmed and not held.machine and began <= at) or \
                    (began > at and not held.machine):
                continue   # the history's own change (the A/B reproduces it), or a later one of the stack it saw
        verdict = Verdict(direction, confirmed=True, standing=at < len(hist.runs) - hist.window, cause=Cause.SAME_NIGHT_AB)
        hist.judged.cells[judged[a.key]] = replace(a, outcome=verdict,
                                                   note=f"confirmed by a same-day interleaved A/B of {hist.runs[at].label}")
        hist.steps[a.key] = replace(hist.step(a.key), at=at)
        if a.key in suspects:
            suspects[a.key].outcome = Verdict(direction, confirmed=True, cause=Cause.SAME_NIGHT_AB, newest=True)
        confirmed += 1
    hist.judged.cells.sort(key=lambda c: key_order(c.key))
    return confirmed, unexplained


def series_changes(runs: list[Run]) -> tuple[dict[Series, int], dict[Series, int]]:
    """Series the newest run has that the first lacks (-> the run each began in) and series an earlier
    run had that the newest lacks (-> the last run each was in): a renamed series is not judged across."""
    present = [{c.series for c in r.cells.values()} for r in runs]
    began = {s: next(i for i, p in enumerate(present) if s in p) for s in present[-1] - present[0]}
    gone = set().union(*present[:-1]) - present[-1]
    return began, {s: max(i for i, p in enumerate(present) if s in p) for s in gone}


def stack_kept(runs: list[Run], first: int, last: int, declared: bool) -> bool:
    """Nothing recorded (versions, environment) differs between any run from `first` to `last` and run
    `last`; with `declared`, every run after `first` also said its --previous-stack changed nothing."""
    newest = run_provenance(runs[last])
    options = [runs[i].meta.options for i in range(first + 1, last + 1)] if declared else []
    if any(o is None or not o.previous_stack or o.previous_differs is not False for o in options):
        return False
    return not any(provenance_diff([run_provenance(runs[i]), newest]) for i in range(first, last + 1))


SAME_NIGHT = "same_night_ab.json"   # in a run's folder: the same-night A/B against the previous stack (--previous-stack)


def recorded_ab(run: Run) -> tuple[Path, dict] | None:
    """The same-night A/B a session recorded beside this run: its results' path and the record, or None."""
    record_file = Path(run.path).parent / SAME_NIGHT
    try:
        record = json.loads(record_file.read_text())
        return record_file.parent.parent / str(record["run"]), record
    except (OSError, ValueError, KeyError, TypeError):
        return None
