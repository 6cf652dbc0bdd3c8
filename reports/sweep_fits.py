"""Numbers a report states about a size sweep: latency floor, peak busbw, n_1/2, alpha-beta fit,
Ring-vs-Tree crossover."""
from __future__ import annotations

import numpy as np

from schema.stats import relative_fit


def sweep_stats(sizes: list[int], times_us: list[float], busbw: list[float]) -> dict:
    """Latency floor = time at the smallest size; n_1/2 = first size reaching half the peak busbw;
    alpha-beta: t = alpha + S/bandwidth, least squares weighted by 1/t (every size counts alike)."""
    s = np.asarray(sizes, dtype=float)
    t = np.asarray(times_us, dtype=float) * 1e-6
    b = np.asarray(busbw, dtype=float)
    order = np.argsort(s)
    s, t, b = s[order], t[order], b[order]
    peak = float(b.max()) if b.size else 0.0
    half = next((int(x) for x, y in zip(s, b) if y >= peak / 2), None) if peak > 0 else None
    out = {"latency_floor_us": float(t[0] * 1e6) if t.size else None, "peak_busbw_gbps": peak,
           "peak_at": int(s[int(np.argmax(b))]) if b.size else None, "half_peak_size": half,
           "alpha_us": None, "bandwidth_gbps": None, "r2": None}
    if s.size >= 3:
        w = 1 / t
        alpha, beta = relative_fit(np.stack([np.ones_like(s), s], axis=1), t)
        pred = alpha + beta * s
        ss_res = float(np.sum(((t - pred) * w) ** 2))
        ss_tot = float(np.sum(((t - np.average(t, weights=w)) * w) ** 2))
        out.update(alpha_us=float(alpha * 1e6), bandwidth_gbps=float(1 / beta / 1e9) if beta > 0 else None,
                   r2=1 - ss_res / ss_tot if ss_tot > 0 else None)
    return out


def crossover(sizes: list[int], first: list[float], second: list[float]) -> int | None:
    """First size at which the faster of two algorithms changes (None if one wins throughout)."""
    sign = np.sign(np.asarray(first) - np.asarray(second))
    flips = np.flatnonzero((sign[1:] != 0) & (sign[:-1] != 0) & (sign[1:] != sign[:-1]))
    return int(sizes[flips[0] + 1]) if flips.size else None
