"""The nightly guard on histories with known truth: runs drifting like this VM's separate runs,
a slowdown from some night on over a size range, one bad newest night, an old change, a revert."""
import base64
import io
import json
import re

import matplotlib.image
import numpy as np
import pytest

from reports import summary
from reports.history import analyse, change_points
from reports.result_files import load
from schema.judgement import IMPROVEMENT, REGRESSION, STANDING_REGRESSION, SUSPECTED_REGRESSION, Cause, Direction, Verdict
from tests.conftest import run_cli
from tests.test_compare import write_run

SLOW_RANGE = lambda op, size: op == "all_reduce" and (256 << 10) <= size <= (4 << 20)  # noqa: E731


def nightly(tmp_path, nights, slow_from=None, factor=1.3, drift=0.08, seed=0, cann=lambda night: "8.0.RC3",
            options=lambda night: None, slow_range=SLOW_RANGE):
    """`nights` result dirs like a --results folder: each night 3 launches whose level drifts by
    `drift` (log sd) night to night; from night `slow_from` on, `slow_range` (all_reduce 256 KiB-4 MiB) is slower:
    True, by `factor`, or a number, its own factor."""
    rng = np.random.default_rng(seed)
    for night in range(nights):
        worse = slow_from is not None and night >= slow_from
        slow = lambda op, size, worse=worse: (  # noqa: E731
            (factor if slow_range(op, size) is True else slow_range(op, size) or 1.0) if worse else 1.0)
        run_dir = tmp_path / "nightly" / f"202611{night + 1:02d}-020000"
        run_dir.mkdir(parents=True)
        write_run(run_dir / "results.json", seed * 100 + night, slow, launches=3, run_shift=rng.normal(0, drift),
                  when=f"2026-11-{night + 1:02d}T02:00:00", provenance={"cann": {"cann": cann(night)}},
                  options=options(night))
    return tmp_path / "nightly"


def runs_of(folder):
    return [load(p) for p in sorted(folder.glob("*/results.json"))]


def test_change_points_find_a_step_and_ignore_noise():
    rng = np.random.default_rng(3)
    step = np.r_[rng.normal(0, 0.05, 8), rng.normal(0.3, 0.05, 5)]
    assert [at for at, _ in change_points(step)] == [8]
    false_alarms = sum(bool(change_points(rng.normal(0, 0.1, 14))) for _ in range(400))
    assert false_alarms <= 0.05 * 400 * 1.5   # Bonferroni over the splits keeps a series near or under alpha


def test_drifting_history_flags_nothing(tmp_path):
    for seed in range(3):
        hist = analyse(runs_of(nightly(tmp_path / str(seed), 12, seed=seed)))
        assert not hist.regressed and hist.judged.by_verdict(IMPROVEMENT) == [], summary.history_text(hist)
        assert len(hist.judged.cells) == 33


def test_slowdown_is_flagged_from_its_night_over_its_size_range(tmp_path):
    folder = nightly(tmp_path, 12, slow_from=9, cann=lambda night: "8.1.RC1" if night >= 9 else "8.0.RC3")
    hist = analyse(runs_of(folder))
    assert hist.regressed
    bad = hist.judged.by_verdict(REGRESSION)
    assert {(c.series.op, c.size) for c in bad} == {("all_reduce", s) for s in (256 << 10, 1 << 20, 4 << 20)}
    assert all(hist.step(c.key).at == 9 for c in bad)
    text = summary.history_text(hist)
    line = next(x for x in text.splitlines() if "256KiB-4MiB: busbw" in x)
    assert line.startswith("  all_reduce float32 sum 2 ranks mpi/default") and line.endswith("since 8.1.RC1 (2026-11-10T02:00)")
    busbw, low, high = (float(v) for v in re.findall(r"([-+][\d.]+)%", line))
    assert low < 1 / 1.3 * 100 - 100 < high and high < 0      # the CI holds the true -23.1%
    assert "what changed from 8.0.RC3 to 8.1.RC1: cann.cann: 8.0.RC3 -> 8.1.RC1" in text
    proc = run_cli("history", folder, "--markdown", tmp_path / "c.md")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert (tmp_path / "c.md").read_text().startswith("### hccl-bench nightly: regression")


