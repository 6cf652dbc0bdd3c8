"""all_to_all_v: AlltoAllV with per-peer counts that differ, as expert parallelism routes MoE tokens:
rank r sends peer p ``((p - r) mod n) + 1`` units of ``count / W`` elements, ``W = n(n+1)/2`` (the
split, S and the factor: docs/method.md, all_to_all_v)."""
from __future__ import annotations

import functools

import numpy as np

from collectives.ops.base import Op


def units(n: int) -> int:
    """W: the units in one rank's buffer (1 + 2 + ... + n)."""
    return n * (n + 1) // 2


def weight(src: int, dst: int, n: int) -> int:
    return (dst - src) % n + 1


def splits(count: int, n: int, rank: int) -> tuple[list[int], list[int]]:
    """(elements `rank` sends to each peer, elements it receives from each peer)."""
    u = count // units(n)
    return [u * weight(rank, p, n) for p in range(n)], [u * weight(p, rank, n) for p in range(n)]


def displacements(counts: list[int]) -> list[int]:
    return [0, *np.cumsum(counts[:-1]).tolist()] if counts else []


def expect(p, rank: int) -> np.ndarray:
    """Rank order of sources, each source's block for `rank` cut from its own send buffer."""
    a, b = p.a(p.count), p.b()
    sends = [splits(p.count, p.nranks, src)[0] for src in range(p.nranks)]
    return np.concatenate([a[sum(send[:rank]):sum(send[:rank + 1])] + b[src] for src, send in enumerate(sends)])


def factor(nranks: int, algo: str) -> float:
    return 1.0 - 1.0 / units(nranks)


def traffic(algo: str, p: int) -> tuple[float, float]:
    """Neither MPICH nor Open MPI has a log-step alltoallv: pairwise exchange (p-1 steps) for both."""
    return p - 1, factor(p, algo)


def _torch(b, send, recv, red, inplace, asynchronous):
    scounts, rcounts = splits(len(send), b.world, b.rank)
    return functools.partial(b.dist.all_to_all_single, recv, send, output_split_sizes=rcounts,
                             input_split_sizes=scounts, async_op=asynchronous)


def _mpi(b, send, recv, red, inplace, asynchronous):
    scounts, rcounts = splits(len(send), b.world, b.rank)
    call = b.comm.Ialltoallv if asynchronous else b.comm.Alltoallv
    return functools.partial(call, [send, (scounts, displacements(scounts))], [recv, (rcounts, displacements(rcounts))])


class AllToAllV(Op):
    def count_for(self, nbytes: int, itemsize: int, nranks: int) -> int:
        """A multiple of W elements, so every share is whole."""
        w = units(nranks)
        count = max(1, nbytes // itemsize)
        return max(w, count - count % w)


OP = AllToAllV(
    "all_to_all_v", reduces=False, chunked=False, send_per_rank=False, recv_per_rank=False,
    factor=factor, expect=expect,
    # out-of-place only: torch has no in-place form; MPI_IN_PLACE alltoallv takes one count per peer
    # for both directions, which this split's (asymmetric) counts are not
    calls={"torch": _torch, "mpi": _mpi}, forms={"torch": frozenset({False}), "mpi": frozenset({False})},
    has_async=True,   # async_op=True and MPI_Ialltoallv
    traffic=traffic,
    # log names left empty: nccl-tests' alltoallv_perf and hccl_test's alltoallv_test split evenly
    # (count/n per peer, busbw (n-1)/n), so their rows are not this op's split
)
