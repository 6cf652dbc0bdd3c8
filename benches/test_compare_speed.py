"""How long comparing two 10,000-cell result files takes (load both, statistics, verdicts, summary).
Target: under 10 s. pytest-benchmark's table prints the time; extra_info holds the cell count."""
import json

import numpy as np
import pytest

from reports import summary
from reports.compare import compare
from reports.result_files import load
from schema.results import CollectiveRow, bench_entry, result_file

pytestmark = pytest.mark.harness_bench   # the harness's own speed: runs with --harness-benches

CELLS = 10_000
ROUNDS = 20
OPS_CYCLE = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce", "sendrecv")


def _write(path, seed, sizes, series):
    rng = np.random.default_rng(seed)
    benches = []
    for s in range(series):
        for size in sizes:
            row = CollectiveRow(backend="mpi", algo=f"algo{s // 7}", op=OPS_CYCLE[s % 7], redop="sum", nranks=8,
                                bytes=int(size))
            data = ((5e-6 + size / 1e10) * np.exp(rng.normal(0, 0.03, ROUNDS))).tolist()
            benches.append(bench_entry(f"c{s}-{size}", row, data))
    path.write_text(json.dumps(result_file(benches, {"groups": {}})))


def test_compare_10000_cells(tmp_path, benchmark):
    sizes = [8 << i for i in range(25)]                 # 8 B .. 128 MiB
    series = CELLS // len(sizes)
    _write(tmp_path / "a.json", 1, sizes, series)
    _write(tmp_path / "b.json", 2, sizes, series)

    def run():
        cmp = compare(load(tmp_path / "a.json"), load(tmp_path / "b.json"))
        summary.text(cmp)
        return cmp

    cmp = benchmark.pedantic(run, rounds=1, iterations=1)
    benchmark.extra_info.update({"cells": len(cmp.cells), "target_s": 10.0})
    assert len(cmp.cells) == series * len(sizes) == CELLS and not cmp.regressed