def test_one_bad_newest_night_is_suspected_not_failed(tmp_path):
    hist = analyse(runs_of(nightly(tmp_path, 10, slow_from=9, factor=1.6, drift=0.03)))
    assert not hist.regressed
    suspects = hist.suspected.by_verdict(SUSPECTED_REGRESSION)
    assert {c.size for c in suspects} >= {1 << 20, 4 << 20} and {c.series.op for c in suspects} == {"all_reduce"}
    assert "suspected regressions in the newest run alone" in summary.history_text(hist)


def test_an_old_change_stands_and_a_revert_is_not_a_regression(tmp_path):
    old = analyse(runs_of(nightly(tmp_path / "old", 14, slow_from=4, drift=0.05)), window=7)
    assert not old.regressed and {c.size for c in old.judged.by_verdict(STANDING_REGRESSION)} >= {1 << 20, 4 << 20}
    # slower on nights 4-8, then back: the newest change is an improvement back to the old level
    folder = nightly(tmp_path / "revert", 13, slow_from=4, drift=0.05)
    for night in range(9, 13):
        path = folder / f"202611{night + 1:02d}-020000" / "results.json"
        write_run(path, night, launches=3, when=f"2026-11-{night + 1:02d}T02:00:00")
    hist = analyse(runs_of(folder))
    assert not hist.regressed and {c.size for c in hist.judged.by_verdict(IMPROVEMENT)} >= {1 << 20, 4 << 20}


def test_history_cli_bad_and_short_input(tmp_path):
    def cli(*args):
        return run_cli("history", *args)
    folder = nightly(tmp_path, 3)
    proc = cli(str(folder))
    assert proc.returncode == 0 and "nothing to judge yet" in proc.stdout
    proc = cli(str(tmp_path / "nowhere"))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "no results.json" in proc.stderr
    (folder / "20261130-020000").mkdir()
    write_run(folder / "20261130-020000" / "results.json", 9, nranks=4, launches=3, when="2026-11-30T02:00:00")
    write_run(tmp_path / "x.json", 9, launches=3, when="2026-11-29T02:00:00")
    proc = cli(str(folder), str(tmp_path / "x.json"))   # the newest has 4 ranks: the 2-rank nights are another platform
    assert proc.returncode == 0 and "# left out 4 runs of another setup than the newest's" in proc.stdout, proc.stdout
    assert "'nranks': [2]" in proc.stdout and "nothing to judge yet" in proc.stdout, proc.stdout
    forced = cli(str(folder), str(tmp_path / "x.json"), "--force")
    assert forced.returncode in (0, 1, 6, 7) and "left out" not in forced.stdout, forced.stdout + forced.stderr
    assert cli(str(folder), str(tmp_path / "x.json"), "--window", "0").returncode == 2


def test_history_page_draws_each_flagged_range_and_escapes_text(tmp_path):
    folder = nightly(tmp_path, 12, slow_from=9, cann=lambda night: "<b>8.1</b>" if night >= 9 else "8.0.RC3")
    proc = run_cli("history", folder, "--report", tmp_path / "page")
    assert proc.returncode == 1 and "(1 figures)" in proc.stdout, proc.stdout + proc.stderr
    html = (tmp_path / "page" / "history.html").read_text()
    assert "<b>8.1</b>" not in html and "&lt;b&gt;8.1&lt;/b&gt;" in html
    assert not re.search(r'(src|href)="(https?:)?//', html)
    png = re.findall(r'src="data:image/png;base64,([^"]+)"', html)
    assert len(png) == 1 and matplotlib.image.imread(io.BytesIO(base64.b64decode(png[0])), format="png").shape[0] > 100


