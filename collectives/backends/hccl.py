"""HCCL, everything the harness knows of it: its algorithm switch (HCCL_ALGO) per op, and what it
supports per Ascend product, each table with its source; a combination HCCL would silently replace
is never run under the requested name (the backend itself is declared in torch_dist.py)."""
from __future__ import annotations

from collectives.backends.base import Unsupported
from collectives.capabilities import ALL, Target
from collectives.ops import OPS

# HCCL_ALGO="<op>=level0:NA;level1:<algo>/..." (CANN env var reference, HCCL_ALGO): each op's name
# there. An op not listed has no setting (HCCL_ALGO has no alltoallv entry; sendrecv is point-to-point).
HCCL_OPS = {"all_reduce": "allreduce", "all_gather": "allgather", "reduce_scatter": "reducescatter",
            "all_to_all": "alltoall", "broadcast": "broadcast", "reduce": "reduce"}
HCCL_NATIVE = ("ring", "H-D_R", "NHR", "NHR_V1", "NB", "pipeline", "pairwise", "AHC")
HCCL_PORTABLE = {"ring": "ring", "tree": "H-D_R"}  # HCCL has no tree; RHD is its logarithmic one


def hccl_product(soc: str) -> str:
    """HCCL's product line from the SoC name: A2, A3, Ascend950, 910 (Atlas training), or '' for one the tables lack."""
    # SoC names as torch.npu.get_device_name reports them (torch_npu SocVersion enum, torchair check_platform.is_arch35)
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
# HcclBroadcast.md, HcclAlltoAll.md. Moves (allgather, broadcast, alltoall) take every harness dtype.
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
# ProcessGroupHCCL.cpp, allreduce: `scalar_type() == at::kByte` -> `npu_dtype_cast(..., at::kInt)`): skipped.
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


def hccl_algo_reason(native: str, op: str, target: Target | None, dtype: str = "") -> str:
    """Why HCCL_ALGO=`native` would not be used for `op` (and `dtype`) on this product ('' if it would).
    Without a target (no device known) only what no product offers is refused."""
    if target is None:
        offered = any(op in algos.get(native, {}) for algos in HCCL_ALGO_SUPPORT.values())
        return "" if offered else f"HCCL's {native} has no {op} on any product (HCCL would run another algorithm under its name)"
    product = hccl_product(target.facts.name)
    if not product:
        return (f"HCCL_ALGO support for SoC {target.facts.name or '(unnamed)'} is not in collectives/backends/hccl.py; "
                f"a {native} series could be another algorithm under its name")
    where = f"{PRODUCT_NAMES[product]} ({target.facts.name})"
    if target.nodes == 1:
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


def hccl_dtype_reason(target: Target, op: str, dtype: str, redop: str) -> str:
    """Why HCCL cannot run `op` on `dtype` with `redop` on this product ('' if it can)."""
    facts = target.facts
    if cast := HCCL_CAST_BY_TORCH_NPU.get((op, dtype)):
        return (f"HCCL has no {dtype} {op}: torch_npu casts it to {cast} and back on the HCCL stream, so the time "
                f"would hold two casts and 4x the bytes (measure --dtypes {cast} instead)")
    product = hccl_product(facts.name)
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


def switch(op, value: str, portable: bool, target: Target | None, variant: str):
    native = HCCL_PORTABLE[value] if portable else value
    name = HCCL_OPS.get(op.name)
    if name is None:
        return Unsupported(f"HCCL_ALGO has no setting for {op.name}")
    if why := hccl_algo_reason(native, op.name, target):
        return Unsupported(why)
    return {"HCCL_ALGO": f"{name}=level0:NA;level1:{native}"}


def skip_reason(target: Target, native: str, op: str, dtype: str, redop: str) -> str:
    return hccl_dtype_reason(target, op, dtype, redop) or (hccl_algo_reason(native, op, target, dtype) if native else "")


def switch_names(op: str) -> tuple[str, ...]:
    """The op's key in HCCL_ALGO's per-op form."""
    return (HCCL_OPS[op],) if op in HCCL_OPS else ()
