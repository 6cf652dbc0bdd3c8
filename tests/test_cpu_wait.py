"""Each round's CPU wait (collectives/timing.py CpuWait) and the verdicts judging a launch's rounds no
rank waited in (schema/stats.py undisturbed).

The histories here are shaped like the ones this VM records with one busy loop beside 2 ranks on 2
cores: a round in which a rank was off its core takes up to twice as long, and the share of such
rounds is a state of the launch (here 20-90%), so launch medians over all rounds spread 1.5x."""
import json
import os
import time

import numpy as np
import pytest

from collectives.timing import CpuWait
from reports import summary
from reports.compare import cpu_wait_lines
from reports.history import analyse
from reports.result_files import load
from schema.judgement import REGRESSION
from schema.results import CollectiveRow, bench_entry, result_file
from schema.stats import MIN_UNDISTURBED, UNDISTURBED_SHARE, undisturbed

SIZES = [64 << 10, 4 << 20]
ROUNDS, K = 60, 4


def nights(folder, count, slow_from=None, factor=1.3, seed=0, waits=True, throughout=()):
    """`count` nights of all_reduce over SIZES, 3 launches each, 60 rounds of K calls a launch; each
    launch has its own share of rounds a rank waited in (those rounds 1.3-2x as long, the wait
    recorded), and from night `slow_from` on every call is `factor` as long (a new stack).
    waits=False: the same times, no waits recorded (an older file). Launches in `throughout`: a rank
    waited in every round (long rounds on a busy machine)."""
    rng = np.random.default_rng(seed)
    for night in range(count):
        benches = []
        for launch in range(3):
            share = 1.0 if launch in throughout else rng.uniform(0.2, 0.9)
            slow = factor if slow_from is not None and night >= slow_from else 1.0
            for size in SIZES:
                call = (5e-6 + size / 1e10) * slow * np.exp(rng.normal(0, 0.01, ROUNDS))
                hit = rng.random(ROUNDS) < share
                stretch = np.where(hit, rng.uniform(1.3, 2.0, ROUNDS), 1.0)
                data = call * stretch
                wait = np.where(hit, (stretch - 1) * call * K * 1e9, rng.uniform(0, 0.002, ROUNDS) * call * K * 1e9)
                row = CollectiveRow(backend="mpi", algo="default", op="all_reduce", nranks=2, bytes=size, count=size // 4,
                                    launch=launch, time_us=float(np.median(data)) * 1e6, iters_per_round=K,
                                    round_cpu_wait_ns=[int(w) for w in wait] if waits else [])
                benches.append(bench_entry(f"ar-{size}-L{launch}", row, list(data)))
        meta = {"groups": {"g": {"hosts": {"h": 2}, "devices": ["cpu"]}},
                "provenance": {"cann": {"cann": "8.1" if slow_from is not None and night >= slow_from else "8.0"}}}
        run_dir = folder / f"202611{night + 1:02d}-020000"
        run_dir.mkdir(parents=True)
        (run_dir / "results.json").write_text(json.dumps(result_file(benches, meta, f"2026-11-{night + 1:02d}T02:00:00")))
    return [load(p) for p in sorted(folder.glob("*/results.json"))]


def detectable(hist, size):
    return next(c.detectable for c in hist.judged.cells if c.size == size)


def test_nights_judged_on_undisturbed_rounds_see_small_changes(tmp_path):
    judged = analyse(nights(tmp_path / "waits", 7))
    blind = analyse(nights(tmp_path / "blind", 7, waits=False))   # the same times without the waits
    for size in SIZES:
        assert detectable(judged, size) <= 0.10, summary.history_text(judged)
        assert detectable(blind, size) > 0.25, summary.history_text(blind)   # the scheduler, not the library
    assert not judged.regressed and not judged.machine_changed
    text = summary.history_text(judged)
    assert "cpu: launches judged on the rounds no rank waited for a CPU" in text


