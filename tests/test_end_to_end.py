"""The benches run for real: child pytest sessions with real rank processes, gloo and MPICH."""
import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from collectives.ops import OPS as REGISTERED_OPS
from reports.result_files import load
from tests.conftest import ROOT, processes_with_tag, run_cli

pytestmark = pytest.mark.slow

OPS = set(REGISTERED_OPS)   # every registered op module


def test_sweep_checks_times_and_records_every_op(bench_run, tmp_path):
    out = tmp_path / "out.json"
    proc = bench_run("--backend", "gloo,mpi", "--sizes", "8,64K", "--algos", "default,ring,tree",
                     "-rs", "--benchmark-json", str(out))
    assert proc.returncode == 0, proc.output[-3000:]
    data = json.loads(out.read_text())
    cases = [b for b in data["benchmarks"] if b["name"].startswith("test_collective")]
    for backend in ("gloo", "mpi"):
        assert {b["extra_info"]["op"] for b in cases if b["extra_info"]["backend"] == backend} == OPS
    for b in cases:
        info = b["extra_info"]
        assert info["wrong"] == 0 and info["busbw_gbps"] > 0 and info["time_us"] > 0
        # pytest-benchmark's stats are the measured per-op round times, not the driver's wall time
        assert len(b["stats"]["data"]) == info["rounds"] == len(info["round_ns_per_rank"][0])
        assert b["stats"]["median"] * 1e6 == pytest.approx(info["time_us"])
        assert len(info["round_ns_per_rank"]) == info["nranks"] == 2
    ring = [b["extra_info"] for b in cases if b["extra_info"]["backend"] == "mpi" and b["extra_info"]["algo"] == "ring"]
    assert {i["op"] for i in ring} == {"all_reduce", "all_gather", "broadcast"}
    allreduce = next(i for i in ring if i["op"] == "all_reduce")
    assert allreduce["algo_env"] == {"MPIR_CVAR_DEVICE_COLLECTIVES": "none", "MPIR_CVAR_COLLECTIVE_FALLBACK": "error",
                                     "MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM": "ring"}
    assert "gloo has no algorithm switch" in proc.output
    meta = data["hccl_bench"]
    assert any(s["id"].startswith("gloo-ring-") and "gloo has no algorithm switch" in s["reason"] for s in meta["skipped"])
    assert meta["provenance"]["packages"]["torch"] and "MPICH" in meta["provenance"]["mpi_library"]
    assert any(g["env"].get("MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM") == "tree" for g in meta["groups"].values())
    run_dirs = list(bench_run.results.iterdir())
    assert len(run_dirs) == 1 and (run_dirs[0] / "results.json").exists()
    assert "# peak busbw" in (run_dirs[0] / "table.txt").read_text()
    assert "harness overhead" in proc.stdout
    assert bench_run.leftovers() == []


@pytest.mark.parametrize("backend", ["gloo", "mpi"])
def test_cluster_launcher_template_starts_the_ranks(bench_run, backend):
    proc = bench_run("--backend", backend, "--ops", "all_reduce", "--sizes", "1K",
                     "--launcher", "mpiexec -n {nproc}", target="benches/test_collectives.py")
    assert proc.returncode == 0, proc.output[-3000:]
    assert "1 passed" in proc.output
    assert bench_run.leftovers() == []


def test_a_hanging_rank_is_reported_with_stacks_and_the_session_goes_on(bench_run):
    proc = bench_run("--backend", "gloo,mpi", "--ops", "all_reduce,broadcast", "--sizes", "8", "--timeout", "3",
                     target="benches/test_collectives.py", env={"HCCL_BENCH_FAULT": "hang:1:all_reduce"})
    assert proc.returncode == 1
    assert "2 failed, 2 passed" in proc.output
    for backend in ("gloo", "mpi"):
        assert f"all_reduce 8B float32 algo=default backend={backend} nranks=2: timed out after 3s; " \
               f"ranks that did not finish: [0, 1]" in proc.output
    assert "in _inject_fault" in proc.output            # the stuck rank's own stack
    assert "Traceback" not in proc.output
    assert bench_run.leftovers() == []


