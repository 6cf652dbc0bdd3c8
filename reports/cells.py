"""Result files as comparable cells: one cell per (backend, algo, op, dtype, redop, in-place,
nranks, size) for collectives and per (tp, pp, schedule, ...) for layers, holding per-launch
per-op times. Reads hccl-bench results.json (and pytest-benchmark JSON written with it)."""
from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

SCHEMA = "hccl-bench/1"     # written into every result file, checked when one is read
COLLECTIVE_KEY = ("backend", "algo", "op", "dtype", "redop", "inplace", "nranks")
LAYER_KEY = ("bench", "backend", "tp", "pp", "dp", "layer", "sequence_parallel", "impl", "schedule", "microbatches")


class ResultError(ValueError):
    """A result file that cannot be used; the message says which and why."""


class NoCells(ResultError):
    """A readable result file with nothing to compare (a night that failed whole, the other side's run)."""


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
    notes: list[str] = field(default_factory=list)   # what a reader must be told: rebuilt, incomplete, torn line

    @property
    def complete(self) -> bool:
        """False for a session that ended early (signal, -x, full disk) or was rebuilt from cases.jsonl."""
        return self.meta.get("complete", True) is not False

    @property
    def label(self) -> str:
        prov = self.meta.get("provenance", {})
        name = self.meta.get("label") or prov.get("cann", {}).get("cann") or Path(self.path).parent.name or self.path
        return f"{name} side {self.side}" if self.side else name


def _read(path: Path) -> tuple[dict, Path, list[str]]:
    """(data, the file it came from, notes): results.json, or the run rebuilt from the cases.jsonl
    beside it when results.json is missing or unreadable (a session killed or out of disk)."""
    results = path / "results.json" if path.is_dir() else path
    cases = results.parent / "cases.jsonl"
    try:
        return json.loads(results.read_text()), results, []
    except RecursionError:
        raise ResultError(f"{results} nests too deeply to be a result file") from None
    except (OSError, ValueError) as exc:
        if results.name != "results.json" or not cases.is_file():
            raise ResultError(f"cannot read result file {results}: {exc}") from None
        data, notes = rebuild(cases)
        why = "is missing" if not results.exists() else "is unreadable"
        return data, cases, [f"{results} {why}: rebuilt from {cases.name} ({len(data['benchmarks'])} cases)"] + notes


def rebuild(cases: Path) -> tuple[dict, list[str]]:
    """A results.json-shaped run from cases.jsonl: the session line, each group, each finished case
    (per-op round times from its rank x round matrix), failures; a torn last line is ignored."""
    from collectives.stats import per_op_seconds
    meta: dict = {"groups": {}, "failures": [], "overhead": [], "complete": False,
                  "interrupted": "the session ended without writing results.json (killed, or the disk filled)"}
    data: dict = {"benchmarks": [], "hccl_bench": meta}
    notes = []
    try:
        raw = cases.read_bytes()
    except OSError as exc:
        raise ResultError(f"cannot read {cases}: {exc.strerror or exc}") from None
    lines = raw.split(b"\n")
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            if number == len(lines):  # no newline after it: the write was cut off
                notes.append(f"{cases.name}: torn last line (line {number}, {len(line)} bytes) ignored")
                continue
            raise ResultError(f"{cases}: line {number} is not JSON") from None
        if not isinstance(obj, dict):
            raise ResultError(f"{cases}: line {number} is not a JSON object")
        try:
            if "session" in obj:
                meta.update({k: v for k, v in obj["session"].items() if k != "datetime"})
                data["datetime"] = obj["session"].get("datetime")
            elif "group" in obj:
                meta["groups"].update(obj["group"])
            elif "failure" in obj:
                meta["failures"].append({**obj["failure"], "error": str(obj.get("error", "")).split("\n", 1)[0]})
            elif "overhead" in obj:
                meta["overhead"].append(obj["overhead"])
            elif "round_ns_per_rank" in obj:
                times = per_op_seconds(obj["round_ns_per_rank"], obj["iters_per_round"]).tolist()
                data["benchmarks"].append({"name": f"case{number}", "extra_info": obj, "stats": {"data": times}})
        except (KeyError, TypeError, ValueError, AttributeError, ZeroDivisionError) as exc:
            raise ResultError(f"{cases}: line {number} is not a case record ({type(exc).__name__})") from None
    return data, notes


