"""A/A calibration (`hccl-bench calibrate`): per backend and size band how far two runs of one stack drift,
how often the 95% CI misses, and the smallest minimum effect that flags none of them (docs/statistics.md)."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from reports.compare import band_key, compare
from schema.calibration import Band, Calibration
from schema.judgement import DEFAULT_ESTIMATOR, Samples
from schema.results import Run


def calibrate(a: Run, b: Run, estimator: str = DEFAULT_ESTIMATOR) -> Calibration:
    """Made with one estimator; a comparison judging another does not apply it."""
    cmp = compare(a, b, min_effect=0.0, estimator=estimator)
    kinds = sorted({c.samples for c in cmp.cells})
    bands = {}
    for key in sorted({band_key(c.series, c.size) for c in cmp.cells}):
        cells = [c for c in cmp.cells if band_key(c.series, c.size) == key]
        drift = np.abs(np.log([c.ratio for c in cells]))
        missed = [max(c.ratio, 1 / c.ratio) - 1 for c in cells if c.low > 1 or c.high < 1]
        bands[key] = Band(cells=len(cells), noise=float(np.exp(np.percentile(drift, 95)) - 1),
                          ci_missed=len(missed) / len(cells),
                          min_effect=math.ceil(max(missed, default=0.0) * 1000) / 1000)   # up to the next 0.1%
    return Calibration(a=a.path, b=b.path, bands=bands, samples=kinds[0] if len(kinds) == 1 else Samples.MIXED,
                       estimator=estimator)


def read(path: str) -> Calibration:
    """A calibration file (`hccl-bench calibrate -o FILE`), checked."""
    return Calibration.from_json(json.loads(Path(path).read_text()), path)
