"""Parallel layers on the same worker groups: tensor-parallel blocks and pipeline steps at each tp/pp.

test_linear: ColumnParallelLinear, a TP MLP block (column then row) and its sequence-parallel form,
hand-written and through PyTorch's DTensor styles. test_pipeline: torch.distributed.pipelining
schedules, step time and measured bubble against theory.
"""
import pytest

from collectives.stats import per_op_seconds
from harness.replay_clock import REPLAY_CLOCK, record

pytestmark = pytest.mark.benchmark(timer=REPLAY_CLOCK)


def test_linear(linear_case, bench_session, benchmark):
    extra = bench_session.run_layer(linear_case)
    record(benchmark, per_op_seconds(extra["round_ns_per_rank"], extra["iters_per_round"]),
           f"{linear_case.backend} tp linear", extra)
    assert extra["step_us"] > 0 and extra["efficiency"] > 0


def test_pipeline(pipeline_case, bench_session, benchmark):
    extra = bench_session.run_layer(pipeline_case)
    record(benchmark, per_op_seconds(extra["round_ns_per_rank"], extra["iters_per_round"]),
           f"{pipeline_case.backend} pipeline", extra)
    assert extra["step_us"] > 0 and (extra["bubble_theory"] is None) == ("zb" in pipeline_case.schedule)
    assert extra["bubble_theory"] is None or 0 <= extra["bubble_theory"] < 1
