"""The expert-parallel bench's rank half (layers.expert, layers.expert_tasks): routing profiles and
capacity alone, then real gloo ranks (2 and 4 processes) running every dispatcher against the
single-rank reference, the corrupt hook failing that check, and the counts the driver reports."""
from __future__ import annotations

import multiprocessing
import os
import traceback
from dataclasses import replace

import pytest

pytest.importorskip("torch", reason="the layer tests need torch")
import torch

from layers import expert

KEYS = {"wrong", "iters", "round_ns", "calibration", "checked", "err_to_tol", "peak_memory_bytes", "params_local",
        "dispatch_ns", "combine_ns", "expert_ns", "tokens_per_expert", "tokens_per_rank", "dropped", "sent_bytes",
        "recv_bytes", "local_bytes", "masked", "comm_share", "cpu_wait_ns", "cores_rt_ns"}
PLAN = {"warmup": 1, "rounds": 2, "iters": 1, "round_time_s": 0.001}
BASE = {"kind": "expert", "ep": 2, "experts": 4, "topk": 1, "hidden": 16, "ffn": 24, "tokens": 32, "routing": "uniform",
        "hot_share": 0.5, "expert_ids": [3, 0, 3, 1, 3, 2, 3, 3, 1], "capacity_factor": 0.0, "impl": "alltoallv",
        "seed": 7, "dtype": "float32", "plan": PLAN, "corrupt": False}


# ---- routing and capacity, no processes -------------------------------------------------------
def test_uniform_routing_is_balanced_over_the_group_with_distinct_experts_per_token():
    ids = torch.cat([expert.choices("uniform", 24, 3, 8, r, seed=1) for r in range(2)])
    assert torch.bincount(ids.reshape(-1), minlength=8).tolist() == [18] * 8
    assert all(len(set(row)) == 3 for row in ids.tolist())
    assert torch.equal(ids[:24], expert.choices("uniform", 24, 3, 8, 0, seed=1))   # the same on every asking rank


def test_skewed_routing_puts_the_hot_share_on_expert_0_and_spreads_the_rest():
    ids = expert.choices("skewed", 50, 2, 5, rank=3, seed=2, hot_share=0.3)
    counts = torch.bincount(ids.reshape(-1), minlength=5).tolist()
    assert counts[0] == 30 and max(counts[1:]) - min(counts[1:]) <= 1


def test_random_routing_draws_distinct_experts_per_token_seeded():
    ids = expert.choices("random", 200, 4, 8, rank=1, seed=3)
    assert expert.distinct_rows(ids) and torch.equal(ids, expert.choices("random", 200, 4, 8, rank=1, seed=3))
    assert not torch.equal(ids, expert.choices("random", 200, 4, 8, rank=0, seed=3))   # each rank its own draws
    counts = torch.bincount(ids.reshape(-1), minlength=8)
    assert counts.min() > 0.6 * counts.float().mean()   # no preference: every expert near its share


def test_hotrank_routing_loads_one_ep_ranks_experts_with_distinct_experts_per_token():
    ids = expert.choices("hotrank", 400, 2, 8, rank=0, seed=5, hot_share=0.7, hot_experts=2)   # ep 4: rank 0 holds 0, 1
    assert expert.distinct_rows(ids)
    hot = float((ids < 2).float().mean())
    assert 0.5 < hot < 0.75   # weighted to 0.7 of the draws, less where a token already took both hot experts
    assert float((expert.choices("random", 400, 2, 8, rank=0, seed=5) < 2).float().mean()) < 0.35


