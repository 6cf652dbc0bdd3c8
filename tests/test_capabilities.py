"""The capability table, through the real case builder: what HCCL (A2, A3, Ascend 950) and NCCL
(per version, GPU and GPUs per node) lack is skipped at collection with the reason, and what they
have is offered. Device facts are given, as a device would report them; no device is needed."""
import pytest

from collectives import capabilities
from collectives.backends import algo_label, oversubscribed
from collectives.backends.hccl import HCCL_FALLBACK_NOTE, hccl_product
from collectives.backends.nccl import nccl_algo_ran, parse_nccl_tuning
from collectives.capabilities import DeviceFacts
from collectives.ops import OPS
from kinds.collective import build
from kinds.options import Options

A2 = DeviceFacts("hccl", name="Ascend910B3", devices=8)
A3 = DeviceFacts("hccl", name="Ascend910_9391", devices=16)
A950 = DeviceFacts("hccl", name="Ascend950PR", devices=8)
H200_221 = DeviceFacts("nccl", name="NVIDIA H200", devices=8, version=(2, 21, 5), capability=(9, 0))
H200_223 = DeviceFacts("nccl", name="NVIDIA H200", devices=8, version=(2, 23, 4), capability=(9, 0))
A100 = DeviceFacts("nccl", name="NVIDIA A100-SXM4-80GB", devices=8, version=(2, 21, 5), capability=(8, 0))


def cases(facts: DeviceFacts, nproc: int = 8, launcher: str = "", algos=("default",), ops=tuple(OPS),
          dtypes=capabilities.ALL, redops=("sum", "prod", "max", "min")) -> dict:
    opts = Options(backends=[facts.backend], nproc=nproc, launcher=launcher, sizes=[1 << 20], ops=list(ops),
                   dtypes=list(dtypes), redops=list(redops), algos=list(algos))
    return {(c.algo, c.op, c.dtype, c.redop): c for c in build(opts, [facts])}


def skip(table: dict, algo: str, op: str, dtype: str = "float32", redop: str = "sum") -> str:
    case = table[algo, op, dtype, redop if OPS[op].reduces else "none"]
    assert case.skip or case.group is not None, "a case either runs in a group or says why not"
    return case.skip


def test_soc_names_name_the_product():
    assert [hccl_product(s) for s in ("Ascend910B1", "Ascend910B2C", "Ascend910_9391", "Ascend910_9581", "Ascend950DT",
                                      "Ascend910ProB", "Ascend310P3", "")] == \
        ["A2", "A2", "A3", "Ascend950", "Ascend950", "910", "", ""]


@pytest.mark.parametrize("op", ["all_reduce", "reduce", "reduce_scatter"])
def test_hccl_float64_reductions_only_on_ascend950(op):
    why = skip(cases(A2), "default", op, "float64")
    assert "no float64" in why and "Ascend 950 only" in why
    assert "Atlas A3" in skip(cases(A3), "default", op, "float64")
    assert skip(cases(A950), "default", op, "float64") == ""


def test_hccl_moves_take_float64_and_uint8():
    table = cases(A2)
    for op in ("all_gather", "broadcast", "all_to_all"):
        assert skip(table, "default", op, "float64") == "" and skip(table, "default", op, "uint8") == ""


def test_hccl_uint8_reductions_are_skipped_not_relabelled():
    table = cases(A2)
    assert "has no uint8 reduce_scatter (and torch_npu does not cast it" in skip(table, "default", "reduce_scatter", "uint8")
    for op in ("all_reduce", "reduce"):
        why = skip(table, "default", op, "uint8")
        assert "torch_npu casts it to int32" in why and "--dtypes int32" in why
    assert "torch_npu casts" in skip(cases(DeviceFacts("hccl", name="Ascend310P3", devices=8)), "default", "all_reduce", "uint8")


def test_hccl_bfloat16_prod_is_skipped_sum_is_not():
    table = cases(A2)
    assert "no bfloat16 prod" in skip(table, "default", "all_reduce", "bfloat16", "prod")
    assert "no bfloat16 prod" in skip(table, "default", "reduce_scatter", "bfloat16", "prod")
    assert skip(table, "default", "all_reduce", "bfloat16", "sum") == ""
    assert skip(table, "default", "all_reduce", "float32", "prod") == ""


TWO_SERVERS = dict(nproc=16, launcher="srun --ntasks-per-node 8 -n {nproc}")