def test_a_regression_is_found_on_the_undisturbed_rounds_with_its_size(tmp_path):
    hist = analyse(nights(tmp_path, 10, slow_from=7, factor=1.3))
    assert hist.regressed, summary.history_text(hist)
    assert {c.size for c in hist.judged.by_verdict(REGRESSION)} == set(SIZES)
    for c in hist.judged.by_verdict(REGRESSION):
        assert c.low < 1.3 < c.high and hist.step(c.key).at == 7


def test_two_runs_compared_on_their_undisturbed_rounds_say_what_they_left_out(tmp_path):
    from reports.compare import compare
    runs = nights(tmp_path, 2, slow_from=1, factor=1.3, seed=4)
    cmp = compare(runs[0], runs[1])
    assert {c.size for c in cmp.by_verdict(REGRESSION)} == set(SIZES), summary.text(cmp)
    assert all(abs(c.ratio - 1.3) < 0.03 for c in cmp.cells), summary.text(cmp)   # every round judged: 1.5-1.7x
    assert cmp.cpu_wait and "of 12 case launches lost" in cmp.cpu_wait[0]
    assert summary.comment(cmp.cpu_wait[0])[0] in summary.text(cmp).splitlines()
    assert summary.as_json(cmp)["cpu_wait"] == cmp.cpu_wait


def test_a_launch_disturbed_throughout_leaves_its_cell_unless_most_launches_were(tmp_path):
    (run,) = nights(tmp_path / "one", 1, throughout=(1,))
    for cell in run.cells.values():
        assert sorted(cell.launches) == sorted(cell.rows) == [0, 2] and sorted(cell.waited) == [0, 1, 2]
    assert "; 2 with fewer than 5 rounds without one left out" in cpu_wait_lines([run])[0]
    assert "more runnable threads than cores" not in cpu_wait_lines([run])[0]
    (run,) = nights(tmp_path / "most", 1, throughout=(0, 1))   # most launches alike: all judged on every round
    for cell in run.cells.values():
        assert sorted(cell.launches) == [0, 1, 2] and all(len(cell.launches[i]) == ROUNDS for i in (0, 1))
    assert "; 4 with fewer than 5 judged on all their rounds" in cpu_wait_lines([run])[0]
    assert "; so this machine had more runnable threads than cores for most of the run" in cpu_wait_lines([run])[0]
    assert "short rounds: --round-time 0.002 --rounds 200" in cpu_wait_lines([run])[0]   # what the user can do


def test_each_bench_kind_decides_which_of_its_launches_to_leave_out(tmp_path):
    """A layer step's rounds are far longer than a small collective's, and on a busy machine each of
    them may hold a wait: the layer launches then are judged whole, and they do not outvote the
    collectives, whose one launch disturbed throughout still leaves its cells."""
    from tests.test_layers import _tp_row
    nights(tmp_path, 1, throughout=(1,))
    path = next(tmp_path.glob("*/results.json"))
    data = json.loads(path.read_text())
    for launch in range(4):
        row = _tp_row("manual", 2_000_000, [0.25, 0.35], launch, waits=(10 ** 9,) * 5)   # every round waited
        assert len(row.round_cpu_wait_ns) == 5
        data["benchmarks"].append(bench_entry(f"tp-L{launch}", row, [t / 1e9 for t in row.round_ns_per_rank[0]]))
    path.write_text(json.dumps(data))
    run = load(path)
    kinds = {cell.series.bench: cell for cell in run.cells.values()}
    assert sorted(kinds["linear"].launches) == [0, 1, 2, 3]
    for cell in run.cells.values():
        if cell.series.bench == "collective":
            assert sorted(cell.launches) == [0, 2] and sorted(cell.waited) == [0, 1, 2]


