"""--previous-stack: a --history suspicion settled the same night by a child A/B session
(harness/session/same_night.py). Fast: the option's validation and the child's arguments; slow: real gloo
nights, then a night slowed by HCCL_BENCH_FAULT=slow, confirmed (exit 1) against a script that
clears the fault, and not confirmed against the same stack (A/A)."""
import json
import re
import shutil
import sys

import pytest

from harness.session.option_error import OptionError
from harness.session.same_night import child_args
from reports.result_files import load
from tests.conftest import run_cli
from tests.test_options import parsed


def test_previous_stack_tells_a_script_from_an_interpreter(tmp_path):
    script = tmp_path / "set_env.sh"
    script.write_text("export ASCEND_HOME=/opt/cann-8.0\n")
    opts = parsed(["--backend", "gloo", "--history", "--previous-stack", str(script)])
    assert opts.previous_stack == str(script) and not opts.previous_is_python
    assert opts.previous_differs     # it changes the environment: another stack, every cell is A/B-tested
    opts = parsed(["--backend", "gloo", "--history", "--previous-stack", sys.executable])
    assert opts.previous_stack == sys.executable and opts.previous_is_python and not opts.previous_differs
    other = tmp_path / "venv" / "python3"   # a venv's interpreter: a link to the same binary, another stack
    other.parent.mkdir()
    other.symlink_to(sys.executable)
    assert parsed(["--backend", "gloo", "--history", "--previous-stack", str(other)]).previous_differs


def test_a_previous_stack_script_that_changes_nothing_is_this_stack(tmp_path):
    """Sourced again where it was sourced already, a set_env.sh prepends its paths a second time:
    the same stack. A path it adds, or one it moves ahead, is another stack."""
    script = tmp_path / "set_env.sh"
    script.write_text('unset HCCL_BENCH_NOT_SET_ANYWHERE\nexport HOME="$HOME"\nexport PATH="${PATH%%:*}:$PATH"\ntrue\n')
    assert not parsed(["--backend", "gloo", "--history", "--previous-stack", str(script)]).previous_differs
    script.write_text('export PATH="/opt/cann-8.0/bin:$PATH"\n')
    assert parsed(["--backend", "gloo", "--history", "--previous-stack", str(script)]).previous_differs
    script.write_text('export PATH="${PATH##*:}:$PATH"\n')   # the last entry moved to the front: another search order
    assert parsed(["--backend", "gloo", "--history", "--previous-stack", str(script)]).previous_differs


@pytest.mark.parametrize("kind, message", [
    ("missing", "is not a file: give the previous stack's env script"),
    ("pyscript", "is neither a shell script to source nor a python interpreter"),
    ("binary", "is neither a shell script to source nor a python interpreter"),
    ("program", "is a program but not a python interpreter"),
    ("no-history", "--previous-stack settles a --history suspicion: add --history"),
])
def test_a_bad_previous_stack_is_one_line(tmp_path, kind, message):
    path = tmp_path / kind
    if kind == "pyscript":
        path.write_text("#!/usr/bin/env python3\nprint('hi')\n")
    elif kind == "binary":
        path.write_bytes(b"PK\x03\x04\x00\x00zip")
    elif kind == "program":
        path = shutil.which("ls")
    elif kind == "no-history":
        path.write_text("export X=1\n")
    history = [] if kind == "no-history" else ["--history"]
    with pytest.raises(OptionError) as raised:
        parsed(["--backend", "gloo", *history, "--previous-stack", str(path)])
    assert message in str(raised.value) and "\n" not in str(raised.value)


def test_the_child_keeps_the_sessions_options_but_its_own():
    given = ["benches/test_collectives.py", "--history", "--previous-stack", "p.sh", "-k", "all_reduce", "--repeat=3",
             "--sizes", "1K", "-kfoo", "--label", "A=x", "--results", "r", "--max-repeat", "6", "--top-up", "2",
             "--night-budget", "5m"]
    assert child_args(given) == ["benches/test_collectives.py", "--sizes", "1K", "--results", "r", "--max-repeat", "6"]


# gloo, whose waiting ranks sleep: two spinning MPICH ranks beside a busy loop take a time slice per
# exchange, and a 3x fault on mpi read 0.08x-45x launch by launch (test_end_to_end's ab-until-decided).
# --min-effect 0.5: the 5x fault is far past it, and an A/A must lean 50% on two neighbouring sizes
# (reports/compare.py assign_verdicts) before the same night could confirm a change that is not there.
NIGHT = ["--backend", "gloo", "--ops", "all_reduce,all_gather", "--sizes", "1K,64K", "--rounds", "20",
         "--round-time", "0.005", "--estimator", "min", "--history", "--max-repeat", "6", "--min-effect", "0.5"]
