"""The hccl-bench command line."""
import subprocess
import sys

from tests.conftest import ROOT, run_cli


def cli(*args):
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], cwd=ROOT, capture_output=True, text=True, timeout=60)


def test_memory_reproduces_the_worked_example():
    proc = cli("memory", "--params", "100e9", "--tp", "4", "--pp", "8")
    assert proc.returncode == 0
    lines = {line[:18].strip(): line[18:].strip() for line in proc.stdout.splitlines() if not line.startswith("#")}
    assert lines["weights"] == "6.25 GB" and lines["gradients"] == "6.25 GB" and lines["optimizer states"] == "37.50 GB"


def test_bad_input_is_one_line_and_a_distinct_exit_code(tmp_path):
    proc = cli("memory", "--params", "100e9", "--tp", "0")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    proc = cli("table", str(tmp_path / "missing.json"))
    assert proc.returncode == 2 and "cannot read result file" in proc.stderr and "Traceback" not in proc.stderr


def test_paired_calibration_from_one_a_a_run_feeds_a_paired_compare(tmp_path):
    from tests.test_compare import write_ab
    aa = write_ab(tmp_path / "aa.json", slow=1.0, drift_sd=0.3, seed=1)
    proc = run_cli("calibrate", aa, "--ab", "-o", str(tmp_path / "cal.json"))
    assert proc.returncode == 0 and "(paired launches)" in proc.stdout.splitlines()[0], proc.stdout + proc.stderr
    ab = write_ab(tmp_path / "ab.json", slow=1.3, drift_sd=0.3, seed=2)
    proc = run_cli("compare", ab, "--ab", "--calibration", str(tmp_path / "cal.json"))
    assert proc.returncode == 1 and "applied to 11 of 11 cells" in proc.stdout, proc.stdout + proc.stderr
    proc = run_cli("calibrate", aa)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "--ab" in proc.stderr
    # --ab reads both sides from one file: a second file would be silently ignored, so it is refused
    for command in (("compare", ab, aa, "--ab"), ("calibrate", aa, ab, "--ab"), ("compare", ab)):
        proc = run_cli(*command)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "--ab" in proc.stderr, command


def test_inconclusive_is_not_a_pass_unless_the_gate_says_so(tmp_path):
    """Two launches a side under heavy drift: nothing confirmed either way, exit 6 and the headline
    says INCONCLUSIVE; --inconclusive pass accepts it; a tight A/A is 'no change' and exits 0."""
    from tests.test_compare import write_ab
    noisy = write_ab(tmp_path / "noisy.json", slow=1.0, launches=2, drift_sd=0.5, seed=4)
    proc = run_cli("compare", noisy, "--ab", "--markdown", tmp_path / "c.md")
    assert proc.returncode == 6 and "# INCONCLUSIVE:" in proc.stdout, proc.stdout
    assert (tmp_path / "c.md").read_text().startswith("### hccl-bench: inconclusive")
    assert "could have seen" in proc.stdout
    assert run_cli("compare", noisy, "--ab", "--inconclusive", "pass").returncode == 0
    tight = write_ab(tmp_path / "tight.json", slow=1.0, launches=6, drift_sd=0.0, seed=4)
    proc = run_cli("compare", tight, "--ab", "--json", tmp_path / "t.json")
    assert proc.returncode == 0 and " 11 no change" in proc.stdout, proc.stdout


def test_labels_name_the_sides_in_compare_and_report(tmp_path):
    from tests.test_compare import write_ab
    ab = write_ab(tmp_path / "ab.json", slow=1.3, drift_sd=0.1)
    proc = run_cli("compare", ab, "--ab", "--label", "A=mpich 4.2.3", "--label", "B=mpich 5.0.2")
    assert "# baseline:  mpich 4.2.3 (side A, baseline)" in proc.stdout
    assert "# candidate: mpich 5.0.2 (side B, candidate)" in proc.stdout, proc.stdout
    proc = run_cli("report", ab, "--ab", "-o", tmp_path / "rep", "--label", "B=mpich 5.0.2")
    assert proc.returncode == 0 and "mpich 5.0.2 (side B, candidate)" in (tmp_path / "rep" / "report.html").read_text()
    proc = run_cli("compare", ab, "--ab", "--label", "C=x")
    assert proc.returncode == 2 and "use A=NAME or B=NAME" in proc.stderr