def test_a_night_that_lost_a_backend_stays_in_the_history(tmp_path):
    folder = nightly(tmp_path, 6)
    data = json.loads((folder / "20261103-020000" / "results.json").read_text())
    for b in data["benchmarks"]:
        b["extra_info"]["backend"] = "gloo"      # that night only gloo ran; its mpi cells are missing
    (folder / "20261103-020000" / "results.json").write_text(json.dumps(data))
    hist = analyse(runs_of(folder))
    assert not hist.judged.mismatch and len(hist.judged.cells) == 33 and hist.too_short == 0


def test_a_same_day_ab_confirms_or_clears_the_newest_suspicion(tmp_path):
    from tests.test_compare import write_ab
    folder = nightly(tmp_path, 10, slow_from=9, factor=1.6, drift=0.03)

    def cli(ab):
        return run_cli("history", folder, "--ab", ab)
    # side A (the baseline) is the previous stack; the newest, side B, is 1.6x slower
    proc = cli(write_ab(tmp_path / "ab.json", slow=1.6))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    counts = re.search(r"confirmed (\d+) of the \d+ cells it measured \((\d+) suspected\)", proc.stdout)
    confirmed, suspected = map(int, counts.groups())
    assert confirmed == 11 and suspected >= 2   # every cell the A/B flags (it slowed them all), suspected or not
    line = next(x for x in proc.stdout.splitlines() if x.startswith("  all_reduce") and "MiB" in x)
    assert line.endswith("since 8.0.RC3 (2026-11-10T02:00)") and "busbw -3" in line, proc.stdout
    proc = cli(write_ab(tmp_path / "aa.json", slow=1.0))     # the A/B sees no difference: nothing fails
    assert proc.returncode == 0 and "confirmed 0 of" in proc.stdout, proc.stdout + proc.stderr


def test_a_regression_the_same_night_ab_runs_alike_on_both_stacks_is_the_machines(tmp_path):
    """Three slower nights read as a new level are a confirmed regression; a same-night A/B in which
    the previous stack and this one run alike says it is not the software stack (exit 7, with the
    A/B's figures); an A/B that reproduces it keeps it a software regression (exit 1)."""
    from tests.test_compare import write_ab
    folder = nightly(tmp_path, 10, slow_from=7, factor=1.6, drift=0.03)

    def cli(*extra):
        return run_cli("history", folder, *extra)
    alone = cli()
    assert alone.returncode == 1 and "REGRESSIONS:" in alone.stdout, alone.stdout + alone.stderr
    alike = cli("--ab", write_ab(tmp_path / "aa.json", slow=1.0))
    out = alike.stdout
    assert alike.returncode == 7, out + alike.stderr
    unexplained, regressed = map(int, re.search(r"(\d+) of (\d+) regressed cells the stacks ran alike", out).groups())
    assert regressed >= 2 and unexplained == regressed, out
    assert "MACHINE CHANGED: 1 size ranges ran alike on both stacks (the same-night A/B found no change between them)" in out
    assert "REGRESSIONS:" not in out and "not the software stack" in out
    kept = cli("--ab", write_ab(tmp_path / "ab.json", slow=1.6))
    assert kept.returncode == 1 and "0 of" in kept.stdout and "REGRESSIONS:" in kept.stdout, kept.stdout
    # the A/B of an upgrade night (the newest records a new CANN) that runs both stacks alike: the step that
    # began on the nights before it, with nothing recorded changed, is not the upgrade's either
    upgraded = nightly(tmp_path / "upgraded", 10, slow_from=7, factor=1.6, drift=0.03,
                       cann=lambda n: "8.1.RC1" if n == 9 else "8.0.RC3")
    proc = run_cli("history", upgraded, "--ab", write_ab(tmp_path / "aa-upgrade.json", slow=1.0))
    assert proc.returncode == 7 and "REGRESSIONS:" not in proc.stdout, proc.stdout


