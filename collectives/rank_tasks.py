"""Runs one collective case on one rank: buffers, one checked call, then the timed rounds."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from collectives.ops import ITEMSIZE, OPS, Pattern, count_wrong
from collectives.timing import LoopRank, Plan, below_floor, measure, repeat
from schema.wire import CollectiveResult, CollectiveSpec, OverheadResult, OverheadSpec


def corrupt_one(a: np.ndarray) -> np.ndarray:
    """HCCL_BENCH_FAULT=corrupt (spec.corrupt): a copy of a result with its first element changed, floats
    by 1 + 2 max|a| (past any tolerance), integers by 1 (wrapping), so the check must count it."""
    out = np.array(a, copy=True, order="C")
    flat = out.reshape(-1)
    with np.errstate(over="ignore"):   # float16 may go to inf: still not the expected value
        if flat.size:
            flat[:1] += (1 + 2 * float(np.abs(flat).max())) if np.issubdtype(out.dtype, np.floating) else 1
    return out


@dataclass
class Buffers:
    """A case's buffers on this rank, with what filled them (kept to fill them again in place)."""
    send: Any
    recv: Any
    pattern: Pattern
    x: np.ndarray          # this rank's input
    recv_n: int

    def refill(self, backend) -> None:
        """The buffers as `buffers` left them, written in place (a graph replays on these addresses): recv's
        sentinel first, then send, which an in-place layout may place inside recv or around it."""
        backend.write(self.recv, np.full(self.recv_n, self.pattern.sentinel()))
        backend.write(self.send, self.x)


def buffers(backend, op: str, dtype: str, redop: str, count: int, inplace: bool) -> Buffers:
    """Allocate and fill this rank's buffers."""
    pattern = Pattern(op, dtype, redop, count, backend.world)
    send_n, recv_n = OPS[op].buffer_counts(count, backend.world)
    x = pattern.input(backend.rank)
    if inplace:                       # the op's own layout (collectives/ops/<op>.py)
        send, recv = OPS[op].inplace(backend, x, pattern, send_n, recv_n)
    else:
        send = backend.from_numpy(x, dtype)
        recv = backend.full(recv_n, pattern.sentinel(), dtype)
    return Buffers(send, recv, pattern, x, recv_n)


def prepare(backend, op: str, dtype: str, redop: str, count: int, inplace: bool, asynchronous: bool = False):
    """This rank's buffers allocated and filled: (call, recv buffer, pattern); asynchronous: the call returns a handle."""
    b = buffers(backend, op, dtype, redop, count, inplace)
    return backend.call(op, b.send, b.recv, redop, inplace, asynchronous), b.recv, b.pattern


def _checked_call(backend, spec: CollectiveSpec):
    """Prepare the case and run it once on fresh data: (call, #wrong on this rank); with --graph one call
    captured is checked too, as nccl-tests -G does (docs/method.md, Graph capture)."""
    b = buffers(backend, spec.op, spec.dtype, spec.redop, spec.count, spec.inplace)
    call = backend.call(spec.op, b.send, b.recv, spec.redop, spec.inplace)
    expected = b.pattern.expected(backend.rank)

    def wrong() -> int:
        backend.device.synchronize()
        got = backend.to_numpy(b.recv)
        return count_wrong(corrupt_one(got) if spec.corrupt else got, expected)
    call()
    eager = wrong()
    if not Plan(**spec.plan).graph:
        return call, eager
    replay = backend.device.capture(repeat(call), 1)
    b.refill(backend)
    replay()
    return call, eager + wrong()


def _result(spec: CollectiveSpec, wrong: int, k: int, times: list[int]) -> CollectiveResult:
    """This rank's result; captured rounds faster than their bytes allow fail the case (timing.below_floor)."""
    if Plan(**spec.plan).graph and (why := below_floor(times, k, spec.count * ITEMSIZE[spec.dtype])):
        raise RuntimeError(why)
    return CollectiveResult(wrong=wrong, iters=k, round_ns=times)


def _collective_loops(backend, spec: CollectiveSpec):
    """Check once on fresh data (#wrong), then the loop to time and how its rounds make the result."""
    call, wrong = _checked_call(backend, spec)
    return [repeat(call)], lambda k, times: _result(spec, wrong, k, times[0])


# The rank half of the collective bench (the driver half: kinds/collective.py).
CollectiveRank = LoopRank(_collective_loops)


class OverheadRank:
    """Harness loop vs a bare loop of the same library call on the same buffer, interleaved."""

    @staticmethod
    def run(backend, spec: OverheadSpec) -> OverheadResult:
        call, recv, _ = prepare(backend, "all_reduce", spec.dtype, "sum", spec.count, True)
        plain = backend.plain_all_reduce_loop(recv, "sum")
        cal, (harness, bare), _ = measure([repeat(call), plain], backend, Plan(**spec.plan))
        return OverheadResult(wrong=0, iters=cal.k, round_ns=harness, plain_round_ns=bare)
