"""Everything derived from the rank x round matrix lives here (ARCHITECTURE.md, Measurement method).

The time of a round is the slowest rank's (a collective finishes when its last rank does);
per-op time = round time / K. time_us is the median over rounds.
"""
from __future__ import annotations

import numpy as np

from collectives.ops import bandwidths


def per_op_seconds(round_ns_by_rank: list[list[int]], iters: int) -> np.ndarray:
    m = np.asarray(round_ns_by_rank, dtype=np.float64)
    return m.max(axis=0) / iters / 1e9


def median_seconds(round_ns_by_rank: list[list[int]], iters: int) -> float:
    return float(np.median(per_op_seconds(round_ns_by_rank, iters)))


def per_rank_median_seconds(round_ns_by_rank: list[list[int]], iters: int) -> np.ndarray:
    """Each rank's own median per-op time (for per-rank quantities such as a stage's bubble)."""
    return np.median(np.asarray(round_ns_by_rank, dtype=np.float64), axis=1) / iters / 1e9


def summarize(round_ns_by_rank: list[list[int]], iters: int, op: str | None = None, nbytes: int = 0, nranks: int = 1) -> dict:
    """Median/min/max/mean/IQR/CV (p95, p99 with enough rounds); algbw/busbw when `op` is given;
    rank_spread = slowest rank's median / fastest rank's median - 1 (ranks that leave a collective
    at different times: 0 when they all see the same time)."""
    t = per_op_seconds(round_ns_by_rank, iters)
    per_rank = per_rank_median_seconds(round_ns_by_rank, iters)
    q1, median, q3 = np.percentile(t, [25, 50, 75])
    mean = float(t.mean())
    out = {
        "time_us": float(median) * 1e6, "min_us": float(t.min()) * 1e6, "max_us": float(t.max()) * 1e6,
        "mean_us": mean * 1e6, "iqr_us": float(q3 - q1) * 1e6,
        "cv": float(t.std(ddof=1) / mean) if t.size > 1 and mean > 0 else 0.0,
        "rounds": int(t.size),
        "rank_spread": float(per_rank.max() / per_rank.min() - 1) if per_rank.min() > 0 else 0.0,
    }
    if t.size >= 20:
        out["p95_us"] = float(np.percentile(t, 95)) * 1e6
    if t.size >= 100:
        out["p99_us"] = float(np.percentile(t, 99)) * 1e6
    if op is not None:
        out["algbw_gbps"], out["busbw_gbps"] = bandwidths(op, nbytes, float(median), nranks)
    return out
