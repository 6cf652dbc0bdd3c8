"""Buffer shapes, exact expected results and bandwidth formulas of the seven ops."""
import numpy as np
import pytest

from collectives.ops import OPS, Pattern, bandwidths, count_wrong

REDUCE = {"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min}


def simulate(op, inputs, rank, redop):
    """What the collective computes, from every rank's input, by its definition."""
    n = len(inputs)
    k = inputs[0].size // n if OPS[op].chunked and op != "all_gather" else inputs[0].size
    stacked = np.stack(inputs)
    if op == "all_reduce":
        return REDUCE[redop](stacked, 0)
    if op == "reduce":
        return REDUCE[redop](stacked, 0) if rank == 0 else None
    if op == "reduce_scatter":
        return REDUCE[redop](stacked, 0)[rank * k:(rank + 1) * k]
    if op == "all_gather":
        return np.concatenate(inputs)
    if op == "all_to_all":
        return np.concatenate([x[rank * k:(rank + 1) * k] for x in inputs])
    if op == "broadcast":
        return inputs[0]
    if op == "sendrecv":
        return inputs[(rank - 1) % n]
    pytest.skip(f"{op}: its own test module simulates it")


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "int8", "uint8", "int32"])
@pytest.mark.parametrize("nranks", [1, 2, 3, 8])
def test_expected_matches_the_collective_definition(op, dtype, nranks):
    for redop in (["sum", "prod", "max", "min"] if OPS[op].reduces else ["none"]):
        p = Pattern(op, dtype, redop, OPS[op].count_for(96, 2, nranks), nranks)
        inputs = [p.input(r) for r in range(nranks)]
        for rank in range(nranks):
            want = simulate(op, inputs, rank, redop)
            got = p.expected(rank)
            assert (want is None and got is None) or np.array_equal(want, got), (op, redop, rank)
            if got is not None:
                assert not np.any(got == p.sentinel())


@pytest.mark.parametrize("dtype, limit", [("float16", 2048), ("bfloat16", 256), ("int8", 127), ("uint8", 255)])
def test_sums_stay_exact_and_in_range_at_scale(dtype, limit):
    p = Pattern("all_reduce", dtype, "sum", 4096, 64)
    partial = np.cumsum(np.stack([p.input(r) for r in range(64)]), axis=0)
    assert np.abs(partial).max() <= limit
    if limit // 2 >= 2 * 64:  # room for a varying pattern; int8 over 64 ranks keeps only b(rank)
        assert np.unique(p.input(0)).size > 1, "inputs must not be constant"


def test_count_wrong_counts_elements():
    assert count_wrong(np.array([1.0, 2, 3]), np.array([1.0, 2, 4])) == 1
    assert count_wrong(np.array([1.0, 2]), np.array([1.0, 2, 3])) == 3
    assert count_wrong(np.array([5.0]), None) == 0


def test_counts_follow_what_the_op_needs():
    assert OPS["all_reduce"].count_for(4, 4, 8) == 1
    assert OPS["all_gather"].count_for(4, 4, 8) == 8            # at least one element per rank
    assert OPS["reduce_scatter"].count_for(1000, 4, 8) == 248   # 250 rounded down to a multiple of 8
    assert OPS["all_gather"].buffer_counts(256, 8) == (32, 256)
    assert OPS["reduce_scatter"].buffer_counts(256, 8) == (256, 32)


# Rows of nccl-tests output published in public repositories:
#  all_reduce_perf -b 8 -e 8G -f 2, 16 ranks (2 x 8 H100): lessizzmore/create-a3mega-ztan-fork, ztan-NCCL-test-result
#  sendrecv_perf -b 128M -e 1G -f 2 -g 8 (8 A100): li-plus/playground, cuda/nccl.md
NCCL_TESTS_ROWS = [
    ("all_reduce", 16, 134217728, 1652.2, 81.24, 152.32),
    ("all_reduce", 16, 1048576, 203.2, 5.16, 9.68),
    ("all_reduce", 16, 8589934592, 47535, 180.71, 338.82),
    ("sendrecv", 8, 134217728, 1211.2, 110.81, 110.81),
    ("sendrecv", 8, 1073741824, 5503.4, 195.10, 195.10),
]


