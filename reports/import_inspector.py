"""NCCL Inspector logs (NCCL_INSPECTOR_ENABLE=1): field data, what a production job's collectives
took, never a controlled benchmark. What a log holds: docs/results.md (NCCL Inspector)."""
from __future__ import annotations

import json
from pathlib import Path

from collectives.ops import OPS, by_log_name
from reports.log_rows import LogRun, entry, log_bytes, result_of
from schema.results import ResultError

LIMITS = ("field data (NCCL Inspector): kernel execution time only (no launch or queueing), 1 us resolution, "
          "messages under NCCL_INSPECTOR_DUMP_MIN_SIZE_BYTES (8 KiB by default) not recorded, data type and "
          "reduction not recorded, sizes and repeats are whatever the job ran")


def read(paths: list[Path], label: str | None) -> list[dict]:
    logs = [f for p in paths for f in (sorted(p.glob("*.log")) if p.is_dir() else [p])]   # a dump directory: its logs
    where = str(paths[0]) if len(paths) == 1 else f"{paths[0]} (+{len(paths) - 1})"
    if not logs:
        raise ResultError(f"{where}: no NCCL Inspector *.log files")
    seen: dict[tuple, dict[int, float]] = {}      # (comm, op, sn) -> rank -> us
    sizes: dict[tuple, tuple[int, int]] = {}      # (comm, op, sn) -> (bytes, n_ranks)
    hosts: dict[str, set] = {}
    run = LogRun(first_line=1)
    p2p = sources = bad = 0
    for log in logs:
        for number, line in enumerate(log_bytes(log).decode(errors="replace").splitlines(), 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                head, meta = obj["header"], obj.get("metadata") or {}
            except (ValueError, RecursionError, KeyError, TypeError):
                bad += 1
                run.cut = run.cut or f"{log.name} line {number}: not a whole Inspector record (cut off?), skipped"
                continue
            if "p2p_perf" in obj:
                p2p += 1
                continue
            perf = obj.get("coll_perf")
            op = by_log_name(str((perf or {}).get("coll")), inspector=True)   # each op module's LogNames.inspector
            if not isinstance(perf, dict) or op is None:
                bad += 1
                continue
            try:
                n, rank, t = int(head["n_ranks"]), int(head["rank"]), float(perf["coll_exec_time_us"])
                size = int(perf["coll_msg_size_bytes"]) * (n if OPS[op].per_rank_log_bytes() else 1)   # one rank's share
                key = (str(head.get("id")), op, int(perf["coll_sn"]))
            except (KeyError, TypeError, ValueError):
                bad += 1
                continue
            if perf.get("coll_timing_source", "kernel_gpu") != "kernel_gpu":
                sources += 1
            if t <= 0:
                continue
            seen.setdefault(key, {})[rank] = t
            sizes[key] = (size, n)
            hosts.setdefault(str(meta.get("hostname", "unknown")), set()).add((key[0], rank))
            run.last_line = max(run.last_line, number)
    if not seen:
        raise ResultError(f"{where}: no NCCL Inspector coll_perf record (expected JSON lines with header and coll_perf)")
    cells: dict[tuple, list[dict[int, float]]] = {}
    for key, by_rank in seen.items():
        size, n = sizes[key]
        cells.setdefault((key[1], size, n), []).append(by_rank)
    partial = sum(len(r) < sizes[k][1] for k, r in seen.items())
    run.warnings.append(LIMITS)
    for count, what in ((partial, "collectives were logged by fewer ranks than their communicator has (a process's "
                                  "file missing?): their time is the slowest rank logged"),
                        (sources, "records timed on the CPU, not the GPU kernels (NCCL_INSPECTOR_REQUIRE_KERNEL_TIMING=0)"),
                        (p2p, "p2p records (Send/Recv) not imported"), (bad, "lines that are not Inspector records skipped")):
        if count:
            run.warnings.append(f"{count} {what}")
    out = []
    for run_op in sorted({op for op, _, _ in cells}):
        benches = []
        for (op, size, n), collectives in sorted(cells.items()):
            if op != run_op:
                continue
            times = [max(r.values()) for r in collectives]
            full = [r for r in collectives if len(r) == n]
            matrix = ([[int(round(r[k] * 1000)) for r in full] for k in sorted(full[0])]
                      if len(full) == len(collectives) and len(full) >= 2 else None)
            benches.append(entry("nccl-inspector", op, "unknown", "unknown" if OPS[op].reduces else "none", False, size,
                                  0, n, times, None, {"collectives": len(times), "resolution_us": 1,
                                                      "what": "slowest rank's kernel time per collective"},
                                  where, matrix_ns=matrix, source="field", backend="nccl"))
        nranks = sorted({n for op, _, n in cells if op == run_op})
        ranks_per_host = {h: len({r for _, r in ranks}) for h, ranks in hosts.items()}
        one = LogRun(first_line=1, op=run_op, cut=run.cut, warnings=list(run.warnings), last_line=run.last_line)
        one.extra.update({"field": True, "limits": LIMITS, "files": [str(p) for p in logs]})
        result = result_of(logs[0] if len(logs) == 1 else paths[0], "nccl-inspector", "nccl-inspector", run_op, nranks[0],
                         benches, one, ranks_per_host, [], label)
        result["hccl_bench"].update(source="field", field_limits=LIMITS)
        out.append(result)
    return out
