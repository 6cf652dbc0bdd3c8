"""Baseline vs candidate, cell by cell, with statistics that survive a noisy sweep (DESIGN §7).

Per cell: effect = Hodges-Lehmann shift of log time (a ratio), its distribution-free 95% CI
(Mann-Whitney order statistics) and p-value; Benjamini-Hochberg across the sweep; a minimum
effect that an A/A calibration can raise; neighbouring sizes must agree before a regression
counts. Samples are per-launch medians when both sides have several launches, else rounds
(flagged: rounds of one launch are not independent samples of a software stack).
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np
from scipy import stats as sps

from reports.cells import Cell, Run, setup_of

ALPHA = 0.05
DEFAULT_MIN_EFFECT = 0.05
MIN_LAUNCHES = 3
BANDS = (("small (<= 8 KiB)", 8 << 10), ("medium (<= 1 MiB)", 1 << 20), ("large (> 1 MiB)", float("inf")))
VERDICTS = ("regression", "improvement", "no change", "inconclusive")


def band_of(size: int) -> str:
    return next(name for name, top in BANDS if size <= top)


@dataclass
class CellResult:
    key: tuple
    series: tuple
    size: int
    ratio: float                 # candidate time / baseline time
    low: float                   # 95% CI of the ratio
    high: float
    p: float
    q: float = 1.0
    samples: str = "rounds"      # "launches" or "rounds"
    n_base: int = 0
    n_cand: int = 0
    min_effect: float = DEFAULT_MIN_EFFECT
    verdict: str = "inconclusive"
    note: str = ""


@dataclass
class Comparison:
    base: str
    cand: str
    cells: list[CellResult]
    only_base: list[tuple] = field(default_factory=list)
    only_cand: list[tuple] = field(default_factory=list)
    mismatch: list[str] = field(default_factory=list)

    def by_verdict(self, verdict: str) -> list[CellResult]:
        return [c for c in self.cells if c.verdict == verdict]

    @property
    def regressed(self) -> bool:
        return bool(self.by_verdict("regression"))


def _samples(base: Cell, cand: Cell) -> tuple[np.ndarray, np.ndarray, str]:
    if len(base.launches) >= MIN_LAUNCHES and len(cand.launches) >= MIN_LAUNCHES:
        return (np.array([np.median(v) for v in base.launches.values()]),
                np.array([np.median(v) for v in cand.launches.values()]), "launches")
    return (np.concatenate([np.asarray(v) for v in base.launches.values()]),
            np.concatenate([np.asarray(v) for v in cand.launches.values()]), "rounds")


def _shift_stats(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Vectorised over cells: x (k, n) base log times, y (k, m) candidate log times.
    Returns HL shift, CI low, CI high, two-sided Mann-Whitney p (normal approximation)."""
    k, n = x.shape
    m = y.shape[1]
    diffs = np.sort((y[:, None, :] - x[:, :, None]).reshape(k, n * m), axis=1)
    shift = np.median(diffs, axis=1)
    nm = n * m
    sd = np.sqrt(nm * (n + m + 1) / 12.0)
    u = (diffs > 0).sum(axis=1) + 0.5 * (diffs == 0).sum(axis=1)
    z = (u - nm / 2.0) / sd if sd > 0 else np.zeros(k)
    p = 2 * sps.norm.sf(np.abs(z))
    c = int(np.floor(nm / 2.0 - 1.959964 * sd))
    if c < 0 or nm < 2:  # too few samples for a 95% interval: it spans everything observed
        return shift, diffs[:, 0], diffs[:, -1], np.ones(k) if nm < 2 else p
    return shift, diffs[:, c], diffs[:, nm - 1 - c], p


