"""The hybrid step on the same worker groups: one training step of MLP blocks on tp x pp x dp ranks
(Megatron's placement), the dp gradient all_reduce bucketed and overlapped with backward as DDP
does (or a distributed optimizer's reduce_scatter + all_gather, optionally in bfloat16), its time
broken into compute, tp, pp send/recv, bubble and dp, each timed on its own per rank; each case first
checked against the same model on one rank (loss and every gradient): #wrong > 0 fails it."""
import pytest

from harness.session.replay_clock import REPLAY_CLOCK, record
from schema.stats import per_op_seconds

pytestmark = pytest.mark.benchmark(timer=REPLAY_CLOCK)


def test_hybrid(hybrid_case, bench_session, benchmark):
    row = bench_session.run(hybrid_case)
    record(benchmark, per_op_seconds(row.round_ns_per_rank, row.iters_per_round), f"{row.backend} hybrid", row.to_json())
    assert row.checked > 0, f"{hybrid_case.id}: compared no element against the single-rank reference"
    assert row.wrong == 0, (f"{hybrid_case.id}: {row.wrong} wrong elements of {row.checked} against the single-rank "
                            f"reference (per rank {row.wrong_per_rank}, worst error {row.err_to_tol:.3g} x the tolerance)")
    # each part timed on its own (min and max over ranks), and only the layouts that have a dimension spend time on it
    for part in ("compute", "tp", "pp", "bubble", "dp"):
        assert 0 <= getattr(row, f"{part}_min_us") <= getattr(row, f"{part}_us"), part
    assert row.compute_us > 0 and (row.tp_us > 0) == (hybrid_case.tp > 1) and (row.pp_us > 0) == (hybrid_case.pp > 1)
    assert (row.dp_us > 0) == (row.dp_bytes > 0) == (hybrid_case.dp > 1) and (row.bubble_theory > 0) == (hybrid_case.pp > 1)
    assert row.tokens_per_s_per_device > 0 and (row.mfu is None) == (row.peak_flops is None), row.peak_source
