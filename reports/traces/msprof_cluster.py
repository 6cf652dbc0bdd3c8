"""msprof-analyze's cluster_analyse output (`cluster_analysis_output/`) into RankTraces: every rank's
HCCL ops, merged by the tool. What is read of it: docs/doctor.md (The trace formats read)."""
from __future__ import annotations

import csv
import io
import re
from pathlib import Path

from reports.traces.ascend import collectives, with_hccl_waits
from reports.traces.files import load_json, read_bytes, shown
from reports.traces.records import RankTrace
from schema.results import ResultError

FILE = "cluster_communication.json"
STEPS = "cluster_step_trace_time.csv"
NOTE = ("HCCL ops from msprof-analyze's cluster_communication.json (Start Timestamp, Elapse Time on each rank's "
        "device): lateness and the wait printed are the doctor's, from them, as for other backends")


def where(folder: Path) -> Path | None:
    """The cluster_communication.json of a folder (or its cluster_analysis_output/), if any."""
    return next((p for p in (folder / FILE, folder / "cluster_analysis_output" / FILE) if p.is_file()), None)


def read_dir(folder: Path) -> list[RankTrace]:
    path = where(Path(folder))
    if path is None:
        raise ResultError(f"{folder}: no {FILE} (run msprof-analyze cluster -d PROF_DIR first)")
    data = load_json(path, FILE)
    if not isinstance(data, dict):
        raise ResultError(f"{shown(path)}: not msprof-analyze's {FILE} (a JSON object of groups expected)")
    per_rank: dict[int, dict[str, dict]] = {}
    group_of: dict[int, dict[str, str]] = {}
    groups: dict[str, list[int]] = {}
    for group, steps in data.items():
        ranks = [int(r) for r in re.findall(r"\d+", str(group))]
        if not ranks or not isinstance(steps, dict):
            raise ResultError(f"{shown(path)}: group {str(group)[:40]!r} names no ranks: not msprof-analyze's {FILE}")
        groups[str(group)] = ranks
        for step in steps.values():
            for op, by_rank in (step or {}).items():
                if op.startswith("Total Op Info") or not isinstance(by_rank, dict):
                    continue
                for r, info in by_rank.items():
                    if not str(r).isdigit():
                        raise ResultError(f"{shown(path)}: op {op[:60]} has a rank {str(r)[:20]!r}, not a number")
                    per_rank.setdefault(int(r), {})[op] = info
                    group_of.setdefault(int(r), {})[op] = str(group)   # the key lists the group's ranks
    if not per_rank:
        raise ResultError(f"{shown(path)}: no op of any rank in it: was communication profiled (Level1 or higher)?")
    world = max(max(per_rank) + 1, _ranks_in_steps(path.parent / STEPS))
    out = []
    for rank, ops in sorted(per_rank.items()):
        mine = collectives(path, ops, group_of[rank])
        out.append(RankTrace(rank, world, "", f"{path} rank {rank}",
                             {g: groups[g] for g in {c.group for c in mine}}, mine, NOTE, "hccl"))
    return with_hccl_waits(out)


def _ranks_in_steps(path: Path) -> int:
    """1 + the highest rank of cluster_step_trace_time.csv's rank rows (0 without the file)."""
    if not path.is_file():
        return 0
    rows = csv.DictReader(io.StringIO(read_bytes(path).decode("utf-8", "replace")))
    ranks = [int(r["Index"]) for r in rows if r.get("Type") == "rank" and str(r.get("Index", "")).isdigit()]
    return max(ranks) + 1 if ranks else 0