def test_a_dying_rank_is_reported_with_its_exit_status_and_log(bench_run):
    proc = bench_run("--backend", "gloo,mpi", "--ops", "all_reduce,broadcast", "--sizes", "8",
                     target="benches/test_collectives.py", env={"HCCL_BENCH_FAULT": "die:1:all_reduce"})
    assert proc.returncode == 1
    assert "2 failed, 2 passed" in proc.output
    # rank 0 dies too once its gloo peer is gone; whether the driver saw it yet is timing
    assert re.search(r"backend=gloo nranks=2: (rank 0 exit status 1; )?rank 1 exit status 3 during the case",
                     proc.output)
    assert "backend=mpi nranks=2: launcher exit status 3" in proc.output
    # both failure reports carry the dead rank's last log line (CI=true also repeats them in the summary)
    for backend in ("gloo", "mpi"):
        report = proc.output.split(f"backend={backend} nranks=2:", 1)[1]
        assert "HCCL_BENCH_FAULT asked this rank to die" in report.split("\n___", 1)[0]
    assert bench_run.leftovers() == []


def test_ctrl_c_leaves_no_rank_behind(bench_run):
    child = subprocess.Popen(bench_run.command("--backend", "gloo", "--ops", "all_reduce", "--sizes", "8", "--timeout", "120",
                                               target="benches/test_collectives.py"),
                             cwd=ROOT, env=bench_run.env({"HCCL_BENCH_FAULT": "hang:1:all_reduce"}),
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             # as at a terminal: a suite started in the background (`cmd &` in a script)
                             # passes SIGINT on ignored, and Python then never raises KeyboardInterrupt
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 60
    while not bench_run.rank_said("asked this rank to hang in all_reduce") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert len(processes_with_tag(bench_run.tag)) >= 3   # driver + 2 ranks, rank 1 hanging in the case
    child.send_signal(signal.SIGINT)
    try:
        output, _ = child.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        child.send_signal(signal.SIGABRT)              # pytest's faulthandler prints the driver's stacks
        try:
            output = child.communicate(timeout=30)[0]
        except subprocess.TimeoutExpired as exc:     # someone else holds the pipe: say who is alive
            child.kill()
            output = f"{exc.output!r}\ntagged processes: {processes_with_tag(bench_run.tag)}"
        bench_run.leftovers()
        pytest.fail(f"the driver ignored Ctrl-C for 60 s:\n{output[-6000:]}")
    assert child.returncode == 2, output[-2000:]      # pytest's "interrupted"
    assert bench_run.leftovers() == []


# each bad option's message is checked in process (tests/test_options.py); these three show the
# whole path: exit 4, one ERROR line, no rank started, no results folder
BAD_OPTIONS = [
    (["--sizes", "12Q"], "bad size '12Q'"),
    (["--nproc", "4", "--tp", "3", "--pp", "1"], "no tp x pp x dp equals the world size 4: tp in [3], pp in [1]"),
    (["--results", "/etc/hostname/results"], "cannot be created: /etc/hostname is not a folder"),
]


@pytest.mark.parametrize("args, message", BAD_OPTIONS, ids=[" ".join(a) for a, _ in BAD_OPTIONS])
def test_bad_options_stop_before_any_rank_starts(bench_run, args, message):
    proc = bench_run("--backend", "gloo", *args, target="benches/test_collectives.py", timeout=120)  # any host
    assert proc.returncode == 4, proc.output[-2000:]
    error_lines = [line for line in proc.stderr.splitlines() if line.startswith("ERROR:")]
    assert len(error_lines) == 1 and message in error_lines[0], proc.stderr
    assert "Traceback" not in proc.output
    assert not bench_run.results.exists() and bench_run.leftovers(wait_s=0) == []


def test_repeat_ab_env_and_baseline_end_to_end(bench_run, tmp_path):
    """--repeat gives launches, --ab-env interleaves two environments, --baseline compares at the end."""
    small = ("--backend", "mpi", "--ops", "all_reduce,broadcast", "--sizes", "8,1K,64K", "--benchmark",
             "--rounds", "5", "--round-time", "0.002")
    ab = bench_run(*small, "--repeat", "2", "--ab-env", "MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM=recexch,"
                   "MPIR_CVAR_ALLREDUCE_DEVICE_COLLECTIVE=0", target="benches/test_collectives.py")
    assert ab.returncode == 0, ab.output[-2000:]
    result = next(bench_run.results.glob("*/results.json"))
    infos = [b["extra_info"] for b in json.loads(result.read_text())["benchmarks"]]
    assert sorted({(i["launch"], i["side"]) for i in infos}) == [(0, "A"), (0, "B"), (1, "A"), (1, "B")]
    groups = json.loads(result.read_text())["hccl_bench"]["groups"].values()
    assert len(groups) == 4  # both sides' groups stay alive through a launch: none restarted
    assert sum(g["env"].get("MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM") == "recexch" for g in groups) == 2
    ran = [row for line in (result.parent / "cases.jsonl").read_text().splitlines()
           if "round_ns_per_rank" in (row := json.loads(line))]   # case rows, not the session and group lines
    pairs = [(a, b) for a, b in zip(ran[::2], ran[1::2])]
    assert len(pairs) == 12 and all(  # each case runs on both sides back to back, ABBA across launches
        (a["launch"], a["op"], a["size"]) == (b["launch"], b["op"], b["size"])
        and (a["side"], b["side"]) == (("A", "B") if a["launch"] == 0 else ("B", "A")) for a, b in pairs)
    cmp = subprocess.run([sys.executable, "-m", "harness.cli", "compare", str(result), "--ab"], cwd=ROOT,
                         capture_output=True, text=True)
    assert cmp.returncode in (0, 1, 6) and "6 cells by paired launches" in cmp.stdout, cmp.stdout + cmp.stderr
    base = bench_run(*small, "--repeat", "2", "--results", str(tmp_path / "base"), target="benches/test_collectives.py")
    assert base.returncode == 0
    base_file = next((tmp_path / "base").glob("*/results.json"))
    again = bench_run(*small, "--repeat", "2", "--results", str(tmp_path / "again"), "--baseline", str(base_file),
                      target="benches/test_collectives.py")
    assert f"# compare {base_file}" in again.output and "# 6 cells" in again.output
    assert again.returncode in (0, 1, 6) and (again.returncode == 1) == ("REGRESSIONS:" in again.output)
    assert (again.returncode == 6) == ("# verdict: INCONCLUSIVE" in again.output)   # undecided cells: not a pass
    assert (next((tmp_path / "again").glob("*/compare.md"))).read_text().startswith("### hccl-bench")
    assert bench_run.leftovers() == []


def test_ab_source_runs_side_b_under_another_stack(bench_run, tmp_path):
    """Side B takes what sourcing a stack's env script changes, and the interpreter it names."""
    stack = tmp_path / "stack" / "bin"
    stack.mkdir(parents=True)
    # a second install, as far as the launcher can tell: a venv of its own (a bare symlink to a venv's
    # interpreter outside that venv starts the base interpreter, without this venv's packages)
    (stack.parent / "pyvenv.cfg").write_text(f"home = {Path(sys._base_executable).parent}\n"
                                             "include-system-site-packages = false\n")
    (stack.parent / "lib").symlink_to(Path(sys.prefix) / "lib")
    (stack / "python3").symlink_to(sys.executable)
    for tool in ("mpiexec", "hydra_pmi_proxy"):  # B's MPI launcher is the one beside B's python
        (stack / tool).symlink_to(Path(sys.executable).parent / tool)
    script = tmp_path / "set_env.sh"
    script.write_text(f"export HCCL_BENCH_PYTHON={stack / 'python3'}\n"
                      "export MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM=recexch\n"
                      "unset TORCH_NCCL_AB_PROBE   # the previous stack lacks it: side B's ranks must not see it\n"
                      'export PATH="/opt/other-stack/bin:$PATH"\n')
    proc = bench_run("--backend", "mpi", "--ops", "all_reduce", "--sizes", "1K", "--ab-source", str(script),
                     target="benches/test_collectives.py", env={"TORCH_NCCL_AB_PROBE": "1"})
    assert proc.returncode == 0, proc.output[-2000:]
    groups = json.loads(next(bench_run.results.glob("*/results.json")).read_text())["hccl_bench"]["groups"]
    by_side = {bool(g["env"]): g for g in groups.values()}
    b = by_side[True]
    assert b["env"]["MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM"] == "recexch"
    assert b["env"]["PATH"].startswith("/opt/other-stack/bin:") and "SHLVL" not in b["env"]
    # what the ranks saw (they report the adapter variables themselves): A has the probe, B not
    assert by_side[False]["adapter_env"].get("TORCH_NCCL_AB_PROBE") == "1" and "TORCH_NCCL_AB_PROBE" not in b["adapter_env"]
    assert b["versions"]["python"].endswith(str(stack / "python3"))
    assert by_side[False]["versions"]["python"].endswith(sys.executable)
    # the report's diff and legends name the interpreters each side's ranks reported
    result = next(bench_run.results.glob("*/results.json"))
    rep = subprocess.run([sys.executable, "-m", "harness.cli", "report", str(result), "--ab", "-o", str(tmp_path / "rep")],
                         cwd=ROOT, capture_output=True, text=True)
    assert rep.returncode == 0, rep.stderr
    html = (tmp_path / "rep" / "report.html").read_text()
    assert "ranks.python" in html and f"<td class=l>{sys.version.split()[0]} {stack / 'python3'}" in html
    from reports.report_page import names_by_difference
    names = names_by_difference([load(result, side="A"), load(result, side="B")])
    version = sys.version.split()[0]   # each legend leads with its side's interpreter (long paths cut at 70)
    assert names[1].startswith(f"{version} {str(stack)[:40]}") and names[1].endswith("(side B, candidate)"), names
    assert names[0].startswith(f"{version} {sys.executable[:40]}") and names[0].endswith("(side A, baseline)"), names


def test_an_ab_source_that_changes_nothing_is_an_aa_said_so(bench_run, tmp_path):
    """Sourcing the stack already in effect changes nothing: both sides still run (an A/A), and the
    session says so before it starts, instead of a one-sided run read as a failed A/B."""
    script = tmp_path / "set_env.sh"
    script.write_text("export HCCL_BENCH_SAME=1\n")
    proc = bench_run("--backend", "gloo", "--ops", "all_reduce", "--sizes", "1K", "--ab-source", str(script),
                     target="benches/test_collectives.py", env={"HCCL_BENCH_SAME": "1"})
    assert proc.returncode == 0, proc.output[-2000:]
    assert f"--ab-source {script} changes nothing in this environment (already sourced?)" in proc.output
    infos = [b["extra_info"] for b in json.loads(next(bench_run.results.glob("*/results.json")).read_text())["benchmarks"]]
    assert sorted({i["side"] for i in infos}) == ["A", "B"]
    assert bench_run.leftovers() == []


def test_ab_pair_fails_together_when_one_side_dies(bench_run):
    """A rank of side B dies mid-pair: both items of that case fail with the reason, the next case
    runs on fresh groups, and nothing is left behind."""
    proc = bench_run("--backend", "mpi", "--ops", "all_reduce,broadcast", "--sizes", "1K",
                     "--ab-env", "HCCL_BENCH_FAULT=die:1:all_reduce", target="benches/test_collectives.py")
    assert proc.returncode == 1, proc.output[-3000:]
    assert "2 failed, 2 passed" in proc.output, proc.output[-3000:]
    assert "its A/B partner failed" in proc.output and "HCCL_BENCH_FAULT asked this rank to die" in proc.output
    assert bench_run.leftovers() == []


def test_layer_ab_pairs_alternate_rounds_between_both_groups(bench_run):
    """--ab-env on layer benches: each block is built in both sides' groups and its rounds alternate
    between them, as for collectives; both items record the pair, no group restarts."""
    proc = bench_run("--backend", "gloo", "--tp", "2", "--pp", "1", "--rounds", "3", "--round-time", "0.002",
                     "--ab-env", "HCCL_BENCH_AA=1", "-k", "manual", target="benches/test_layers.py")
    assert proc.returncode == 0, proc.output[-3000:]
    result = next(bench_run.results.glob("*/results.json"))
    data = json.loads(result.read_text())
    rows = [b["extra_info"] for b in data["benchmarks"] if b["extra_info"].get("bench") == "linear"]
    assert sorted((r["layer"], r["sequence_parallel"], r["side"]) for r in rows) == sorted(
        (layer, sp, side) for layer, sp in (("linear", False), ("mlp", False), ("mlp", True)) for side in "AB")
    assert all(r["rounds_interleaved"] and len(r["round_ns_per_rank"][0]) == 3 and r["step_us"] > 0 for r in rows)
    assert [g["env"].get("HCCL_BENCH_AA") for g in data["hccl_bench"]["groups"].values()] == [None, "1"]
    ran = [row for line in (result.parent / "cases.jsonl").read_text().splitlines()
           if "round_ns_per_rank" in (row := json.loads(line))]   # case rows, not the session and group lines
    assert [(r["layer"], r["sequence_parallel"], r["side"]) for r in ran] == [
        (layer, sp, side) for layer, sp in (("linear", False), ("mlp", False), ("mlp", True)) for side in "AB"]
    assert bench_run.leftovers() == []


def test_history_option_judges_the_run_against_its_results_folder(bench_run, tmp_path):
    """--history: the nightly guard at the end of the session, over the --results folder; a budget spent
    at once (1 s) runs the three launches a night needs and no more, and says why."""
    nightly = tmp_path / "nightly"
    small = ("--backend", "mpi", "--ops", "all_reduce", "--sizes", "1K,64K", "--rounds", "3", "--round-time", "0.002",
             "--results", str(nightly), "--history", "--night-budget", "1s")
    first = bench_run(*small, target="benches/test_collectives.py")
    assert first.returncode == 0 and "nothing to judge yet" in first.output, first.output[-2000:]
    assert "# night budget 0m01s: 3 launches" in first.output and "launches 4-40 not run" in first.output
    data = json.loads(next(nightly.glob("*/results.json")).read_text())
    assert sorted({b["extra_info"]["launch"] for b in data["benchmarks"]}) == [0, 1, 2]
    assert data["hccl_bench"]["night_budget"]["launches"] == 3 and data["hccl_bench"]["options"]["estimator"] == "fastest"
    for night in range(1, 4):   # three earlier nights: this run's data, dated before it
        (nightly / f"2026010{night}-020000").mkdir()
        (nightly / f"2026010{night}-020000" / "results.json").write_text(
            json.dumps({**data, "datetime": f"2026-01-0{night}T02:00:00"}))
    again = bench_run(*small, target="benches/test_collectives.py")
    assert again.returncode == 0 and "# history: 5 runs 2026-01-01.." in again.output, again.output[-2000:]
    # each cell judged or named too short: which one depends on where the host put ranks 0 and 1's cores on
    # each night (the four copies leave a cell when tonight's launches ran a placement faster: reports/placement.py)
    counts = re.search(r"# (\d+) cells: [^\n]*?(?:; (\d+) cells in fewer than 4 runs not judged)?\n", again.output)
    assert counts and int(counts[1]) + int(counts[2] or 0) == 2, again.output[-2000:]
    assert len(list(nightly.glob("*/history.md"))) == 1
    assert bench_run.leftovers() == []


def test_the_default_relative_results_folder_works_from_any_directory(bench_run, tmp_path):
    """README command 1 as written: --results is the relative default 'results', resolved against
    the directory pytest runs in, for the driver and for every rank."""
    proc = subprocess.run([sys.executable, "-m", "pytest", str(ROOT / "benches" / "test_collectives.py"),
                           "-p", "no:cacheprovider", "--backend", "gloo,mpi", "--ops", "all_reduce", "--sizes", "8",
                           "--timeout", "60"],
                          cwd=tmp_path, env=bench_run.env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert len(list((tmp_path / "results").glob("*/results.json"))) == 1
    # the ranks start in the repository: their logs must still land in this run's folder
    assert len(list((tmp_path / "results").glob("*/logs/*/rank0.log"))) == 2
    assert bench_run.leftovers() == []


def test_the_last_lines_say_where_the_results_are_the_peaks_and_the_verdict(bench_run, tmp_path):
    small = ("--backend", "gloo,mpi", "--ops", "all_reduce,broadcast", "--sizes", "8,1K", "--benchmark", "--rounds", "5",
             "--round-time", "0.002")
    base = bench_run(*small, "--results", str(tmp_path / "base"), target="benches/test_collectives.py")
    assert base.returncode == 0, base.output[-2000:]
    proc = bench_run(*small, "--baseline", str(next((tmp_path / "base").glob("*/results.json"))),
                     "--inconclusive", "pass", target="benches/test_collectives.py")
    assert proc.returncode == 0, proc.output[-3000:]   # one launch a side: never a confirmed regression
    last = proc.stdout.splitlines()[-15:]
    assert any(line.startswith("# results: ") and line.endswith("(complete)") for line in last), last
    assert any(line.startswith("# peak busbw all_reduce: gloo ") and ", mpi " in line for line in last), last
    assert any(line.startswith(("# verdict: INCONCLUSIVE: no confirmed regression", "# verdict: no regression: every"))
               for line in last), last
    ours = proc.stdout[proc.stdout.index("hccl-bench ="):].splitlines()
    assert [line for line in ours if len(line) > 120 and not line.startswith("# results: ")] == []   # a path is a path
    assert "Legend:" not in proc.stdout          # pytest-benchmark's own tables are off by default


def test_the_mpi_thread_level_is_asked_for_recorded_and_kept_apart(bench_run, tmp_path):
    small = ("--backend", "mpi", "--ops", "all_reduce", "--sizes", "1K,64K", "--rounds", "3", "--round-time", "0.002")
    levels = {}
    for level in ("single", "multiple"):
        proc = bench_run(*small, "--mpi-thread-level", level, "--results", str(tmp_path / level),
                         target="benches/test_collectives.py")
        assert proc.returncode == 0, proc.output[-2000:]
        result = next((tmp_path / level).glob("*/results.json"))
        groups = json.loads(result.read_text())["hccl_bench"]["groups"].values()
        assert {g["versions"]["mpi_thread_level"] for g in groups} == {level}
        levels[level] = result
    cli = [sys.executable, "-m", "harness.cli", "compare", str(levels["single"]), str(levels["multiple"])]
    refused = subprocess.run(cli, cwd=ROOT, capture_output=True, text=True)
    assert refused.returncode == 2 and "mpi_thread_level: baseline ['single'] vs candidate ['multiple']" in refused.stderr
    assert subprocess.run([*cli, "--force"], cwd=ROOT, capture_output=True, text=True).returncode in (0, 1, 6)
    assert bench_run.leftovers() == []


def test_ab_until_decided_stops_each_cell_at_its_decision(bench_run, tmp_path):
    """A huge slowdown on side B made by the fault hook (rank 1's timed rounds take 10x as long), never
    by the scheduler (MPICH's progress thread on shared cores was: its size is how busy the cores
    are): every cell is decided a regression before the budget, later launches skip it, the session
    fails with exit 1, and `compare --ab` replays the same looks to the same verdicts. gloo, whose
    waiting ranks sleep: two spinning MPICH ranks beside a busy loop take turns on a core, a time
    slice per exchange, and a 3x fault on mpi read B/A 0.08x-45x launch by launch (load 20 on 2 cores).
    10x and 12 launches (looks at 6, 8 and 12): at 5x and 10 launches one CI run left the 4 B cell
    undecided at its last look."""
    proc = bench_run("--backend", "gloo", "--ops", "all_reduce", "--sizes", "4,64,1K", "--benchmark", "--rounds", "5",
                     "--round-time", "0.005", "--ab-env", "HCCL_BENCH_FAULT=slow:1:all_reduce:10", "--ab-until-decided",
                     "--max-repeat", "12", "--label", "A=as is", "--label", "B=rank 1 slowed 10x",
                     target="benches/test_collectives.py")
    assert proc.returncode == 1, proc.output[-3000:]
    assert "# A/B look after 6 launches (alpha 0.0250" in proc.output and "# verdict: REGRESSION" in proc.output
    result = next(bench_run.results.glob("*/results.json"))
    data = json.loads(result.read_text())
    seq = data["hccl_bench"]["sequential"]
    assert seq["max_launches"] == 12 and len(seq["decided_at"]) == 3 and seq["launches_used"] < 12, seq
    launches: dict = {}
    for b in data["benchmarks"]:
        launches.setdefault((b["extra_info"]["side"], b["extra_info"]["bytes"]), []).append(b["extra_info"]["launch"])
    for name, at in seq["decided_at"].items():
        size = int(name.split()[-2])
        assert sorted(launches[("A", size)]) == sorted(launches[("B", size)]) == list(range(at)), (name, launches)
    skipped = int(re.search(r"(\d+) skipped", proc.output).group(1))
    assert skipped == 2 * sum(12 - at for at in seq["decided_at"].values())   # both sides of every later launch
    replay = run_cli("compare", result, "--ab", "--json", tmp_path / "replay.json")
    assert replay.returncode == 1 and "# sequential A/B:" in replay.stdout, replay.stdout + replay.stderr
    verdicts = lambda path: [(c["size"], c["verdict"]) for c in json.loads(Path(path).read_text())["cells"]]  # noqa: E731
    assert verdicts(tmp_path / "replay.json") == verdicts(result.parent / "ab.json") == [(4, "regression"),
                                                                                        (64, "regression"),
                                                                                        (1024, "regression")]
    assert "# baseline:  as is (side A, baseline)" in replay.stdout
    assert bench_run.leftovers() == []
