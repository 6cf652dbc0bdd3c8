"""An A/A calibration (`hccl-bench calibrate`): per size band, how far two runs of one stack drifted
and the minimum effect that would have flagged none of its cells."""
from __future__ import annotations

from dataclasses import asdict, dataclass

from schema.judgement import Samples
from schema.records import load_fields
from schema.results import ResultError, column

METHOD = "A/A: min effect per size band = the largest A/A effect whose 95% CI excluded no change"


@dataclass(frozen=True)
class Band:
    cells: int = column("whole", 0)
    noise: float = column("amount", 0.0)        # 95th percentile of |A/A ratio - 1|
    ci_missed: float = column("amount", 0.0)    # share of cells whose 95% CI excluded 1 (~5% is honest)
    min_effect: float = column("amount", 0.0)   # the smallest minimum effect under which no A/A cell was flagged


@dataclass(frozen=True)
class Calibration:
    a: str = column("text", "")
    b: str = column("text", "")
    bands: dict[str, Band] = column("object", {})   # band_key (reports/compare.py) -> Band
    samples: Samples = column("text", Samples.LAUNCHES)   # what it was made from
    estimator: str = column("text", "median")       # each launch's statistic (a file from before --estimator: the median)
    method: str = column("text", METHOD)

    def min_effect(self, band: str) -> float:
        """The minimum effect this calibration asks of a band (0: it did not measure that band)."""
        return self.bands[band].min_effect if band in self.bands else 0.0

    def to_json(self) -> dict:
        return asdict(self)

    def __getitem__(self, key: str):
        """The JSON by key, as the dict this type replaced was read (tests/test_estimators.py)."""
        return self.to_json()[key]

    @classmethod
    def from_json(cls, data, where: str) -> Calibration:
        """A calibration file's content, every field checked; ResultError names the file and the field."""
        if not isinstance(data, dict):
            raise ResultError(f"{where}: a calibration must be a JSON object (hccl-bench calibrate -o FILE)")
        values = load_fields(cls, data, where)
        bands = values.get("bands", {})
        if not all(isinstance(b, dict) for b in bands.values()):
            raise ResultError(f"{where}.bands must be an object of objects (band -> cells, noise, ci_missed, min_effect)")
        if values.get("samples", Samples.LAUNCHES) not in {s.value for s in Samples}:
            raise ResultError(f"{where}.samples must be one of {', '.join(s.value for s in Samples)}, not {values['samples']!r}")
        values["samples"] = Samples(values.get("samples", Samples.LAUNCHES))
        values["bands"] = {str(k): Band(**load_fields(Band, b, f"{where}.bands.{k}")) for k, b in bands.items()}
        return cls(**values)
