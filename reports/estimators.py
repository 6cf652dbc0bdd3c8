"""The per-launch statistic a verdict rests on (--estimator): how one launch's round times become
the one number a comparison or a history judges (docs/statistics.md, "Which statistic")."""
from __future__ import annotations

import numpy as np

from schema.judgement import DEFAULT_ESTIMATOR
from schema.stats import median

ESTIMATORS = ("median", "p10", "min", "fastest")   # fastest: p10, and a night its fastest launch (history.py)


def launch_value(times, estimator: str = DEFAULT_ESTIMATOR) -> float:
    """One launch's per-op time (s) from its rounds' per-op times: their median, 10th percentile
    (linear interpolation between order statistics; fastest too) or minimum."""
    if estimator == "median":
        return median(times)
    if estimator in ESTIMATORS:
        t = np.asarray(times, dtype=np.float64)
        return float(t.min() if estimator == "min" else np.percentile(t, 10))
    raise ValueError(f"unknown estimator {estimator!r}: allowed {', '.join(ESTIMATORS)}")


def describe(estimator: str) -> str:
    """How summaries name the statistic: 'median', '10th percentile', 'minimum'."""
    return {"median": "median", "p10": "10th percentile", "min": "minimum",
            "fastest": "10th percentile (a night: the fastest launch with the cores near)"}.get(estimator, estimator)
