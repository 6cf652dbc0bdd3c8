"""Baseline vs candidate, cell by cell, with statistics that survive a noisy sweep (ARCHITECTURE.md,
Comparing runs; the method: docs/statistics.md, "From cells to a verdict")."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from itertools import groupby
from typing import Optional

import numpy as np

from collectives.sizes import format_size
from kinds import sized
from reports.estimators import launch_value
from schema.calibration import Calibration
from schema.judgement import (
    CHANGES,
    DEFAULT_ESTIMATOR,
    DEFAULT_MIN_EFFECT,
    INCONCLUSIVE,
    REGRESSION,
    Cause,
    Direction,
    Samples,
    Verdict,
    VerdictKind,
)
from schema.results import Cell, Run, Series, key_order, metrics
from schema.stats import MIN_UNDISTURBED, UNDISTURBED_SHARE, median, medians

ALPHA = 0.05
MIN_LAUNCHES = 2   # launches (fresh worker groups) are the sample whenever both sides have several
TRIM = 0.2         # share trimmed from each end of paired launch differences (Tukey-McLaughlin)
POWER_Z = 0.8416   # z of 80% power: what "could have seen" means in the minimum detectable effect
BANDS = (("small (<= 8 KiB)", 8 << 10), ("medium (<= 1 MiB)", 1 << 20), ("large (> 1 MiB)", float("inf")))


def band_key(series: Series, size: int) -> str:
    """Calibration is per backend and size band: gloo's small-message noise says nothing about MPI's."""
    return f"{series.backend} {next(name for name, top in BANDS if size <= top)}"


@dataclass
class CellResult:
    key: tuple
    series: Series
    size: int
    ratio: float                 # candidate time / baseline time
    low: float                   # 95% CI of the ratio
    high: float
    p: float
    q: float = 1.0
    samples: Samples = Samples.ROUNDS
    n_base: int = 0
    n_cand: int = 0
    min_effect: float = DEFAULT_MIN_EFFECT
    detectable: float = float("inf")   # the change this cell's sample could have seen (80% power)
    outcome: Verdict = Verdict()
    note: str = ""
    isolated: bool = False       # a change no neighbouring size agreed with, left inconclusive (counted by the summaries)
    metrics: dict = field(default_factory=dict)   # metric -> [baseline, candidate], pooled over launches

    @property
    def verdict(self) -> str:
        """The verdict's words, for what prints them (a session's progress line, scripts); nothing decides on them."""
        return self.outcome.text()


@dataclass(frozen=True)
class SizeRange:
    """Consecutive sizes of one series with verdicts of one kind, pooled: the lines people read."""
    series: Series
    first: int
    last: int
    cells: int
    ratio: float
    low: float
    high: float
    samples: Samples
    since: int = -1              # a history's: the run where most of its cells changed (history.settle)


@dataclass(frozen=True)
class Band:
    """One backend and size band (or one backend's unsized kind): the change its cells could have seen."""
    band: str
    first: int
    last: int
    cells: int
    detectable: float
    kind: str
    sized: bool


@dataclass
class Comparison:
    base: str
    cand: str
    cells: list[CellResult]
    base_label: str = ""         # what the runs are called (--label, a version, the folder; the side's role)
    cand_label: str = ""
    only_base: list[tuple] = field(default_factory=list)
    only_cand: list[tuple] = field(default_factory=list)
    mismatch: list[str] = field(default_factory=list)
    calibration: str = ""        # how a given A/A calibration was used, for the summary
    estimator: str = DEFAULT_ESTIMATOR   # each launch's statistic of its rounds the verdicts rest on
    budget: dict = field(default_factory=dict)   # what the verdict cost: launches, timed and cluster time (budget())
    cpu_wait: list[str] = field(default_factory=list)   # launches that lost rounds to a CPU wait (cpu_wait_lines())
    placement: list[str] = field(default_factory=list)  # separate runs: where ranks 0 and 1's cores were, what left (_placed)
    unplaced: list[tuple] = field(default_factory=list)  # shared cells not judged: one side had no launch in the usual placement
    ranges: dict[VerdictKind, list[SizeRange]] = field(default_factory=dict)   # conclude(): each kind's size ranges
    bands: list[Band] = field(default_factory=list)                             # ... and what each band could have seen

    def by_verdict(self, kind: VerdictKind) -> list[CellResult]:
        if not isinstance(kind, VerdictKind):   # a verdict's words match nothing: say so rather than find no cell
            raise TypeError(f"by_verdict takes a VerdictKind (schema.judgement), not {kind!r}")
        return [c for c in self.cells if c.outcome.kind == kind]

    @property
    def regressed(self) -> bool:
        return bool(self.by_verdict(REGRESSION))

    @property
    def inconclusive(self) -> int:
        """Cells without the evidence to say regression, improvement or no change (those not judged
        for the cores' placement included)."""
        return len(self.by_verdict(INCONCLUSIVE)) + len(self.unplaced)


def _pair_shift(a: list[float], b: list[float], quads: bool = True) -> float:
    """One interleaved launch's log ratio B/A: the median over its AB, BA round quads (each sees one
    machine state and cancels the position); the ratio of the sides' medians where rounds do not
    pair up or `quads` is False (a side's rounds were filtered for CPU waits)."""
    if quads and len(a) == len(b) and len(a) >= 2:
        d = np.log(b) - np.log(a)
        even = len(d) - len(d) % 2
        return median((d[0:even:2] + d[1:even:2]) / 2)
    return float(np.log(median(b)) - np.log(median(a)))


def _filtered(cell: Cell, launch: int) -> bool:
    """The launch's judged rounds are a subset (rounds a rank waited for a CPU in left out)."""
    waited, rounds = cell.waited.get(launch, (0, 0))
    return 0 < waited and rounds - waited >= MIN_UNDISTURBED


def _samples(base: Cell, cand: Cell, paired: bool, estimator: str = DEFAULT_ESTIMATOR) -> tuple[np.ndarray, np.ndarray, Samples]:
    common = sorted(set(base.launches) & set(cand.launches))
    if paired and len(common) >= MIN_LAUNCHES:
        x = np.array([launch_value(base.launches[i], estimator) for i in common])
        if estimator != "median":   # a low quantile of each side: both saw one stretch of machine states
            y = np.array([launch_value(cand.launches[i], estimator) for i in common])   # (quads would mix their noise)
            return x, x * np.exp(np.log(y) - np.log(x)), Samples.PAIRED
        # quads pair rounds by position: only while both sides kept every round
        shifts = [_pair_shift(base.launches[i], cand.launches[i], quads=not (_filtered(base, i) or _filtered(cand, i)))
                  for i in common]
        return x, x * np.exp(shifts), Samples.PAIRED
    if len(base.launches) >= MIN_LAUNCHES and len(cand.launches) >= MIN_LAUNCHES:
        return (np.array([launch_value(v, estimator) for v in base.launches.values()]),
                np.array([launch_value(v, estimator) for v in cand.launches.values()]), Samples.LAUNCHES)
    return (np.concatenate([np.asarray(v) for v in base.launches.values()]),
            np.concatenate([np.asarray(v) for v in cand.launches.values()]), Samples.ROUNDS)


def _placed(base: Run, cand: Run, common: list[tuple]) -> tuple[dict[tuple, tuple[Cell, Cell]], list[str]]:
    """Two separate runs' cells, each side's launches in the runs' usual placement of ranks 0 and 1's
    cores (reports/placement.py); a cell with no launch in it on one side is not judged, and the
    lines say so."""
    from reports.placement import of
    pairs = {k: (base.cells[k], cand.cells[k]) for k in common}
    place = of([base, cand]) if of([base]) and of([cand]) else None
    if place is None or not place.left_out:
        return pairs, []
    kept, left = {}, []
    for key, (b, c) in pairs.items():
        kb, kc = place.judged(b), place.judged(c)
        if kb is not None and kc is not None:
            kept[key] = (kb, kc)
        else:
            left.append(key)
    lines = [place.text()]
    if left:
        shown = ", ".join(f"{s.label()} {format_size(size)}" for s, size in left[:8])
        shown += f", and {len(left) - 8} more" if len(left) > 8 else ""
        lines.append(f"{len(left)} cells not judged: one run had no launch of them in the usual placement ({shown}); "
                     "an interleaved A/B (--ab-env, --previous-stack) judges them in one placement")
    return kept, lines


def detectable(low: float, high: float, alpha: float) -> float:
    """The change a cell's sample could have seen: h x (z_alpha/2 + z_0.8) / z_alpha/2 for the
    interval's log half-width h (flagged about 80% of the time, normal approximation)."""
    from scipy import stats as sps
    z = float(sps.norm.ppf(1 - alpha / 2))
    half = (np.log(high) - np.log(low)) / 2
    return float(np.exp(half * (z + POWER_Z) / z) - 1) if np.isfinite(half) else float("inf")


def _paired_stats(x: np.ndarray, y: np.ndarray, alpha: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Interleaved A/B: Tukey-McLaughlin's test on the paired launches' log ratios (20%-trimmed mean,
    winsorized standard error, n - 2g - 1 degrees of freedom): one descheduled launch cannot sink it."""
    d = np.sort(y - x, axis=1)
    n = d.shape[1]
    g = int(TRIM * n)
    kept = d[:, g:n - g]
    shift = kept.mean(axis=1)
    wins = np.concatenate([np.repeat(kept[:, :1], g, axis=1), kept, np.repeat(kept[:, -1:], g, axis=1)], axis=1)
    return _t_test(shift, wins.std(axis=1, ddof=1) / ((1 - 2 * g / n) * np.sqrt(n)), n - 2 * g - 1, alpha)


def _welch_stats(x: np.ndarray, y: np.ndarray, alpha: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Vectorised Welch t on log launch medians: (shift, CI low, CI high, p); it charges launch-to-launch drift."""
    n, m = x.shape[1], y.shape[1]
    shift = y.mean(axis=1) - x.mean(axis=1)
    vx, vy = x.var(axis=1, ddof=1) / n, y.var(axis=1, ddof=1) / m
    se = np.sqrt(vx + vy)
    with np.errstate(divide="ignore", invalid="ignore"):
        df = (vx + vy) ** 2 / (vx ** 2 / (n - 1) + vy ** 2 / (m - 1))
        df = np.where(np.isfinite(df), df, n + m - 2)
    return _t_test(shift, se, df, alpha)


def _t_test(shift: np.ndarray, se: np.ndarray, df, alpha: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(shift, CI low, CI high, p) of a t statistic shift / se on `df` degrees of freedom."""
    from scipy import stats as sps
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(se > 0, shift / se, 0.0)
    half = sps.t.ppf(1 - alpha / 2, df) * se
    return shift, shift - half, shift + half, 2 * sps.t.sf(np.abs(t), df)


def _shift_stats(x: np.ndarray, y: np.ndarray, alpha: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Vectorised over cells: x (k, n) base log times, y (k, m) candidate log times.
    Returns HL shift, CI low, CI high, two-sided Mann-Whitney p (normal approximation)."""
    from scipy import stats as sps
    k, n = x.shape
    m = y.shape[1]
    diffs = np.sort((y[:, None, :] - x[:, :, None]).reshape(k, n * m), axis=1)
    shift = medians(diffs, axis=1)
    nm = n * m
    sd = np.sqrt(nm * (n + m + 1) / 12.0)
    u = (diffs > 0).sum(axis=1) + 0.5 * (diffs == 0).sum(axis=1)
    z = (u - nm / 2.0) / sd if sd > 0 else np.zeros(k)
    p = 2 * sps.norm.sf(np.abs(z))
    c = int(np.floor(nm / 2.0 - sps.norm.ppf(1 - alpha / 2) * sd))
    if c < 0 or nm < 2:  # too few samples for a 95% interval: it spans everything observed
        return shift, diffs[:, 0], diffs[:, -1], np.ones(k) if nm < 2 else p
    return shift, diffs[:, c], diffs[:, nm - 1 - c], p


def compare(base: Run, cand: Run, calibration: Optional[Calibration] = None, min_effect: float = DEFAULT_MIN_EFFECT,
            alpha: float = ALPHA, settled: list[CellResult] | None = None,
            estimator: str = DEFAULT_ESTIMATOR) -> Comparison:
    """Every shared cell judged at level `alpha` (intervals at 1 - alpha). `settled`: cells a
    sequential A/B decided at earlier looks; they count as neighbours but are not judged again.
    `estimator`: each launch's statistic of its rounds (reports/estimators.py)."""
    common = sorted(set(base.cells) & set(cand.cells), key=key_order)
    out = Comparison(base.path, cand.path, [], base.label, cand.label,
                     sorted(set(base.cells) - set(cand.cells), key=key_order),
                     sorted(set(cand.cells) - set(base.cells), key=key_order), estimator=estimator)
    out.budget, out.cpu_wait = budget(base, cand), cpu_wait_lines([base, cand])
    sb, sc = base.setup, cand.setup
    # devices and thread levels count only where both sides name them (an imported log, an older file)
    out.mismatch = [f"{k}: baseline {sb[k]} vs candidate {sc[k]}" for k in sb
                    if sb[k] != sc[k] and (k not in ("devices", "mpi_thread_level") or (sb[k] and sc[k]))]
    kinds = [sorted({getattr(c.row, "source", "benchmark") for c in r.cells.values()}) for r in (base, cand)]
    if kinds[0] != kinds[1]:   # production field data (NCCL Inspector) against a controlled benchmark
        out.mismatch.append(f"source: baseline {kinds[0]} vs candidate {kinds[1]} (field data is what a production job "
                            "saw, not a controlled benchmark)")
    paired = bool(base.side and cand.side)
    cells, out.placement = (({k: (base.cells[k], cand.cells[k]) for k in common}, []) if paired
                            else _placed(base, cand, common))
    out.unplaced = [k for k in common if k not in cells]
    grouped: dict[tuple[int, int, Samples], list] = defaultdict(list)
    for key, (base_cell, cand_cell) in cells.items():
        x, y, kind = _samples(base_cell, cand_cell, paired=paired, estimator=estimator)
        grouped[(x.size, y.size, kind)].append((key, np.log(x), np.log(y)))
    # an A/A of separate runs says nothing about paired A/B launches (the pairing cancels the drift
    # it measured) and vice versa: a calibration applies only to cells sampled its way
    cal = calibration if calibration and calibration.estimator == estimator else None
    stats = {Samples.PAIRED: _paired_stats, Samples.LAUNCHES: _welch_stats, Samples.ROUNDS: _shift_stats}
    for (n, m, kind), items in grouped.items():
        shift, low, high, p = stats[kind](np.stack([i[1] for i in items]), np.stack([i[2] for i in items]), alpha)
        for (key, _, _), s, lo, hi, pv in zip(items, shift, low, high, p):
            cell, cand_cell = cells[key]
            effect = max(min_effect, cal.min_effect(band_key(cell.series, cell.size)) if cal and kind == cal.samples else 0.0)
            shown = {mt.name: [cell.pooled(mt.name), cand_cell.pooled(mt.name)]
                     for mt in metrics(type(cell.row), "compare")}
            if "time_us" in shown:   # the rounds the ratio rests on (undisturbed ones), not the row's every round
                shown["time_us"] = [cell.pooled_s * 1e6, cand_cell.pooled_s * 1e6]
            out.cells.append(CellResult(key, cell.series, cell.size, float(np.exp(s)), float(np.exp(lo)), float(np.exp(hi)),
                                        float(pv), samples=kind, n_base=n, n_cand=m, min_effect=effect, metrics=shown,
                                        detectable=max(effect, detectable(float(np.exp(lo)), float(np.exp(hi)), alpha))))
    if calibration and not cal:
        out.calibration = (f"A/A calibration not applied: it was made with the {calibration.estimator} of each launch, "
                           f"this comparison judges the {estimator}")
    elif cal:
        used = sum(c.samples == cal.samples for c in out.cells)
        out.calibration = (f"A/A calibration ({cal.samples}) applied to {used} of {len(out.cells)} cells"
                           + ("" if used == len(out.cells) else "; the others were sampled differently"))
    fdr(out.cells)
    assign_verdicts(out.cells, alpha, settled or [])
    rank = {key: i for i, key in enumerate(common)}
    out.cells.sort(key=lambda c: rank[c.key])
    return conclude(out)


def fdr(cells: list[CellResult]) -> None:
    """Each cell's q: Benjamini-Hochberg across the sweep."""
    if cells:
        from scipy import stats as sps
        for c, q in zip(cells, sps.false_discovery_control([c.p for c in cells])):
            c.q = float(q)


def by_series(cells: list[CellResult]) -> list[list[CellResult]]:
    """The cells of each series (first seen first), by size."""
    groups: dict[Series, list[CellResult]] = defaultdict(list)
    for c in cells:
        groups[c.series].append(c)
    return [sorted(group, key=lambda c: c.size) for group in groups.values()]


def assign_verdicts(cells: list[CellResult], alpha: float, settled: list[CellResult] | None = None,
                    cause: Cause = Cause.BASELINE, unmeasured: frozenset = frozenset()) -> None:
    """Each cell's verdict at level `alpha`, resting on `cause` (the cells' samples against a
    baseline's, or a history's levels). `unmeasured`: keys of cells with no point on the newest
    night (a history's cells left out of it by placement): as neighbours they neither agree nor
    disagree, so a changed cell looks past them to the next size measured."""
    decided = lambda d: Verdict(d, confirmed=True, cause=cause)  # noqa: E731
    undecided = Verdict(cause=cause)
    for c in cells:
        band = 1 + c.min_effect
        if c.n_base < 2 or c.n_cand < 2:
            c.outcome = decided(Direction.NO_CHANGE) if 1 / band < c.ratio < band else undecided
            c.note = "one sample per side: no confidence interval"
        elif c.q < alpha and c.ratio > band and c.low > 1:
            c.outcome = decided(Direction.REGRESSION)
        elif c.q < alpha and c.ratio < 1 / band and c.high < 1:
            c.outcome = decided(Direction.IMPROVEMENT)
        elif 1 / band <= c.low and c.high <= band or (c.q < alpha and 1 / band < c.ratio < band):
            c.outcome = decided(Direction.NO_CHANGE)
        else:
            c.outcome = undecided
    # neighbouring sizes must lean the same way, or a lone cell stays inconclusive
    judged = {id(c) for c in cells}
    for whole in by_series([*cells, *(settled or [])]):
        for c in whole:
            if id(c) not in judged or c.outcome.direction not in CHANGES or len(whole) == 1:
                continue
            series = [nb for nb in whole if nb is c or nb.key not in unmeasured]
            i = next(j for j, nb in enumerate(series) if nb is c)
            worse = c.outcome.direction is Direction.REGRESSION
            leaning = [nb for nb in series[max(0, i - 1):i] + series[i + 1:i + 2]
                       if (nb.ratio > 1 + nb.min_effect / 2 if worse else nb.ratio < 1 / (1 + nb.min_effect / 2))]
            if not leaning:
                c.note = f"isolated {c.outcome.direction.value}: no neighbouring size agrees"
                c.outcome, c.isolated = undecided, True
    # rounds of one launch are not independent samples of a stack: at most a suspicion, never a failure
    for c in cells:
        if c.samples is Samples.ROUNDS and c.outcome.direction in CHANGES:
            c.outcome = Verdict(c.outcome.direction, confirmed=False, cause=cause)
            c.note = "one launch per side: rounds are not independent samples of a stack"


def conclude(cmp: Comparison) -> Comparison:
    """The lines people read, made once from the final verdicts: each kind's size ranges and, per
    backend and size band, the median change its cells could have seen. Call it again after a verdict changes."""
    groups: dict[str, list[CellResult]] = defaultdict(list)
    for c in cmp.cells:
        groups[band_key(c.series, c.size) if sized(c.series) else f"{c.series.backend} {c.series.kind}"].append(c)
    cmp.ranges = defaultdict(list)
    for cells in by_series(cmp.cells):
        for kind, group in groupby(cells, key=lambda c: c.outcome.kind):
            run = list(group)
            ratio, low, high = np.exp(np.log([[r.ratio, r.low, r.high] for r in run]).mean(axis=0)).tolist()
            first, last = run[0], run[-1]
            cmp.ranges[kind].append(SizeRange(first.series, first.size, last.size, len(run), ratio, low, high, first.samples))
    cmp.bands = [Band(key, min(c.size for c in cells), max(c.size for c in cells), len(cells),
                      median([c.detectable for c in cells]), cells[0].series.kind, sized(cells[0].series))
                 for key, cells in groups.items()]
    return cmp


def cpu_wait_lines(runs: list[Run]) -> list[str]:
    """How many case launches lost rounds to a CPU wait (schema/stats.py undisturbed) and how many
    had too few left and were judged whole; nothing when no rank waited."""
    per_launch = [w for run in runs for cell in run.cells.values() for w in cell.waited.values()]
    hit = [(waited, rounds) for waited, rounds in per_launch if waited]
    if not hit:
        return []
    few = [(cell, i) for run in runs for cell in run.cells.values() for i, (w, r) in cell.waited.items()
           if w and r - w < MIN_UNDISTURBED]
    left = sum(1 for cell, i in few if i not in cell.launches)
    share = sum(w for w, _ in hit) / sum(r for _, r in hit)
    out = (f"cpu: launches judged on the rounds no rank waited for a CPU in (> {UNDISTURBED_SHARE:.0%} of the round): "
           f"{len(hit)} of {len(per_launch)} case launches lost {share:.0%} of their rounds to such waits")
    if left:
        out += f"; {left} with fewer than {MIN_UNDISTURBED} rounds without one left out"
    if len(few) > left:
        out += (f"; {len(few) - left} with fewer than {MIN_UNDISTURBED} judged on all their rounds (most launches of "
                "their run were alike, or it was the cell's only one: their numbers carry the machine's other work)")
    if 2 * (len(few) - left) > len(per_launch):   # what the user can act on: the machine, not the library
        out += ("; so this machine had more runnable threads than cores for most of the run: the verdicts rest on "
                "times that carry its other work, so they see only larger changes (nothing else running beside the "
                "benchmark gives undisturbed rounds, and so do short rounds: --round-time 0.002 --rounds 200, what a "
                "--history night's --night-budget runs)")
    return [out]


def budget(*runs: Run) -> dict:
    """What a verdict cost: launches per run (the most any cell has), ranks, the seconds of timed
    rounds, their wall-clock where every run recorded it, and cluster time = ranks x wall (else x timed)."""
    def launch_s(cell, i: int, times: list[float]) -> float:
        row = cell.rows.get(i)
        if row is None:
            return 0.0
        k = row.iters_per_round or 1
        if i in cell.waited and row.mean_us and row.rounds:   # every round, not only those judged (undisturbed)
            return row.mean_us * 1e-6 * row.rounds * k
        return sum(times) * k

    ranks = max((c.row.nranks or 1 for r in runs for c in r.cells.values()), default=1)
    launches = [max((len(c.launches) for c in r.cells.values()), default=0) for r in runs]
    walls = {r.path: r.meta.wall_s for r in runs}   # one A/B run: one wall for both sides
    known = [float(w) for w in walls.values() if w is not None]
    wall = sum(known) if len(known) == len(walls) else None
    seconds = sum(float(sum(launch_s(cell, i, times) for cell in r.cells.values() for i, times in cell.launches.items()))
                  for r in runs)
    return {"launches": launches, "ranks": int(ranks), "timed_s": seconds, "wall_s": wall,
            "cluster_rank_s": int(ranks) * (wall if wall is not None else seconds)}
