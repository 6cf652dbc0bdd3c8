"""broadcast: every rank ends with the root's buffer (nccl-tests broadcast.cu)."""
from __future__ import annotations

import functools

from collectives.ops.base import ROOT, LogNames, Op, unit_factor


def _torch(b, send, recv, red, inplace, asynchronous):
    return functools.partial(b.dist.broadcast, recv, ROOT)


def _mpi(b, send, recv, red, inplace, asynchronous):
    return functools.partial(b.comm.Bcast, recv, ROOT)


OP = Op(
    "broadcast", reduces=False, chunked=False, send_per_rank=False, recv_per_rank=False,
    factor=unit_factor, expect=lambda p, rank: p.input(ROOT),
    calls={"torch": _torch, "mpi": _mpi}, forms={"torch": frozenset({True}), "mpi": frozenset({True})},
    log=LogNames(nccl_tests="broadcast", nccl_func="Broadcast", inspector=("Broadcast",)),
)
