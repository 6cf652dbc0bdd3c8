"""Sequential A/B (reports/sequential.py): the error budget over the looks, a real slowdown decided
early on its size range, decided cells left alone, an A/A's false-positive rate, the replay."""
import json

import numpy as np

from reports.compare import ALPHA
from reports.result_files import load
from reports.sequential import look_alpha, planned_looks, run_looks
from schema.judgement import REGRESSION
from schema.results import CollectiveRow, bench_entry, result_file
from tests.test_compare import SIZES


def write_paired(path, slowdown, launches, seed, drift_sd=0.2, noise=0.04, stop_after=None):
    """An interleaved A/B run: launch i of both sides shares a drift (the machine's state); side B
    is slowdown(size) times side A. stop_after: size -> last launch measured (a decided cell)."""
    rng = np.random.default_rng(seed)
    benches = []
    for launch in range(launches):
        drift = np.exp(rng.normal(0, drift_sd))
        for size in SIZES:
            for side in "AB":
                factor = slowdown(size) if side == "B" else 1.0
                data = list((5e-6 + size / 2e9) * factor * drift * np.exp(rng.normal(0, noise, 10)))
                if stop_after and launch > stop_after.get(size, launches):
                    continue   # drawn all the same: the other cells' data stay as they were
                row = CollectiveRow(backend="mpi", algo="default", op="all_reduce", redop="sum", nranks=2, bytes=size,
                                    count=max(1, size // 4), launch=launch, side=side)
                benches.append(bench_entry(f"{side}{launch}-{size}", row, data))
    meta = {"groups": {}, "options": {"ab_until_decided": True, "repeat": launches}}
    path.write_text(json.dumps(result_file(benches, meta)))
    return str(path)


def sides(path):
    return load(path, side="A"), load(path, side="B")


def test_the_looks_spend_alpha_and_no_more():
    assert planned_looks(12) == [6, 8, 12] and planned_looks(3) == [3] and planned_looks(20) == [6, 8, 12, 16, 20]
    for budget in (3, 6, 12, 20):
        spent = [look_alpha(n, budget) for n in range(0, budget + 3)]
        assert abs(sum(spent) - ALPHA) < 1e-12 and spent[budget + 1] == 0
        assert [n for n, a in enumerate(spent) if a] == planned_looks(budget)


def test_a_small_message_slowdown_is_decided_on_its_range_before_the_budget(tmp_path):
    slow = lambda size: 1.3 if size <= 1024 else 1.0  # noqa: E731
    seq = run_looks(*sides(write_paired(tmp_path / "ab.json", slow, 12, seed=3)), 12)
    verdicts = {c.size: c.verdict for c in seq.comparison.cells}
    assert all(verdicts[s] == "regression" for s in SIZES if s <= 1024), verdicts
    assert not any(v in ("regression", "improvement") for s, v in verdicts.items() if s > 1024), verdicts
    small_at = [seq.decided_at[c.key] for c in seq.comparison.cells if c.size <= 1024]
    assert max(small_at) < 12                      # decided before the budget was spent
    assert [look.launches for look in seq.looks] == planned_looks(12)[:len(seq.looks)]
    assert "decided" in seq.progress[-1] and seq.record()["launches_used"] == seq.launches_used


def test_a_decided_cell_keeps_its_verdict_whatever_comes_after(tmp_path):
    """What a cell measured after its decision (a fixed --repeat run of the same sweep) does not
    change the replay: the live session and `compare --ab` agree."""
    slow = lambda size: 1.3 if size <= 1024 else 1.0  # noqa: E731
    full = run_looks(*sides(write_paired(tmp_path / "full.json", slow, 12, seed=3)), 12)
    stops = {c.size: n - 1 for c, n in ((c, full.decided_at.get(c.key)) for c in full.comparison.cells) if n}
    cut = run_looks(*sides(write_paired(tmp_path / "cut.json", slow, 12, seed=3, stop_after=stops)), 12)
    assert [(c.size, c.verdict, round(c.ratio, 9)) for c in cut.comparison.cells] == \
           [(c.size, c.verdict, round(c.ratio, 9)) for c in full.comparison.cells]


def test_a_a_false_positive_rate_is_within_alpha(tmp_path):
    """120 A/A runs of 11 sizes under strong launch drift: the share with any confirmed regression
    stays under alpha (the union bound over looks), whenever the looks stopped."""
    flagged = 0
    for seed in range(120):
        seq = run_looks(*sides(write_paired(tmp_path / "aa.json", lambda size: 1.0, 8, seed=seed, drift_sd=0.3)), 8)
        flagged += any(c.outcome.kind == REGRESSION for c in seq.comparison.cells)
    assert flagged / 120 <= ALPHA, flagged