def load(path: str | Path, side: str = "") -> Run:
    """One run; `side` picks the A or B half of an interleaved --ab-env run."""
    data, path, notes = _read(Path(path))
    if not isinstance(data, dict) or not isinstance(data.get("benchmarks"), list):
        raise ResultError(f"{path} is not an hccl-bench/pytest-benchmark result file (no 'benchmarks' list)")
    if not isinstance(data.get("hccl_bench") or {}, dict):
        raise ResultError(f"{path}: 'hccl_bench' must be an object")
    schema = (data.get("hccl_bench") or {}).get("schema", SCHEMA)
    if schema != SCHEMA:
        raise ResultError(f"{path}: written in schema {str(schema)[:40]!r}; this hccl-bench reads {SCHEMA!r} "
                          "(use the hccl-bench that wrote it)")
    cells: dict[tuple, Cell] = {}
    for number, bench in enumerate(data["benchmarks"]):
        info, times = _checked(bench, f"{path}: benchmark {number}")
        if info.get("side", "") != side:
            continue
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
        raise NoCells(f"{path} holds no {what}")
    started = data.get("datetime") or datetime.fromtimestamp(path.stat().st_mtime, timezone.utc).isoformat()
    run = Run(str(path), cells, data.get("hccl_bench") or {}, side, str(started), notes)
    if not run.complete:
        run.notes.append(f"{path.parent} is an incomplete run ({run.meta.get('interrupted') or 'ended early'}): "
                         f"{len(cells)} cells")
    if run.meta.get("failed"):
        run.notes.append(f"{path} is marked failed: {run.meta['failed']}")
    return run


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _checked(bench, where: str) -> tuple[dict, list]:
    """(extra_info, per-op times) of one benchmark entry, or ResultError naming the entry and field:
    times finite and > 0, sizes whole and >= 0, the fields a cell is keyed on plain values."""
    if not isinstance(bench, dict):
        raise ResultError(f"{where} is a JSON {type(bench).__name__}, not an object")
    info, stats = bench.get("extra_info") or {}, bench.get("stats") or {}
    where = f"{where} ({str(bench.get('name', 'unnamed'))[:80]})"
    if not isinstance(info, dict) or not isinstance(stats, dict):
        raise ResultError(f"{where}: extra_info and stats must be objects")
    times = stats.get("data") or []
    if not isinstance(times, list) or not all(_number(t) and t > 0 for t in times):
        bad = next((t for t in times if not (_number(t) and t > 0)), times) if isinstance(times, list) else times
        raise ResultError(f"{where}: stats.data must be a list of finite times > 0 s, found {str(bad)[:40]}")
    for name in ("bytes", "count", "launch"):
        value = info.get(name, 0)
        if not (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
            raise ResultError(f"{where}: extra_info.{name} must be a whole number >= 0, found {str(value)[:40]}")
    nranks = info.get("nranks", 1)
    if not (isinstance(nranks, int) and not isinstance(nranks, bool) and nranks >= 1):
        raise ResultError(f"{where}: extra_info.nranks must be a whole number >= 1, found {str(nranks)[:40]}")
    for name in ("time_us", "busbw_gbps", "algbw_gbps", "step_us"):
        if info.get(name) is not None and not (_number(info[name]) and info[name] >= 0):
            raise ResultError(f"{where}: extra_info.{name} must be a finite number >= 0, found {str(info[name])[:40]}")
    for name in (*COLLECTIVE_KEY, *LAYER_KEY):
        if isinstance(info.get(name), (list, dict)):
            raise ResultError(f"{where}: extra_info.{name} must be a plain value, found a {type(info[name]).__name__}")
    return info, times


def setup_of(run: Run) -> dict:
    """What must match between two runs for a comparison to mean anything."""
    groups = run.meta.get("groups", {}).values()
    hosts = sorted({len(g.get("hosts", {})) for g in groups})
    return {"backends": sorted({c.series[0] if c.kind == "collective" else c.series[1] for c in run.cells.values()}),
            "nranks": sorted({c.info.get("nranks") for c in run.cells.values()}),
            "hosts": hosts, "devices": sorted({str(d) for g in groups for d in g.get("devices", [])}),
            "mpi_thread_level": sorted({str(g["versions"]["mpi_thread_level"]) for g in groups
                                        if isinstance(g.get("versions"), dict) and "mpi_thread_level" in g["versions"]})}
