"""NCCL, everything the harness knows of it: its algorithm switch (NCCL_ALGO) per op, what it builds
per version, GPU and layout, each table with its source, and what its TUNING lines say it ran (the
backend itself is declared in torch_dist.py)."""
from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from collectives.backends.base import Unsupported
from collectives.capabilities import ALL, Target
from collectives.ops import OPS

# --- NCCL. Source: NVIDIA/nccl src/device/generate.py (algos_of_coll, all_tys, all_redops,
# required_cuda / ncclNvlsSupported), NCCL env reference (NCCL_ALGO, NCCL_COLLNET_ENABLE).
# Every harness dtype and redop is built for every collective; a forced NCCL_ALGO the op lacks fails
# in the call ("no algorithm/protocol available"), so it is skipped with the reason instead.
NCCL_DTYPES = ALL
NCCL_ALGOS = ("Tree", "Ring", "CollnetDirect", "CollnetChain", "NVLS", "NVLSTree", "PAT")   # ncclAlgoStr order
# NCCL_ALGO applies to collectives: the values NCCL builds for each (generate.py algos_of_coll). An op
# not listed has none (alltoall, alltoallv and send/recv are point-to-point in NCCL).
NCCL_ALGOS_OF = {
    "all_reduce": ("Tree", "Ring", "CollnetDirect", "CollnetChain", "NVLS", "NVLSTree"),
    "all_gather": ("Ring", "CollnetDirect", "NVLS", "PAT"),
    "reduce_scatter": ("Ring", "CollnetDirect", "NVLS", "PAT"),
    "broadcast": ("Ring",),
    "reduce": ("Ring",),
}
NCCL_ALGO_OPS = {algo: tuple(op for op, algos in NCCL_ALGOS_OF.items() if algo in algos) for algo in NCCL_ALGOS}
NCCL_PORTABLE = {"ring": "Ring", "tree": "Tree"}
# ncclNvlsSupported: i32/u32/i64/u64 with sum/min/max; f32/f64 sum only; f16/bf16 sum/min/max.
NCCL_NVLS_REDOPS = {"int32": ("sum", "max", "min"), "int64": ("sum", "max", "min"), "float32": ("sum",),
                    "float64": ("sum",), "float16": ("sum", "max", "min"), "bfloat16": ("sum", "max", "min")}
NCCL_PAT_SINCE = (2, 23)   # NCCL 2.23 added PAT, for one GPU per node only (NVIDIA/nccl#1473, #1964)
NCCL_NVLS_ARCH = (9, 0)    # generate.py: NVLS kernels need __CUDA_ARCH__ >= 900 (and NVSwitch NVLink SHARP)
# enqueue.cc (v2.21.5:1503 .. v2.29): NVLS is skipped when collNetSupport != 1 && nNodes > 1; up to 2.26
# (v2.26.6 enqueue.cc:1689) NVLS AllGather/ReduceScatter is skipped whenever nNodes > 1.
NCCL_NVLS_AG_RS_NODES_SINCE = (2, 27)


def nccl_algo_reason(native: str, op: str, target: Target | None, dtype: str = "", redop: str = "",
                     asked: str = "") -> str:
    """Why NCCL_ALGO=`native` cannot run `op` here ('' if it can): NCCL fails the call instead."""
    name = asked or native
    ops = NCCL_ALGO_OPS.get(native, ())
    if op not in ops:
        return f"NCCL has no {name} algorithm for {op} ({native} covers {', '.join(ops)})"
    if target is None:
        return ""
    facts = target.facts
    if native.startswith("Collnet") and not facts.collnet:
        return (f"NCCL's {native} needs a CollNet network plugin (e.g. SHARP) and NCCL_COLLNET_ENABLE=1, "
                "not set here")
    if native == "PAT":
        if facts.version and facts.version < NCCL_PAT_SINCE:
            return f"NCCL {'.'.join(map(str, facts.version))} has no PAT (NCCL >= 2.23)"
        if target.ranks_per_node > 1:   # 0: not known from the launcher
            return f"NCCL's PAT runs with one GPU per node only; this group has {target.ranks_per_node} per node"
    if native.startswith("NVLS"):
        if facts.capability != (0, 0) and facts.capability < NCCL_NVLS_ARCH:
            arch = "".join(map(str, facts.capability))
            return f"NCCL's {native} needs sm_90 or newer (NVLink SHARP); {facts.name} is sm_{arch}"
        if target.ranks_per_node == 1:
            return f"NCCL's {native} needs several GPUs on one NVSwitch node; this group has {target.ranks_per_node} per node"
        if native == "NVLS" and target.nodes > 1:   # enqueue.cc: NVLS is left out when collNetSupport != 1 && nNodes > 1
            if not facts.collnet:
                return (f"NCCL's NVLS across nodes needs CollNet (a CollNet plugin and NCCL_COLLNET_ENABLE=1); this group "
                        f"spans {target.nodes} nodes without it")
            if op in ("all_gather", "reduce_scatter") and facts.version and facts.version < NCCL_NVLS_AG_RS_NODES_SINCE:
                return f"NCCL {'.'.join(map(str, facts.version))}'s NVLS {op} runs on one node only (NCCL >= 2.27 spans nodes)"
        if native == "NVLSTree" and target.nodes == 1:
            return "NCCL's NVLSTree spans nodes (NVLS inside, Tree between); this group is on one node"
        if dtype and OPS[op].reduces and redop and redop not in NCCL_NVLS_REDOPS.get(dtype, ()):
            return (f"NCCL's {native} has no {dtype} {redop} {op} (NVLS reduces int32/int64 sum/min/max, "
                    "fp32/fp64 sum, fp16/bf16 sum/min/max)")
    return ""