def test_masked_routing_masks_its_share_of_selections_and_they_weigh_nothing():
    ids = expert.choices("masked", 500, 2, 8, rank=2, seed=4, hot_share=0.25)
    share = float((ids < 0).float().mean())
    assert 0.2 < share < 0.3 and int(ids.max()) < 8
    w = expert.weights(torch.randn(500, 8), ids)
    assert torch.all(w[ids < 0] == 0)
    both = (ids >= 0).all(dim=1)
    assert torch.allclose(w[both].sum(dim=1), torch.ones(int(both.sum())))   # renormalised over what is left
    assert expert.kept(ids.reshape(-1), torch.zeros(8, dtype=torch.long), 0).tolist() == (ids.reshape(-1) >= 0).tolist()
    assert not expert.kept(ids.reshape(-1), torch.zeros(8, dtype=torch.long), 10)[ids.reshape(-1) < 0].any()


def test_per_rank_drops_keep_each_experts_highest_probabilities_or_its_first_selections():
    ids = torch.tensor([[0, 1], [0, 2], [0, 1], [1, 0]])
    probs = torch.tensor([[.5, .3, .2], [.2, .1, .7], [.6, .2, .2], [.3, .6, .1]])
    # expert 0 is chosen 4 times, expert 1 three times; capacity 2 each
    assert expert.rank_drops(ids, probs, 2, "position").tolist() == [[0, 1], [0, 2], [-1, 1], [-1, -1]]
    assert expert.rank_drops(ids, probs, 2, "probs").tolist() == [[0, 1], [-1, 2], [0, -1], [1, -1]]
    assert expert.rank_capacity(0.5, 4, 2, 3) == 2


def test_distinct_rows_finds_a_token_naming_one_expert_twice():
    assert expert.distinct_rows(torch.tensor([[0, 1], [2, 3]]))
    assert not expert.distinct_rows(torch.tensor([[0, 1], [2, 2]]))


def test_file_routing_replays_the_ids_in_order_and_refuses_unknown_experts():
    trace = [2, 0, 1, 1, 3]
    assert expert.choices("file", 3, 2, 4, rank=0, seed=0, expert_ids=trace).reshape(-1).tolist() == [2, 0, 1, 1, 3, 2]
    assert expert.choices("file", 3, 2, 4, rank=1, seed=0, expert_ids=trace).reshape(-1).tolist() == [0, 1, 1, 3, 2, 0]
    with pytest.raises(ValueError, match=r"expert ids in \[0, 4\)"):
        expert.choices("file", 3, 2, 4, rank=0, seed=0, expert_ids=[0, 4])


def test_capacity_keeps_the_first_slots_of_the_group_per_expert():
    ids = [torch.tensor([0, 0, 1, 0]), torch.tensor([0, 1, 1, 1])]   # two ranks, two experts
    routed = torch.stack([torch.bincount(i, minlength=2) for i in ids])
    cap = expert.capacity(0.75, tokens=4, ep=2, topk=1, experts=2)
    assert cap == 3
    assert expert.after_drops(routed, cap).tolist() == [[3, 1], [0, 2]]
    before = routed.cumsum(0) - routed
    assert expert.kept(ids[0], before[0], cap).tolist() == [True, True, True, True]
    assert expert.kept(ids[1], before[1], cap).tolist() == [False, True, True, False]


