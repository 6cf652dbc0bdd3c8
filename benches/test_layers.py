"""Parallel layers on the same worker groups: tensor-parallel blocks and pipeline steps at each tp/pp.

test_linear: ColumnParallelLinear, a TP MLP block (column then row) and its sequence-parallel form,
hand-written and through PyTorch's DTensor styles. test_pipeline: torch.distributed.pipelining
schedules, step time and measured bubble against theory. Each case is first checked against the
same model on one rank (outputs, loss, gradients; layers/check.py): #wrong > 0 fails it.
"""
import pytest

from collectives.stats import per_op_seconds
from harness.replay_clock import REPLAY_CLOCK, record

pytestmark = pytest.mark.benchmark(timer=REPLAY_CLOCK)


def _assert_checked(case, extra) -> None:
    assert extra["checked"] > 0, f"{case.id}: compared no element against the single-rank reference"
    assert extra["wrong"] == 0, (f"{case.id}: {extra['wrong']} wrong elements of {extra['checked']} against the "
                                 f"single-rank reference (per rank {extra['wrong_per_rank']}, worst error "
                                 f"{extra['err_to_tol']:.3g} x the tolerance)")


def test_linear(linear_case, bench_session, benchmark):
    extra = bench_session.run_layer(linear_case)
    record(benchmark, per_op_seconds(extra["round_ns_per_rank"], extra["iters_per_round"]),
           f"{linear_case.backend} tp linear", extra)
    _assert_checked(linear_case, extra)
    assert extra["step_us"] > 0 and extra["efficiency"] > 0


def test_pipeline(pipeline_case, bench_session, benchmark):
    extra = bench_session.run_layer(pipeline_case)
    record(benchmark, per_op_seconds(extra["round_ns_per_rank"], extra["iters_per_round"]),
           f"{pipeline_case.backend} pipeline", extra)
    _assert_checked(pipeline_case, extra)
    assert extra["step_us"] > 0 and (extra["bubble_theory"] is None) == ("zb" in pipeline_case.schedule)
    assert extra["bubble_theory"] is None or 0 <= extra["bubble_theory"] < 1