def test_an_unknown_command_is_one_line_and_the_bad_input_code():
    proc = cli("frobnicate")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "unknown command 'frobnicate'" in proc.stderr
    assert "compare" in proc.stderr and "Traceback" not in proc.stderr


def test_every_command_answers_with_a_member_of_the_exit_code_enum(tmp_path):
    """Each subcommand's function, run in process, returns an ExitCode, not a bare int."""
    from harness.cli import COMMANDS
    from schema.exit_codes import ExitCode
    from tests.test_compare import write_ab
    ab = write_ab(tmp_path / "ab.json", slow=1.3, drift_sd=0.1)
    calls = {"provenance": (), "table": (ab, "--ab"), "compare": (ab, "--ab"), "calibrate": (ab, "--ab"),
             "history": (tmp_path / "none",), "report": (ab, "--ab", "-o", tmp_path / "rep"),
             "import": (tmp_path / "missing.log",), "baseline": ("show",), "memory": ("--params", "1e9"),
             "predict": (ab, "--hosts", "0", "--ranks-per-host", "1"), "export": (ab, "--prometheus", tmp_path / "m.prom")}
    assert set(calls) == set(COMMANDS)
    for name, args in calls.items():
        proc = run_cli(name, *args)
        assert type(proc.returncode) is ExitCode, (name, proc.returncode, proc.stderr)


def test_exit_codes_keep_their_values_and_agree_with_pytest():
    """CI jobs read these numbers: the session's own agree with pytest's, ours never move."""
    import pytest

    from schema.exit_codes import ExitCode
    assert [(c.name, int(c)) for c in ExitCode] == [("OK", 0), ("REGRESSION", 1), ("BAD_INPUT", 2), ("INTERNAL", 3),
                                                     ("BAD_OPTION", 4), ("NO_TESTS", 5), ("INCONCLUSIVE", 6),
                                                     ("MACHINE_CHANGED", 7), ("DRIVER_GONE", 70)]
    assert (ExitCode.TESTS_FAILED, ExitCode.INTERRUPTED, ExitCode.INTERNAL, ExitCode.BAD_OPTION, ExitCode.NO_TESTS) == (
        pytest.ExitCode.TESTS_FAILED, pytest.ExitCode.INTERRUPTED, pytest.ExitCode.INTERNAL_ERROR,
        pytest.ExitCode.USAGE_ERROR, pytest.ExitCode.NO_TESTS_COLLECTED)


def test_the_plugin_finds_pytest_benchmarks_session_by_its_public_plugin_name(pytestconfig):
    """results.json is built from pytest-benchmark's session: found through pluggy's get_plugin, it
    must be the very object the plugin keeps privately (a new pytest-benchmark that renames it fails here)."""
    from harness.session import run_output
    found = run_output.benchmark_session(pytestconfig)
    assert found is not None and found is pytestconfig._benchmarksession
    assert isinstance(found.benchmarks, list) and callable(found.get_machine_info)


def test_progress_lines_name_each_move_and_count_what_started():
    from harness.session.progress import Progress
    progress = Progress({"a": ("gloo", "all_reduce", ""), "b": ("gloo", "all_reduce", ""),
                         "c": ("mpi", "broadcast", "side B")})
    assert progress.lines_at("a") == ["# [0/3] now: gloo all_reduce"]
    assert progress.lines_at("b") == [] and progress.lines_at("not-a-case") == []
    (line,) = progress.lines_at("c")
    assert line.startswith("# [2/3, about ") and line.endswith(" left] now: mpi broadcast side B") and progress.done == 3
