"""A history that knows its noise, on constructed histories with known truth: what each cell could
have seen, a noisy night the canary marks (left out, with its figures), a step of the machine the
canary shows too (a machine regression, exit 7, not a software regression; a machine improvement,
reported, exit 0), a software change beside a
quiet canary (exit 1), and the canary's own measurement."""
import json
from dataclasses import replace

import numpy as np
import pytest

from harness.session import canary as canary_workload
from reports import summary
from reports.gate import judge_history
from reports.history import MIN_SEGMENT, analyse, change_points, detectable_change
from schema.exit_codes import ExitCode
from schema.judgement import IMPROVEMENT, MACHINE_IMPROVEMENT, MACHINE_REGRESSION, REGRESSION, SUSPECTED_REGRESSION
from tests.conftest import run_cli
from tests.test_history import SLOW_RANGE, nightly, runs_of

SMALL_GATHER = lambda op, size: op == "all_gather" and size <= (1 << 10)  # noqa: E731


def with_canary(folder, factor=lambda night: 1.0, cells=lambda night, op, size: 1.0, seed=0):
    """Give each night of a `nightly` folder a canary (each workload's samples x factor(night), 2%
    noise) and multiply its cells' round times by cells(night, op, size): the machine's state."""
    rng = np.random.default_rng(seed)
    for night, run in enumerate(sorted(folder.glob("*/results.json"))):
        data = json.loads(run.read_text())
        workloads = {"memory": {"bytes": 64 << 20, "unit": "GB/s", "base": 0.01},
                     "loopback": {"round_trips": 50, "bytes": 4096, "unit": "us per round trip", "base": 0.005},
                     "compute": {"steps": 300_000, "unit": "ms per loop", "base": 0.04}}
        data["hccl_bench"]["canary"] = {"version": 1, "workloads": {
            name: {**{k: v for k, v in w.items() if k != "base"},
                   "samples": list(w["base"] * factor(night) * np.exp(rng.normal(0, 0.02, 7)))}
            for name, w in workloads.items()}}
        for bench in data["benchmarks"]:
            info = bench["extra_info"]
            bench["stats"]["data"] = [t * cells(night, info["op"], info["bytes"]) for t in bench["stats"]["data"]]
        run.write_text(json.dumps(data))
    return folder


def test_the_detectable_change_is_what_the_search_finds_four_times_in_five():
    """A step the size of detectable_change, held MIN_SEGMENT nights after 10 quiet ones, is found
    at its night about 80% of the time (normal noise of sd 0.05): the figure is what it says."""
    rng = np.random.default_rng(0)
    quiet = rng.normal(0, 1, 10)
    quiet = (quiet - quiet.mean()) / quiet.std(ddof=1) * 0.05     # a history whose spread is exactly the noise's
    effect = detectable_change(quiet, [])
    assert 0.1 < effect < 0.4, effect
    found = 0
    for _ in range(300):
        y = np.r_[rng.normal(0, 0.05, 10), np.log1p(effect) + rng.normal(0, 0.05, MIN_SEGMENT)]
        found += any(at == 10 for at, _ in change_points(y))
    assert 0.65 <= found / 300 <= 0.95, found
    assert detectable_change(2 * quiet, []) > 1.5 * effect            # twice the spread, a larger change to see


def test_each_cell_says_what_its_history_could_have_seen(tmp_path):
    quiet = analyse(runs_of(nightly(tmp_path / "q", 10, drift=0.01, seed=1)))
    noisy = analyse(runs_of(nightly(tmp_path / "n", 10, drift=0.15, seed=1)))
    q, n = (np.median([c.detectable for c in h.judged.cells]) for h in (quiet, noisy))
    assert 0.05 <= q < n and np.isfinite(n), (q, n)
    text = summary.history_text(noisy)
    assert "could have seen (a new level held 2 nights, 80% power, from this history's own night-to-night spread)" in text
    assert "mpi small 4B-4KiB: could have seen a" in text
    assert "# budget: 10 nights of up to 3 launches, 2 ranks, timed rounds" in text   # no wall in these files


