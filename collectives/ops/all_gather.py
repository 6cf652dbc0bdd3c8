"""all_gather: every rank ends with every rank's chunk, in rank order (nccl-tests all_gather.cu)."""
from __future__ import annotations

import functools

from collectives.ops.base import LogNames, Op, chunk_factor, chunk_traffic


def expect(p, rank: int):
    k = p.count // p.nranks
    return (p.a(k)[None, :] + p.b()[:, None]).reshape(-1)


def inplace(backend, x, pattern, send_n: int, recv_n: int):
    """The input is this rank's chunk of the output (nccl-tests)."""
    me = backend.rank
    recv = backend.full(recv_n, pattern.sentinel(), pattern.dtype)
    send = backend.view(recv, me * send_n, (me + 1) * send_n)
    backend.write(send, x)
    return send, recv


def _torch(b, send, recv, red, inplace, asynchronous):
    # all_gather_single: torch 2.13's name; all_gather_into_tensor (1.13 on) warns FutureWarning there
    call = getattr(b.dist, "all_gather_single", None) or b.dist.all_gather_into_tensor
    return functools.partial(call, recv, send, async_op=asynchronous)


def _mpi(b, send, recv, red, inplace, asynchronous):
    call = b.comm.Iallgather if asynchronous else b.comm.Allgather
    return functools.partial(call, b.MPI.IN_PLACE if inplace else send, recv)


OP = Op(
    "all_gather", reduces=False, chunked=True, send_per_rank=True, recv_per_rank=False,
    factor=chunk_factor, expect=expect, inplace=inplace,
    calls={"torch": _torch, "mpi": _mpi}, forms={"torch": frozenset({True, False}), "mpi": frozenset({True, False})},
    has_async=True, traffic=chunk_traffic,
    log=LogNames(nccl_tests="allgather", nccl_func="AllGather", inspector=("AllGather",)),
)
