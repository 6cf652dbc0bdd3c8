"""Tuning levers on the same worker groups: how much of a collective hides behind compute, which
gradient bucket size a DDP-style all_reduce wants, and what bf16/fp16/int8 gradients buy and cost.

test_overlap: an async collective (async_op=True, MPI_I*) started, a matmul sized to take about as
long, then the wait; against each alone. test_bucket: the layer benches' MLP stack's gradients
all_reduced one per tensor and in buckets (flatten, all_reduce, unflatten, as DDP does).
test_compress: the same gradients in float32, bfloat16, float16 and int8, with their error.
"""
import pytest

from harness.replay_clock import REPLAY_CLOCK, record
from schema.stats import per_op_seconds

pytestmark = pytest.mark.benchmark(timer=REPLAY_CLOCK)


def _record(benchmark, case, extra) -> None:
    record(benchmark, per_op_seconds(extra["round_ns_per_rank"], extra["iters_per_round"]),
           f"{case.backend} {case.bench}", extra)


def test_overlap(tuning_case, bench_session, benchmark):
    extra = bench_session.run_tuning(tuning_case)
    _record(benchmark, tuning_case, extra)
    assert extra["wrong"] == 0, f"{tuning_case.id}: {extra['wrong']} wrong elements in the async collective's result"
    comm, comp, both = extra["t_comm_us"], extra["t_comp_us"], extra["t_both_us"]
    # the raw efficiency is the formula of the three loop times, the step is the "both" loop, and the
    # shown value is the raw one clipped to [0, 1] (noise can push the raw one past either end)
    raw = extra["overlap_efficiency_raw"]
    assert raw == pytest.approx((comm + comp - both) / min(comm, comp), rel=1e-9), (comm, comp, both, raw)
    assert both == pytest.approx(extra["time_us"], rel=1e-9) and extra["overlap_efficiency"] == min(1.0, max(0.0, raw))


def test_bucket(tuning_case, bench_session, benchmark):
    extra = bench_session.run_tuning(tuning_case)
    _record(benchmark, tuning_case, extra)
    assert extra["wrong"] == 0, f"{tuning_case.id}: {extra['wrong']} gradient elements differ from the exact mean"
    assert extra["calls"] >= 1 and extra["step_us"] > 0


def test_compress(tuning_case, bench_session, benchmark):
    extra = bench_session.run_tuning(tuning_case)
    _record(benchmark, tuning_case, extra)
    assert extra["wrong"] == 0, (f"{tuning_case.id}: {extra['wrong']} elements past the stated error bound "
                                 f"(max rel error {extra['max_rel_error']:.2e}, bound {extra['error_bound']:.2e})")
    assert extra["max_rel_error"] <= extra["error_bound"]