def test_a_noisy_night_is_left_out_with_the_canary_figures(tmp_path):
    """Night 7 of 10 the machine is busy: the canary and every cell 1.6x slower. It is left out of
    every cell with the canary's figures; nothing is flagged. The same night as the newest: no suspicion."""
    busy = lambda night: 1.6 if night == 6 else 1.0  # noqa: E731
    folder = with_canary(nightly(tmp_path / "a", 10, drift=0.02), busy, lambda night, op, size: busy(night))
    hist = analyse(runs_of(folder))
    assert list(hist.left_out) == [6] and "canary memory" in hist.left_out[6], hist.left_out
    assert all(f"canary {name}" in hist.left_out[6] for name in ("memory", "loopback", "compute"))
    assert not hist.regressed and not hist.machine_changed and not hist.judged.by_verdict(IMPROVEMENT)
    text = summary.history_text(hist)
    assert "noisy night left out of every cell: 8.0.RC3 (2026-11-07T02:00):" in text and "GB/s against its usual" in text
    newest = with_canary(nightly(tmp_path / "b", 8, drift=0.02), lambda night: 1.6 if night == 7 else 1.0,
                         lambda night, op, size: 1.6 if night == 7 else 1.0)
    hist = analyse(runs_of(newest))
    assert list(hist.left_out) == [7] and not [c for c in hist.suspected.cells if c.outcome.suspected]
    without = runs_of(newest)   # the same nights, the canary removed: a suspicion
    for run in without:
        run.meta = replace(run.meta, canary=None)
    assert analyse(without).suspected.by_verdict(SUSPECTED_REGRESSION)


def test_a_step_the_canary_shows_too_is_the_machine_exit_7(tmp_path):
    """From night 8 on the machine is slower (canary 1.4x) and so is all_gather up to 1 KiB (1.5x):
    nothing in the stack changed. A machine regression with the canary's step, exit 7, never 1."""
    step = lambda night: 1.4 if night >= 7 else 1.0  # noqa: E731
    folder = with_canary(nightly(tmp_path, 10, drift=0.02), step,
                         lambda night, op, size: 1.5 if night >= 7 and SMALL_GATHER(op, size) else 1.0)
    judgement = judge_history(runs_of(folder))
    hist = judgement.history
    assert not hist.regressed and hist.machine_changed
    machine = hist.judged.by_verdict(MACHINE_REGRESSION)
    assert {(c.series.op, c.size) for c in machine} == {("all_gather", s) for s in (4, 16, 64, 256, 1024)}
    assert all(c.note.startswith("canary ") and "+40% time" in c.note for c in machine), [c.note for c in machine]
    assert judgement.headline.startswith("MACHINE CHANGED: 1 size ranges moved with the canary (canary ")
    assert judgement.exit_status() == ExitCode.MACHINE_CHANGED == 7 and judgement.as_json["machine_changed"] is True
    assert "MACHINE CHANGES (the canary moved with them" in judgement.text
    out = run_cli("history", folder, "--report", tmp_path / "page")
    assert out.returncode == 7, out.stdout + out.stderr
    page = (tmp_path / "page" / "history.html").read_text()
    assert "machine changed" in page and "The canary" in page and "What each cell could have seen" in page


def test_a_machine_improvement_is_reported_and_never_fails_the_job(tmp_path):
    """The mirror of the step above: from night 8 on the machine is faster (canary 0.7x) and so is
    all_gather up to 1 KiB (0.67x). A machine improvement, judged by the same rules, said in the
    headline, the text and the JSON, and the job passes: exit 0 from the gate and the CLI."""
    step = lambda night: 0.7 if night >= 7 else 1.0  # noqa: E731
    folder = with_canary(nightly(tmp_path, 10, drift=0.02), step,
                         lambda night, op, size: 0.67 if night >= 7 and SMALL_GATHER(op, size) else 1.0)
    judgement = judge_history(runs_of(folder))
    hist = judgement.history
    assert not hist.regressed and hist.machine_changed and not hist.machine_regressed
    machine = hist.judged.by_verdict(MACHINE_IMPROVEMENT)
    assert {(c.series.op, c.size) for c in machine} == {("all_gather", s) for s in (4, 16, 64, 256, 1024)}
    assert not hist.judged.by_verdict(MACHINE_REGRESSION)
    assert judgement.headline.startswith("machine improvement (does not fail the job): 1 size ranges moved with "
                                         "the canary (canary "), judgement.headline
    assert judgement.exit_status() == 0 and judgement.exit_status("fail") == 0
    assert judgement.as_json["machine_changed"] is True and judgement.as_json["machine_regressed"] is False
    assert "machine improvements (the canary moved with them" in judgement.text
    out = run_cli("history", folder)
    assert out.returncode == 0, out.stdout + out.stderr


