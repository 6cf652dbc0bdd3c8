"""Helpers for end-to-end tests: run the benches in a child pytest and find any process it left."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def processes_with_tag(tag: str) -> list[int]:
    """PIDs whose environment carries this test's tag: ranks, launchers, anything the run started."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if f"HCCL_BENCH_TEST_TAG={tag}".encode() in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def shm_segments() -> set[str]:
    """This user's MPI shared-memory files in /dev/shm (harness.engine.shm.SHM_PREFIXES)."""
    from harness.engine.shm import segment_files
    return segment_files()


def orphan_segments(before: set[str]) -> list[str]:
    """MPI segments made since `before` that no live process maps: what a killed rank's MPI left."""
    from harness.engine.shm import still_mapped
    new = shm_segments() - before
    return sorted(new - still_mapped(new))


class BenchRun:
    def __init__(self, tmp_path: Path):
        self.tag = uuid.uuid4().hex
        self.results = tmp_path / "results"
        self.segments_before = shm_segments()

    def command(self, *args: str, target: str = "benches/") -> list[str]:
        return [sys.executable, "-m", "pytest", target, "-p", "no:cacheprovider", "--results", str(self.results), *args]

    def env(self, extra: dict | None = None) -> dict:
        return {**os.environ, "HCCL_BENCH_TEST_TAG": self.tag, **(extra or {})}

    def __call__(self, *args: str, target: str = "benches/", env: dict | None = None, timeout: float = 600):
        proc = subprocess.run(self.command(*args, target=target), cwd=ROOT, env=self.env(env),
                              capture_output=True, text=True, timeout=timeout)
        proc.output = proc.stdout + proc.stderr
        return proc

    def rank_said(self, text: str) -> bool:
        """Whether a rank of this run wrote `text` into its log (the fault hook says what it does)."""
        return any(text in p.read_text(errors="replace") for p in self.results.glob("*/logs/*/rank*.log"))

    def leftovers(self, wait_s: float = 5.0) -> list[int | str]:
        """The run's processes still alive, and the shared-memory segments its ranks left."""
        deadline = time.monotonic() + wait_s
        while (left := processes_with_tag(self.tag)) and time.monotonic() < deadline:
            time.sleep(0.2)
        for pid in left:  # don't leak into the rest of the suite, but still report them
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        while left and any(Path(f"/proc/{pid}").exists() for pid in left) and time.monotonic() < deadline + 5:
            time.sleep(0.05)
        segments = orphan_segments(self.segments_before)
        for path in segments:
            try:
                Path(path).unlink()
            except OSError:
                pass
        return [*left, *segments]


@pytest.fixture(autouse=True)
def no_orphan_segments():
    """Every test, skipped or not, leaves /dev/shm as it found it: an MPI segment it made that no
    live process maps fails the test (and is removed, so one leak does not fail the next test)."""
    before = shm_segments()
    yield
    left = orphan_segments(before)
    for path in left:
        try:
            Path(path).unlink()
        except OSError:
            pass
    assert not left, f"the test left MPI shared-memory segments in /dev/shm that no process maps: {left}"


@pytest.fixture(autouse=True)
def no_torchelastic_folders():
    """torchrun's agent makes a torchelastic_* log folder in the temp folder and never removes it
    (torch.distributed.elastic DefaultLogsSpecs without --log-dir): a test that ran one removes it."""
    temp = Path(tempfile.gettempdir())
    before = set(temp.glob("torchelastic_*"))
    yield
    for path in set(temp.glob("torchelastic_*")) - before:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def bench_run(tmp_path):
    return BenchRun(tmp_path)


def run_cli(*args) -> subprocess.CompletedProcess:
    """`hccl-bench ARGS` in this process (harness.cli.main), its output captured: the same code as
    the console script without an interpreter start per call. The entry point itself is tested in
    tests/test_cli.py."""
    import contextlib
    import io

    from harness.cli import main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in args])
    return subprocess.CompletedProcess(["hccl-bench", *map(str, args)], code, out.getvalue(), err.getvalue())


def _untracked() -> set[str] | None:
    """Ignored paths in the checkout (what tools write: results/, logs), or None outside a git checkout.
    Untracked source files are left out: an editor may make one while the suite runs."""
    try:
        proc = subprocess.run(["git", "status", "--porcelain", "--ignored", "--untracked-files=all"], cwd=ROOT,
                              capture_output=True, text=True)
    except OSError:   # no git here (a copied tree): nothing to compare against
        return None
    if proc.returncode != 0:
        return None
    paths = {line[3:] for line in proc.stdout.splitlines() if line[:2] == "!!"}
    return {p for p in paths if "__pycache__" not in p and ".egg-info" not in p}


_BEFORE = _untracked()


def pytest_sessionfinish(session, exitstatus):
    """A test leaves nothing in the checkout: whatever the suite added there fails the session."""
    after = _untracked()
    if _BEFORE is None or after is None or not (new := sorted(after - _BEFORE)):
        return
    print(f"\nhccl-bench tests: the suite left {len(new)} new files in the checkout: {', '.join(new[:10])}")
    session.exitstatus = pytest.ExitCode.TESTS_FAILED
