"""What each library supports on each device generation, as data, and the reason a case cannot run.

One table per fact, each with its source. ``algorithms.resolve`` reads the algorithm x op tables;
``harness.cases`` reads the dtype x op x redop tables and skips, at collection, what a library
lacks, with the reason. A combination the library would silently replace (HCCL_ALGO falls back)
or fail in the call (NCCL_ALGO) is never run under the requested name.

Device facts (SoC name, NCCL version, accelerators per node) come from the driver at collection
(``BackendInfo.read_facts``); unit tests pass ``DeviceFacts`` for hardware they do not have.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from collectives.ops import OPS

# The dtypes the harness offers for torch.distributed backends (collectives.backends).
ALL = ("float32", "float16", "bfloat16", "float64", "int32", "int64", "int8", "uint8")


@dataclass(frozen=True)
class DeviceFacts:
    """What collection knows about one backend's devices on this node. The default is a CPU
    backend (gloo, mpi): nothing to check. Real runs read it from the device (``BackendInfo.read_facts``)."""
    backend: str = "gloo"
    name: str = ""                        # SoC / GPU name: "Ascend910B3", "Ascend910_9391", "NVIDIA H200"
    devices: int = 0                      # accelerators visible on this node (0: a CPU backend)
    version: tuple[int, ...] = ()         # NCCL's (2, 21, 5); () unknown
    capability: tuple[int, int] = (0, 0)  # CUDA compute capability; (0, 0) unknown
    collnet: bool = False                 # NCCL_COLLNET_ENABLE=1 (a CollNet/SHARP plugin is expected)

    @property
    def product(self) -> str:
        """HCCL's product line from the SoC name (torch.npu.get_device_name): A2, A3, Ascend950,
        Atlas training (910) or '' when the name is not one the tables know (every non-Ascend name)."""
        return hccl_product(self.name)


@dataclass(frozen=True)
class Target:
    """Where a worker group runs: the device facts and how its ranks sit on nodes (0: not known,
    and nothing is judged on it)."""
    facts: DeviceFacts = field(default_factory=DeviceFacts)
    ranks_per_node: int = 1
    nodes: int = 1

    @classmethod
    def of(cls, facts: DeviceFacts, nproc: int, launcher: str = "") -> Target:
        """Without a launcher every rank is on this node. With one, the ranks per node are what its
        template says (srun --ntasks-per-node, torchrun --nproc-per-node, hydra -ppn, Open MPI
        -npernode or --map-by ppr:N:node); a per-node count of {nproc} puts every rank on one node;
        nested launchers multiply (srun --ntasks-per-node 1 running torchrun --nproc-per-node 8 puts 8
        on a node); a template that does not say leaves them unknown."""
        if not launcher:
            return cls(facts, max(1, nproc), 1)
        counts = [nproc if n == "{nproc}" else int(n) for m in PER_NODE.finditer(launcher) for n in m.groups() if n]
        if not counts:   # one device per node can only hold one rank; otherwise the launcher decides
            return cls(facts, 1, nproc) if facts.devices == 1 else cls(facts, 0, 0)
        per_node = min(nproc, math.prod(counts))
        return cls(facts, max(1, per_node), max(1, math.ceil(nproc / max(1, per_node))))


PER_NODE = re.compile(r"(?:--ntasks-per-node|--nproc[-_]per[-_]node|-ppn|-npernode|--npernode)[= ](\d+|\{nproc\})"
                      r"|--map-by[= ]ppr:(\d+|\{nproc\}):node")


def hccl_product(soc: str) -> str:
    # SoC names as torch_npu reports them (torch.npu.get_device_name / CANN soc_version):
    # Ascend910B1..B4, 910B2C = Atlas A2; Ascend910_93xx = Atlas A3; Ascend910_95xx / Ascend950 =
    # Ascend 950; Ascend910A/ProA/ProB/PremiumA = Atlas training (torch_npu SocVersion enum,
    # torchair check_platform.is_arch35).
    if soc.startswith("Ascend910B"):
        return "A2"
    if soc.startswith("Ascend910_93"):
        return "A3"
    if soc.startswith(("Ascend950", "Ascend910_95")):
        return "Ascend950"
    if soc.startswith(("Ascend910A", "Ascend910ProA", "Ascend910ProB", "Ascend910PremiumA")) or soc == "Ascend910":
        return "910"
    return ""


PRODUCT_NAMES = {"A2": "Atlas A2", "A3": "Atlas A3", "Ascend950": "Ascend 950", "910": "Atlas training (910)"}

# --- HCCL dtype x op x redop, per product. Source: hicann/hccl docs/en/api_ref/comm_op_interface/
# HcclAllReduce.md, HcclReduce.md, HcclReduceScatter.md (dataType / op lists), HcclAllGather.md,
# HcclBroadcast.md, HcclAlltoAll.md. Reductions: int8, int16, int32, int64, fp16, fp32, bf16 on A2
# and A3 (no float64, no uint8); Ascend 950 adds uint64 and float64; Atlas training has no bf16.
# Moves (allgather, broadcast, alltoall) take every harness dtype (uint8 and float64 included).
HCCL_REDUCE_DTYPES = {
    "A2": ("float32", "float16", "bfloat16", "int32", "int64", "int8"),
    "A3": ("float32", "float16", "bfloat16", "int32", "int64", "int8"),
    "Ascend950": ("float32", "float16", "bfloat16", "float64", "int32", "int64", "int8"),
    "910": ("float32", "float16", "int32", "int64", "int8"),
}
HCCL_MOVE_DTYPES = {"A2": ALL, "A3": ALL, "Ascend950": ALL, "910": tuple(d for d in ALL if d != "bfloat16")}
# Ascend 950: "针对int64、uint64、float64，当前仅支持节点内通信" (int64/uint64/float64: intra-node only), hicann/hccl
# v9.1.0 docs/zh/api_ref/comm_op_interface/HcclAllReduce.md:47, HcclReduce.md:48, HcclReduceScatter.md:47.
HCCL_INTRA_SERVER_REDUCE = {"Ascend950": ("int64", "float64")}
# "The prod operation does not support int16 and bfp16" (A2, A3, Ascend 950; same docs, op lists).
HCCL_PROD_LACKS = {"A2": ("bfloat16",), "A3": ("bfloat16",), "Ascend950": ("bfloat16",), "910": ()}
# torch_npu's ProcessGroupHCCL casts uint8 (and bool) all_reduce/reduce inputs to int32 with
# npu_dtype_cast on the HCCL stream and back (Ascend/pytorch torch_npu/csrc/distributed/
# ProcessGroupHCCL.cpp, allreduce: `scalar_type() == at::kByte` -> `npu_dtype_cast(..., at::kInt)`).
# Skipped rather than relabelled as int32: the timed iteration would hold two cast kernels and 4x
# the bytes, which is neither the uint8 op asked for nor a clean int32 one (--dtypes int32 is).
HCCL_CAST_BY_TORCH_NPU = {("all_reduce", "uint8"): "int32", ("reduce", "uint8"): "int32"}

# --- HCCL_ALGO (level1, inter-server) x op x dtype, per product. Source: hicann/hccl docs/en/
# user_guide/hccl_env/inter_server_algo_support.md ("those not listed are not supported"; the
# handling of an unsupported op is "auto switching to" another algorithm, i.e. a silent fallback),
# CANN env var reference HCCL_ALGO (envref_07_0079, 8.0.0 - 9.0.0 table "Server间通信算法支持度").
_HD = ("float32", "float16", "bfloat16", "int32", "int64", "int8")   # "int8, int16, int32, int64, fp16, fp32, bfp16"
_HD_NO_I64 = ("float32", "float16", "bfloat16", "int32", "int8")
_RS_AG_AR = {"reduce_scatter": _HD, "all_gather": _HD, "all_reduce": _HD}
HCCL_ALGO_SUPPORT: dict[str, dict[str, dict[str, tuple[str, ...]]]] = {
    "A2": {
        "ring": {**_RS_AG_AR, "reduce": _HD},                     # no Broadcast
        "H-D_R": {**_RS_AG_AR, "broadcast": _HD, "reduce": _HD},
        "NHR": {**_RS_AG_AR, "broadcast": _HD},                   # no Reduce
        "NHR_V1": {**_RS_AG_AR, "broadcast": _HD},
        "NB": {**_RS_AG_AR, "broadcast": _HD},
        "pipeline": {"all_reduce": _HD_NO_I64, "all_gather": _HD, "reduce_scatter": _HD_NO_I64, "all_to_all": _HD},
        "pairwise": {"all_to_all": _HD},
    },
    "A3": {
        "ring": {**_RS_AG_AR, "reduce": _HD},
        "NHR": {**_RS_AG_AR, "broadcast": _HD},
        "NB": {**_RS_AG_AR, "broadcast": _HD},
        "AHC": dict(_RS_AG_AR),                                   # AHC is A3-only
    },
    "Ascend950": {   # "Ascend 950PR/950DT support only the NHR algorithm"
        "NHR": {"reduce_scatter": _HD_NO_I64, "all_gather": ALL, "all_reduce": _HD_NO_I64, "broadcast": ALL,
                "reduce": _HD_NO_I64},
    },
    "910": {
        "ring": {**_RS_AG_AR, "reduce": _HD},
        "H-D_R": {**_RS_AG_AR, "broadcast": _HD, "reduce": _HD},
        "NHR": {**_RS_AG_AR, "broadcast": _HD},
        "NHR_V1": {**_RS_AG_AR, "broadcast": _HD},
        "NB": {**_RS_AG_AR, "broadcast": _HD},
    },
}
# HCCL_ALGO docs: "for certain communication operators, when a specific type of AI processor is used
# and the data volume is small, the algorithm is adaptively selected by HCCL and is not controlled by
# this environment variable"; level0 (intra-server) accepts only NA, so within one server HCCL
# always chooses. HCCL does not say what ran: its series are labelled "<algo> (requested)".
HCCL_FALLBACK_NOTE = ("'(requested)': HCCL may run another algorithm without saying so (HCCL_ALGO is inter-server "
                      "only, and HCCL may ignore it for small messages)")

# --- NCCL. Source: NVIDIA/nccl src/device/generate.py (algos_of_coll, all_tys, all_redops,
# required_cuda / ncclNvlsSupported), NCCL env reference (NCCL_ALGO, NCCL_COLLNET_ENABLE).
# Every harness dtype and redop is built for every collective (i8 u8 i32 u64 f16 f32 f64 bf16;
# Sum Prod MinMax), so NCCL skips no dtype; a forced NCCL_ALGO the op lacks fails in the call
# ("no algorithm/protocol available"), so those are skipped here.
NCCL_DTYPES = ALL
NCCL_ALGOS = ("Tree", "Ring", "CollnetDirect", "CollnetChain", "NVLS", "NVLSTree", "PAT")   # ncclAlgoStr order
NCCL_ALGO_OPS = {algo: tuple(name for name, op in OPS.items() if algo in op.switches.nccl_algos) for algo in NCCL_ALGOS}
# ncclNvlsSupported: i32/u32/i64/u64 with sum/min/max; f32/f64 sum only; f16/bf16 sum/min/max.
NCCL_NVLS_REDOPS = {"int32": ("sum", "max", "min"), "int64": ("sum", "max", "min"), "float32": ("sum",),
                    "float64": ("sum",), "float16": ("sum", "max", "min"), "bfloat16": ("sum", "max", "min")}
NCCL_PAT_SINCE = (2, 23)   # NCCL 2.23 added PAT, for one GPU per node only (NVIDIA/nccl#1473, #1964)
NCCL_NVLS_ARCH = (9, 0)    # generate.py: NVLS kernels need __CUDA_ARCH__ >= 900 (and NVSwitch NVLink SHARP)
# enqueue.cc (v2.21.5:1503 .. v2.29): NVLS is skipped when collNetSupport != 1 && nNodes > 1; up to 2.26
# (v2.26.6 enqueue.cc:1689) NVLS AllGather/ReduceScatter is skipped whenever nNodes > 1.
NCCL_NVLS_AG_RS_NODES_SINCE = (2, 27)


def hccl_algo_reason(native: str, op: str, target: Target | None, dtype: str = "") -> str:
    """Why HCCL_ALGO=`native` would not be used for `op` (and `dtype`) on this product ('' if it would).
    Without a target (no device known) only what no product offers is refused."""
    product = target.facts.product if target else ""
    if target is None:
        if not any(op in algos.get(native, {}) for algos in HCCL_ALGO_SUPPORT.values()):
            return f"HCCL's {native} has no {op} on any product (HCCL would run another algorithm under its name)"
        return ""
    if not product:
        return (f"HCCL_ALGO support for SoC {target.facts.name or '(unnamed)'} is not in collectives/capabilities.py; "
                f"a {native} series could be another algorithm under its name")
    where = f"{PRODUCT_NAMES[product]} ({target.facts.name})"
    if target.nodes == 1:
        # HCCL_ALGO sets level1, the algorithm between servers; level0 (inside one) is HCCL's own
        # choice (CANN env var reference, HCCL_ALGO): on one server a forced series is the default
        return (f"HCCL_ALGO chooses the algorithm between servers only; this group is on one server, where HCCL "
                f"picks its own: run {native} across servers (--launcher)")
    ops = HCCL_ALGO_SUPPORT[product].get(native)
    if ops is None:
        return f"HCCL on {where} has no {native} algorithm (HCCL_ALGO would fall back silently)"
    if op not in ops:
        return f"HCCL's {native} has no {op} on {where} (it covers {', '.join(ops)}); HCCL would fall back silently"
    if dtype and dtype not in ops[op]:
        return f"HCCL's {native} {op} has no {dtype} on {where}; HCCL would fall back silently"
    return ""


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


def nccl_dtype_reason(target: Target, op: str, dtype: str, redop: str) -> str:
    """Why NCCL cannot run `op` on `dtype` ('' if it can)."""
    return "" if dtype in NCCL_DTYPES else f"NCCL has no {dtype} datatype"


def hccl_dtype_reason(target: Target, op: str, dtype: str, redop: str) -> str:
    """Why HCCL cannot run `op` on `dtype` with `redop` on this product ('' if it can)."""
    facts = target.facts
    if (op, dtype) in HCCL_CAST_BY_TORCH_NPU:
        cast = HCCL_CAST_BY_TORCH_NPU[op, dtype]
        return (f"HCCL has no {dtype} {op}: torch_npu casts it to {cast} and back on the HCCL stream, so the time "
                f"would hold two casts and 4x the bytes (measure --dtypes {cast} instead)")
    product = facts.product
    if not product:
        return ""     # a SoC the tables do not know: the library's own error says what it lacks
    where = f"{PRODUCT_NAMES[product]} ({facts.name})"
    reduces = OPS[op].reduces
    if reduces and dtype not in HCCL_REDUCE_DTYPES[product]:
        extra = {"float64": " (HCCL reduces float64 on Ascend 950 only)",
                 "uint8": " (and torch_npu does not cast it: the call would fail)"}.get(dtype, "")
        return f"HCCL on {where} has no {dtype} {op}{extra}"
    if not reduces and dtype not in HCCL_MOVE_DTYPES[product]:
        return f"HCCL on {where} has no {dtype} {op}"
    if reduces and redop == "prod" and dtype in HCCL_PROD_LACKS[product]:
        return f"HCCL on {where} has no {dtype} prod"
    if reduces and dtype in HCCL_INTRA_SERVER_REDUCE.get(product, ()) and target.nodes > 1:
        return f"HCCL on {where} reduces {dtype} within one server only; this group spans {target.nodes} servers"
    return ""


# --- What NCCL says it ran. NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING makes rank 0 print one line
# per collective (NVIDIA/nccl src/enqueue.cc), in two formats:
# - 2.20-2.23: "%ld Bytes -> Algo %d proto %d time %f" with
#   numeric ids (v2.20.5 enqueue.cc:1498, v2.21.5:1534, v2.22.3:1613), 2.23 prefixed "%s: " with the op
#   (v2.23.4 enqueue.cc:1855). The bytes are the whole buffer: AllGather/ReduceScatter count x size x nranks
#   (v2.21.5 info.h:84 nBytes *= nRanks; 2.22/2.23 ncclFuncMaxSendRecvCount).
# - 2.24 on: "%s: %ld Bytes -> Algo %s proto %s channel{Lo..Hi}={%d..%d}" (later " comm %p"), the bytes
#   task->count x size: one rank's part for AllGather/ReduceScatter (v2.24.3 enqueue.cc:678).
# The COLL lines ("AllReduce: opCount ... count ... datatype ... [nranks=N]") name no algorithm.
_TUNING = re.compile(r"NCCL INFO (?:(?P<op>AllReduce|AllGather|ReduceScatter|Broadcast|Reduce): )?(?P<bytes>\d+) Bytes "
                     r"-> Algo (?P<algo>\w+) proto (?P<proto>\w+)(?P<timed> time )?")
_ALGO_IDS = NCCL_ALGOS
_PROTO_IDS = ("LL", "LL128", "Simple")
_ALGO_NAMES = {a.lower(): a for a in _ALGO_IDS}
_PROTO_NAMES = {p.lower(): p for p in _PROTO_IDS}


@dataclass(frozen=True)
class NcclCall:
    op: str          # NCCL's name ("AllReduce"); '' in 2.20-2.22 lines, which do not say
    nbytes: int      # as NCCL printed it: see whole
    algo: str        # NCCL_ALGO spelling: Ring, Tree, NVLS, ...
    proto: str       # LL, LL128, Simple
    whole: bool = False   # nbytes is the whole buffer (2.20-2.23), not one rank's part of an AllGather/ReduceScatter


def parse_nccl_tuning(text: str) -> list[NcclCall]:
    """Every algorithm/protocol choice NCCL printed in `text` (a rank log), in order."""
    calls = []
    for m in _TUNING.finditer(text):
        algo, proto = m["algo"], m["proto"]
        algo = _ALGO_IDS[int(algo)] if algo.isdigit() and int(algo) < len(_ALGO_IDS) else \
            _ALGO_NAMES.get(algo.lower().replace("_", ""), algo)
        proto = _PROTO_IDS[int(proto)] if proto.isdigit() and int(proto) < len(_PROTO_IDS) else \
            _PROTO_NAMES.get(proto.lower(), proto)
        calls.append(NcclCall(m["op"] or "", int(m["bytes"]), algo, proto, whole=bool(m["timed"])))
    return calls


def nccl_algo_ran(text: str, op: str, nbytes: int, nranks: int) -> str | None:
    """'Ring/LL128' (or 'Ring/LL 90%, Tree/LL 10%' when it changed) for the calls of `op` moving
    `nbytes` (the harness's full buffer) in `text`; None when NCCL printed nothing for them."""
    coll = OPS[op]
    func = coll.log.nccl_func
    if not coll.switches.nccl_algos or not func:   # NCCL prints a choice only for what NCCL_ALGO applies to
        return None
    per_call = nbytes // nranks if coll.per_rank_log_bytes() else nbytes
    seen: dict[str, int] = {}
    for call in parse_nccl_tuning(text):
        if call.op in (func, "") and call.nbytes == (nbytes if call.whole else per_call):
            key = f"{call.algo}/{call.proto}"
            seen[key] = seen.get(key, 0) + 1
    if not seen:
        return None
    if len(seen) == 1:
        return next(iter(seen))
    total = sum(seen.values())
    return ", ".join(f"{k} {100 * v // total}%" for k, v in sorted(seen.items(), key=lambda kv: -kv[1]))
