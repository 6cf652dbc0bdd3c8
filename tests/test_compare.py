"""Comparison statistics on result files with known truth: A/A, an injected slowdown over a size
range, an isolated blip, launch- vs round-level samples, mismatched setups, calibration."""
import json

import numpy as np
import pytest

from reports import summary
from reports.calibration import calibrate
from reports.compare import compare
from reports.result_files import load
from schema.judgement import IMPROVEMENT, INCONCLUSIVE, REGRESSION, SUSPECTED_REGRESSION
from schema.results import CollectiveRow, bench_entry, result_file

SIZES = [4 << (2 * i) for i in range(11)]          # 4 B .. 4 MiB, like --sizes 4:4M:4


def write_run(path, seed, slowdown=lambda op, size: 1.0, launches=1, rounds=20, nranks=2, noise=0.03, drift=None,
              run_shift=0.0, when="", provenance=None, options=None):
    """A result file shaped like a real run: per-round per-op times with lognormal noise."""
    rng = np.random.default_rng(seed)
    benches = []
    for op in ("all_reduce", "all_gather", "broadcast"):
        for size in SIZES:
            base = 5e-6 + size / 2e9
            for launch in range(launches):
                shift = rng.normal(0, noise / 3 if drift is None else drift)   # launch-to-launch drift
                data = list(base * slowdown(op, size) * np.exp(run_shift + shift + rng.normal(0, noise, rounds)))
                row = CollectiveRow(backend="mpi", algo="default", op=op, redop="sum", nranks=nranks, bytes=size,
                                    count=size // 4, launch=launch, time_us=float(np.median(data)) * 1e6)
                benches.append(bench_entry(f"{op}-{size}-L{launch}", row, data))
    meta = {"groups": {"g": {"hosts": {"h": nranks}, "devices": ["cpu"]}}, "provenance": provenance or {},
            **({"options": options} if options else {})}
    path.write_text(json.dumps(result_file(benches, meta, when)))
    return str(path)


def write_ab(path, slow=1.0, launches=6, drift_sd=0.0, seed=7):
    """One interleaved --ab-env run: side B is `slow` times side A; a drift shared by launch i of both sides."""
    rng = np.random.default_rng(seed)
    drift = np.exp(rng.normal(0, drift_sd, launches))
    benches = []
    for side, factor in (("A", 1.0), ("B", slow)):
        for launch in range(launches):
            for size in SIZES:
                data = list((5e-6 + size / 2e9) * factor * drift[launch] * np.exp(rng.normal(0, 0.01, 20)))
                row = CollectiveRow(backend="mpi", algo="default", op="all_reduce", redop="sum", nranks=2, bytes=size,
                                    count=size // 4, launch=launch, side=side, time_us=float(np.median(data)) * 1e6,
                                    group_env={"HCCL_BUFFSIZE": "400"} if side == "B" else {})
                benches.append(bench_entry(f"{side}{launch}{size}", row, data))
    path.write_text(json.dumps(result_file(benches, {"groups": {}})))
    return str(path)


def test_a_a_flags_nothing(tmp_path):
    cmp = compare(load(write_run(tmp_path / "a.json", 1)), load(write_run(tmp_path / "b.json", 2)))
    assert len(cmp.cells) == 33 and not cmp.regressed and cmp.by_verdict(IMPROVEMENT) == []


def test_slowdown_is_flagged_exactly_on_its_size_range(tmp_path):
    slow = lambda op, size: 1.25 if op == "all_reduce" and (64 << 10) <= size <= (1 << 20) else 1.0  # noqa: E731
    cmp = compare(load(write_run(tmp_path / "a.json", 1, launches=3)), load(write_run(tmp_path / "c.json", 2, slow, launches=3)))
    ranges = cmp.ranges[REGRESSION]
    assert [(r.series.op, r.first, r.last) for r in ranges] == [("all_reduce", 64 << 10, 1 << 20)]
    assert ranges[0].low < 1.25 < ranges[0].high * 1.05
    line = summary.range_lines(cmp, REGRESSION)[0]
    assert line.startswith("all_reduce float32 sum 2 ranks mpi/default 64KiB-1MiB: busbw -") and 1.15 < ranges[0].ratio < 1.35


def test_an_isolated_blip_stays_inconclusive(tmp_path):
    blip = lambda op, size: 1.3 if op == "broadcast" and size == (16 << 10) else 1.0  # noqa: E731
    cmp = compare(load(write_run(tmp_path / "a.json", 1)), load(write_run(tmp_path / "c.json", 2, blip)))
    assert not cmp.regressed
    cell = next(c for c in cmp.cells if c.series.op == "broadcast" and c.size == 16 << 10)
    assert cell.outcome.kind == INCONCLUSIVE and cell.note.startswith("isolated regression") and cell.isolated
    assert "# 1 isolated cells left inconclusive (no neighbouring size agreed)" in summary.text(cmp).splitlines()


def test_launches_are_the_sample_when_both_sides_have_several(tmp_path):
    a = load(write_run(tmp_path / "a.json", 1, launches=3))
    b = load(write_run(tmp_path / "b.json", 2, launches=3))
    assert {c.samples for c in compare(a, b).cells} == {"launches"}
    one = load(write_run(tmp_path / "c.json", 3))
    assert {c.samples for c in compare(a, one).cells} == {"rounds"}
    assert "not independent samples" in summary.text(compare(a, one))


def test_one_launch_a_side_can_only_suspect(tmp_path):
    """A real 25% slowdown seen in the rounds of one launch a side: named as suspected, with the
    sweep that would settle it, and never a failing verdict."""
    slow = lambda op, size: 1.25 if op == "all_reduce" and (64 << 10) <= size <= (1 << 20) else 1.0  # noqa: E731
    cmp = compare(load(write_run(tmp_path / "a.json", 1)), load(write_run(tmp_path / "c.json", 2, slow)))
    assert not cmp.regressed and cmp.by_verdict(REGRESSION) == []
    assert [(r.first, r.last) for r in cmp.ranges[SUSPECTED_REGRESSION]] == [(64 << 10, 1 << 20)]
    out = summary.text(cmp)
    assert "suspected regressions" in out and "REGRESSIONS" not in out
    assert "--repeat 3 --backend mpi --ops all_reduce --dtypes float32 --sizes 64KiB,256KiB,1MiB" in summary.settle_command(cmp)
    assert max(len(line) for line in out.splitlines()) <= 120
    assert summary.markdown(cmp).startswith("### hccl-bench: inconclusive")   # 2 cells: not read as a pass


def test_mismatched_setups_are_named(tmp_path):
    cmp = compare(load(write_run(tmp_path / "a.json", 1)), load(write_run(tmp_path / "b.json", 2, nranks=4)))
    assert cmp.cells == [] and any(m.startswith("nranks: baseline [2] vs candidate [4]") for m in cmp.mismatch)


def test_calibration_raises_the_minimum_effect(tmp_path):
    """One launch a side: round-level CIs ignore a 10% launch-to-launch drift, the A/A shows their
    misses, and the minimum effect rises until none of those A/A cells would have been flagged."""
    noisy_a = load(write_run(tmp_path / "a.json", 1, noise=0.01, drift=0.1))
    noisy_b = load(write_run(tmp_path / "b.json", 2, noise=0.01, drift=0.1))
    cal = calibrate(noisy_a, noisy_b)
    assert set(cal.bands) == {"mpi small (<= 8 KiB)", "mpi medium (<= 1 MiB)", "mpi large (> 1 MiB)"}
    assert all(b.ci_missed > 0.5 and b.min_effect > 0.07 for b in cal.bands.values())
    assert not compare(noisy_a, noisy_b, calibration=cal).regressed
    # a 7% slowdown: real for a quiet machine (default 5% minimum), below what this noisy one can resolve
    slow = lambda op, size: 1.07 if op == "all_reduce" else 1.0  # noqa: E731
    base, cand = load(write_run(tmp_path / "q1.json", 4)), load(write_run(tmp_path / "q2.json", 5, slow))
    assert compare(base, cand).by_verdict(SUSPECTED_REGRESSION)
    calibrated = compare(base, cand, calibration=cal)
    assert not calibrated.by_verdict(SUSPECTED_REGRESSION)
    assert {round(c.min_effect, 6) for c in calibrated.cells} == {round(b.min_effect, 6) for b in cal.bands.values()}
    # honest intervals (pairs sharing the drift) miss about 5% of the time and raise little
    aa = calibrate(load(write_ab(tmp_path / "aa.json", drift_sd=0.3), side="A"),
                           load(tmp_path / "aa.json", side="B"))
    assert aa.samples == "paired launches" and all(b.min_effect < 0.05 for b in aa.bands.values())


@pytest.mark.parametrize("count", [0, 1])
def test_markdown_fits_a_ci_comment(tmp_path, count):
    slow = lambda op, size: 1.5  # noqa: E731
    same = lambda op, size: 1.0  # noqa: E731
    cmp = compare(load(write_run(tmp_path / "a.json", 1, launches=3)),
                  load(write_run(tmp_path / "c.json", 2, slow if count else same, launches=3)))
    md = summary.markdown(cmp)
    assert len(md) <= summary.MARKDOWN_LIMIT and md.startswith("### hccl-bench")
    assert ("**Regressions**" in md) == bool(count)


def test_interleaved_pairs_cancel_drift_the_unpaired_test_cannot(tmp_path):
    """Launch i of A and B ran back to back: a drift shared by the pair cancels in their ratio."""
    path = write_ab(tmp_path / "ab.json", slow=1.15, drift_sd=0.3)  # machine 30% noisier between launches than within
    paired = compare(load(path, side="A"), load(path, side="B"))
    assert {c.samples for c in paired.cells} == {"paired launches"}
    ranges = paired.ranges[REGRESSION]
    assert [(r.first, r.last) for r in ranges] == [(SIZES[0], SIZES[-1])]
    assert ranges[0].low < 1.15 < ranges[0].high
    b_alone = load(path, side="B")
    b_alone.side = ""                                  # the same numbers, pairing forgotten
    unpaired = compare(load(path, side="A"), b_alone)
    assert {c.samples for c in unpaired.cells} == {"launches"} and not unpaired.regressed


def test_calibration_applies_only_to_cells_sampled_its_way(tmp_path):
    """Separate-run A/A drift is what interleaved pairs cancel: it must not mute a paired A/B."""
    # the second A/A run found the machine 20% slower throughout: launch CIs of separate runs miss it
    noisy = [load(write_run(tmp_path / f"n{i}.json", i, launches=3, run_shift=0.2 * (i - 1))) for i in (1, 2)]
    cal = calibrate(*noisy)
    assert cal.samples == "launches" and all(b.min_effect > 0.15 for b in cal.bands.values())
    a, b = (load(write_run(tmp_path / f"q{i}.json", i, launches=3)) for i in (3, 4))
    assert compare(a, b, calibration=cal).calibration.startswith("A/A calibration (launches) applied to 33 of 33")
    path = write_ab(tmp_path / "ab.json", slow=1.15, launches=4)
    paired = compare(load(path, side="A"), load(path, side="B"), calibration=cal)
    assert paired.regressed and {c.min_effect for c in paired.cells} == {0.05}
    assert "applied to 0 of 11 cells" in summary.text(paired)
