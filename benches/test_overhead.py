"""The harness's own cost: its timed loop vs a bare loop of the same all_reduce, same buffers,
same worker, rounds interleaved. Printed per size as a ratio and as added microseconds."""
import pytest

from harness.session.replay_clock import REPLAY_CLOCK, record
from schema.stats import per_op_seconds

pytestmark = pytest.mark.benchmark(timer=REPLAY_CLOCK)


def test_overhead(overhead_case, bench_session, benchmark):
    row = bench_session.run(overhead_case)
    record(benchmark, per_op_seconds(row.round_ns_per_rank, row.iters_per_round), f"{row.backend} overhead", row.to_json())
    assert row.plain_us > 0 and row.time_us > 0
