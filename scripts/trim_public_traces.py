"""Trim a public Kineto (NCCL) trace to what reports/traces/ reads, for tests/data/traces/: the NCCL
kernels, the runtime launches of the same correlation, the CPU ops enclosing those launches on their
thread (record_param_comms, nccl:*, ProfilerStep*), and the trace's top-level keys (distributedInfo,
baseTimeNanoseconds, ...). Event fields and values are kept as they are.

    python scripts/trim_public_traces.py IN.json.gz OUT.json.gz
"""
from __future__ import annotations

import gzip
import json
import sys

from reports.traces import nccl


def trim(trace: dict) -> dict:
    events = trace["traceEvents"]
    kernels = [e for e in events if e.get("ph") == "X" and e.get("cat") == "kernel"
               and str(e.get("name", "")).startswith(nccl.KERNEL_PREFIXES)]
    corr = {(k.get("args") or {}).get("correlation") for k in kernels}
    launches = [e for e in events if e.get("ph") == "X" and str(e.get("name", "")).startswith(nccl.LAUNCHES)
                and (e.get("args") or {}).get("correlation") in corr]
    keep_cpu = [e for e in events if e.get("ph") == "X" and (
        e.get("name") == "record_param_comms" or str(e.get("name", "")).startswith(("nccl:", "ProfilerStep#")))]
    meta = [e for e in events if e.get("ph") == "M"]
    kept = kernels + launches + keep_cpu + meta
    return {**{k: v for k, v in trace.items() if k != "traceEvents"}, "traceEvents": kept}


if __name__ == "__main__":
    src, dst = sys.argv[1], sys.argv[2]
    with gzip.open(src, "rt") as f:
        trace = json.load(f)
    with gzip.open(dst, "wt") as f:
        json.dump(trim(trace), f)
