"""Tuning levers on the same worker groups: how much of a collective hides behind compute, which
gradient bucket size a DDP-style all_reduce wants, and what bf16/fp16/int8 gradients buy and cost.

test_overlap: an async collective (async_op=True, MPI_I*) started, a matmul sized to take about as
long, then the wait; against each alone. test_bucket: the layer benches' MLP stack's gradients
all_reduced one per tensor and in buckets (flatten, all_reduce, unflatten, as DDP does).
test_compress: the same gradients in float32, bfloat16, float16 and int8, with their error.
"""
import pytest

from harness.session.replay_clock import REPLAY_CLOCK, record
from schema.stats import per_op_seconds

pytestmark = pytest.mark.benchmark(timer=REPLAY_CLOCK)


def _run(bench_session, benchmark, case):
    row = bench_session.run(case)
    record(benchmark, per_op_seconds(row.round_ns_per_rank, row.iters_per_round), f"{case.backend} {row.bench}", row.to_json())
    return row


def test_overlap(overlap_case, bench_session, benchmark):
    row = _run(bench_session, benchmark, overlap_case)
    assert row.wrong == 0, f"{overlap_case.id}: {row.wrong} wrong elements in the async collective's result"
    comm, comp, both = row.t_comm_us, row.t_comp_us, row.t_both_us
    # the raw efficiency is the formula of the three loop times, the step is the "both" loop, and the
    # shown value is the raw one clipped to [0, 1] (noise can push the raw one past either end)
    raw = row.overlap_efficiency_raw
    assert raw == pytest.approx((comm + comp - both) / min(comm, comp), rel=1e-9), (comm, comp, both, raw)
    assert both == pytest.approx(row.time_us, rel=1e-9) and row.overlap_efficiency == min(1.0, max(0.0, raw))


def test_bucket(bucket_case, bench_session, benchmark):
    row = _run(bench_session, benchmark, bucket_case)
    assert row.wrong == 0, f"{bucket_case.id}: {row.wrong} gradient elements differ from the exact mean"
    assert row.calls >= 1 and row.step_us > 0


def test_compress(compress_case, bench_session, benchmark):
    row = _run(bench_session, benchmark, compress_case)
    assert row.wrong == 0, (f"{compress_case.id}: {row.wrong} elements past the stated error bound "
                            f"(max rel error {row.max_rel_error:.2e}, bound {row.error_bound:.2e})")
    assert row.max_rel_error <= row.error_bound
