"""all_reduce: every rank ends with the reduction of every rank's whole buffer (nccl-tests all_reduce.cu)."""
from __future__ import annotations

import functools
import math

from collectives.ops.base import LogNames, Op

NVLS = ("NVLS", "NVLSTREE")


def factor(nranks: int, algo: str) -> float:
    """2(n-1)/n; NVLS (n-1)/(n+1): NVIDIA/nccl-tests src/all_reduce.cu AllReduceGetBw (commit 03a204a)
    uses (n-1)/(n+1) when NCCL_ALGO is "NVLS" or "NVLSTREE", the switch reducing inside the NVSwitch."""
    if algo.rsplit(":", 1)[-1].upper() in NVLS:
        return (nranks - 1) / (nranks + 1)
    return 2.0 * (nranks - 1) / nranks


def traffic(algo: str, p: int) -> tuple[float, float]:
    """ring: reduce-scatter then all-gather; tree: a binary tree's reduce then broadcast of S."""
    lg = math.ceil(math.log2(p))
    return (2 * (p - 1), 2 * (p - 1) / p) if algo == "ring" else (2 * lg, 2 * lg)


def _torch(b, send, recv, red, inplace, asynchronous):
    return functools.partial(b.dist.all_reduce, recv, op=red, async_op=asynchronous)


def _mpi(b, send, recv, red, inplace, asynchronous):
    call = b.comm.Iallreduce if asynchronous else b.comm.Allreduce
    return functools.partial(call, b.MPI.IN_PLACE if inplace else send, recv, red)


OP = Op(
    "all_reduce", reduces=True, chunked=False, send_per_rank=False, recv_per_rank=False,
    factor=factor, expect=lambda p, rank: p.reduced(p.count),
    calls={"torch": _torch, "mpi": _mpi}, forms={"torch": frozenset({True}), "mpi": frozenset({True, False})},
    has_async=True, traffic=traffic,
    log=LogNames(nccl_tests="allreduce", nccl_func="AllReduce", inspector=("AllReduce",)),
)