def test_hccl_algorithms_per_product():
    algos = ("ring", "hccl:NHR", "hccl:NB", "hccl:NHR_V1", "hccl:pipeline", "hccl:AHC", "hccl:pairwise")
    a2 = cases(A2, algos=algos, dtypes=("float32", "int64"), redops=("sum",), **TWO_SERVERS)
    assert "ring has no broadcast" in skip(a2, "ring", "broadcast")
    assert skip(a2, "ring", "all_reduce") == "" and skip(a2, "ring", "reduce") == ""
    assert a2["ring", "all_reduce", "float32", "sum"].env == {"HCCL_ALGO": "allreduce=level0:NA;level1:ring"}
    for native in ("NHR", "NB", "NHR_V1"):
        assert f"{native} has no reduce" in skip(a2, f"hccl:{native}", "reduce")
        assert skip(a2, f"hccl:{native}", "broadcast") == ""
    for op in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all"):
        assert skip(a2, "hccl:pipeline", op) == ""
    for op in ("broadcast", "reduce"):
        assert "pipeline has no" in skip(a2, "hccl:pipeline", op)
    assert "pipeline all_reduce has no int64" in skip(a2, "hccl:pipeline", "all_reduce", "int64")
    assert "no AHC algorithm" in skip(a2, "hccl:AHC", "all_reduce")
    assert "pairwise has no all_reduce" in skip(a2, "hccl:pairwise", "all_reduce")
    assert skip(a2, "hccl:pairwise", "all_to_all") == ""
    a3 = cases(A3, algos=algos, dtypes=("float32",), redops=("sum",), **TWO_SERVERS)
    assert skip(a3, "hccl:AHC", "all_reduce") == "" and "AHC has no broadcast" in skip(a3, "hccl:AHC", "broadcast")
    assert "ring has no broadcast" in skip(a3, "ring", "broadcast")
    a950 = cases(A950, algos=("ring", "hccl:NHR"), dtypes=("float32",), redops=("sum",), **TWO_SERVERS)
    assert "no ring algorithm" in skip(a950, "ring", "all_reduce") and skip(a950, "hccl:NHR", "reduce") == ""


def test_hccl_algo_on_one_server_is_skipped_as_hccls_own_choice():
    """HCCL_ALGO's level1 is between servers: on one server a 'ring' series would be the default."""
    one = cases(A2, algos=("default", "ring"), dtypes=("float32",), redops=("sum",))
    assert "this group is on one server" in skip(one, "ring", "all_reduce")
    assert skip(one, "default", "all_reduce") == ""
    unknown = cases(A2, algos=("ring",), dtypes=("float32",), redops=("sum",), nproc=16, launcher="srun -n {nproc}")
    assert skip(unknown, "ring", "all_reduce") == ""   # the launcher spreads the ranks: not judged


def test_hccl_unknown_soc_refuses_algorithms_but_not_default():
    table = cases(DeviceFacts("hccl", name="Ascend999X", devices=8), algos=("default", "ring"), dtypes=("float32",))
    assert "SoC Ascend999X is not in collectives/backends/hccl.py" in skip(table, "ring", "all_reduce")
    assert skip(table, "default", "all_reduce") == ""


def test_nccl_algorithm_per_op():
    algos = ("ring", "tree", "nccl:Tree", "nccl:Ring", "nccl:NVLS", "nccl:NVLSTree", "nccl:CollnetDirect",
             "nccl:CollnetChain", "nccl:PAT")
    table = cases(H200_221, algos=algos, dtypes=("float32",), redops=("sum",))
    assert "NCCL has no tree algorithm for all_gather" in skip(table, "tree", "all_gather")
    assert skip(table, "tree", "all_reduce") == "" and table["tree", "all_reduce", "float32", "sum"].env == {"NCCL_ALGO": "Tree"}
    for op in ("broadcast", "reduce"):
        assert skip(table, "nccl:Ring", op) == "" and "Tree covers all_reduce" in skip(table, "nccl:Tree", op)
        assert "NVLS covers" in skip(table, "nccl:NVLS", op)
    for op in ("all_reduce", "all_gather", "reduce_scatter"):
        assert skip(table, "nccl:NVLS", op) == ""
        assert "CollNet network plugin" in skip(table, "nccl:CollnetDirect", op)
    assert "NCCL 2.21.5 has no PAT" in skip(table, "nccl:PAT", "all_gather")
    assert "PAT covers all_gather, reduce_scatter" in skip(table, "nccl:PAT", "all_reduce")
    assert "spans nodes" in skip(table, "nccl:NVLSTree", "all_reduce")
    assert "point-to-point" in skip(table, "ring", "all_to_all")


