"""Device paths that must be right before any GPU or NPU runs them: --graph (captured rounds) from
option to collection, timing, rows and table; the doctor's skew step synchronising the device.
The captures themselves need a GPU (scripts/device_check.sh runs them there)."""
import re

import pytest

from collectives import timing
from collectives.device import GRAPH_NEEDS_DEVICE, Device, DeviceUnavailable
from harness.session.option_error import OptionError
from kinds import collective
from kinds.collective import KIND as COLLECTIVE
from kinds.collective import CollectiveCase
from reports.table import host_cost_lines, render
from schema.results import CollectiveRow, Series
from schema.wire import DoctorSkewSpec
from tests.test_options import parsed


@pytest.mark.parametrize("args, message", [
    (["--graph", "maybe"], "--graph 'maybe': allowed off, on, both"),
    (["--graph", "on", "--iters", "20000"], "--iters 20000 with --graph: a captured round holds at most 10000 iterations"),
])
def test_a_bad_graph_option_is_one_line(args, message):
    with pytest.raises(OptionError) as raised:
        parsed(["--backend", "gloo", *args])
    assert message in str(raised.value) and "\n" not in str(raised.value)


def test_graph_modes():
    assert [parsed(["--backend", "gloo", *g]).graph for g in ([], ["--graph", "on"], ["--graph", "both"])] == \
        [(False,), (True,), (False, True)]


@pytest.mark.parametrize("backend", ["gloo", "mpi"])
def test_captured_cases_on_cpu_backends_are_skipped_at_collection(backend):
    if backend == "mpi":
        pytest.importorskip("mpi4py")
    opts = parsed(["--backend", backend, "--graph", "both", "--ops", "all_reduce,broadcast", "--sizes", "8,1K"])
    built = collective.build(opts)
    eager, captured = [c for c in built if not c.graph], [c for c in built if c.graph]
    assert len(eager) == len(captured) == 4
    assert all(not c.skip and c.group is not None for c in eager)
    assert all(c.skip == GRAPH_NEEDS_DEVICE and c.group is None and c.id.endswith("-graph") for c in captured)
    assert len({c.id for c in built}) == len(built)
    assert all("graph" not in COLLECTIVE.spec(c, opts).plan for c in eager)


def test_a_captured_case_asks_its_rank_for_graph_rounds():
    case = CollectiveCase(backend="nccl", algo="default", op="all_reduce", dtype="float32", redop="sum", inplace=True, size=8,
                          nranks=2, graph=True)
    plan = timing.Plan(**COLLECTIVE.spec(case, parsed(["--backend", "gloo"])).plan)
    assert plan.graph is True


def test_a_cpu_device_refuses_to_capture():
    with pytest.raises(DeviceUnavailable, match=GRAPH_NEEDS_DEVICE):
        Device("cpu").capture(lambda k: None, 4)


class RunningCapture(Device):
    """The CPU device with capture standing in for a device graph (which needs a GPU): the replay
    runs the loop; it records when captures and timed spans happen, to check that no capture
    falls inside a timed span and that K stays within what a graph may hold."""
    def __init__(self, log):
        super().__init__("cpu")
        self.log = log

    def capture(self, loop, k):
        self.log.append(("capture", k))
        return lambda: loop(k)

    def timer(self):
        log, inner = self.log, Device("cpu").timer()

        class Logged:
            def start(self):
                log.append(("start", None))
                inner.start()

            def stop(self):
                log.append(("stop", None))
                return inner.stop()
        return Logged()


class OneRank:
    """A world of one on the CPU device: the side channel is the identity."""
    rank, world = 0, 1

    def __init__(self, device):
        self.device = device

    def barrier(self):
        pass

    def max_float(self, value):
        return value


def test_captured_rounds_capture_outside_every_timed_span():
    log: list = []
    calls = []
    backend = OneRank(RunningCapture(log))
    cal, (times,), _ = timing.measure([timing.repeat(lambda: calls.append(1))], backend,
                                   timing.Plan(warmup=1, rounds=3, round_time_s=0.5, graph=True))
    assert len(times) == 3 and all(t > 0 for t in times)
    assert cal.k == timing.MAX_GRAPH_ITERS   # a trivial call: K as large as a graph may hold, no more
    timed = False
    for event, _ in log:
        timed = {"start": True, "stop": False}.get(event, timed)
        assert not (event == "capture" and timed), "a capture fell inside a timed span"
    assert [k for event, k in log if event == "capture"].count(cal.k) == 1   # the rounds' graph: captured once


def row(graph: bool, size: int, time_us: float) -> CollectiveRow:
    return CollectiveRow(backend="nccl", algo="default", op="all_reduce", bytes=size, count=size // 4, time_us=time_us,
                         algbw_gbps=1.0, busbw_gbps=1.0, wrong=0, graph=graph)


