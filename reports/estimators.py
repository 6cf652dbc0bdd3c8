"""The per-launch statistic a verdict rests on (--estimator): how one launch's round times become
the one number a comparison or a history judges (docs/statistics.md, "Which statistic")."""
from __future__ import annotations

import numpy as np

from schema.judgement import DEFAULT_ESTIMATOR
from schema.stats import median

ESTIMATORS = ("median", "p10", "min")


def launch_value(times, estimator: str = DEFAULT_ESTIMATOR) -> float:
    """One launch's per-op time (s) from its rounds' per-op times: their median, 10th percentile
    (linear interpolation between order statistics) or minimum."""
    if estimator == "median":
        return median(times)
    t = np.asarray(times, dtype=np.float64)
    if estimator == "p10":
        return float(np.percentile(t, 10))
    if estimator == "min":
        return float(t.min())
    raise ValueError(f"unknown estimator {estimator!r}: allowed {', '.join(ESTIMATORS)}")


def describe(estimator: str) -> str:
    """How summaries name the statistic: 'median', '10th percentile', 'minimum'."""
    return {"median": "median", "p10": "10th percentile", "min": "minimum"}.get(estimator, estimator)
