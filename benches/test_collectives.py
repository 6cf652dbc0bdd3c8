"""Collective sweeps: every (backend, algo, op, dtype, redop, in-place, size), checked and timed.

One pytest-benchmark entry per case; its stats are the measured per-op round times (max over
ranks), and extra_info holds bandwidths, #wrong, per-rank times and the algorithm environment.
"""
import pytest

from harness.session.replay_clock import REPLAY_CLOCK, record
from schema.stats import per_op_seconds

pytestmark = pytest.mark.benchmark(timer=REPLAY_CLOCK)


def test_collective(collective_case, bench_session, benchmark):
    case = collective_case
    row = bench_session.run(case)
    record(benchmark, per_op_seconds(row.round_ns_per_rank, row.iters_per_round),
           f"{case.backend} {case.algo} {case.op} {case.dtype}", row.to_json())
    assert row.wrong == 0, f"{case.id}: {row.wrong} wrong elements (per rank {row.wrong_per_rank})"
