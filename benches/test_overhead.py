"""The harness's own cost: its timed loop vs a bare loop of the same all_reduce, same buffers,
same worker, rounds interleaved. Printed per size as a ratio and as added microseconds."""
import pytest

from harness.groups import GroupKey
from harness.replay_clock import REPLAY_CLOCK, record

pytestmark = pytest.mark.benchmark(timer=REPLAY_CLOCK)


def test_overhead(overhead_case, bench_session, benchmark):
    backend, size = overhead_case
    opts = bench_session.opts
    out = bench_session.run_overhead(backend, size, GroupKey(backend, opts.nproc, (), opts.launcher))
    record(benchmark, out["per_op_seconds"], f"{backend} overhead", out["row"])
    assert out["row"]["plain_us"] > 0 and out["row"]["time_us"] > 0
