"""The hybrid step (kinds/hybrid.py, layers/hybrid.py, layers/hybrid_tasks.py): its options and
refusals alone, then real gloo worker groups running every layout of 2 ranks (and of 4, slow; and
of 2 on MPI, slow)
against the single-rank model, the breakdown the driver makes of their results, and the corrupt
fault hook (HCCL_BENCH_FAULT=corrupt:1:hybrid) failing the check."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("torch", reason="the layer tests need torch")

from harness.engine.groups import GroupKey, GroupPool
from kinds.base import Ran
from kinds.hybrid import (
    KIND,
    KNOBS,
    HybridCase,
    _crowded,
    _knobs,
    _layouts,
    best_layout_lines,
    every_layout,
    machine_work,
    machines_cores,
    model_flops,
)
from kinds.options import Options
from layers import memory, schedules
from layers.hybrid_tasks import refusal

SHAPE = {"hidden": 32, "seq": 8, "batch": 4, "layers": 4}
OPTS = Options(**SHAPE, microbatches=[2], warmup=1, rounds=2, iters=1, round_time_s=0.001)
FAULT = (("HCCL_BENCH_FAULT", "corrupt:1:hybrid"),)


def _case(tp: int, pp: int, dp: int, schedule: str = "1f1b", backend: str = "gloo", knob: str = "plain") -> HybridCase:
    dist_opt, grad_reduce, sp, vpp = KNOBS[knob][0]
    return HybridCase(backend=backend, nranks=tp * pp * dp, tp=tp, pp=pp, dp=dp, microbatches=2,
                      schedule="interleaved1f1b" if vpp else schedule, bucket_bytes=4096, dist_opt=dist_opt,
                      grad_reduce=grad_reduce, sp=sp, vpp=4 if vpp else 0)


# ---- no processes ------------------------------------------------------------------------------
def test_the_default_layouts_are_every_factorisation_of_the_world():
    assert every_layout(2) == [(1, 1, 2), (1, 2, 1), (2, 1, 1)]
    assert sorted(every_layout(8)) == sorted((t, p, 8 // (t * p)) for t in (1, 2, 4, 8) for p in (1, 2, 4, 8) if t * p <= 8)


def test_layouts_option_says_what_it_takes():
    assert _layouts("1x2x1, 2x1x1,1x1x2") == [(1, 2, 1), (2, 1, 1), (1, 1, 2)]
    with pytest.raises(ValueError, match="no expert-parallel"):
        _layouts("1x1x1x2")
    with pytest.raises(ValueError, match="TPxPPxDP"):
        _layouts("2x0x1")


def test_layouts_the_step_cannot_run_are_refused_with_the_numbers():
    spec = KIND.spec(_case(1, 2, 1), OPTS)
    assert refusal(spec, 2) == ""
    assert refusal(spec, 4) == "tp x pp x dp = 1 x 2 x 1 does not equal the world size 4"
    assert "needs at least pp = 4 microbatches" in refusal(replace(spec, pp=4), 4)
    assert "not divisible by tp 3" in refusal(replace(spec, tp=3, pp=1, dp=1), 3)
    assert "weight gradients outside autograd" in refusal(replace(spec, schedule="zbv"), 2)
    assert spec.fault_names() == {"hybrid"}


# ---- real gloo worker groups --------------------------------------------------------------------
@pytest.fixture(scope="module")
def pool(tmp_path_factory):
    pool = GroupPool(Path(tmp_path_factory.mktemp("hybrid-logs")))
    yield pool
    pool.close_all()


def _run(pool, case: HybridCase, env: tuple = (), opts: Options = OPTS):
    """The case's row, made by the kind from the ranks' results as the session makes it."""
    results, _ = pool.run(GroupKey(case.backend, case.nranks, env), KIND.spec(case, opts), 120)
    places = {r: ("localhost", r) for r in range(case.nranks)}
    return KIND.row(case, opts, Ran(results, {"localhost": list(places)}, places))


def _assert_checked_and_broken_down(row, case: HybridCase, opts: Options = OPTS) -> None:
    assert row.wrong == 0 and row.checked > 0 and row.err_to_tol <= 1, (row.wrong_per_rank, row.err_to_tol)
    # each part timed on its own, min <= max over ranks, and only the layouts that have a dimension spend
    # time on it; how large each is, is timing: measured by the bench, never asserted here
    for part in ("compute", "tp", "pp", "bubble", "dp"):
        assert 0 <= getattr(row, f"{part}_min_us") <= getattr(row, f"{part}_us"), part
    assert row.compute_us > 0 and row.step_us > 0 and row.timed_step_us > 0
    assert (row.tp_us > 0) == (case.tp > 1) and (row.tp_busbw_gbps is not None) == (case.tp > 1)
    assert (row.pp_us > 0) == (row.pp_bytes > 0) == (case.pp > 1) and (case.pp > 1 or row.bubble_us == 0)
    assert (row.dp_us > 0) == (case.dp > 1) and (row.buckets > 0) == (case.dp > 1)
    # the dp bytes are the buckets' in the dtype they are reduced in (a distributed optimizer pads them to dp)
    grads = sum(memory.mlp_gradient_sizes(opts.hidden, opts.layers)) // (case.tp * case.pp)
    assert case.dp == 1 or row.dp_bytes >= grads * {"float32": 4, "bfloat16": 2}[case.grad_reduce] * (1 - 1 / case.tp)
    assert row.tokens_per_s_per_device * case.nranks == pytest.approx(row.tokens_per_s)
    assert row.peak_source.startswith("CPU: ") and 0 < row.mfu == pytest.approx(
        model_flops(opts.hidden, opts.layers, case.dp * opts.batch * opts.seq)
        / (row.step_us * 1e-6) / case.nranks / row.peak_flops)
    assert row.bubble_theory == (schedules.bubble_theory(case.schedule, case.pp, 2, case.vpp) if case.pp > 1 else 0.0)
    assert row.tokens_per_s == pytest.approx(case.dp * SHAPE["batch"] * SHAPE["seq"] / (row.step_us * 1e-6))
    assert row.model_states_estimate_bytes > 0 and not [w for w in row.placement_warnings if w.startswith("tp group")]
    # each round's longest CPU wait over the ranks, as a collective's: what verdicts leave out (schema/stats.py)
    assert len(row.round_cpu_wait_ns) == row.rounds and all(w >= 0 for w in row.round_cpu_wait_ns)


@pytest.fixture(scope="module")
def rows2(pool):
    """Every layout of 2 ranks, run once in one worker group: layout -> row."""
    return {layout: _run(pool, _case(*layout)) for layout in every_layout(2)}


@pytest.mark.parametrize("layout", every_layout(2), ids=lambda t: "x".join(map(str, t)))
def test_every_layout_of_2_ranks_equals_the_single_rank_model(rows2, layout):
    _assert_checked_and_broken_down(rows2[layout], _case(*layout))


def test_the_best_layout_is_the_one_with_the_most_tokens_per_second(rows2):
    rows = list(rows2.values())
    best = max(rows, key=lambda r: r.tokens_per_s)
    (line,) = best_layout_lines(rows)
    assert line.startswith(f"# best layout for 2 ranks (gloo): {best.tp}x{best.pp}x{best.dp} ")
    assert "hybrid step" in KIND.table(rows) and "#wrong" in KIND.table(rows)


def test_the_corrupt_hook_fails_the_check_on_its_rank_only(rows2, pool):
    row = _run(pool, _case(1, 1, 2), FAULT)
    assert row.wrong_per_rank == [0, 1] and row.err_to_tol > 1000


@pytest.mark.parametrize("knob, layout", [("distopt", (1, 1, 2)), ("bf16grad", (1, 1, 2)), ("distopt+bf16grad", (1, 1, 2)),
                                          ("sp", (2, 1, 1)), ("vpp", (1, 2, 1))])
def test_each_knob_equals_the_single_rank_model_and_a_corrupt_rank_fails_it(pool, knob, layout):
    """The distributed optimizer (its gradient shards and its all_gathered weights after the step), the
    bfloat16 reduction (its rounding in the tolerance), sequence parallelism (each tp rank's loss over its
    part of the sequence) and a virtual pipeline of 4 chunks per rank checked; the corrupt hook fails each."""
    case = _case(*layout, knob=knob)
    opts = replace(OPTS, layers=8) if knob == "vpp" else OPTS   # 2 ranks x 4 chunks: 8 stages of a block each
    row = _run(pool, case, opts=opts)
    _assert_checked_and_broken_down(row, case, opts)
    bad = _run(pool, case, FAULT, opts)
    assert bad.wrong_per_rank == [0, 1] and bad.err_to_tol > 100


def test_knobs_option_and_refusals():
    assert _knobs("plain, distopt") == ["plain", "distopt"]
    with pytest.raises(ValueError, match="plain, sp, distopt, bf16grad"):
        _knobs("zero3")
    spec = KIND.spec(_case(1, 2, 1), OPTS)
    assert "needs dp > 1" in refusal(replace(spec, grad_reduce="bfloat16"), 2)
    assert "needs dp > 1" in refusal(replace(spec, distributed_optimizer=True), 2)
    assert "needs tp > 1 dividing it" in refusal(replace(spec, sequence_parallel=True), 2)
    assert "interleaved schedule" in refusal(replace(spec, vpp=2), 2)
    vpp4 = replace(spec, vpp=4, schedule="interleaved1f1b")
    assert "4 layers do not split into pp x stages-per-rank = 2 x 4" in refusal(vpp4, 2)


def test_the_memory_model_is_the_optimizer_and_reduction_the_step_runs():
    """SGD holds no optimizer state; each gradient is also copied into a bucket in the reduction's dtype;
    the distributed optimizer keeps 1/dp of that bucket (its reduce_scatter output) on the optimizer side."""
    w, g, o = memory.model_states(1000, 1, 1, 4, **memory.sgd_states(False, "float32", "float32"))
    assert (w, g, o) == (4000, 8000, 0)
    assert memory.model_states(1000, 1, 1, 4, **memory.sgd_states(False, "float32", "bfloat16")) == (4000, 6000, 0)
    assert memory.model_states(1000, 1, 1, 4, **memory.sgd_states(True, "float32", "bfloat16")) == (4000, 6000, 500)
    assert model_flops(256, 8, 1024) == 6 * 1024 * 8 * (2 * 256 * 4 * 256)   # torchtitan's 6 x weights per token


@pytest.mark.slow  # four real rank processes
@pytest.mark.parametrize("layout, schedule", [(t, "1f1b") for t in every_layout(4) if t[1] < 4] + [((1, 2, 2), "interleaved1f1b"),
                                                                                                  ((1, 2, 2), "gpipe")],
                         ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else v)
def test_every_layout_of_4_ranks_equals_the_single_rank_model(pool, layout, schedule):
    case = _case(*layout, schedule=schedule)
    _assert_checked_and_broken_down(_run(pool, case), case)


@pytest.mark.slow  # four real rank processes
def test_sequence_parallelism_inside_a_pipeline_equals_the_single_rank_model(pool):
    """tp 2 with sp in a 2-stage pipeline: the stages pass sequence shards, and the backward receive
    buffer takes the strides of the next stage's input gradient (gloo refused a transposed one)."""
    case = _case(2, 2, 1, knob="sp")
    _assert_checked_and_broken_down(_run(pool, case), case)
    bad = _run(pool, case, FAULT)
    assert bad.wrong_per_rank[1] == 1 and bad.err_to_tol > 100


