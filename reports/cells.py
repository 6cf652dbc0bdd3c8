"""Result files as comparable cells: one cell per (backend, algo, op, dtype, redop, in-place,
nranks, size) for collectives and per (tp, pp, schedule, ...) for layers, holding per-launch
per-op times. Reads hccl-bench results.json (and pytest-benchmark JSON written with it)."""
from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

COLLECTIVE_KEY = ("backend", "algo", "op", "dtype", "redop", "inplace", "nranks")
LAYER_KEY = ("bench", "backend", "tp", "pp", "dp", "layer", "sequence_parallel", "impl", "schedule", "microbatches")


class ResultError(ValueError):
    """A result file that cannot be used; the message says which and why."""


@dataclass
class Cell:
    series: tuple               # everything but the size: neighbours share it
    size: int                   # bytes for collectives, 0 for layers
    launches: dict[int, list[float]] = field(default_factory=lambda: defaultdict(list))  # launch -> per-op seconds
    info: dict = field(default_factory=dict)

    @property
    def key(self) -> tuple:
        return (*self.series, self.size)

    @property
    def kind(self) -> str:
        return "layer" if self.series and self.series[0] in ("linear", "pipeline") else "collective"


@dataclass
class Run:
    path: str
    cells: dict[tuple, Cell]
    meta: dict
    side: str = ""              # "A"/"B" of an interleaved --ab-env run: launches pair up across sides
    started: str = ""           # ISO time (pytest-benchmark's `datetime`, else the file's): orders a history

    @property
    def label(self) -> str:
        prov = self.meta.get("provenance", {})
        name = self.meta.get("label") or prov.get("cann", {}).get("cann") or Path(self.path).parent.name or self.path
        return f"{name} side {self.side}" if self.side else name


def load(path: str | Path, side: str = "") -> Run:
    """One run; `side` picks the A or B half of an interleaved --ab-env run."""
    path = Path(path)
    if path.is_dir():
        path = path / "results.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ResultError(f"cannot read result file {path}: {exc}") from None
    if not isinstance(data, dict) or "benchmarks" not in data:
        raise ResultError(f"{path} is not an hccl-bench/pytest-benchmark result file (no 'benchmarks' list)")
    cells: dict[tuple, Cell] = {}
    for bench in data["benchmarks"]:
        info = bench.get("extra_info") or {}
        if info.get("side", "") != side:
            continue
        times = (bench.get("stats") or {}).get("data") or []
        if "op" in info and "bytes" in info and "algo" in info:
            series, size = tuple(info.get(k) for k in COLLECTIVE_KEY), int(info["bytes"])
        elif info.get("bench") in ("linear", "pipeline"):
            series, size = tuple(info.get(k) for k in LAYER_KEY), 0
        else:
            continue  # overhead rows and foreign benchmarks are not comparison cells
        if not times:
            continue
        info.setdefault("time_us", float(sorted(times)[len(times) // 2]) * 1e6)  # files from other writers
        cell = cells.setdefault((*series, size), Cell(series, size, info=info))
        cell.launches[int(info.get("launch", 0))].extend(float(t) for t in times)
    if not cells:
        what = f"side {side} of an --ab-env run" if side else "collective or layer results (an --ab-env run? use --ab)"
        raise ResultError(f"{path} holds no {what}")
    started = data.get("datetime") or datetime.fromtimestamp(path.stat().st_mtime, timezone.utc).isoformat()
    return Run(str(path), cells, data.get("hccl_bench") or {}, side, str(started))


def setup_of(run: Run) -> dict:
    """What must match between two runs for a comparison to mean anything."""
    groups = run.meta.get("groups", {}).values()
    hosts = sorted({len(g.get("hosts", {})) for g in groups})
    return {"backends": sorted({c.series[0] if c.kind == "collective" else c.series[1] for c in run.cells.values()}),
            "nranks": sorted({c.info.get("nranks") for c in run.cells.values()}),
            "hosts": hosts}
