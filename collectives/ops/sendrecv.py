"""sendrecv: each rank sends its buffer to the next rank and receives the previous one's (nccl-tests sendrecv.cu)."""
from __future__ import annotations

import functools

from collectives.ops.base import LogNames, Op, unit_factor


def _torch(b, send, recv, red, inplace, asynchronous):
    d = b.dist
    ops = [d.P2POp(d.isend, send, (b.rank + 1) % b.world), d.P2POp(d.irecv, recv, (b.rank - 1) % b.world)]

    def sendrecv(batch=d.batch_isend_irecv, ops=ops):
        for req in batch(ops):
            req.wait()
    return sendrecv


def _mpi(b, send, recv, red, inplace, asynchronous):
    return functools.partial(b.comm.Sendrecv, send, (b.rank + 1) % b.world, 0, recv, (b.rank - 1) % b.world, 0)


OP = Op(
    "sendrecv", reduces=False, chunked=False, send_per_rank=False, recv_per_rank=False,
    factor=unit_factor, expect=lambda p, rank: p.input((rank - 1) % p.nranks),
    calls={"torch": _torch, "mpi": _mpi}, forms={"torch": frozenset({False}), "mpi": frozenset({False})},
    point_to_point=True, min_ranks=2,
    log=LogNames(nccl_tests="sendrecv"),
)
