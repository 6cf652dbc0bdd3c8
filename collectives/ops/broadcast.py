"""broadcast: every rank ends with the root's buffer (nccl-tests broadcast.cu)."""
from __future__ import annotations

import functools

from collectives.ops.base import ROOT, LogNames, Op, Switches, unit_factor


def _torch(b, send, recv, red, inplace, asynchronous):
    return functools.partial(b.dist.broadcast, recv, ROOT)


def _mpi(b, send, recv, red, inplace, asynchronous):
    return functools.partial(b.comm.Bcast, recv, ROOT)


OP = Op(
    "broadcast", reduces=False, chunked=False, send_per_rank=False, recv_per_rank=False,
    factor=unit_factor, expect=lambda p, rank: p.input(ROOT),
    calls={"torch": _torch, "mpi": _mpi}, forms={"torch": frozenset({True}), "mpi": frozenset({True})},
    switches=Switches(
        hccl_op="broadcast",
        mpich_cvar="BCAST",
        mpich_values=("nb", "smp", "binomial", "scatter_recursive_doubling_allgather", "scatter_ring_allgather",
                      "pipelined_tree", "tree"),
        mpich_portable={"ring": "scatter_ring_allgather", "tree": "tree"},
        ompi_param="bcast",
        ompi_ids={"basic_linear": 1, "chain": 2, "pipeline": 3, "split_binary_tree": 4, "binary_tree": 5, "binomial": 6,
                  "knomial": 7, "scatter_allgather": 8, "scatter_allgather_ring": 9},
        ompi_portable={"ring": "scatter_allgather_ring", "tree": "binary_tree"},
        nccl_algos=("Ring",),
    ),
    log=LogNames(nccl_tests="broadcast", nccl_func="Broadcast", inspector=("Broadcast",)),
)
