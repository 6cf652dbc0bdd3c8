"""Parallel layers on the same worker groups: tensor-parallel blocks and pipeline steps at each tp/pp.

test_linear: ColumnParallelLinear, a TP MLP block (column then row) and its sequence-parallel form,
hand-written and through PyTorch's DTensor styles. test_pipeline: torch.distributed.pipelining
schedules, step time and measured bubble against theory. Each case is first checked against the
same model on one rank (outputs, loss, gradients; layers/check.py): #wrong > 0 fails it.
"""
import pytest

from harness.replay_clock import REPLAY_CLOCK, record
from schema.stats import per_op_seconds

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
    # the block's GEMM FLOPs from its shapes (fwd 2mkn + bwd 4mkn per GEMM; an MLP block has two of
    # 4h x h / tp, a column-parallel linear one) are what its FLOP rate times its fwd+bwd time gives;
    # efficiency is the plain GEMMs' time over fwd+bwd, so the ratio of the two rates; the step is time_us
    tokens, h = extra["seq"] * extra["batch"], extra["hidden"]
    flops = (1 if linear_case.layer == "linear" else 2) * 6 * tokens * h * 4 * h // linear_case.tp
    fwd_bwd_s = (extra["fwd_us"] + extra["bwd_us"]) * 1e-6
    assert extra["achieved_flops"] * fwd_bwd_s == pytest.approx(flops, rel=1e-6), (extra["achieved_flops"], fwd_bwd_s)
    assert extra["efficiency"] == pytest.approx(extra["achieved_flops"] / extra["matmul_flops"], rel=1e-9)
    assert extra["step_us"] == pytest.approx(extra["time_us"], rel=1e-9)
    assert extra["tokens_per_s"] * extra["step_us"] * 1e-6 == pytest.approx(tokens, rel=1e-6)
    if extra["comm_share"] is not None:   # hand-written blocks time their collectives: that time is all exposed
        assert extra["comm_exposed_us"] == pytest.approx(extra["comm_share"] * (extra["fwd_us"] + extra["bwd_us"]), rel=1e-9)


def test_pipeline(pipeline_case, bench_session, benchmark):
    extra = bench_session.run_layer(pipeline_case)
    record(benchmark, per_op_seconds(extra["round_ns_per_rank"], extra["iters_per_round"]),
           f"{pipeline_case.backend} pipeline", extra)
    _assert_checked(pipeline_case, extra)
    assert extra["step_us"] > 0 and (extra["bubble_theory"] is None) == ("zb" in pipeline_case.schedule)
    assert extra["bubble_theory"] is None or 0 <= extra["bubble_theory"] < 1
