"""reduce_scatter: rank r ends with chunk r of the reduction (nccl-tests reduce_scatter.cu)."""
from __future__ import annotations

import functools

from collectives.ops.base import LogNames, Op, chunk_factor, chunk_traffic


def expect(p, rank: int):
    k = p.count // p.nranks
    return p.reduced(p.count)[rank * k:(rank + 1) * k]


def inplace(backend, x, pattern, send_n: int, recv_n: int):
    """The output is this rank's chunk of the input."""
    me = backend.rank
    send = backend.from_numpy(x, pattern.dtype)
    return send, backend.view(send, me * recv_n, (me + 1) * recv_n)


def _torch(b, send, recv, red, inplace, asynchronous):
    # reduce_scatter_single: torch 2.13's name; reduce_scatter_tensor (1.13 on) is deprecated there
    call = getattr(b.dist, "reduce_scatter_single", None) or b.dist.reduce_scatter_tensor
    return functools.partial(call, recv, send, op=red, async_op=asynchronous)


def _mpi(b, send, recv, red, inplace, asynchronous):
    call = b.comm.Ireduce_scatter_block if asynchronous else b.comm.Reduce_scatter_block
    return functools.partial(call, send, recv, red)


OP = Op(
    "reduce_scatter", reduces=True, chunked=True, send_per_rank=False, recv_per_rank=True,
    factor=chunk_factor, expect=expect, inplace=inplace,
    calls={"torch": _torch, "mpi": _mpi}, forms={"torch": frozenset({True, False}), "mpi": frozenset({False})},
    has_async=True, traffic=chunk_traffic,
    log=LogNames(nccl_tests="reducescatter", nccl_func="ReduceScatter", inspector=("ReduceScatter",)),
)
