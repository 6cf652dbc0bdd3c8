"""all_to_all: rank r ends with chunk r of every rank's buffer, in rank order (nccl-tests alltoall.cu)."""
from __future__ import annotations

import functools
import math

from collectives.ops.base import LogNames, Op, chunk_factor


def expect(p, rank: int):
    k = p.count // p.nranks
    return (p.a(p.count)[rank * k:(rank + 1) * k][None, :] + p.b()[:, None]).reshape(-1)


def traffic(algo: str, p: int) -> tuple[float, float]:
    """ring: pairwise exchange, p-1 steps; tree: Bruck, log2 p steps moving log2(p)/2 of S."""
    lg = math.ceil(math.log2(p))
    return (p - 1, (p - 1) / p) if algo == "ring" else (lg, lg / 2)


def _torch(b, send, recv, red, inplace, asynchronous):
    return functools.partial(b.dist.all_to_all_single, recv, send)


def _mpi(b, send, recv, red, inplace, asynchronous):
    return functools.partial(b.comm.Alltoall, b.MPI.IN_PLACE if inplace else send, recv)


OP = Op(
    "all_to_all", reduces=False, chunked=True, send_per_rank=False, recv_per_rank=False,
    factor=chunk_factor, expect=expect,
    calls={"torch": _torch, "mpi": _mpi}, forms={"torch": frozenset({False}), "mpi": frozenset({True, False})},
    traffic=traffic,
    log=LogNames(nccl_tests="alltoall", nccl_func="AllToAll", inspector=("All2All", "AllToAll")),
)
