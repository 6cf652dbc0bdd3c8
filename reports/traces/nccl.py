"""NCCL and RCCL collectives in a torch.profiler (Kineto) trace: the GPU kernels, read on the device's
clock, each with what its CPU side says it is. What is read: docs/doctor.md (The trace formats read)."""
from __future__ import annotations

import json
import re
from collections import defaultdict

from reports.traces.records import Collective

KERNEL_PREFIXES = ("ncclKernel_", "ncclDevKernel_")
LAUNCHES = ("cudaLaunchKernel", "cuLaunchKernel", "hipLaunchKernel", "hipExtLaunchKernel", "hipModuleLaunchKernel",
            "hipExtModuleLaunchKernel")   # ROCm's names as HTA's MI250 trace shows them


def holds(events: list[dict]) -> bool:
    return any(_is_kernel(e) for e in events)


def _is_kernel(e: dict) -> bool:
    return e.get("ph") == "X" and e.get("cat") == "kernel" and str(e.get("name", "")).startswith(KERNEL_PREFIXES)


def collectives(events: list[dict], base_us: float) -> tuple[list[Collective], dict[str, list[int]], str]:
    """The trace's NCCL collectives in start order (seq: order within its group on this rank, or
    torch's own sequence number where every collective of the group has one), the groups the CPU side
    names (pg name -> global ranks), and a note on how they were paired."""
    kernels = sorted((e for e in events if _is_kernel(e)), key=lambda e: float(e["ts"]))
    cpu_args = _cpu_side(events, {_corr(k) for k in kernels})
    rows: list[tuple[str, int | None, str, str, float, float]] = []
    groups: dict[str, list[int]] = {}
    described = 0
    for k in kernels:
        args = dict(cpu_args.get(_corr(k), {}))
        args.update({key: v for key, v in (k.get("args") or {}).items() if key in _WANTED})
        described += bool(args.get("Collective name") or args.get("op"))
        op = _op(args, str(k["name"]))
        # no group name (older torch): each op's kernels are matched in their own order across ranks,
        # which holds where the job's groups interleave differently by rank, as long as each op runs alike
        group = str(args.get("Process Group Name", "")) or f"? {op}"
        if ranks := _ranks(args.get("Process Group Ranks")):
            groups.setdefault(group, ranks)
        seq = args.get("Seq")
        rows.append((group, seq if isinstance(seq, int) else None, op, _shape(op, args),
                     base_us + float(k["ts"]), float(k["dur"])))
    out: list[Collective] = []
    order: dict[str, int] = defaultdict(int)
    # torch's Seq where every collective of the group has one and no two share it (p2p ops count apart)
    torch_seq = {g for g in {r[0] for r in rows}
                 if all(r[1] is not None for r in rows if r[0] == g)
                 and len({r[1] for r in rows if r[0] == g}) == sum(r[0] == g for r in rows)}
    for group, seq, op, shape, start, dur in rows:
        out.append(Collective(group, seq if seq is not None and group in torch_seq else order[group], op, shape, start, dur))
        order[group] += 1
    note = (f"NCCL kernels on the device clock ({len(kernels)}), {described} described by their CPU side "
            "(record_param_comms / nccl:*), the rest by the kernel's name")
    if described == len(kernels):
        note = "NCCL kernels on the device clock, each paired with its record_param_comms / nccl:* CPU op"
    if any(g.startswith("? ") for g, *_ in rows):
        note += "; no process group names (older torch): each op's kernels matched in order (groups '? <op>')"
    return out, groups, note


_WANTED = ("Collective name", "In msg nelems", "Out msg nelems", "dtype", "Process Group Name",
           "Process Group Ranks", "Seq", "In split size", "Out split size")


def _corr(e: dict):
    return (e.get("args") or {}).get("correlation")


def _cpu_side(events: list[dict], wanted: set) -> dict:
    """correlation -> the args of record_param_comms and the nccl:<op> name around its launch."""
    launches = [e for e in events if e.get("ph") == "X" and str(e.get("name", "")).startswith(LAUNCHES) and _corr(e) in wanted]
    ops = defaultdict(list)
    for e in events:
        name = str(e.get("name", ""))
        if e.get("ph") == "X" and (name == "record_param_comms" or name.startswith("nccl:")):
            ops[(e.get("pid"), e.get("tid"))].append(e)
    out = {}
    for launch in launches:
        t = float(launch["ts"])
        args: dict = {}
        for e in ops.get((launch.get("pid"), launch.get("tid")), []):
            if float(e["ts"]) <= t <= float(e["ts"]) + float(e.get("dur", 0)):
                if e["name"] == "record_param_comms":
                    args.update({k: v for k, v in (e.get("args") or {}).items() if k in _WANTED})
                else:
                    args.setdefault("op", e["name"][len("nccl:"):])
        out[_corr(launch)] = args
    return out


def _op(args: dict, kernel: str) -> str:
    if name := args.get("Collective name") or args.get("op"):
        return snake_op(str(name).lstrip("_"))
    m = re.match(r"nccl(?:Dev)?Kernel_([A-Za-z]+)", kernel)
    return snake_op(m.group(1)) if m else kernel


def snake_op(name: str) -> str:
    """allreduce, all_reduce, AllReduce -> all_reduce: the CPU side, the kernel and HCCL's op name the same op."""
    flat = re.sub(r"(?<=[a-z])(?=[A-Z])", "_", name).lower().replace("_base", "")
    known = {"allreduce": "all_reduce", "allgather": "all_gather", "reducescatter": "reduce_scatter",
             "alltoall": "all_to_all", "alltoallv": "all_to_all", "alltoallvc": "all_to_all",
             "reduce_scatter_tensor": "reduce_scatter", "all_gather_into_tensor": "all_gather",
             "sendrecv": "send_recv", "receive": "recv", "batchsendrecv": "batch_send_recv"}
    return known.get(flat.replace("_", ""), known.get(flat, flat))


def _shape(op: str, args: dict) -> str:
    """Same collective, same shape on every member: element counts and dtype, except for all_to_all,
    whose splits differ by rank (an MoE job's are uneven), and whose dtype alone must agree."""
    dtype = args.get("dtype", "?")
    if op == "all_to_all" or "In msg nelems" not in args:
        return f"{dtype}"
    return f"{args.get('In msg nelems')}->{args.get('Out msg nelems', '?')} {dtype}"


def _ranks(value) -> list[int]:
    if isinstance(value, list):
        return [int(r) for r in value]
    try:
        got = json.loads(value) if isinstance(value, str) else None
    except ValueError:
        return []    # torch shortens long rank lists ("[0, 1, ..."): the group's members stay unknown
    return [int(r) for r in got] if isinstance(got, list) and all(isinstance(r, int) for r in got) else []