def test_nccl_pat_needs_one_gpu_per_node_and_223():
    one_node = cases(H200_223, algos=("nccl:PAT",), dtypes=("float32",), redops=("sum",))
    assert "one GPU per node only; this group has 8 per node" in skip(one_node, "nccl:PAT", "reduce_scatter")
    single = DeviceFacts("nccl", name="NVIDIA H200", devices=1, version=(2, 23, 4), capability=(9, 0))
    spread = cases(single, nproc=4, launcher="srun -n {nproc}", algos=("nccl:PAT",), dtypes=("float32",), redops=("sum",))
    assert skip(spread, "nccl:PAT", "all_gather") == "" and skip(spread, "nccl:PAT", "reduce_scatter") == ""
    assert "NVLS needs several GPUs" in skip(cases(single, nproc=4, launcher="srun -n {nproc}", algos=("nccl:NVLS",),
                                                   dtypes=("float32",), redops=("sum",)), "nccl:NVLS", "all_reduce")


def test_nccl_nvls_needs_hopper_and_its_reductions():
    table = cases(H200_221, algos=("nccl:NVLS",), dtypes=("float32", "int8", "bfloat16"), redops=("sum", "max", "prod"))
    assert skip(table, "nccl:NVLS", "all_reduce", "float32", "sum") == ""
    assert "no float32 max" in skip(table, "nccl:NVLS", "all_reduce", "float32", "max")
    assert "no int8 sum" in skip(table, "nccl:NVLS", "reduce_scatter", "int8", "sum")
    assert skip(table, "nccl:NVLS", "all_reduce", "bfloat16", "max") == ""
    assert "no bfloat16 prod" in skip(table, "nccl:NVLS", "all_reduce", "bfloat16", "prod")
    assert skip(table, "nccl:NVLS", "all_gather", "int8") == ""   # a move: no reduction to support
    assert "needs sm_90" in skip(cases(A100, algos=("nccl:NVLS",), dtypes=("float32",)), "nccl:NVLS", "all_reduce")


def test_nccl_collnet_runs_where_enabled():
    enabled = DeviceFacts("nccl", name="NVIDIA H200", devices=8, version=(2, 21, 5), capability=(9, 0), collnet=True)
    table = cases(enabled, algos=("nccl:CollnetDirect", "nccl:CollnetChain"), dtypes=("float32",), redops=("sum",))
    assert skip(table, "nccl:CollnetDirect", "all_gather") == "" and skip(table, "nccl:CollnetChain", "all_reduce") == ""
    assert "CollnetChain covers all_reduce" in skip(table, "nccl:CollnetChain", "all_gather")


def test_nccl_offers_every_dtype_and_redop():
    table = cases(H200_221)
    assert not [k for k, c in table.items() if c.skip and k[1] != "sendrecv"]


@pytest.mark.parametrize("facts,what", [(DeviceFacts("nccl", name="NVIDIA H200", devices=1), "1 GPU"), (A2, "8 NPUs")])
def test_oversubscription_is_refused_with_one_line(facts, what):
    table = cases(facts, nproc=16, ops=("all_reduce",), dtypes=("float32",), redops=("sum",))
    assert f"--nproc 16 > {what} on this node" in skip(table, "default", "all_reduce")
    assert skip(cases(facts, nproc=16, launcher="mpirun -np {nproc}", ops=("all_reduce",), dtypes=("float32",),
                      redops=("sum",)), "default", "all_reduce") == ""
    assert oversubscribed("gloo", 64, 0) == ""


def test_cpu_backends_read_nothing_and_skip_nothing_new():
    opts = Options(backends=["gloo"], nproc=2, sizes=[1024], ops=["all_reduce"], dtypes=["float64", "uint8"],
                   redops=["prod"])
    assert [c.skip for c in build(opts)] == ["", ""]


def test_hccl_series_are_labelled_as_requested():
    assert algo_label("hccl", "ring") == "ring (requested)" and algo_label("hccl", "default") == "default"
    assert algo_label("nccl", "ring") == "ring" and algo_label("mpi", "mpi:ring") == "mpi:ring"
    assert "may ignore it" in HCCL_FALLBACK_NOTE and "without saying so" in HCCL_FALLBACK_NOTE


