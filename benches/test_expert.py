"""Expert parallelism on the same worker groups: tokens routed by a seeded top-k router, dispatched
to their experts (AlltoAllV, Megatron's all-gather dispatcher, or torch_npu's fused dispatch/combine),
the experts' MLPs, combined back; forward and backward, each case first checked against the same
model on one rank (output, gate and expert gradients): #wrong > 0 fails it."""
import pytest

from harness.session.replay_clock import REPLAY_CLOCK, record
from schema.stats import per_op_seconds

pytestmark = pytest.mark.benchmark(timer=REPLAY_CLOCK)


def test_expert(expert_case, bench_session, benchmark):
    row = bench_session.run(expert_case)
    record(benchmark, per_op_seconds(row.round_ns_per_rank, row.iters_per_round), f"{row.backend} expert", row.to_json())
    assert row.checked > 0, f"{expert_case.id}: compared no element against the single-rank reference"
    assert row.wrong == 0, (f"{expert_case.id}: {row.wrong} wrong elements of {row.checked} against the single-rank "
                            f"reference (per rank {row.wrong_per_rank}, worst error {row.err_to_tol:.3g} x the tolerance)")
    # every routed slot is counted once (a masked one goes nowhere), and a case without capacity drops nothing
    assert sum(row.tokens_per_expert) + row.masked == expert_case.tokens * expert_case.topk * expert_case.ep
    assert row.dropped == 0 or expert_case.capacity_factor > 0
    assert row.dispatch_us > 0 and row.combine_us > 0 and row.step_us > 0
