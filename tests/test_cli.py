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
