"""Runs one collective case on one rank: buffers, one checked call, then the timed rounds."""
from __future__ import annotations

import numpy as np

from collectives.ops import OPS, Pattern, count_wrong
from collectives.timing import Plan, begin, measure, repeat
from schema.wire import CollectiveResult, CollectiveSpec, OverheadResult, OverheadSpec


def corrupt_one(a: np.ndarray) -> np.ndarray:
    """HCCL_BENCH_FAULT=corrupt (harness/worker.py sets spec.corrupt on the faulting rank): a
    copy of a result with its first element changed, floats by 1 + 2 max|a| (past any tolerance
    a check allows), integers by 1 (wrapping), so the check that follows must count it."""
    out = np.array(a, copy=True, order="C")
    flat = out.reshape(-1)
    with np.errstate(over="ignore"):   # float16 may go to inf: still not the expected value
        if flat.size:
            flat[:1] += (1 + 2 * float(np.abs(flat).max())) if np.issubdtype(out.dtype, np.floating) else 1
    return out


def prepare(backend, op: str, dtype: str, redop: str, count: int, inplace: bool, asynchronous: bool = False):
    """Allocate and fill this rank's buffers; return (call, recv buffer, pattern). asynchronous:
    the call starts the collective and returns a handle to wait() on."""
    pattern = Pattern(op, dtype, redop, count, backend.world)
    send_n, recv_n = OPS[op].buffer_counts(count, backend.world)
    x = pattern.input(backend.rank)
    if inplace:                       # the op's own layout (collectives/ops/<op>.py)
        send, recv = OPS[op].inplace(backend, x, pattern, send_n, recv_n)
    else:
        send = backend.from_numpy(x, dtype)
        recv = backend.full(recv_n, pattern.sentinel(), dtype)
    return backend.call(op, send, recv, redop, inplace, asynchronous), recv, pattern


def _checked_call(backend, spec: CollectiveSpec):
    """Prepare the case and run it once on fresh data: (call, #wrong elements on this rank)."""
    call, recv, pattern = prepare(backend, spec.op, spec.dtype, spec.redop, spec.count, spec.inplace)
    call()
    backend.device.synchronize()
    got = backend.to_numpy(recv)
    return call, count_wrong(corrupt_one(got) if spec.corrupt else got, pattern.expected(backend.rank))


class CollectiveRank:
    """The rank half of the collective bench (the driver half: harness.case_rows.CollectiveBench)."""

    @staticmethod
    def run(backend, spec: CollectiveSpec) -> CollectiveResult:
        """Check once on fresh data (#wrong), then time; returns this rank's share of the result."""
        call, wrong = _checked_call(backend, spec)
        cal, (times,) = measure([repeat(call)], backend, Plan(**spec.plan))
        return CollectiveResult(wrong=wrong, iters=cal.k, round_ns=times, calibration=cal.record())

    @staticmethod
    def begin(backend, spec: CollectiveSpec) -> None:
        """Round-interleaved A/B: check now and keep the case for the driver's single rounds
        (collectives.timing.begin); `end` returns what run would."""
        call, wrong = _checked_call(backend, spec)
        begin([repeat(call)], lambda k, times: CollectiveResult(wrong=wrong, iters=k, round_ns=times[0]), backend,
              Plan(**spec.plan))


class OverheadRank:
    """Harness loop vs a bare loop of the same library call on the same buffer, interleaved."""

    @staticmethod
    def run(backend, spec: OverheadSpec) -> OverheadResult:
        call, recv, _ = prepare(backend, "all_reduce", spec.dtype, "sum", spec.count, True)
        plain = backend.plain_all_reduce_loop(recv, "sum")
        cal, (harness, bare) = measure([repeat(call), plain], backend, Plan(**spec.plan))
        return OverheadResult(wrong=0, iters=cal.k, round_ns=harness, plain_round_ns=bare)
