"""all_to_all_v (collectives/ops/all_to_all_v.py): its uneven split, the exact result it must leave on
every rank, its bandwidth, its switches, and real runs on gloo and MPI, clean and with a corrupted rank."""
import json

import numpy as np
import pytest

from collectives import algorithms
from collectives.ops import OPS, Pattern, bandwidths, count_wrong
from collectives.ops.all_to_all_v import displacements, splits, units

OP = OPS["all_to_all_v"]


def simulate(inputs: list[np.ndarray], rank: int, send_of, recv_of) -> np.ndarray:
    """An AlltoAllV by its definition (MPI 5.2.8): `rank` receives send_of(src)[rank] elements from each src,
    cut at the source's send displacement and laid down at this rank's receive displacement."""
    n = len(inputs)
    recv = recv_of(rank)
    out = np.full(sum(recv), np.nan)
    rdispls = displacements(recv)
    for src in range(n):
        send = send_of(src)
        start = displacements(send)[rank]
        block = inputs[src][start:start + send[rank]]
        out[rdispls[src]:rdispls[src] + recv[src]] = block[:recv[src]]
    return out


@pytest.mark.parametrize("nranks", [1, 2, 3, 4, 8])
def test_counts_are_uneven_whole_and_sum_consistently(nranks):
    count = OP.count_for(1 << 16, 4, nranks)
    assert count % units(nranks) == 0 and count <= 1 << 14
    matrix = np.array([splits(count, nranks, r)[0] for r in range(nranks)])
    assert (matrix.sum(1) == count).all() and (matrix.sum(0) == count).all()   # every rank sends and receives `count`
    for r in range(nranks):
        send, recv = splits(count, nranks, r)
        assert recv == matrix[:, r].tolist()          # what r receives from p is what p sends r
        assert len(set(send)) == nranks               # a different share for every peer
        if nranks >= 3:
            assert send != recv                       # a swapped send/receive split would be seen
    assert OP.buffer_counts(count, nranks) == (count, count)


def test_displacements_are_exclusive_prefix_sums():
    assert displacements([3, 1, 2]) == [0, 3, 4] and displacements([5]) == [0] and displacements([]) == []
    assert splits(60, 3, 1) == ([30, 10, 20], [20, 10, 30])   # u = 60 / 6; rank 1 keeps one unit


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "int8", "uint8", "int32"])
@pytest.mark.parametrize("nranks", [1, 2, 3, 4, 8])
def test_expected_matches_the_collective_definition(dtype, nranks):
    p = Pattern("all_to_all_v", dtype, "none", OP.count_for(480, 2, nranks), nranks)
    inputs = [p.input(r) for r in range(nranks)]
    for rank in range(nranks):
        want = simulate(inputs, rank, lambda r: splits(p.count, nranks, r)[0], lambda r: splits(p.count, nranks, r)[1])
        assert count_wrong(want, p.expected(rank)) == 0, rank
        assert not np.any(p.expected(rank) == p.sentinel())


@pytest.mark.parametrize("nranks", [3, 4, 8])
def test_a_wrong_receive_layout_is_counted(nranks):
    p = Pattern("all_to_all_v", "float32", "none", OP.count_for(4096, 4, nranks), nranks)
    inputs = [p.input(r) for r in range(nranks)]
    swapped = simulate(inputs, 1, lambda r: splits(p.count, nranks, r)[1], lambda r: splits(p.count, nranks, r)[0])
    k = p.count // nranks
    even = np.concatenate([x[k:2 * k] for x in inputs])       # all_to_all's layout: equal shares
    assert count_wrong(swapped, p.expected(1)) > 0
    assert count_wrong(even, p.expected(1)) > 0
    assert count_wrong(p.expected(1)[:-1], p.expected(1)) == p.count   # a short buffer: every element


def test_busbw_counts_the_bytes_that_leave_each_rank():
    for n in (1, 2, 3, 8):
        assert OP.bus_factor(n) == pytest.approx(1 - 2 / (n * (n + 1)))
    assert bandwidths("all_to_all_v", 36 * 10 ** 9, 1.0, 8) == pytest.approx((36.0, 35.0))
    assert OP.traffic is not None and OP.traffic("ring", 4) == (3, pytest.approx(0.9)) == OP.traffic("tree", 4)
    assert OP.forms == {"torch": {False}, "mpi": {False}} and OP.has_async


def test_algorithm_switches():
    ompi = algorithms.resolve("mpi", "mpi:pairwise", "all_to_all_v", "openmpi")
    assert ompi["OMPI_MCA_coll_tuned_alltoallv_algorithm"] == "2"
    assert algorithms.resolve("mpi", "mpi:scattered", "all_to_all_v")["MPIR_CVAR_ALLTOALLV_INTRA_ALGORITHM"] == "scattered"
    for backend in ("mpi", "gloo", "nccl", "hccl"):
        assert isinstance(algorithms.resolve(backend, "ring", "all_to_all_v"), algorithms.Unsupported), backend


def _rows(bench_run) -> list[dict]:
    lines = next(bench_run.results.glob("*/cases.jsonl")).read_text().splitlines()
    return [r for r in map(json.loads, lines) if r.get("op") == "all_to_all_v"]


@pytest.mark.slow  # a child pytest per case: real ranks
@pytest.mark.parametrize("backend, nproc", [("mpi", 2), ("mpi", 3), ("gloo", 3), ("gloo", 4)])
def test_runs_exact_on_real_ranks(bench_run, backend, nproc):
    proc = bench_run("--backend", backend, "--nproc", str(nproc), "--ops", "all_to_all_v", "--sizes", "1K,64K",
                     "--dtypes", "float32,int8", target="benches/test_collectives.py")
    assert proc.returncode == 0, proc.output[-3000:]
    rows = _rows(bench_run)
    assert len(rows) == 4, rows
    for r in rows:
        assert r["wrong"] == 0 and r["wrong_per_rank"] == [0] * nproc and r["inplace"] is False
        assert r["count"] % units(nproc) == 0 and r["bytes"] == r["count"] * (4 if r["dtype"] == "float32" else 1)
        assert r["busbw_gbps"] == pytest.approx(r["algbw_gbps"] * OP.bus_factor(nproc)) and r["busbw_gbps"] > 0
    assert bench_run.leftovers() == []


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["mpi", "gloo"])
def test_a_corrupted_rank_fails_the_case(bench_run, backend):
    proc = bench_run("--backend", backend, "--nproc", "3", "--ops", "all_to_all_v", "--sizes", "1K",
                     target="benches/test_collectives.py", env={"HCCL_BENCH_FAULT": "corrupt:1:all_to_all_v"})
    assert proc.returncode == 1, proc.output[-3000:]
    assert "wrong elements" in proc.output, proc.output[-3000:]
    rows = _rows(bench_run)
    assert rows and all(r["wrong"] > 0 and r["wrong_per_rank"] == [0, 1, 0] for r in rows), rows
    assert bench_run.leftovers() == []