def compare(base: Run, cand: Run, calibration: dict | None = None, min_effect: float = DEFAULT_MIN_EFFECT,
            alpha: float = ALPHA) -> Comparison:
    common = sorted(set(base.cells) & set(cand.cells), key=str)
    out = Comparison(base.path, cand.path, [], sorted(set(base.cells) - set(cand.cells), key=str),
                     sorted(set(cand.cells) - set(base.cells), key=str))
    sb, sc = setup_of(base), setup_of(cand)
    out.mismatch = [f"{k}: baseline {sb[k]} vs candidate {sc[k]}" for k in sb if sb[k] != sc[k]]
    grouped: dict[tuple[int, int], list] = defaultdict(list)
    for key in common:
        x, y, kind = _samples(base.cells[key], cand.cells[key])
        grouped[(x.size, y.size)].append((key, np.log(x), np.log(y), kind))
    bands = (calibration or {}).get("bands", {})
    for (n, m), items in grouped.items():
        shift, low, high, p = _shift_stats(np.stack([i[1] for i in items]), np.stack([i[2] for i in items]))
        for (key, _, _, kind), s, lo, hi, pv in zip(items, shift, low, high, p):
            cell = base.cells[key]
            effect = max(min_effect, bands.get(band_of(cell.size), {}).get("min_effect", 0.0))
            out.cells.append(CellResult(key, cell.series, cell.size, float(np.exp(s)), float(np.exp(lo)), float(np.exp(hi)),
                                        float(pv), samples=kind, n_base=n, n_cand=m, min_effect=effect))
    if out.cells:
        qs = sps.false_discovery_control([c.p for c in out.cells])
        for c, q in zip(out.cells, qs):
            c.q = float(q)
    _verdicts(out.cells, alpha)
    out.cells.sort(key=lambda c: (str(c.series), c.size))
    return out


def _verdicts(cells: list[CellResult], alpha: float) -> None:
    for c in cells:
        band = 1 + c.min_effect
        if c.n_base < 2 or c.n_cand < 2:
            c.verdict = "no change" if 1 / band < c.ratio < band else "inconclusive"
            c.note = "one sample per side: no confidence interval"
        elif c.q < alpha and c.ratio >= band and c.low > 1:
            c.verdict = "regression"
        elif c.q < alpha and c.ratio <= 1 / band and c.high < 1:
            c.verdict = "improvement"
        elif 1 / band <= c.low and c.high <= band or (c.q < alpha and 1 / band < c.ratio < band):
            c.verdict = "no change"
        else:
            c.verdict = "inconclusive"
        if c.samples == "rounds" and c.verdict in ("regression", "improvement"):
            c.note = "round-level samples (one launch per side): weaker evidence"
    # neighbouring sizes must lean the same way, or a lone cell stays inconclusive
    by_series: dict[tuple, list[CellResult]] = defaultdict(list)
    for c in cells:
        by_series[c.series].append(c)
    for series in by_series.values():
        series.sort(key=lambda c: c.size)
        for i, c in enumerate(series):
            if c.verdict not in ("regression", "improvement") or len(series) == 1:
                continue
            worse = c.verdict == "regression"
            neighbours = series[max(0, i - 1):i] + series[i + 1:i + 2]
            leaning = [nb for nb in neighbours
                       if (nb.ratio > 1 + nb.min_effect / 2 if worse else nb.ratio < 1 / (1 + nb.min_effect / 2))]
            if not leaning:
                c.verdict, c.note = "inconclusive", f"isolated {c.verdict}: no neighbouring size agrees"


def size_ranges(cmp: Comparison, verdict: str = "regression") -> list[dict]:
    """Consecutive sizes of one series with the same verdict, pooled: the lines people read."""
    ranges = []
    by_series: dict[tuple, list[CellResult]] = defaultdict(list)
    for c in cmp.cells:
        by_series[c.series].append(c)
    for series, cells in by_series.items():
        cells.sort(key=lambda c: c.size)
        run: list[CellResult] = []
        for c in cells + [None]:
            if c is not None and c.verdict == verdict:
                run.append(c)
                continue
            if run:
                logs = np.log([[r.ratio, r.low, r.high] for r in run]).mean(axis=0)
                ranges.append({"series": series, "first": run[0].size, "last": run[-1].size, "cells": len(run),
                               "ratio": float(np.exp(logs[0])), "low": float(np.exp(logs[1])), "high": float(np.exp(logs[2])),
                               "samples": run[0].samples})
            run = []
    return ranges