def test_the_same_night_screen_takes_each_cell_on_its_own_p():
    """A +35% newest night whose q across the sweep is 0.052 is not listed as suspected, but the
    same-night A/B measures it (its fresh launches decide); a move inside the minimum effect, or
    one its own night-to-night spread explains, is not measured."""
    from reports.compare import CellResult, Comparison
    from reports.history import History
    from schema.results import Series
    series = Series("collective", "mpi", "default", "all_reduce", "float32", "sum", False, 2)

    undecided, suspected = (Verdict(d, cause=Cause.HISTORY, newest=True) for d in (Direction.INCONCLUSIVE, Direction.REGRESSION))

    def cell(size, ratio, low, high, p, q, verdict=undecided):
        c = CellResult((series, size), series, size, ratio, low, high, p, samples="newest run", min_effect=0.05, outcome=verdict)
        c.q = q
        return c
    cells = [cell(4, 1.35, 1.2, 1.52, 0.002, 0.052), cell(16, 1.03, 1.01, 1.05, 0.01, 0.1),
             cell(64, 1.3, 0.9, 1.8, 0.2, 0.5), cell(256, 1.4, 1.3, 1.5, 0.001, 0.01, suspected)]
    hist = History([], Comparison("", "", []), Comparison("", "", cells))
    assert [c.size for c in hist.screened()] == [4, 256]


def test_a_change_the_noisy_history_cannot_pick_is_confirmed_by_the_same_night_ab(tmp_path):
    """The night of an upgrade measures every cell (--previous-stack another stack): a 1.25x all_reduce
    that the nights' spread hides (nothing suspected) is a regression since the newest night once
    the interleaved A/B flags it; an A/A of the same cells confirms nothing."""
    from tests.test_compare import write_ab
    folder = nightly(tmp_path, 11, slow_from=10, factor=1.25, drift=0.35)
    alone = run_cli("history", folder)
    assert alone.returncode == 0 and "REGRESSIONS:" not in alone.stdout, alone.stdout
    proc = run_cli("history", folder, "--ab", write_ab(tmp_path / "ab.json", slow=1.25))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    confirmed, measured, suspected = map(int, re.search(
        r"confirmed (\d+) of the (\d+) cells it measured \((\d+) suspected\)", proc.stdout).groups())
    assert measured == 11 and confirmed == 11 and suspected < confirmed, proc.stdout
    regressions = proc.stdout.split("REGRESSIONS:")[1].split("\n#")[0]
    busbw = re.search(r"all_reduce float32 sum 2 ranks mpi/default 4B-4MiB: busbw (-[\d.]+)%", regressions)
    assert busbw and -21 < float(busbw.group(1)) < -19, proc.stdout   # 1/1.25: -20%
    assert regressions.rstrip().endswith("(2026-11-11T02:00)"), proc.stdout   # began with the newest night
    same = run_cli("history", folder, "--ab", write_ab(tmp_path / "aa.json", slow=1.0))
    assert same.returncode == 0 and "confirmed 0 of the 11 cells" in same.stdout, same.stdout


def test_an_upgrade_nights_ab_stands_the_nights_after_and_an_aa_of_the_new_stack_does_not_clear_it(tmp_path):
    """Night 11 upgrades (8.0.RC3 -> 8.1.RC1, all_reduce 1.25x slower) and its same-night A/B
    against 8.0.RC3 confirms it; on night 12 the previous stack is night 11's, so that night's A/A
    finds the stacks alike, which says nothing about the upgrade: the regression since night 11
    stands (exit 1), while the history alone, whose nights' spread hides it, passes."""
    from tests.test_compare import write_ab
    folder = nightly(tmp_path, 12, slow_from=10, factor=1.25, drift=0.35,
                     cann=lambda night: "8.1.RC1" if night >= 10 else "8.0.RC3")
    assert run_cli("history", folder).returncode == 0
    (folder / "20261111-030000").mkdir()
    # a recorded same-night run has this stack as side A, the previous one as side B (harness/session/same_night.py)
    write_ab(folder / "20261111-030000" / "results.json", slow=1 / 1.25)
    (folder / "20261111-020000" / "same_night_ab.json").write_text(json.dumps({"run": "20261111-030000"}))
    proc = run_cli("history", folder, "--ab", write_ab(tmp_path / "aa.json", slow=1.0))
    out = proc.stdout
    assert proc.returncode == 1, out + proc.stderr
    assert re.search(r"# same-night A/B of 8\.1\.RC1 \(2026-11-11T02:00\): confirmed 11 of the 11 cells it measured", out), out
    assert "0 of 11 regressed cells the stacks ran alike" in out, out   # the A/A of 8.1 says nothing of 8.0
    regressions = out.split("REGRESSIONS:")[1].split("\n#")[0]
    busbw = re.search(r"all_reduce float32 sum 2 ranks mpi/default 4B-4MiB: busbw (-[\d.]+)%", regressions)
    assert busbw and -21 < float(busbw.group(1)) < -19, out   # 1/1.25: -20%
    assert regressions.rstrip().endswith("since 8.1.RC1 (2026-11-11T02:00)"), out


