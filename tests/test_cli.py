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