def test_a_software_change_beside_a_quiet_canary_is_a_regression_exit_1(tmp_path):
    folder = with_canary(nightly(tmp_path, 12, slow_from=9, drift=0.02))
    judgement = judge_history(runs_of(folder))
    assert judgement.regressed and not judgement.machine_changed and judgement.exit_status() == 1
    assert {(c.series.op, c.size) for c in judgement.history.judged.by_verdict(REGRESSION)} == {
        ("all_reduce", s) for s in (256 << 10, 1 << 20, 4 << 20)} and all(SLOW_RANGE("all_reduce", s) for s in (256 << 10,))
    assert run_cli("history", folder).returncode == 1


def test_a_history_without_a_canary_says_so(tmp_path):
    hist = analyse(runs_of(nightly(tmp_path, 6)))
    assert "canary: none recorded in these runs" in summary.history_text(hist) and not hist.left_out


def test_the_canary_measures_three_workloads():
    measured = canary_workload.measure()
    assert set(measured["workloads"]) == {"memory", "loopback", "compute"}
    for w in measured["workloads"].values():
        assert len(w["samples"]) == canary_workload.SAMPLES and all(s > 0 for s in w["samples"]), w


def test_spanning_joins_the_samples_before_and_after_the_sweep():
    before = {"version": 1, "workloads": {"memory": {"samples": [1.0, 1.0], "bytes": 8}, "loopback": {"error": "OSError: x"},
                                          "compute": {"samples": [2.0]}}}
    after = {"version": 1, "workloads": {"memory": {"samples": [3.0], "bytes": 8}, "loopback": {"samples": [0.5]},
                                         "compute": {"error": "OSError: y"}}}
    joined = canary_workload.spanning(before, after)["workloads"]
    assert joined["memory"] == {"samples": [1.0, 1.0, 3.0], "bytes": 8, "after_sweep": 1}
    assert joined["loopback"] == {"samples": [0.5], "after_sweep": 1} and joined["compute"] == {"samples": [2.0]}


@pytest.mark.slow
def test_a_timed_sweep_records_the_canary_before_and_after_it(bench_run):
    proc = bench_run("--benchmark", "--backend", "mpi", "--ops", "all_reduce", "--sizes", "1K", "--rounds", "3",
                     "-k", "float32", target="benches/test_collectives.py")
    assert proc.returncode == 0, proc.output[-2000:]
    (run,) = bench_run.results.glob("*/results.json")
    workloads = json.loads(run.read_text())["hccl_bench"]["canary"]["workloads"]
    for w in workloads.values():
        assert len(w["samples"]) == 2 * canary_workload.SAMPLES and w["after_sweep"] == canary_workload.SAMPLES, w
    assert bench_run.leftovers() == []


def test_nights_of_an_older_canary_version_are_not_levels_of_the_newest(tmp_path):
    """A canary that changed what a night's figure is (version 1 -> 2) starts afresh: the older
    nights are not read as the machine's level, so a jump between versions is no machine step."""
    from reports.canary import judge
    runs = runs_of(with_canary(nightly(tmp_path, 10, drift=0.02), lambda night: 1.4 if night >= 6 else 1.0))
    for run in runs[:6]:
        run.meta = replace(run.meta, canary=replace(run.meta.canary, version=0))
    view = judge(runs, 0.05)
    assert view.steps == [] and view.nights == 4
    for run in runs[:6]:
        run.meta = replace(run.meta, canary=replace(run.meta.canary, version=1))
    assert {s.at for s in judge(runs, 0.05).steps} == {6}   # one step per workload
