"""Parallel layers on the same worker groups: tensor-parallel blocks and pipeline steps at each tp/pp.

test_linear: ColumnParallelLinear, a TP MLP block (column then row) and its sequence-parallel form,
hand-written and through PyTorch's DTensor styles. test_pipeline: torch.distributed.pipelining
schedules, step time and measured bubble against theory. Each case is first checked against the
same model on one rank (outputs, loss, gradients; layers/check.py): #wrong > 0 fails it.
"""
import pytest

from harness.session.replay_clock import REPLAY_CLOCK, record
from schema.stats import per_op_seconds

pytestmark = pytest.mark.benchmark(timer=REPLAY_CLOCK)


def _assert_checked(case, row) -> None:
    assert row.checked > 0, f"{case.id}: compared no element against the single-rank reference"
    assert row.wrong == 0, (f"{case.id}: {row.wrong} wrong elements of {row.checked} against the single-rank "
                            f"reference (per rank {row.wrong_per_rank}, worst error {row.err_to_tol:.3g} x the tolerance)")


def _record(benchmark, case, row, what: str) -> None:
    record(benchmark, per_op_seconds(row.round_ns_per_rank, row.iters_per_round), f"{case.backend} {what}", row.to_json())


def test_linear(linear_case, bench_session, benchmark):
    row = bench_session.run(linear_case)
    _record(benchmark, linear_case, row, "tp linear")
    _assert_checked(linear_case, row)
    # the block's GEMM FLOPs from its shapes (fwd 2mkn + bwd 4mkn per GEMM; an MLP block has two of
    # 4h x h / tp, a column-parallel linear one) are what its FLOP rate times its fwd+bwd time gives;
    # efficiency is the plain GEMMs' time over fwd+bwd, so the ratio of the two rates; the step is time_us
    tokens, h = row.seq * row.batch, row.hidden
    flops = (1 if linear_case.layer == "linear" else 2) * 6 * tokens * h * 4 * h // linear_case.tp
    fwd_bwd_s = (row.fwd_us + row.bwd_us) * 1e-6
    assert row.achieved_flops * fwd_bwd_s == pytest.approx(flops, rel=1e-6), (row.achieved_flops, fwd_bwd_s)
    assert row.efficiency == pytest.approx(row.achieved_flops / row.matmul_flops, rel=1e-9)
    assert row.step_us == pytest.approx(row.time_us, rel=1e-9)
    assert row.tokens_per_s * row.step_us * 1e-6 == pytest.approx(tokens, rel=1e-6)
    if row.comm_share is not None:   # hand-written blocks time their collectives: that time is all exposed
        assert row.comm_exposed_us == pytest.approx(row.comm_share * (row.fwd_us + row.bwd_us), rel=1e-9)


def test_pipeline(pipeline_case, bench_session, benchmark):
    row = bench_session.run(pipeline_case)
    _record(benchmark, pipeline_case, row, "pipeline")
    _assert_checked(pipeline_case, row)
    assert row.step_us > 0 and (row.bubble_theory is None) == ("zb" in pipeline_case.schedule)
    assert row.bubble_theory is None or 0 <= row.bubble_theory < 1