def test_a_step_on_nights_that_all_kept_their_stack_is_the_machines(tmp_path):
    """Each night ran with a --previous-stack that changed nothing (options.previous_differs false):
    a step over those nights, nothing recorded changed, is a machine regression (exit 7). A night in
    the chain that ran another stack, or a version change recorded beside the declarations (an
    in-place upgrade), keeps it a software regression (exit 1)."""
    kept = {"previous_stack": "/opt/cann-prev/set_env.sh", "previous_differs": False}
    machine = run_cli("history", nightly(tmp_path / "kept", 10, slow_from=7, factor=1.6, drift=0.03, options=lambda n: kept))
    assert machine.returncode == 7 and "REGRESSIONS:" not in machine.stdout, machine.stdout
    # checked from 2 judged nights before the step (night 8) on: a change point may land a night or two late
    assert "the stack stayed that of 8.0.RC3 (2026-11-06T02:00): every night since ran the stack of the night before" \
        in machine.stdout, machine.stdout
    switched = nightly(tmp_path / "switched", 10, slow_from=7, factor=1.6, drift=0.03,
                       options=lambda n: {**kept, "previous_differs": n == 9})
    assert run_cli("history", switched).returncode == 1
    # the upgrade a night before the step (a change point on noisy nights may land a night late): not the machine
    late = nightly(tmp_path / "late", 10, slow_from=7, factor=1.6, drift=0.03,
                   options=lambda n: {**kept, "previous_differs": n == 6})
    assert run_cli("history", late).returncode == 1
    # an upgrade three nights after the step began (past the 2 nights a change point may land early) came
    # after it: the step stays the machine's, and the upgrade's night is judged on its own
    after = run_cli("history", nightly(tmp_path / "after", 11, slow_from=7, factor=1.6, drift=0.03,
                                       options=lambda n: {**kept, "previous_differs": n == 10}))
    assert after.returncode == 7 and "REGRESSIONS:" not in after.stdout, after.stdout
    assert "the stack stayed that of 8.0.RC3 (2026-11-06T02:00): every night to " in after.stdout, after.stdout
    in_place = nightly(tmp_path / "in-place", 10, slow_from=7, factor=1.6, drift=0.03, options=lambda n: kept,
                       cann=lambda n: "8.1.RC1" if n >= 7 else "8.0.RC3")
    proc = run_cli("history", in_place)
    assert proc.returncode == 1 and "cann.cann: 8.0.RC3 -> 8.1.RC1" in proc.stdout, proc.stdout