FAULT = {"HCCL_BENCH_FAULT": "slow:1:all_reduce:5"}


@pytest.mark.slow
def test_a_suspected_cell_is_confirmed_the_same_night_and_an_aa_confirms_nothing(bench_run, tmp_path):
    """No --benchmark: a smoke night records no canary, so a busy CI machine's noisy nights are not
    left out and the test sees the suspicion every time; the minimum per launch keeps it visible."""
    for _ in range(5):   # clean nights without --previous-stack: a drifting VM's step may read as a level (exit 1)
        proc = bench_run(*NIGHT, target="benches/test_collectives.py")
        assert proc.returncode in (0, 1) and "# results: " in proc.output, proc.output[-2000:]
    nights = tmp_path / "nights"
    shutil.copytree(bench_run.results, nights)
    clears = tmp_path / "previous.sh"
    clears.write_text("unset HCCL_BENCH_FAULT   # the previous stack: without the slowdown\n")
    proc = bench_run(*NIGHT, "--previous-stack", str(clears), target="benches/test_collectives.py", env=FAULT)
    out = proc.output
    assert proc.returncode == 1, out[-3000:]
    confirmed = re.search(r"# same-day A/B: confirmed (\d+) of the (\d+) cells it measured", out)
    assert confirmed and int(confirmed.group(1)) >= 1, out[-3000:]
    line = re.search(r"# same-night A/B: \d+ cases \((gloo-\w+-all_\w+-float32-.*)", out)
    assert line and re.search(r"gloo-\w+-all_reduce-float32-sum-", line.group(0)), out[-3000:]
    # the previous stack is another one (its script unsets the fault): the whole sweep's 4 cells ran
    assert "the previous stack differs from this one: all 4 cells of this run" in out, out[-3000:]
    assert int(re.search(r"# same-night A/B: (\d+) cases", out).group(1)) == 4
    assert re.search(r"budget: \d+ launches a side, 2 ranks, .* rank-s of cluster time", out)
    # the A/B run's own folder, opened alone (a CI link): previous -> this, the slowed all_reduce a regression
    ab = re.search(r"# same-night A/B: \d+ cases .* against \S+: (\S+)", out)
    assert ab and load(ab.group(1), side="A").meta.baseline_side == "B", out[-3000:]
    alone = run_cli("compare", ab.group(1), "--ab")
    assert alone.returncode == 1 and "# baseline:  previous stack (side A, baseline)" in alone.stdout, alone.stdout + alone.stderr
    after = alone.stdout.split("REGRESSIONS:\n", 1)[-1].splitlines()
    regressions = after[:next((i for i, line in enumerate(after) if not line.startswith("  ")), len(after))]
    assert any(line.startswith("  all_reduce float32 sum 2 ranks gloo/") for line in regressions), alone.stdout
    # a later history reads the record, without --ab, to the same verdict
    later = run_cli("history", bench_run.results)
    assert later.returncode == 1 and confirmed.group(0) in later.stdout, later.stdout + later.stderr
    assert "REGRESSIONS:" in later.stdout and "# skipped: " in later.stdout   # the A/B run is no night of its own
    # A/A: a previous stack that differs only in a variable nothing reads (the fault stays on both
    # sides): every cell is measured, and nothing is confirmed
    same = tmp_path / "same.sh"
    same.write_text("export HCCL_BENCH_AA=1\n")
    bench_run.results = nights
    proc = bench_run(*NIGHT, "--previous-stack", str(same), target="benches/test_collectives.py", env=FAULT)
    out = proc.output
    # nothing began with the newest night: its suspicions stay suspicions (a step of the clean nights
    # themselves, this VM's drift, may still be a regression of its own, which the A/A cannot touch)
    newest = re.search(r"# results: .*/nights/([0-9-]+)/results\.json", out)
    assert newest and f"since {newest.group(1)}" not in out, out[-3000:]
    assert re.search(r"# same-day A/B: confirmed 0 of the 4 cells it measured", out), out[-3000:]
    # a script that changes nothing here is this stack: no A/B runs, and the run records it
    noop = tmp_path / "noop.sh"
    noop.write_text("unset HCCL_BENCH_NOT_SET   # changes nothing here\n")
    proc = bench_run(*NIGHT, "--previous-stack", str(noop), target="benches/test_collectives.py", env=FAULT)
    assert "# same-night A/B: the previous stack is this one (it changes nothing here), nothing to A/B" in proc.output, \
        proc.output[-3000:]
    recorded = re.search(r"# results: (.*/nights/[0-9-]+/results\.json)", proc.output)
    assert recorded and load(recorded.group(1)).meta.options.previous_differs is False, proc.output[-3000:]
    assert bench_run.leftovers() == []


