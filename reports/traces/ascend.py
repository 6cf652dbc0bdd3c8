"""torch_npu profiler output, one folder per rank (`*_ascend_pt/`), into RankTraces: HCCL's collectives.
What is read of it: docs/doctor.md (The trace formats read)."""
from __future__ import annotations

import json
import re
from collections import defaultdict
from itertools import count
from pathlib import Path

from reports.traces.files import load_json, shown
from reports.traces.nccl import snake_op
from reports.traces.records import Collective, RankTrace
from schema.results import ResultError
from schema.stats import median

INFO = re.compile(r"^profiler_info(?:_(\d+))?\.json$")   # no rank: a run without torch.distributed
OUTPUT = "ASCEND_PROFILER_OUTPUT"
TIME_INFO = "Communication Time Info"
NOTE = ("HCCL ops from communication.json (Start Timestamp, Elapse Time on the device): lateness and the wait printed "
        "are the doctor's, from them, as for other backends")


def is_rank_folder(folder: Path) -> bool:
    return folder.is_dir() and any(INFO.search(p.name) for p in folder.iterdir())


def rank_folders(folder: Path) -> list[Path]:
    """The folder's rank folders (`*_ascend_pt`, or any with profiler_info_<rank>.json), or itself as one rank's."""
    return [folder] if is_rank_folder(folder) else sorted(p for p in folder.iterdir() if is_rank_folder(p))


def split_name(name: str) -> tuple[str, str, str]:
    """hcom_allReduce__501_0_1@629723... -> (group "629723...", op "all_reduce", the name's tag "501_0_1")."""
    stem, _, group = name.partition("@")
    m = re.match(r"hcom_([A-Za-z]+)_*(.*)$", stem)
    op = m.group(1) if m else stem
    return group, snake_op(op), (m.group(2) if m else "")


def collectives(path: Path, ops: dict[str, dict], group_of: dict[str, str] | None = None) -> list[Collective]:
    """One rank's ops (name -> its record) in start order, each group's in order from 0; the group is
    the op name's group id unless `group_of` names it."""
    rows = []
    for name, info in ops.items():
        if name.startswith("Total Op Info") or not isinstance(info, dict):
            continue
        times = info.get(TIME_INFO) or {}   # start us, elapse us and HCCL's own wait us, or one line why not
        try:
            start, elapse = float(times["Start Timestamp(us)"]), float(times["Elapse Time(ms)"]) * 1e3
            wait = None if times.get("Wait Time(ms)") is None else float(times["Wait Time(ms)"]) * 1e3
        except (KeyError, TypeError, ValueError, AttributeError):
            raise ResultError(f"{shown(path)}: op {name.partition('@')[0][:40]} has no Start Timestamp(us) / Elapse Time(ms) "
                              f"in its '{TIME_INFO}'") from None
        group, op, tag = split_name(name)
        group = (group_of or {}).get(name, group)
        rows.append((start, elapse, wait, group, op, tag))
    seq: defaultdict[str, count[int]] = defaultdict(count)
    return [Collective(group, next(seq[group]), op, tag, start, elapse, wait)
            for start, elapse, wait, group, op, tag in sorted(rows)]


def read_rank(folder: Path) -> RankTrace:
    infos = [p for p in folder.iterdir() if INFO.search(p.name)]
    if len(infos) != 1:
        raise ResultError(f"{shown(folder)}: {len(infos)} profiler_info_<rank>.json files: one rank's folder holds one")
    number = INFO.search(infos[0].name).group(1)   # type: ignore[union-attr]
    comm = folder / OUTPUT / "communication.json"
    if number is None:     # torch_npu writes no rank where torch.distributed was not initialised
        return RankTrace(0, 1, "", str(folder), {}, [], NOTE, "hccl")
    if not comm.is_file():
        db = "only the .db export there: profile with export_type text, " if list(folder.glob(f"{OUTPUT}/*.db")) else ""
        raise ResultError(f"{shown(folder)}: no {OUTPUT}/communication.json ({db}profiler_level Level1 or higher, "
                          "and let torch_npu parse)")
    data = load_json(comm, "communication.json")
    if not isinstance(data, dict):
        raise ResultError(f"{shown(comm)}: not torch_npu's communication.json (a JSON object of steps expected)")
    ops: dict[str, dict] = {}
    for step in data.values():
        for kind in ("collective", "p2p"):
            part = step.get(kind) if isinstance(step, dict) else None
            if isinstance(part, dict):
                ops.update(part)
    return RankTrace(int(number), _world(folder) or 0, "", str(folder), {}, collectives(comm, ops), NOTE, "hccl")


def _world(folder: Path) -> int | None:
    meta = folder / "profiler_metadata.json"
    if not meta.is_file():
        return None
    data = load_json(meta, "profiler_metadata.json")
    args = data.get("distributed_args") if isinstance(data, dict) else None
    if isinstance(args, str):          # add_metadata_json's value is the caller's JSON text
        try:
            args = json.loads(args)
        except ValueError:
            args = None
    size = args.get("world_size") if isinstance(args, dict) else None
    return int(size) if isinstance(size, int) else None


def with_groups(traces: list[RankTrace]) -> list[RankTrace]:
    """Each group's members are the ranks holding its ops; a world no file states is the highest rank + 1."""
    members: dict[str, set[int]] = {}
    for t in traces:
        for c in t.collectives:
            members.setdefault(c.group, set()).add(t.rank)
    size = max([t.world for t in traces] + [max(t.rank for t in traces) + 1])
    for t in traces:
        t.world = size
        t.groups = {g: sorted(members[g]) for g in {c.group for c in t.collectives}}
    return with_hccl_waits(traces)


def with_hccl_waits(traces: list[RankTrace], shown_ranks: int = 3) -> list[RankTrace]:
    """HCCL's own Wait Time beside the doctor's, in each trace's note: each rank's median, the lowest few and the highest."""
    medians = sorted((float(median(w)), t.rank) for t in traces
                     if (w := [c.wait_us for c in t.collectives if c.wait_us is not None]))
    if medians:
        low = ", ".join(f"rank {r} {m / 1e3:.2f} ms" for m, r in medians[:shown_ranks])
        high = f"; highest rank {medians[-1][1]} {medians[-1][0] / 1e3:.2f} ms" if len(medians) > shown_ranks else ""
        for t in traces:
            t.note = f"{t.note}; HCCL's own Wait Time, median per rank: lowest {low}{high}"
    return traces


def read_dir(folder: Path) -> list[RankTrace]:
    """Every rank folder's collectives, in rank order."""
    folders = rank_folders(Path(folder))
    if not folders:
        raise ResultError(f"{folder}: no torch_npu rank folder (*_ascend_pt with profiler_info_<rank>.json) in it")
    return with_groups(sorted((read_rank(f) for f in folders), key=lambda t: t.rank))