# Lines in the formats NCCL prints (NVIDIA/nccl src/enqueue.cc; logs quoted in NVIDIA/nccl issues).
NCCL_LOG = """\
gpu01:1234:1290 [0] NCCL INFO AllReduce: opCount 0 sendbuff 0x7fc9c4000000 recvbuff 0x7fc9bc000000 count 262144 \
datatype 7 op 0 root 0 comm 0x5631f0816b40 [nranks=8] stream 0x5631f0021140
gpu01:1234:1290 [0] NCCL INFO AllReduce: 1048576 Bytes -> Algo RING proto LL128 channel{Lo..Hi}={0..15}
gpu01:1234:1290 [0] NCCL INFO AllReduce: 1048576 Bytes -> Algo RING proto LL128 channel{Lo..Hi}={0..15}
gpu01:1234:1290 [0] NCCL INFO AllReduce: 1048576 Bytes -> Algo TREE proto SIMPLE channel{Lo..Hi}={0..31}
gpu01:1234:1290 [0] NCCL INFO AllGather: 131072 Bytes -> Algo NVLS proto Simple channel{Lo..Hi}={0..0} comm 0x55a7a339db50
gpu01:1234:1290 [0] NCCL INFO ReduceScatter: 131072 Bytes -> Algo COLLNET_DIRECT proto SIMPLE channel{Lo..Hi}={0..3}
n122-230-208:1214:1263 [0] NCCL INFO 4194304 Bytes -> Algo 1 proto 2 time 17.375999
"""


def test_nccl_tuning_lines_parse_in_both_formats():
    calls = parse_nccl_tuning(NCCL_LOG)
    assert [(c.op, c.nbytes, c.algo, c.proto) for c in calls] == [
        ("AllReduce", 1048576, "Ring", "LL128"), ("AllReduce", 1048576, "Ring", "LL128"),
        ("AllReduce", 1048576, "Tree", "Simple"), ("AllGather", 131072, "NVLS", "Simple"),
        ("ReduceScatter", 131072, "CollnetDirect", "Simple"), ("", 4194304, "Ring", "Simple")]


def test_nccl_algo_ran_names_what_ran_for_the_case():
    assert nccl_algo_ran(NCCL_LOG, "all_reduce", 1048576, 8) == "Ring/LL128 66%, Tree/Simple 33%"
    assert nccl_algo_ran(NCCL_LOG, "all_gather", 131072 * 8, 8) == "NVLS/Simple"      # NCCL counts one rank's part
    assert nccl_algo_ran(NCCL_LOG, "broadcast", 4194304, 8) == "Ring/Simple"          # a 2.20 line names no op
    assert nccl_algo_ran(NCCL_LOG, "reduce", 1 << 30, 8) is None                        # NCCL said nothing of it
    assert nccl_algo_ran("", "all_reduce", 1048576, 8) is None and nccl_algo_ran(NCCL_LOG, "all_to_all", 8, 8) is None


def test_the_npu_chip_name_is_read_from_npu_smi_without_the_device():
    from collectives.device import npu_smi_chip_name
    table = """+---------------------------+---------------+----------------------------------------------------+
| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|
| Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |
+===========================+===============+====================================================+
| 0     910B3               | OK            | 93.4        38                0    / 0             |
| 0                         | 0000:C1:00.0  | 0           0    / 0          3161 / 65536         |
+===========================+===============+====================================================+
| 1     910B3               | OK            | 90.1        37                0    / 0             |
"""
    assert npu_smi_chip_name(table) == "Ascend910B3" and hccl_product(npu_smi_chip_name(table)) == "A2"
    assert npu_smi_chip_name("npu-smi: command not found\n") == ""