def test_undisturbed_keeps_the_rounds_no_rank_waited_in_when_there_are_enough():
    t = [1e-3 + i * 1e-9 for i in range(10)]         # 10 rounds of K=2 calls: ~2 ms each
    limit = int(UNDISTURBED_SHARE * 2e6)             # 20 us: a wait past it disturbed the round
    waits = [0, limit, limit + 100, 5_000_000] + [0] * 6
    assert undisturbed(t, waits, 2) == t[:2] + t[4:]
    few = [limit + 1] * (10 - MIN_UNDISTURBED + 1) + [0] * (MIN_UNDISTURBED - 1)
    assert undisturbed(t, few, 2) == t               # too few undisturbed: the launch is judged whole
    assert undisturbed(t, [], 2) == t                # no waits recorded (older files, other writers)
    assert undisturbed(t, [0] * 9, 2) == t           # waits that do not match the rounds are not used


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="no /proc/self/task")
def test_the_cpu_wait_is_the_kernels_counter_for_every_thread():
    """One counter per thread of this process, each the run delay its schedstat shows: it never goes
    back, and no thread can have waited longer than the time that passed (how long a busy machine
    keeps a woken thread waiting is the scheduler's: not asserted)."""
    clock = CpuWait()
    try:
        began = time.monotonic_ns()
        first = clock.read()
        time.sleep(0.05)
        second = clock.read()
        passed = time.monotonic_ns() - began
        with open("/proc/thread-self/schedstat") as f:
            mine = int(f.read().split()[1])
        assert first is not None and second is not None
        assert len(first) == len(second) == len(os.listdir("/proc/self/task"))
        assert all(isinstance(v, int) and v >= 0 for v in first + second)
        assert 0 <= CpuWait.waited(first, second) <= passed * len(first)
        assert any(a <= mine for a in first) and CpuWait.waited(first, [None] * len(first)) == 0   # a thread gone: not counted
    finally:
        clock.close()
    assert clock.read() is None                       # closed: nothing read, nothing leaked


def test_an_ab_launch_that_lost_rounds_is_judged_by_its_sides_medians_not_quads():
    """Quads pair an A/B launch's rounds by position; once a side's disturbed rounds are left out the
    positions no longer pair up, so that launch's shift is the ratio of the sides' medians."""
    from reports.compare import _samples
    from schema.results import Cell, Series
    row = CollectiveRow(backend="mpi", algo="default", op="all_reduce", nranks=2, bytes=4096, count=1024, iters_per_round=K)
    a, b = [1.0, 1.0, 1.0, 1.0], [1.0, 2.0, 1.0, 2.0]
    base = Cell(Series.of(row), 4096, row, launches={0: a, 1: a}, rows={0: row, 1: row})
    cand = Cell(Series.of(row), 4096, row, launches={0: b, 1: b}, rows={0: row, 1: row})
    _, quads, _ = _samples(base, cand, paired=True)
    assert quads == pytest.approx([np.sqrt(2)] * 2)               # every round kept: ABBA quads
    base.waited = {0: (3, 10), 1: (0, 10)}                       # launch 0 lost 3 of 10 rounds on side A
    _, shifted, kind = _samples(base, cand, paired=True)
    assert kind == "paired launches" and shifted == pytest.approx([1.5, np.sqrt(2)])


def test_launches_that_never_waited_are_neither_counted_nor_left_out():
    """A smoke run's 3 rounds with no wait: fewer than 5 rounds, but nothing was disturbed."""
    from reports.result_files import leave_out_disturbed
    from schema.results import Cell, Series
    row = CollectiveRow(backend="mpi", algo="default", op="all_reduce", nranks=2, bytes=4096, count=1024, iters_per_round=K)
    cell = Cell(Series.of(row), 4096, row, launches={0: [1.0] * 3, 1: [1.0] * 3}, rows={0: row, 1: row},
                waited={0: (0, 3), 1: (0, 3)})
    leave_out_disturbed({cell.key: cell})
    assert sorted(cell.launches) == [0, 1]
    assert cpu_wait_lines([type("R", (), {"cells": {cell.key: cell}})()]) == []