@pytest.mark.slow  # two MPI ranks under mpiexec: torch.distributed on MPICH (collectives/backends/mpi_torch.py)
@pytest.mark.parametrize("layout", every_layout(2), ids=lambda t: "x".join(map(str, t)))
def test_every_layout_of_2_ranks_on_mpi_equals_the_single_rank_model(pool, layout):
    case = _case(*layout, backend="mpi")
    _assert_checked_and_broken_down(_run(pool, case), case)


@pytest.mark.slow
def test_the_corrupt_hook_fails_the_check_on_mpi_too(pool):
    row = _run(pool, _case(2, 1, 1, backend="mpi"), FAULT)
    assert row.wrong_per_rank == [0, 1] and row.err_to_tol > 1000


def _ranks(machines: list[str], cpus: list[list[int]], cpu_s: float = 0.1) -> list:
    """What the driver reads of each rank's result for machine sharing: its machine, affinity and CPU per step."""
    return [SimpleNamespace(machine=m, cpus=c, cpu_notp_ns=cpu_s * 1e9) for m, c in zip(machines, cpus)]


def test_a_pipeline_with_more_ranks_than_cores_on_a_machine_is_warned():
    """Which layouts get the warning, from what the ranks saw: pp > 1 on a CPU backend with more ranks
    on one machine (kernel) than the cores they may use between them."""
    (line,) = _crowded(_case(1, 2, 2), machines_cores(_ranks(["m1"] * 4, [[0, 1]] * 4)))
    assert line.startswith("4 ranks share 2 cores on a machine: ")
    assert _crowded(_case(1, 1, 4), machines_cores(_ranks(["m1"] * 4, [[0, 1]] * 4))) == []   # no pipeline
    assert _crowded(_case(1, 2, 2), machines_cores(_ranks(["m1", "m1", "m2", "m2"], [[0, 1]] * 4))) == []   # 2 machines
    assert _crowded(_case(1, 2, 2), machines_cores(_ranks(["m1"] * 4, [[0], [1], [2], [3]]))) == []   # a core each


def test_a_crowded_machine_bounds_the_model_by_its_cpu_work():
    """Cores are the union of a machine's ranks' affinities; a crowded machine gives its ranks' compute
    back their share (cores / ranks) and the step a floor of its CPU work per core; others change nothing."""
    ranks = _ranks(["m1"] * 4 + ["m2"] * 2, [[0], [1], [0], [1], [0, 1, 2, 3], [0, 1, 2, 3]], cpu_s=0.1)
    assert machines_cores(ranks) == {"m1": ([0, 1, 2, 3], 2), "m2": ([4, 5], 4)}
    share, busy = machine_work(ranks)
    assert share == 0.5 and busy == pytest.approx(0.2)   # 4 x 0.1 s on 2 cores
    assert machine_work(_ranks(["m1", "m2"], [[0], [0]])) == (1.0, None)
