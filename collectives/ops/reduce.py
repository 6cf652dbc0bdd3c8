"""reduce: the root ends with the reduction; other ranks' buffers are undefined (nccl-tests reduce.cu)."""
from __future__ import annotations

import functools

from collectives.ops.base import ROOT, LogNames, Op, unit_factor


def _torch(b, send, recv, red, inplace, asynchronous):
    return functools.partial(b.dist.reduce, recv, ROOT, op=red)


def _mpi(b, send, recv, red, inplace, asynchronous):
    return functools.partial(b.comm.Reduce, send, recv, red, ROOT)


OP = Op(
    "reduce", reduces=True, chunked=False, send_per_rank=False, recv_per_rank=False,
    factor=unit_factor, expect=lambda p, rank: p.reduced(p.count) if rank == ROOT else None,
    calls={"torch": _torch, "mpi": _mpi}, forms={"torch": frozenset({True}), "mpi": frozenset({False})},
    log=LogNames(nccl_tests="reduce", nccl_func="Reduce", inspector=("Reduce",)),
)
