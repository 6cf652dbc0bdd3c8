"""torch.profiler (Kineto) Chrome-trace JSON, one file per rank, into RankTraces (gloo's events;
NCCL and RCCL kernels: nccl.py). What is read of it: docs/doctor.md (The trace formats read)."""
from __future__ import annotations

from pathlib import Path

from reports.traces import nccl
from reports.traces.files import listed, load_json, shown
from reports.traces.records import Collective, RankTrace
from schema.results import ResultError

SUFFIXES = (".json", ".json.gz")
GLOO_THREADS = 2      # ProcessGroupGloo::Options threads, the default every torch job gets


def read(path: Path) -> RankTrace:
    trace = load_json(path, "torch.profiler trace")
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        raise ResultError(f"{shown(path)}: JSON without 'traceEvents': not a torch.profiler (Kineto) trace")
    info = trace.get("distributedInfo")
    if not isinstance(info, dict) or not isinstance(info.get("rank"), int) or not isinstance(info.get("world_size"), int):
        raise ResultError(f"{shown(path)}: a trace without distributedInfo (rank, world_size): start the profiler after "
                          "torch.distributed.init_process_group")
    pgs = info.get("pg_config") or []
    groups = {str(pg.get("pg_name")): [int(r) for r in pg["ranks"]] for pg in (pgs.values() if isinstance(pgs, dict) else pgs)
              if isinstance(pg, dict) and isinstance(pg.get("ranks"), list)}
    events = [e for e in trace["traceEvents"] if isinstance(e, dict) and e.get("ph") == "X"
              and str(e.get("name", "")).startswith("gloo:")]
    out = RankTrace(info["rank"], info["world_size"], str(trace.get("host_name") or ""), str(path), groups,
                    backend=str(info.get("backend") or "gloo"))
    base_us = float(trace.get("baseTimeNanoseconds") or 0) / 1e3   # ts + base: wall-clock microseconds
    out.steps = sorted(base_us + float(e["ts"]) for e in trace["traceEvents"] if isinstance(e, dict)
                       and e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")
                       and isinstance(e.get("ts"), (int, float)))   # prof.step()'s marks, where the job made them
    if not events:
        if nccl.holds(trace["traceEvents"]):
            try:
                out.collectives, named, out.note = nccl.collectives(trace["traceEvents"], base_us)
            except (KeyError, TypeError, ValueError) as exc:
                raise ResultError(f"{shown(path)}: an NCCL kernel without a number where one belongs ({exc})") from None
            for g, ranks in named.items():
                out.groups.setdefault(g, ranks)
            out.backend = "nccl"
        return out
    try:
        threads = sorted({int(e["tid"]) for e in events})
        rows = [(float(e["ts"]), float(e["dur"]), int(e["tid"]), e["name"][len("gloo:"):], _shape(e.get("args"))) for e in events]
    except (KeyError, TypeError, ValueError) as exc:
        raise ResultError(f"{shown(path)}: a gloo event without a number where one belongs ({exc})") from None
    names = list(groups)
    if len(threads) == GLOO_THREADS * len(names):
        group_of = {t: names[i // GLOO_THREADS] for i, t in enumerate(threads)}
        out.note = "groups from gloo's runloop threads in creation order"
    else:
        group_of = {t: "" for t in threads}
        out.note = (f"{len(threads)} gloo threads for {len(names)} groups: collectives matched in start order, "
                    "groups unknown")
    seq: dict[str, int] = {}
    for ts, dur, tid, op, shape in sorted(rows):
        g = group_of[tid]
        out.collectives.append(Collective(g, seq.get(g, 0), op, shape, base_us + ts, dur))
        seq[g] = seq.get(g, 0) + 1
    return out


def _shape(args) -> str:
    args = args if isinstance(args, dict) else {}
    return f"{args.get('Input Dims', '?')} {args.get('Input type', '?')}"


def read_dir(folder: Path) -> list[RankTrace]:
    """Every rank's trace in the folder, in rank order."""
    return [read(p) for p in listed(Path(folder), SUFFIXES)]