@pytest.mark.parametrize("why, slow_from, factor, slow_range", [
    ("held 2 nights, an alert needs 3 with the newest", 8, 1.6, SLOW_RANGE),
    ("an alert needs 10%", 7, 1.07, SLOW_RANGE),
    # its neighbour leans its way (as far as the software rule asks) without a step of its own
    ("no neighbouring size made the same step", 7, 1.6, lambda op, size: op == "all_reduce" and {64: True, 256: 1.04}.get(size)),
])
def test_a_machine_step_alerts_only_past_the_machine_alert_rule(tmp_path, why, slow_from, factor, slow_range):
    """Nights that kept their stack, a step the software rules confirm: an alert (exit 7) needs it
    held 3 nights, 10% or more, and a neighbouring size alike; short of one of these it is
    inconclusive, listed with the part it failed, and the job passes. Each case here is the same
    history as a step that does alert (test above) but for that one part."""
    kept = {"previous_stack": "/opt/cann-prev/set_env.sh", "previous_differs": False}
    folder = nightly(tmp_path, 10, slow_from=slow_from, factor=factor, drift=0.01, options=lambda n: kept,
                     slow_range=slow_range)
    proc = run_cli("history", folder)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    section = proc.stdout.split("machine steps below the machine-alert rule", 1)
    assert len(section) == 2 and why in section[1] and "MACHINE" not in proc.stdout, proc.stdout
    assert "REGRESSIONS:" not in proc.stdout, proc.stdout


@pytest.mark.slow   # four real sweeps of two MPI ranks (a history judges from 4 runs)
def test_a_switch_exported_in_the_environment_is_measured_and_its_night_shows_in_the_history(bench_run):
    """The night a job script exports MPICH's all_reduce switch: the sweep runs (exit 0), its series
    is 'recexch (environment)' with the variable recorded, and the history says which series began and
    ended and that the variable is what changed."""
    var = {"MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM": "recexch"}
    for env in ({}, {}, var, var):
        proc = bench_run("--backend", "mpi", "--nproc", "2", "--ops", "all_reduce,broadcast", "--sizes", "1K",
                         target="benches/test_collectives.py", env=env)
        assert proc.returncode == 0, proc.output[-2000:]
    assert "mpi/recexch (environment)" in proc.output
    runs = sorted(p for p in bench_run.results.iterdir() if p.is_dir())
    rows = [json.loads(line) for line in (runs[-1] / "cases.jsonl").read_text().splitlines()]
    forced = [r for r in rows if r.get("op") == "all_reduce"]
    assert forced and all(r["algo"] == "recexch (environment)" and r["algo_env"] == var for r in forced)
    assert all(r["algo"] == "default" for r in rows if r.get("op") == "broadcast")
    out = run_cli("history", bench_run.results).stdout
    assert f"began in {runs[2].name}: all_reduce float32 sum 2 ranks mpi/recexch (environment)" in out, out
    assert f"ended after {runs[1].name}: all_reduce float32 sum 2 ranks mpi/default" in out, out
    assert re.search(rf"what changed from {runs[1].name} to {runs[2].name}: .*MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM: - -> recexch",
                     out), out
    assert bench_run.leftovers() == []


def test_nightly_trials_replay_counts_each_alert_night(tmp_path):
    """scripts/nightly_trials.py --replay judges recorded nights again as they were judged live: a
    kept-stack step from night 8 of 10 alerts once, on night 10 (its third night), and that night's
    job is the one the machine fails; night 9, two nights in, is no alert yet."""
    import subprocess
    import sys
    from pathlib import Path
    kept = {"previous_stack": "/opt/cann-prev/set_env.sh", "previous_differs": False}
    nightly(tmp_path, 10, slow_from=7, factor=1.6, drift=0.01, options=lambda n: kept).rename(tmp_path / "trial-1")
    script = Path(__file__).resolve().parent.parent / "scripts" / "nightly_trials.py"
    proc = subprocess.run([sys.executable, str(script), "--replay", str(tmp_path), "--same", "10"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    nights = [line for line in proc.stdout.splitlines() if line.startswith("  same-stack night")]
    assert len(nights) == 10 and "MACHINE CHANGED" in nights[9] and "MACHINE" not in "".join(nights[:9]), proc.stdout
    assert "10 same-stack nights: 0 software regressions, 1 machine alerts, 1 jobs failed by the machine (exit 7)" \
        in proc.stdout, proc.stdout
    # each judged night says, per size range, the largest change a cell of it could have missed
    seen = [line for line in proc.stdout.splitlines() if line.startswith("    could have seen at most: ")]
    assert len(seen) >= 6 and all("below 64 KiB " in line and "; 64 KiB and above " in line for line in seen), proc.stdout