@pytest.mark.slow
def test_an_upgrade_on_a_new_historys_second_night_fails_it(bench_run, tmp_path):
    """Two nights are too few for a history, but not for the same-night A/B: its interleaved launches
    compared the two stacks, so the upgrade's regression fails the night (exit 1), and a later
    `hccl-bench history` of the folder reads the record to the same verdict."""
    proc = bench_run(*NIGHT, target="benches/test_collectives.py")
    assert proc.returncode == 0 and "nothing to judge yet" in proc.output, proc.output[-2000:]
    clears = tmp_path / "previous.sh"
    clears.write_text("unset HCCL_BENCH_FAULT   # the previous stack: without the slowdown\n")
    proc = bench_run(*NIGHT, "--previous-stack", str(clears), target="benches/test_collectives.py", env=FAULT)
    out = proc.output
    assert proc.returncode == 1, out[-3000:]
    assert "# history: 2 runs" in out and "nothing to judge yet" not in out, out[-3000:]
    assert re.search(r"  all_reduce float32 sum 2 ranks gloo/[^:]+: busbw -\d", out), out[-3000:]
    later = run_cli("history", bench_run.results)
    assert later.returncode == 1 and "REGRESSIONS:" in later.stdout, later.stdout + later.stderr
    assert bench_run.leftovers() == []


def _same_night_run(folder, this_over_previous):
    """An A/B run as the same-night child writes it: side A this stack, side B the previous one
    (its labels), this stack `this_over_previous` times as slow; 6 interleaved launches."""
    from tests.test_compare import write_ab
    folder.mkdir(parents=True)
    path = write_ab(folder / "results.json", slow=1 / this_over_previous)   # side B (the previous stack) the faster
    data = json.loads((folder / "results.json").read_text())
    data["hccl_bench"]["options"] = {"labels": {"A": "this stack", "B": "previous stack"}}
    (folder / "results.json").write_text(json.dumps(data))
    return path


def test_the_same_night_ab_run_reads_previous_to_this_in_every_reader(tmp_path):
    """This stack 30% slower than the previous one. Unmarked (as the child wrote it before runs carried
    their direction), `compare --ab` reads the direction from the child's side labels (A "this stack",
    B "previous stack"): a regression, never the 11 improvements of reading side A as the baseline;
    marked as the session marks it (same_night.mark_direction), compare, table and report judge
    previous -> this: a regression, exit 1, with the sides named as the stacks they are; the history's
    reading of both is the same."""
    from harness.session.same_night import mark_direction
    from reports.gate import same_night
    from schema.judgement import REGRESSION
    unmarked, marked = tmp_path / "unmarked", tmp_path / "marked"
    _same_night_run(unmarked, 1.3)
    _same_night_run(marked, 1.3)
    before = run_cli("compare", unmarked, "--ab")
    assert before.returncode == 1 and "11 regression, 0 improvement" in before.stdout, before.stdout + before.stderr
    assert "REGRESSIONS:\n  all_reduce float32 sum 2 ranks mpi/default 4B-4MiB: busbw -23" in before.stdout
    assert "its side labels; recorded before runs carried baseline_side" in before.stderr
    assert load(unmarked, side="A").meta.baseline_side == "B"
    mark_direction(marked)
    assert load(marked, side="A").meta.baseline_side == "B"
    out = run_cli("compare", marked, "--ab")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "# baseline:  previous stack (side A, baseline)" in out.stdout
    assert "# candidate: this stack (side B, candidate)" in out.stdout
    assert "REGRESSIONS:\n  all_reduce float32 sum 2 ranks mpi/default 4B-4MiB: busbw -23" in out.stdout, out.stdout
    assert "read by role, as it records (baseline_side B)" in out.stderr
    table = run_cli("table", marked, "--ab")
    ratios = [float(line.split()[5]) for line in table.stdout.splitlines() if line.startswith("     all_reduce      mpi")]
    assert len(ratios) == 11 and all(1.25 < r < 1.35 for r in ratios), table.stdout   # B/A = this / previous
    assert "B/A = this / previous" in (marked / "table.txt").read_text()
    page = run_cli("report", marked, "--ab", "-o", tmp_path / "page")
    assert page.returncode == 0, page.stdout + page.stderr
    html = (tmp_path / "page" / "report.html").read_text()
    assert "previous stack (side A, baseline)" in html and "this stack (side B, candidate)" in html
    assert html.rstrip().endswith("</html>")
    assert (tmp_path / "page" / "summary.md").read_text().count("hccl-bench: regression") == 1
    for folder in (unmarked, marked):   # the history turns an older record round itself: one reading of both
        cmp, line = same_night(folder)
        assert cmp is not None and len(cmp.by_verdict(REGRESSION)) == 11 and "judged previous stack -> this stack" in line
