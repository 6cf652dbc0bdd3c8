"""reduce: the root ends with the reduction; other ranks' buffers are undefined (nccl-tests reduce.cu)."""
from __future__ import annotations

import functools

from collectives.ops.base import ROOT, LogNames, Op, Switches, unit_factor


def _torch(b, send, recv, red, inplace, asynchronous):
    return functools.partial(b.dist.reduce, recv, ROOT, op=red)


def _mpi(b, send, recv, red, inplace, asynchronous):
    return functools.partial(b.comm.Reduce, send, recv, red, ROOT)


OP = Op(
    "reduce", reduces=True, chunked=False, send_per_rank=False, recv_per_rank=False,
    factor=unit_factor, expect=lambda p, rank: p.reduced(p.count) if rank == ROOT else None,
    calls={"torch": _torch, "mpi": _mpi}, forms={"torch": frozenset({True}), "mpi": frozenset({False})},
    switches=Switches(
        hccl_op="reduce",
        mpich_cvar="REDUCE",
        mpich_values=("nb", "smp", "binomial", "reduce_scatter_gather"),
        mpich_portable={"tree": "binomial"},
        ompi_param="reduce",
        ompi_ids={"linear": 1, "chain": 2, "pipeline": 3, "binary": 4, "binomial": 5, "in-order_binary": 6,
                  "rabenseifner": 7},
        ompi_portable={"tree": "binomial"},
        nccl_algos=("Ring",),
    ),
    log=LogNames(nccl_tests="reduce", nccl_func="Reduce", inspector=("Reduce",)),
)