@pytest.mark.parametrize("op, nranks, size, time_us, algbw, busbw", NCCL_TESTS_ROWS)
def test_bandwidth_formulas_reproduce_nccl_tests_rows(op, nranks, size, time_us, algbw, busbw):
    got_alg, got_bus = bandwidths(op, size, time_us * 1e-6, nranks)
    # nccl-tests prints time to ~5 significant digits and bandwidths to 2 decimals
    assert got_alg == pytest.approx(algbw, rel=2e-4, abs=0.006)
    assert got_bus == pytest.approx(busbw, rel=2e-4, abs=0.006)


def test_bus_factors():
    n = 8
    assert OPS["all_reduce"].bus_factor(n) == pytest.approx(2 * 7 / 8)
    for op in ("all_gather", "reduce_scatter", "all_to_all"):
        assert OPS[op].bus_factor(n) == pytest.approx(7 / 8)
    for op in ("broadcast", "reduce", "sendrecv"):
        assert OPS[op].bus_factor(n) == 1.0


def test_nvls_all_reduce_bus_factor_follows_nccl_tests():
    """NVIDIA/nccl-tests src/all_reduce.cu: (n-1)/(n+1) under NCCL_ALGO=NVLS or NVLSTREE."""
    assert OPS["all_reduce"].bus_factor(8, "nccl:NVLS") == pytest.approx(7 / 9)
    assert OPS["all_reduce"].bus_factor(8, "nccl:NVLSTree") == pytest.approx(7 / 9)
    assert OPS["all_reduce"].bus_factor(8, "nccl:Ring") == pytest.approx(2 * 7 / 8)
    assert bandwidths("all_reduce", 9 * 10 ** 9, 1.0, 8, "nccl:NVLS")[1] == pytest.approx(7.0)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "int8", "uint8", "float32"])
@pytest.mark.parametrize("nranks", [8, 256, 1024])
def test_every_ranks_part_shows_at_scale(dtype, nranks):
    """Sums: leaving out any one rank's input changes the result, and every partial sum in any order
    stays exact (sparse past the dtype's dense range: bfloat16 at 256 ranks had one constant input).
    Moved data: ranks' chunks differ, so a chunk at another rank's place shows (it repeated every 3)."""
    limit = {"float16": 2048, "bfloat16": 256, "int8": 127, "uint8": 255, "float32": 1 << 24}[dtype]
    p = Pattern("all_reduce", dtype, "sum", 4096, nranks)
    inputs = np.stack([p.input(r) for r in range(nranks)])
    total = inputs.sum(axis=0)
    assert np.array_equal(total, p.reduced(4096))
    assert all(np.any(inputs[r] != 0) for r in range(nranks)), "a rank whose part is all zeros cannot be missed"
    order = np.random.default_rng(0).permutation(nranks)   # a library may add in any order
    assert np.abs(np.cumsum(inputs[order], axis=0)).max() < limit and np.abs(inputs).max() < limit
    gathered = Pattern("all_gather", dtype, "none", OPS["all_gather"].count_for(8 * nranks * 4, 4, nranks), nranks)
    chunks = np.stack([gathered.input(r) for r in range(nranks)])
    distinct = len({c.tobytes() for c in chunks})
    assert distinct == min(nranks, limit // (2 * gathered._amplitude() + 1)) and np.abs(chunks).max() < limit


@pytest.mark.parametrize("dtype", ["float32", "int8", "uint8", "bfloat16"])
@pytest.mark.parametrize("redop", ["max", "min"])
@pytest.mark.parametrize("nranks", [2, 3, 8])
def test_the_root_never_holds_a_max_or_min_before_the_call(dtype, redop, nranks):
    """An in-place reduce that does nothing leaves the root's input: it must differ from the result everywhere."""
    p = Pattern("reduce", dtype, redop, 64, nranks)
    assert np.all(p.input(0) != p.expected(0))
    b = Pattern("broadcast", dtype, "none", 64, nranks)   # broadcast in place: no other rank holds the root's data
    assert all(np.any(b.input(r) != b.expected(r)) for r in range(1, nranks))