def test_eager_and_captured_are_separate_series_and_old_rows_load_as_eager():
    eager, captured = row(False, 8, 20.0), row(True, 8, 8.5)
    assert Series.of(eager) != Series.of(captured)
    assert Series.of(eager).graph is None and "graph" not in Series.of(eager).to_json()
    assert Series.of(captured).label().endswith("graph")
    old = {k: v for k, v in eager.to_json().items() if k != "graph"}
    assert CollectiveRow.from_json(old, "old file").graph is False
    assert CollectiveRow.from_json(captured.to_json(), "new file").graph is True


def test_the_table_prints_the_host_cost_per_call_for_small_sizes():
    rows = [row(False, 8, 20.0), row(True, 8, 8.5), row(False, 1 << 20, 60.0), row(True, 1 << 20, 55.0),
            row(False, 64 << 20, 900.0), row(True, 64 << 20, 899.0), row(False, 1 << 10, 21.0)]
    lines = host_cost_lines(rows)
    assert lines[1].startswith("# host cost per call")
    body = [line.split() for line in lines[3:]]
    assert [(b[3], float(b[5]), float(b[6]), float(b[7])) for b in body] == [("8B", 20.0, 8.5, 11.5), ("1MiB", 60.0, 55.0, 5.0)]
    text = render(rows)
    assert sum(line.endswith("busbw factor=0.000  graph-captured") for line in text.splitlines()) == 1   # one block
    assert "# host cost per call" in text
    assert host_cost_lines([r for r in rows if not r.graph]) == []


@pytest.fixture
def gloo_alone(tmp_path, monkeypatch):
    """A real gloo TorchBackend in this process, a world of one (its side channel is gloo itself)."""
    pytest.importorskip("torch", reason="a gloo backend needs torch")
    import torch.distributed as dist

    from collectives.backends import TorchBackend
    monkeypatch.delenv("HCCL_BENCH_TCP_STORE", raising=False)
    monkeypatch.setenv("HCCL_BENCH_STORE", str(tmp_path / "store"))
    backend = TorchBackend("gloo", 0, 1, 0)
    yield backend
    dist.destroy_process_group()


def test_the_doctors_skew_exit_is_read_after_the_device_synchronises(gloo_alone, monkeypatch):
    """On nccl/hccl a collective call returns once enqueued: the exit time must be read after the
    backend's device synchronize, every round."""
    import time

    from collectives import doctor_tasks
    synced: list[int] = []
    real = gloo_alone.device.synchronize

    def synchronize():
        real()
        synced.append(time.time_ns())
    monkeypatch.setattr(gloo_alone.device, "synchronize", synchronize)
    out = doctor_tasks.skew(gloo_alone, DoctorSkewSpec(rounds=3, matrix=8, work=1))
    assert out["offset_ns"] == 0 and len(synced) == len(out["exit_ns"]) == 3   # alone: rank 0's clock is its own
    for entry, sync, exit_ in zip(out["entry_ns"], synced, out["exit_ns"]):
        assert entry <= sync <= exit_


REPO = __import__("pathlib").Path(__file__).resolve().parent.parent


def _nvidia_here() -> bool:
    import os
    import subprocess
    if os.path.exists("/proc/driver/nvidia/version"):
        return True
    try:
        return subprocess.run(["nvidia-smi", "-L"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def test_device_check_without_a_gpu_says_so_and_exits_0(tmp_path):
    import os
    import subprocess
    if _nvidia_here():
        pytest.skip("an NVIDIA driver is here: scripts/device_check.sh runs the real check (minutes), not this one")
    proc = subprocess.run(["bash", str(REPO / "scripts" / "device_check.sh")], env={**os.environ, "OUT": str(tmp_path)},
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "no NVIDIA GPU on this machine" in proc.stdout, proc.stdout + proc.stderr
    assert not any(tmp_path.iterdir())


@pytest.mark.slow
def test_device_check_rehearses_every_step_on_cpu(tmp_path):
    """The script's steps and summary on gloo (about a minute here): what a GPU machine runs, minus the GPU."""
    import os
    import subprocess
    import sys
    proc = subprocess.run(["bash", str(REPO / "scripts" / "device_check.sh"), "--rehearse-on-cpu"],
                          env={**os.environ, "OUT": str(tmp_path), "PYTHON": sys.executable},
                          capture_output=True, text=True, timeout=420)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    summary = (tmp_path / "device_check" / "summary.txt").read_text()
    assert "REHEARSAL on gloo" in summary and "==== every check passed ====" in summary
    skipped = re.search(rf"skipped (\d+): {re.escape(GRAPH_NEEDS_DEVICE)}", summary)   # every captured case, whatever the op set
    assert skipped and int(skipped.group(1)) > 0 and "#wrong 0" in summary
    # the doctor ran to a verdict: healthy, or a rank named (a busy core beside one CPU rank slows its work)
    assert "skew step, one rank on" in summary and re.search(r"^  (healthy|SUSPECTS)", summary, re.M), summary