def test_an_a3_nodes_bare_ascend910_asks_the_runtime():
    """Atlas A3's npu-smi (vllm-project/vllm-ascend#2534, npu-smi 24.1-26.0) names every chip a bare
    Ascend910, as the old Atlas 910 did: the runtime's name decides, else bf16 was refused on A3."""
    from collectives.device import npu_chip, npu_smi_chip_name
    a3 = """| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|
| Chip  Phy-ID              | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |
+===========================+===============+====================================================+
| 0     Ascend910           | OK            | 178.5       36                0    / 0             |
| 0     0                   | 0000:9D:00.0  | 0           0    / 0          3416 / 65536         |
+------------------------------------------------------------------------------------------------+
| 0     Ascend910           | OK            | -           36                0    / 0             |
| 1     1                   | 0000:9F:00.0  | 0           0    / 0          3195 / 65536         |
"""
    smi = npu_smi_chip_name(a3)
    assert smi == "Ascend910" and hccl_product(npu_chip(smi, lambda: "Ascend910_9392")) == "A3"
    assert npu_chip("Ascend910B3", lambda: 1 / 0) == "Ascend910B3"   # a name that tells: the device is not touched


def test_nested_launchers_multiply_their_ranks_per_node():
    """srun one task per node, each a torchrun of 8: 8 ranks a node on 2 nodes, not 1 on 16."""
    from collectives.capabilities import Target
    nested = Target.of(DeviceFacts("nccl"), 16, "srun --nodes 2 --ntasks-per-node 1 python -m torch.distributed.run "
                                               "--nproc-per-node 8 --no-python {cmd}")
    assert (nested.ranks_per_node, nested.nodes) == (8, 2)
    assert (Target.of(DeviceFacts("nccl"), 16, "srun --ntasks-per-node 8 -n {nproc}").ranks_per_node) == 8


def test_tuning_cases_obey_the_same_table_as_the_sweep():
    """The overlap and compress benches skip what the collective sweep skips (HCCL has no uint8
    all_reduce on Atlas A2; torch_npu would time its cast to int32 under that name)."""
    from kinds import compress, overlap
    opts = Options(backends=["hccl"], nproc=8, sizes=[1 << 20], ops=["all_reduce"], dtypes=["uint8", "float32"],
                   comm_dtypes=["float32", "uint8"])
    tuning = {**{("overlap", c.dtype): c.skip for c in overlap.build(opts, [A2])},
              **{("compress", c.comm_dtype): c.skip for c in compress.build(opts, [A2])}}
    sweep = skip(cases(A2, ops=("all_reduce",), dtypes=("uint8",)), "default", "all_reduce", "uint8")
    assert sweep and tuning[("overlap", "uint8")] == sweep and tuning[("overlap", "float32")] == ""
    assert tuning[("compress", "uint8")]


@pytest.mark.parametrize("launcher", [
    "torchrun --nproc-per-node {nproc} --no-python {cmd}", "python -m torch.distributed.run --nproc_per_node={nproc} {cmd}",
    "srun -N 1 --ntasks-per-node {nproc}", "srun --ntasks-per-node={nproc} -n {nproc}", "mpirun -ppn {nproc} -n {nproc}",
    "mpirun -npernode {nproc} -np {nproc}", "mpirun --map-by ppr:{nproc}:node -np {nproc}"])
def test_a_per_node_count_of_nproc_puts_every_rank_on_one_node(launcher):
    """`torchrun --nproc-per-node {nproc}` starts all ranks on the node it runs on: HCCL's one-server
    refusal and NCCL's PAT rule apply; an unread count left them unjudged and the cases failed in the call."""
    from collectives.capabilities import Target
    assert (Target.of(A2, 8, launcher).ranks_per_node, Target.of(A2, 8, launcher).nodes) == (8, 1)
    one = dict(launcher=launcher, dtypes=("float32",), redops=("sum",))
    assert "this group is on one server" in skip(cases(A2, algos=("ring",), **one), "ring", "all_reduce")
    assert "this group has 8 per node" in skip(cases(H200_223, algos=("nccl:PAT",), **one), "nccl:PAT", "all_gather")


def test_nccl_nvls_across_nodes_needs_collnet():
    """enqueue.cc: NVLS is left out of the choice when collNetSupport != 1 && nNodes > 1, so
    NCCL_ALGO=NVLS fails 'no algorithm/protocol available'; before 2.27 NVLS AllGather/ReduceScatter
    is single-node whatever CollNet says."""
    one = dict(algos=("nccl:NVLS",), dtypes=("float32",), redops=("sum",))
    plain = cases(H200_223, **one, **TWO_SERVERS)
    for op in ("all_reduce", "all_gather", "reduce_scatter"):
        why = skip(plain, "nccl:NVLS", op)
        assert "NVLS across nodes needs CollNet" in why and "spans 2 nodes without it" in why
    assert skip(cases(H200_223, **one), "nccl:NVLS", "all_reduce") == ""
    h200 = dict(name="NVIDIA H200", devices=8, capability=(9, 0), collnet=True)
    collnet = cases(DeviceFacts("nccl", version=(2, 23, 4), **h200), **one, **TWO_SERVERS)
    assert skip(collnet, "nccl:NVLS", "all_reduce") == ""
    assert "NCCL 2.23.4's NVLS all_gather runs on one node only" in skip(collnet, "nccl:NVLS", "all_gather")
    assert skip(cases(DeviceFacts("nccl", version=(2, 27, 3), **h200), **one, **TWO_SERVERS), "nccl:NVLS", "reduce_scatter") == ""