# ---- real gloo ranks ----------------------------------------------------------------------------
def _rank(rank: int, world: int, store: str, specs: list[dict], out) -> None:
    """One gloo rank running every spec (`corrupt_on`: the rank whose result the fault hook changes)."""
    from types import SimpleNamespace

    import torch.distributed as dist

    from collectives.backends import TorchBackend
    from layers.expert_tasks import ExpertRank
    from schema.wire import to_json
    torch.set_num_threads(1)   # as the harness's ranks (OMP_NUM_THREADS=1): ranks on few cores must not spin on each other
    os.environ.pop("HCCL_BENCH_TCP_STORE", None)
    os.environ["HCCL_BENCH_STORE"] = store
    backend = TorchBackend("gloo", rank, world, rank)
    results = []
    try:
        for given in specs:
            spec = {k: v for k, v in given.items() if k != "corrupt_on"}
            spec["corrupt"] = given.get("corrupt_on") == rank
            try:
                results.append(to_json(ExpertRank.run(backend, SimpleNamespace(**spec))))   # as the worker sends it
            except Exception as exc:   # raised alike on every rank (a refused spec) or the group hangs: see run_ranks
                results.append({"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()})
        out.put((rank, results))
    finally:
        dist.destroy_process_group()


def run_ranks(world: int, specs: list[dict], store: str, timeout: float = 120) -> list[list[dict]]:
    """Every spec's results, one per rank, from `world` spawned gloo ranks (killed if they hang)."""
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    ranks = [ctx.Process(target=_rank, args=(r, world, store, specs, out)) for r in range(world)]
    for p in ranks:
        p.start()
    try:
        got = dict(out.get(timeout=timeout) for _ in ranks)
    finally:
        for p in ranks:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
                p.join()
    return [[got[r][i] for r in range(world)] for i in range(len(specs))]


UNEVEN_ALLGATHER = {"impl": "allgather", "routing": "uneven"}
RANK_DROPS = [{"impl": impl, "routing": routing, "topk": 2, "capacity_factor": 0.5, "drop_policy": policy}
              for impl in ("alltoallv", "allgather") for routing in ("skewed", "uneven") for policy in ("probs", "position")
              if not (impl == "allgather" and routing == "uneven")]
ROUTINGS = ("uniform", "skewed", "random", "hotrank", "masked", "uneven", "file")
CASES = [{"impl": impl, "routing": routing, "topk": topk, "capacity_factor": cf}
         for impl in ("alltoallv", "allgather") for routing in ROUTINGS
         for topk in (1, 2) for cf in (0.0, 0.5) if not (impl == "allgather" and routing == "uneven")]
WORLD4 = [{"impl": impl, "ep": ep, "experts": 8, "routing": routing, "topk": 2, "capacity_factor": cf}
          for impl in ("alltoallv", "allgather") for ep in (2, 4) for routing, cf in (("uniform", 0.0), ("skewed", 1.0))]
CORRUPT = {"corrupt_on": 1, "topk": 2}
FUSED = {"impl": "fused"}


def _ids(case: dict) -> str:
    return "-".join(f"{k}={v}" for k, v in case.items())


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """Every case of this module in two groups of rank processes, started once: (world, case) -> per-rank results."""
    tmp = tmp_path_factory.mktemp("expert")
    two = [CORRUPT, FUSED, UNEVEN_ALLGATHER, *RANK_DROPS, *CASES]
    four = [CORRUPT, *WORLD4]
    got = {}
    for world, cases in ((2, two), (4, four)):
        for case, per_rank in zip(cases, run_ranks(world, [{**BASE, **c} for c in cases], str(tmp / f"store{world}"))):
            got[world, _ids(case)] = per_rank
    return got


def _expected_checked(spec: dict, rank: int) -> int:
    """The output and input gradient (the rank's tokens x H), the gate's gradient and the local experts' parameters."""
    h, f, e = spec["hidden"], spec["ffn"], spec["experts"]
    tokens = expert.tokens_of(spec["routing"], spec["tokens"], spec["hot_share"], rank % spec["ep"], spec["ep"])
    return 2 * tokens * h + e * h + e // spec["ep"] * (2 * h * f + f + h)


def _assert_passes(spec: dict, per_rank: list[dict]) -> None:
    ep, slots = spec["ep"], spec["tokens"] * spec["topk"]
    for rank, r in enumerate(per_rank):
        assert "error" not in r, r.get("traceback")
        assert set(r) == KEYS
        assert r["wrong"] == 0 and r["err_to_tol"] <= 1 and r["checked"] == _expected_checked(spec, rank), (rank, r)
        assert len(r["round_ns"]) == len(r["dispatch_ns"]) == len(r["expert_ns"]) == len(r["combine_ns"]) == PLAN["rounds"]
        assert 0 <= r["comm_share"] <= 1 and r["iters"] == 1 and r["params_local"] > 0
    for first in range(0, len(per_rank), ep):   # each ep group: its ranks agree on the counts
        group = per_rank[first:first + ep]
        per_expert = group[0]["tokens_per_expert"]
        assert all(r["tokens_per_expert"] == per_expert and r["tokens_per_rank"] == group[0]["tokens_per_rank"] for r in group)
        masked = sum(r["masked"] for r in group)
        assert (masked > 0) == (spec["routing"] == "masked") and masked < slots * ep
        assert len(per_expert) == spec["experts"] and sum(per_expert) == slots * ep - masked
        cap = expert.capacity(spec["capacity_factor"], spec["tokens"], ep, spec["topk"], spec["experts"])
        if spec.get("drop_policy", "group") == "group":
            dropped = sum(max(0, n - cap) for n in per_expert) if cap else 0
            assert sum(r["dropped"] for r in group) == dropped
        else:   # each rank's experts keep at most ceil(cf x its tokens x k / E) of its selections
            dropped = sum(r["dropped"] for r in group)
            caps = [expert.rank_capacity(spec["capacity_factor"], len_r, spec["topk"], spec["experts"]) for len_r in
                    (expert.tokens_of(spec["routing"], spec["tokens"], spec["hot_share"], r, ep) for r in range(ep))]
            assert dropped > 0 and max(group[0]["tokens_per_rank"]) <= sum(caps) * spec["experts"] // ep
        assert sum(group[0]["tokens_per_rank"]) == slots * ep - masked - dropped and len(group[0]["tokens_per_rank"]) == ep


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_every_dispatcher_equals_the_single_rank_layer_at_2_ranks(results, case):
    spec = {**BASE, **case}
    per_rank = results[2, _ids(case)]
    _assert_passes(spec, per_rank)
    per_expert = per_rank[0]["tokens_per_expert"]
    if case["routing"] == "skewed":   # the hot expert takes its share of all routed slots
        assert per_expert[0] == spec["hot_share"] * sum(per_expert)
    if case["capacity_factor"] and case["routing"] != "masked":   # masking half the selections leaves room under it
        assert sum(r["dropped"] for r in per_rank) > 0
    if case["routing"] == "uniform" and not case["capacity_factor"]:   # half of every rank's slots go to the other rank
        slots, h = spec["tokens"] * spec["topk"], spec["hidden"]
        if case["impl"] == "alltoallv":   # the counts, the tokens out and the outputs back
            assert all(r["sent_bytes"] == spec["experts"] * 8 + 2 * slots // 2 * h * 4 for r in per_rank)
            # DeepEP's count: every slot routed to the rank's experts, half of them its own
            assert all(r["recv_bytes"] == slots * h * 4 and r["local_bytes"] == slots // 2 * h * 4 for r in per_rank)
        else:   # tokens, weights and choices gathered, outputs reduce-scattered
            assert all(r["sent_bytes"] == spec["tokens"] * (2 * h * 4 + spec["topk"] * 12) for r in per_rank)
            assert all(r["recv_bytes"] == 2 * spec["tokens"] * h * 4 and r["local_bytes"] == spec["tokens"] * h * 4
                       for r in per_rank)


@pytest.mark.parametrize("case", RANK_DROPS, ids=_ids)
def test_megatrons_per_rank_drop_policies_equal_the_single_rank_layer(results, case):
    _assert_passes({**BASE, **case}, results[2, _ids(case)])


@pytest.mark.parametrize("case", WORLD4, ids=_ids)
def test_ep_groups_and_their_data_parallel_replicas_at_4_ranks(results, case):
    spec = {**BASE, **case}
    per_rank = results[4, _ids(case)]
    _assert_passes(spec, per_rank)
    if case["routing"] == "skewed":   # each group: expert 0 takes its share, and no expert more than the capacity
        cap = expert.capacity(case["capacity_factor"], spec["tokens"], case["ep"], case["topk"], case["experts"])
        for first in range(0, 4, case["ep"]):
            per_expert = per_rank[first]["tokens_per_expert"]
            assert per_expert[0] == spec["hot_share"] * sum(per_expert) > cap
            assert max(per_rank[first]["tokens_per_rank"]) <= cap * case["experts"] // case["ep"]


@pytest.mark.parametrize("world", [2, 4])
def test_the_corrupt_hook_fails_the_check_on_its_rank_only(results, world):
    """corrupt (HCCL_BENCH_FAULT=corrupt on rank 1) changes one element of that rank's output."""
    wrong = [r["wrong"] for r in results[world, _ids(CORRUPT)]]
    assert wrong == [0, 1] + [0] * (world - 2)
    assert results[world, _ids(CORRUPT)][1]["err_to_tol"] > 1000


def test_uneven_tokens_per_rank_send_their_own_counts_and_the_allgather_dispatcher_refuses_them(results):
    assert [expert.tokens_of("uneven", 32, 0.5, r, 2) for r in range(2)] == [16, 48]
    assert [expert.tokens_of("uneven", 32, 0.5, r, 4) for r in range(4)] == [16, 27, 37, 48]   # the total kept
    per_rank = results[2, _ids({"impl": "alltoallv", "routing": "uneven", "topk": 2, "capacity_factor": 0.0})]
    assert [sum(r["tokens_per_expert"]) for r in per_rank] == [(16 + 48) * 2] * 2
    for r in results[2, _ids(UNEVEN_ALLGATHER)]:
        assert r["error"].startswith("ValueError: routing uneven: the all-gather dispatcher gathers equal shapes")


def test_the_fused_dispatcher_says_why_it_cannot_run_here(results):
    if not expert.fused_missing():
        pytest.skip("torch_npu has the fused dispatch/combine here")
    for r in results[2, _ids(FUSED)]:
        assert r["error"].startswith("RuntimeError: ") and "npu_moe_distribute_dispatch" in r["error"]


# ---- the kind on MPI: torch.distributed over MPICH (collectives/backends/mpi_torch.py) -------------
@pytest.mark.slow  # rank groups under mpiexec
@pytest.mark.parametrize("world", [2, 4])
def test_every_dispatcher_on_mpi_equals_the_single_rank_layer_and_the_hook_fails_it(tmp_path, world):
    """The driver's rows for skewed routing at capacity 1.0 (dropped slots), each dispatcher, then the
    corrupt hook on rank 1: real MPI ranks, the same check as on gloo."""
    from pathlib import Path

    from harness.engine.groups import GroupKey, GroupPool
    from kinds.base import Ran
    from kinds.expert import KIND, ExpertCase
    from kinds.options import Options
    opts = Options(warmup=1, rounds=2, iters=1, round_time_s=0.001)
    pool = GroupPool(Path(tmp_path))
    places = {r: ("localhost", r) for r in range(world)}
    try:
        def row(impl: str, env: tuple = ()):
            case = ExpertCase(backend="mpi", nranks=world, ep=world, experts=4, topk=2, routing="skewed:0.5",
                              capacity_factor=1.0, impl=impl, tokens=32, hidden=16)
            results, _ = pool.run(GroupKey("mpi", world, env), KIND.spec(case, opts), 120)
            return KIND.row(case, opts, Ran(results, {"localhost": list(places)}, places))
        for impl in ("alltoallv", "allgather"):
            ok = row(impl)
            assert ok.wrong == 0 and ok.checked > 0 and ok.dropped > 0 and ok.expert_imbalance > 1, ok
        broken = row("alltoallv", (("HCCL_BENCH_FAULT", "corrupt:1:expert"),))
        assert broken.wrong_per_rank == [0, 1] + [0] * (world - 2)
    finally:
        pool.close_all()


def _documented(op: str) -> tuple[list[str], set[str]]:
    """(positional names, keyword-only names) of `op`'s prototype in op-plugin's docs."""
    import re
    from pathlib import Path
    text = (Path(__file__).parent / "data" / "op_plugin" / "moe_distribute.txt").read_text()
    (line,) = [t for t in text.splitlines() if t.startswith(f"torch_npu.{op}(")]
    params = line[line.index("(") + 1:line.index(") ->")]
    positional, _, keywords = params.partition(", *, ")
    names = lambda part: [re.match(r"\S+ (\w+)", p.strip()).group(1) for p in part.split(", ")]   # noqa: E731
    return names(positional), set(names(keywords))


def test_the_fused_calls_use_the_documented_names_of_torch_npu():
    """layers/expert.py's fused dispatch/combine against op-plugin's documented prototypes, on each chip:
    every positional parameter given, no name the op lacks (torch_npu is absent here: the calls are built, not made)."""
    for chip in ("A2", "A3"):
        for op, args in (("npu_moe_distribute_dispatch", expert.dispatch_args(chip, "x", "ids", "g", 16, 0, 32, "w")),
                         ("npu_moe_distribute_combine", expert.combine_args(chip, *"abcde", "g", 16, 0, 32, "t", "s"))):
            positional, keywords = _documented(op)
            assert set(positional) <= set(args), (chip, op, set(positional) - set(args))
            assert set(args) <= set(positional) | keywords, (chip, op, set(args) - set(positional) - keywords)
            assert op in expert.FUSED_OPS


def test_the_fused_calls_follow_the_chip():
    """A2: the token weights go to dispatch as expert_scales (so that it fills expand_scales), combine
    gets expand_scales (required there) and no tp_send_counts (left at its default); A3 takes no
    expert_scales in dispatch nor expand_scales in combine (op-plugin: not supported there)."""
    a2 = expert.dispatch_args("A2", "x", "ids", "g", 16, 0, 32, "w")
    a3 = expert.dispatch_args("A3", "x", "ids", "g", 16, 0, 32, "w")
    assert a2["expert_scales"] == "w" and "expert_scales" not in a3
    c2 = expert.combine_args("A2", *"abcde", "g", 16, 0, 32, "tp", "expand")
    c3 = expert.combine_args("A3", *"abcde", "g", 16, 0, 32, "tp", "expand")
    assert c2["expand_scales"] == "expand" and "tp_send_counts" not in c2
    assert c3["tp_send_counts"] == "tp" and "expand_scales" not in c3
    assert c2["expert_scales"] == c3["expert_scales"] == "e"   # combine weighs by them on both


def test_dispatch_and_combine_get_the_same_global_bs():
    """op-plugin: where ranks send different BS, both ops take global_bs = max BS x ep_world_size (0 where equal);
    a dispatch left at 0 while combine gets 64 would mis-size the exchange on uneven routing."""
    for chip in ("A2", "A3"):
        d = expert.dispatch_args(chip, "x", "ids", "g", 16, 0, 32, "w", global_bs=64)
        c = expert.combine_args(chip, *"abcde", "g", 16, 0, 32, "tp", "expand", global_bs=64)
        assert d["global_bs"] == c["global_bs"] == 64, chip


def test_the_per_rank_spread_names_the_slowest_and_fastest_rank():
    from kinds.expert import spread_text
    assert spread_text([2.0, 0.5, 3.0, 1.0]) == "0.5@r1/3@r2"
    assert spread_text([]) == "-"


def test_low_latency_sizes_are_their_own_cases():
    from kinds.expert import ExpertSettings, _build_launch
    from kinds.options import Options
    opts = Options(backends=["gloo"], nproc=2)
    opts.settings = [replace(ExpertSettings.defaults(), moe_impl=["alltoallv"], routing=["random"], tokens=[256, 8])]
    cases = list(_build_launch(opts))
    assert [c.tokens for c in cases] == [256, 8] and len({c.id for c in cases}) == 2