# --- What NCCL says it ran: rank 0's NCCL_DEBUG_SUBSYS=TUNING lines, in 2.20-2.23's format (numeric ids,
# the whole buffer's bytes) or 2.24's (names, one rank's part): docs/method.md, NCCL's TUNING lines.
_TUNING = re.compile(r"NCCL INFO (?:(?P<op>AllReduce|AllGather|ReduceScatter|Broadcast|Reduce): )?(?P<bytes>\d+) Bytes "
                     r"-> Algo (?P<algo>\w+) proto (?P<proto>\w+)(?P<timed> time )?")
NCCL_PROTOS = ("LL", "LL128", "Simple")   # ncclProtoStr order


@dataclass(frozen=True)
class NcclCall:
    op: str          # NCCL's name ("AllReduce"); '' in 2.20-2.22 lines, which do not say
    nbytes: int      # as NCCL printed it: see whole
    algo: str        # NCCL_ALGO spelling: Ring, Tree, NVLS, ...
    proto: str       # LL, LL128, Simple
    whole: bool = False   # nbytes is the whole buffer (2.20-2.23), not one rank's part of an AllGather/ReduceScatter


def parse_nccl_tuning(text: str) -> list[NcclCall]:
    """Every algorithm/protocol choice NCCL printed in `text` (a rank log), in order."""
    return [NcclCall(m["op"] or "", int(m["bytes"]), _named(m["algo"], NCCL_ALGOS), _named(m["proto"], NCCL_PROTOS),
                     whole=bool(m["timed"])) for m in _TUNING.finditer(text)]


def _named(printed: str, names: tuple[str, ...]) -> str:
    """An algorithm or protocol as NCCL_ALGO spells it: from its id (2.20-2.23) or its name in any case (2.24)."""
    if printed.isdigit() and int(printed) < len(names):
        return names[int(printed)]
    return next((n for n in names if n.lower() == printed.lower().replace("_", "")), printed)


def nccl_algo_ran(text: str, op: str, nbytes: int, nranks: int) -> str | None:
    """'Ring/LL128' (or 'Ring/LL 90%, Tree/LL 10%' when it changed) for the calls of `op` moving
    `nbytes` (the harness's full buffer) in `text`; None when NCCL printed nothing for them."""
    coll = OPS[op]
    func = coll.log.nccl_func
    if op not in NCCL_ALGOS_OF or not func:   # NCCL prints a choice only for what NCCL_ALGO applies to
        return None
    per_call = nbytes // nranks if coll.per_rank_log_bytes() else nbytes
    seen = Counter(f"{call.algo}/{call.proto}" for call in parse_nccl_tuning(text)
                   if call.op in (func, "") and call.nbytes == (nbytes if call.whole else per_call))
    if not seen:
        return None
    if len(seen) == 1:
        return next(iter(seen))
    total = sum(seen.values())
    return ", ".join(f"{k} {100 * v // total}%" for k, v in sorted(seen.items(), key=lambda kv: -kv[1]))


def switch(op, value: str, portable: bool, target: Target | None, variant: str):
    native = NCCL_PORTABLE[value] if portable else value
    if op.name not in NCCL_ALGOS_OF:
        return Unsupported(f"NCCL_ALGO does not apply to {op.name} (point-to-point)")
    if why := nccl_algo_reason(native, op.name, target, asked=value):
        return Unsupported(why)
    return {"NCCL_ALGO": native}


def skip_reason(target: Target, native: str, op: str, dtype: str, redop: str) -> str:
    if dtype not in NCCL_DTYPES:
        return f"NCCL has no {dtype} datatype"
    return nccl_algo_reason(native, op, target, dtype, redop) if native else ""


def warmup_op(env: Mapping[str, str]) -> str:
    """The op that makes a new group's communicator: all_reduce, unless NCCL_ALGO forces only
    algorithms without one (PAT: NCCL fails 'no algorithm/protocol available'), then an op they cover
    (a per-op or negated NCCL_ALGO is left to NCCL: docs/method.md, NCCL's TUNING lines)."""
    value = (env.get("NCCL_ALGO") or "").strip()
    if not value or any(c in value for c in "^:;"):   # NCCL's own choice, or a negated / per-op list: the user's
        return "all_reduce"
    names = {a.strip().lower() for a in value.split(",")}
    covered = {op for algo, ops in NCCL_ALGO_OPS.items() if algo.lower() in names for op in ops}
    return next((op for op in ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce") if op in covered),
                "all_reduce")