@pytest.mark.parametrize("op", ["all_reduce", "reduce", "reduce_scatter"])
def test_ascend950_reduces_64_bit_types_within_one_server_only(op):
    """HcclAllReduce / HcclReduce / HcclReduceScatter (CANN 9.1 docs): int64, uint64 and float64 on
    Ascend 950 intra-node only; across servers the call fails."""
    two = cases(A950, ops=(op,), dtypes=("int64", "float64", "int32"), redops=("sum",), **TWO_SERVERS)
    for dtype in ("int64", "float64"):
        assert f"reduces {dtype} within one server only; this group spans 2 servers" in skip(two, "default", op, dtype)
    assert skip(two, "default", op, "int32") == ""
    assert skip(cases(A950, ops=(op,), dtypes=("int64", "float64"), redops=("sum",)), "default", op, "float64") == ""
    assert skip(cases(A950, ops=("all_gather",), dtypes=("float64",), **TWO_SERVERS), "default", "all_gather", "float64") == ""
    assert "Atlas A2" in skip(cases(A2, ops=(op,), dtypes=("float64",), redops=("sum",), **TWO_SERVERS), "default", op, "float64")


# TUNING lines in each version's own format (INFO(NCCL_TUNING, ...) in NVIDIA/nccl src/enqueue.cc at
# v2.20.5-1:1498, v2.21.5-1:1534, v2.22.3-1:1613, v2.23.4-1:1855, v2.24.3-1:678), for a 1 MiB
# AllGather on 8 ranks (128 KiB a rank) and a 1 MiB AllReduce: up to 2.23 the bytes are the whole buffer.
TUNING_BY_VERSION = {
    (2, 20): "h:1:2 [0] NCCL INFO 1048576 Bytes -> Algo 1 proto 2 time 38.400002\n",
    (2, 21): "h:1:2 [0] NCCL INFO 1048576 Bytes -> Algo 1 proto 2 time 38.400002\n",
    (2, 22): "h:1:2 [0] NCCL INFO 1048576 Bytes -> Algo 4 proto 2 time 21.120001\n",
    (2, 23): "h:1:2 [0] NCCL INFO AllGather: 1048576 Bytes -> Algo 6 proto 2 time 30.720001\n"
             "h:1:2 [0] NCCL INFO AllReduce: 1048576 Bytes -> Algo 0 proto 1 time 25.000000\n",
    (2, 24): "h:1:2 [0] NCCL INFO AllGather: 131072 Bytes -> Algo PAT proto SIMPLE channel{Lo..Hi}={0..1}\n"
             "h:1:2 [0] NCCL INFO AllReduce: 1048576 Bytes -> Algo TREE proto LL128 channel{Lo..Hi}={0..15}\n",
}


@pytest.mark.parametrize("version", sorted(TUNING_BY_VERSION), ids=lambda v: f"nccl-{v[0]}.{v[1]}")
def test_algo_ran_reads_allgather_lines_of_every_nccl_version(version):
    """NCCL 2.20-2.23 count an AllGather's whole buffer (v2.21.5 info.h:84
    nBytes *= nRanks; 2.22/2.23 ncclFuncMaxSendRecvCount), 2.24 on one rank's part: both are read."""
    log = TUNING_BY_VERSION[version]
    ran = {(2, 20): "Ring/Simple", (2, 21): "Ring/Simple", (2, 22): "NVLS/Simple"}.get(version, "PAT/Simple")
    assert nccl_algo_ran(log, "all_gather", 1 << 20, 8) == ran
    assert nccl_algo_ran(log, "all_gather", 1 << 17, 8) is None        # another size: not this case's lines
    if version >= (2, 23):
        assert nccl_algo_ran(log, "all_reduce", 1 << 20, 8) == ("Tree/LL128")
