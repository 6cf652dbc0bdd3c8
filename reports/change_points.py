"""Change points in one cell's history (binary segmentation, Hunter's t-test form; the method is
in docs/statistics.md): used by the nightly guard and by the canary's step search, so it
lives apart from both."""
from __future__ import annotations

import numpy as np

from reports.compare import ALPHA

MIN_SEGMENT = 2          # runs on each side of a change: one night alone is a suspicion, not a level
MIN_RUNS = 2 * MIN_SEGMENT


def _split_t(y: np.ndarray, lo: int) -> np.ndarray:
    """Pooled two-sample t of y[k:] against y[:k] for every k in [lo, n - lo], from running sums."""
    n = y.size
    y = y - y.mean()
    k = np.arange(lo, n - lo + 1)
    c1, c2 = np.cumsum(y), np.cumsum(y * y)
    s1, q1 = c1[k - 1], c2[k - 1]
    s2, q2 = c1[-1] - s1, c2[-1] - q1
    m1, m2 = s1 / k, s2 / (n - k)
    var = np.maximum((q1 - s1 * m1) + (q2 - s2 * m2), 0.0) / (n - 2)
    se = np.sqrt(var * (1.0 / k + 1.0 / (n - k)))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(se > 0, (m2 - m1) / se, 0.0)


def _bump_t(y: np.ndarray, lo: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pooled t of a stretch y[a:b] against the rest, for every a, b leaving `lo` runs in each of the
    three pieces: a change later undone has no single split that separates it."""
    n = y.size
    y = y - y.mean()
    c1, c2 = np.r_[0.0, np.cumsum(y)], np.r_[0.0, np.cumsum(y * y)]
    a, b = np.triu_indices(n + 1, k=lo)
    keep = (a >= lo) & (n - b >= lo)
    a, b = a[keep], b[keep]
    s_in, q_in, n_in = c1[b] - c1[a], c2[b] - c2[a], b - a
    s_out, q_out, n_out = c1[n] - s_in, c2[n] - q_in, n - n_in
    m_in, m_out = s_in / n_in, s_out / n_out
    var = np.maximum((q_in - s_in * m_in) + (q_out - s_out * m_out), 0.0) / (n - 2)
    se = np.sqrt(var * (1.0 / n_in + 1.0 / n_out))
    with np.errstate(divide="ignore", invalid="ignore"):
        return a, b, np.where(se > 0, (m_in - m_out) / se, 0.0)


def _best_split(y: np.ndarray, alpha: float) -> tuple[list[int], float]:
    """Where new levels begin in this stretch (one step, or a stretch that came back) and the p of
    the largest |t|, Bonferroni over every split tried; alpha is shared by the two searches."""
    from scipy import stats as sps
    n = y.size
    if n < MIN_RUNS:
        return [], 1.0
    t = np.abs(_split_t(y, MIN_SEGMENT))
    step = int(np.argmax(t))
    p = float(min(1.0, t.size * 2 * sps.t.sf(t[step], n - 2)))
    if p < alpha / 2 or n < 3 * MIN_SEGMENT:
        return [MIN_SEGMENT + step], p
    a, b, tb = _bump_t(y, MIN_SEGMENT)
    bump = int(np.argmax(np.abs(tb)))
    p_bump = float(min(1.0, tb.size * 2 * sps.t.sf(abs(tb[bump]), n - 2)))
    return ([int(a[bump]), int(b[bump])], p_bump) if p_bump < p else ([MIN_SEGMENT + step], p)


def change_points(y: np.ndarray, alpha: float = ALPHA) -> list[tuple[int, float]]:
    """Every significant change in one cell's history, oldest first: (index, p)."""
    found, todo = [], [(0, y.size)]
    while todo:
        start, stop = todo.pop()
        cuts, p = _best_split(y[start:stop], alpha)
        if cuts and p < alpha / 2:
            edges = [start] + [start + c for c in cuts] + [stop]
            found += [(e, p) for e in edges[1:-1]]
            todo += list(zip(edges[:-1], edges[1:]))
    return sorted(found)
