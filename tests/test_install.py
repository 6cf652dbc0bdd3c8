"""What an NPU host's Python and packages need: 3.9 (openEuler 22.03) works, 3.8 is refused in
one line, and numpy 2 under a torch built against numpy 1 is refused before any rank starts."""
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from harness.provenance import numpy_torch_problem
from harness.session.option_error import OptionError
from harness.session.options import prepare
from kinds.options import Options

ROOT = Path(__file__).resolve().parent.parent
NO_PYC = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}   # another Python's .pyc files would stay in the checkout


def _python(version: str) -> str:
    """An interpreter of `version` (pyenv's, else one on PATH), or skip naming what was looked for."""
    found = sorted(Path("/root/.pyenv/versions").glob(f"{version}.*/bin/python")) or \
        [Path(p) for p in [shutil.which(f"python{version}")] if p]
    if not found:
        pytest.skip(f"no Python {version} here (/root/.pyenv/versions/{version}.*, python{version} on PATH)")
    return str(found[-1])


# the rows and wire messages as the harness builds and reads them; numpy (schema.stats) is stubbed
# where the interpreter has none: construction and the field checks do not call it
ON_39 = """
import sys, types
try:
    import numpy
except ImportError:
    sys.modules["numpy"] = types.ModuleType("numpy")
from schema import results, wire
tp = dict(wrong=0, iters=5, round_ns=[10], checked=4, err_to_tol=0.5, peak_memory_bytes=None, params_local=8,
          fwd_ns=[1], fwd_bwd_ns=[2], matmul_ns=[3], flops_per_iter=1.0, tokens_per_iter=2, comm_share=0.25)
assert wire.result_from_json(wire.TpResult, tp) == wire.TpResult(**tp)
try:
    wire.result_from_json(wire.TpResult, {**tp, "peak_memory_bytes": "8"})
except wire.WireError as exc:
    assert "peak_memory_bytes" in str(exc), exc
spec = wire.CollectiveSpec(op="all_reduce", count=8, plan={"rounds": 3})
assert wire.spec_from_json(wire.to_json(spec)) == spec
for bad in (lambda: wire.Timed(0, 1, [1]), lambda: wire.CollectiveSpec(op="all_reduce")):
    try:
        bad()
    except TypeError:
        pass
    else:
        raise AssertionError("positional or incomplete construction was accepted")
row = results.CollectiveRow(backend="gloo", algo="default", op="all_reduce", bytes=8)
assert results.row_from_json(results.bench_entry("x", row, [1e-6])["extra_info"], "x").bytes == 8
print("ok")
"""


def test_rows_and_wire_messages_work_on_python_3_9():
    """kw_only dataclasses and `X | None` evaluated by the wire are 3.10+: schema/kwonly.py and Optional replace them."""
    proc = subprocess.run([_python("3.9"), "-c", ON_39], cwd=ROOT, capture_output=True, text=True, timeout=60, env=NO_PYC)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


def test_python_3_8_is_refused_in_one_line():
    proc = subprocess.run([_python("3.8"), "-m", "harness.cli", "compare", "a", "b"], cwd=ROOT, capture_output=True, env=NO_PYC,
                          text=True, timeout=60)
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    assert proc.stderr.startswith("hccl-bench needs Python 3.9 or newer") and proc.stderr.count("\n") == 1, proc.stderr


@pytest.mark.parametrize("numpy, torch, refused", [
    ("2.0.2", "2.1.0", True), ("2.1.3", "2.2.2+cpu", True), ("2.0.0rc1", "2.1.0a0+git", True),
    ("1.26.4", "2.1.0", False), ("2.0.2", "2.3.0", False), ("2.2.0", "2.13.0", False)])
def test_numpy_2_under_a_torch_built_for_numpy_1_is_named_with_the_fix(numpy, torch, refused):
    problem = numpy_torch_problem(numpy, torch)
    assert bool(problem) == refused
    if refused:
        assert f"numpy {numpy}" in problem and f"torch {torch}" in problem and "pip install 'numpy<2'" in problem
        assert "\n" not in problem


def test_the_session_refuses_it_before_any_probe_for_a_torch_backend_only(monkeypatch):
    """OptionError is the plugin's usage error: exit 4 (schema.exit_codes.BAD_OPTION)."""
    monkeypatch.setattr("harness.provenance._dist", {"numpy": "2.0.2", "torch": "2.1.0"}.get)
    with pytest.raises(OptionError, match=r"^numpy 2\.0\.2 does not work with torch 2\.1\.0"):
        prepare(Options(backends=["gloo"]), lambda name: None)
    assert numpy_torch_problem() and not numpy_torch_problem("1.26.4")


def test_the_doctor_refuses_it_in_one_line_before_any_rank_starts(monkeypatch):
    """`hccl-bench doctor` does not go through the plugin's prepare: it makes the same check, for a
    torch backend only (its ranks would all fail in torch.from_numpy)."""
    from tests.conftest import run_cli
    monkeypatch.setattr("harness.provenance._dist", {"numpy": "2.0.2", "torch": "2.1.0"}.get)
    proc = run_cli("doctor", "--launcher", "mpiexec -n {nproc}", "--nproc", "2", "--backend", "gloo")
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        "hccl-bench doctor: numpy 2.0.2 does not work with torch 2.1.0, which was built against numpy 1 (torch < 2.3): "
        "pip install 'numpy<2'"], proc.stderr
