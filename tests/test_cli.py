"""The hccl-bench command line."""
import subprocess
import sys

from tests.conftest import ROOT


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
