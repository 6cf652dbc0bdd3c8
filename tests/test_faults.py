"""Faults as jobs really meet them, done for real: signals to the driver under every launcher, two
sessions in one second, a full filesystem, hostile connections on the control port, hostile strings
bound for Markdown, malformed result files. (Bad options are in test_end_to_end.)"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from harness import files
from harness.engine import control
from harness.session import baselines
from reports.result_files import load
from tests.conftest import ROOT, processes_with_tag, run_cli
from tests.test_compare import write_run

pytestmark = pytest.mark.slow

TORCHRUN = str(Path(sys.executable).parent / "torchrun")
LAUNCHES = {  # (backend, extra options): a local gloo group, MPICH's mpiexec, torchrun
    "local": ("gloo", ()),
    "mpiexec": ("mpi", ()),
    "torchrun": ("gloo", ("--launcher", f"{TORCHRUN} --nproc-per-node {{nproc}} --no-python {{cmd}}")),
}


def _cli(*args, check_one_line=True):
    proc = subprocess.run([sys.executable, "-m", "harness.cli", *map(str, args)], cwd=ROOT, capture_output=True, text=True)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    return proc


def _wait_for(predicate, timeout=90.0, what=""):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGKILL], ids=lambda s: s.name)
@pytest.mark.parametrize("launch", list(LAUNCHES))
def test_a_signal_to_the_driver_keeps_what_finished_and_leaves_no_process(bench_run, launch, sig):
    """all_reduce finishes, broadcast hangs on rank 1, then the driver gets the signal: SIGINT and
    SIGTERM write results.json marked incomplete with the case in flight named; after SIGKILL the
    run is rebuilt from cases.jsonl. Either way no rank, launcher or agent is alive 10 s later."""
    backend, extra = LAUNCHES[launch]
    child = subprocess.Popen(bench_run.command("--backend", backend, "--ops", "all_reduce,broadcast", "--sizes", "8",
                                               "--timeout", "300", *extra, target="benches/test_collectives.py"),
                             cwd=ROOT, env=bench_run.env({"HCCL_BENCH_FAULT": "hang:1:broadcast"}),
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        def all_reduce_done():
            cases = list(bench_run.results.glob("*/cases.jsonl"))
            return cases and '"op": "all_reduce"' in cases[0].read_text()
        _wait_for(all_reduce_done, what="the all_reduce case to finish")
        _wait_for(lambda: bench_run.rank_said("asked this rank to hang in broadcast"), what="rank 1 to hang in broadcast")
        child.send_signal(sig)
        output = child.communicate(timeout=60)[0]
    finally:
        if child.poll() is None:
            child.kill()
    run_dir = next(bench_run.results.iterdir())
    if sig == signal.SIGKILL:
        assert not (run_dir / "results.json").exists()
        table = _cli("table", run_dir)
        assert table.returncode == 0 and "rebuilt from cases.jsonl (1 cases)" in table.stderr, table.stderr
        assert "incomplete run" in table.stderr and "# all_reduce" in table.stdout
    else:
        assert child.returncode == 2, output[-3000:]              # pytest's "interrupted"
        meta = json.loads((run_dir / "results.json").read_text())
        hb = meta["hccl_bench"]
        assert hb["complete"] is False and hb["interrupted"].startswith(f"{sig.name} during broadcast 8B"), hb["interrupted"]
        assert [b["extra_info"]["op"] for b in meta["benchmarks"]] == ["all_reduce"]
        assert f"(incomplete: {sig.name} during broadcast" in output
        assert "incomplete run" in _cli("table", run_dir).stderr
    assert bench_run.leftovers(wait_s=10) == []


def test_an_interrupted_budget_night_says_it_ended_early_not_what_the_budget_ran(bench_run):
    """A --night-budget night stopped by SIGTERM in its first launch: the closing block says the run is
    incomplete and leaves out the budget's line (it would claim every launch up to the cap fit)."""
    child = subprocess.Popen(bench_run.command("--backend", "mpi", "--ops", "all_reduce,broadcast", "--sizes", "8",
                                               "--rounds", "3", "--round-time", "0.002", "--timeout", "300",
                                               "--history", "--night-budget", "1h", target="benches/test_collectives.py"),
                             cwd=ROOT, env=bench_run.env({"HCCL_BENCH_FAULT": "hang:1:broadcast"}),
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        _wait_for(lambda: bench_run.rank_said("asked this rank to hang in broadcast"), what="rank 1 to hang in broadcast")
        child.send_signal(signal.SIGTERM)
        output = child.communicate(timeout=60)[0]
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 2 and "(incomplete: SIGTERM during broadcast" in output, output[-3000:]
    assert "# night budget" not in output, output[-3000:]
    run = json.loads(next(bench_run.results.glob("*/results.json")).read_text())["hccl_bench"]
    assert run["complete"] is False and run["night_budget"]["budget_s"] == 3600
    assert bench_run.leftovers(wait_s=10) == []


def test_two_sessions_started_together_keep_their_own_results(bench_run):
    """Same --results, same second: each session gets its own folder, results and logs."""
    args = bench_run.command("--backend", "gloo", "--ops", "all_reduce", "--sizes", "8,1K", target="benches/test_collectives.py")
    children = [subprocess.Popen(args, cwd=ROOT, env=bench_run.env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 text=True) for _ in range(2)]
    outputs = [c.communicate(timeout=300)[0] for c in children]
    assert [c.returncode for c in children] == [0, 0], outputs[0][-2000:] + outputs[1][-2000:]
    run_dirs = sorted(bench_run.results.iterdir())
    assert len(run_dirs) == 2
    for run_dir in run_dirs:
        lines = (run_dir / "cases.jsonl").read_text().splitlines()
        assert sum('"session"' in line[:12] for line in lines) == 1
        assert len(json.loads((run_dir / "results.json").read_text())["benchmarks"]) == 2
    # and the folder names themselves never collide, whatever the clock says
    stamp = "20260101-000000"
    assert files.new_run_dir(bench_run.results, stamp) != files.new_run_dir(bench_run.results, stamp)
    assert bench_run.leftovers() == []


@pytest.fixture
def small_disk(tmp_path):
    """A real full filesystem: a tmpfs of 1 MiB with 24 KiB left (root is needed to mount it)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (not root?)")
    try:
        free = shutil.disk_usage(mount).free
        with open(mount / "filler", "wb") as fh:
            fh.write(b"\0" * (free - (24 << 10)))
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def test_a_full_disk_is_one_line_and_keeps_what_was_written(bench_run, small_disk):
    results = small_disk / "results"
    # 54 cases: far more than 24 KiB holds, while the session's first line (about 1 KiB) fits
    proc = bench_run("--backend", "gloo", "--ops", "all_reduce,all_gather,broadcast", "--sizes", "8:1M:2",
                     "--results", str(results), target="benches/test_collectives.py", timeout=300)
    assert proc.returncode == 3, proc.output[-3000:]
    assert "No space left on device" in proc.output and "Traceback" not in proc.output
    run_dir = next(results.iterdir())
    table = _cli("table", run_dir)
    assert table.returncode == 0 and "rebuilt from cases.jsonl" in table.stderr and "# all_reduce" in table.stdout
    assert bench_run.leftovers() == []


class Attacker:
    """Any local user: finds the driver's port in a rank's environment and, while groups start,
    opens slow, silent, junk, oversized, non-object and idle connections against it."""

    def __init__(self, tag: str):
        self.tag, self.stop, self.ports, self.sockets = tag, threading.Event(), set(), []
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self.stop.is_set():
            for pid in processes_with_tag(self.tag):
                try:
                    env = dict(kv.split(b"=", 1) for kv in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") if b"=" in kv)
                except OSError:
                    continue
                port = int(env.get(b"HCCL_BENCH_DRIVER_PORT", b"0"))
                if port and port not in self.ports:
                    self.ports.add(port)
                    threading.Thread(target=self._attack, args=(port,), daemon=True).start()
            time.sleep(0.02)

    def _connect(self, port):
        try:
            sock = socket.create_connection(("127.0.0.1", port), timeout=2)
        except OSError:
            return None
        self.sockets.append(sock)
        return sock

    def _send(self, sock, data):
        try:
            sock.sendall(data)
        except OSError:
            pass

    def _attack(self, port):
        for _ in range(300):                       # idle connections: a full backlog would refuse the ranks
            self._connect(port)
        for data in (b"[]\n", b'{"token": "0000", "ranks": []}\n', b"\xff" * 1000 + b"\n", b'{"token":"'):
            if sock := self._connect(port):
                self._send(sock, data)
        if sock := self._connect(port):            # 100 MB without a newline
            threading.Thread(target=self._send, args=(sock, b"x" * (100 << 20)), daemon=True).start()
        if sock := self._connect(port):            # one byte now and then
            for _ in range(10):
                self._send(sock, b"{")
                time.sleep(0.5)

    def close(self):
        self.stop.set()
        for sock in self.sockets:
            sock.close()


def test_control_port_attacks_do_not_disturb_a_sweep(bench_run):
    """Every group start of a 3-launch sweep is attacked at once; the sweep passes, nothing fails."""
    attacker = Attacker(bench_run.tag)
    attacker.thread.start()
    try:
        proc = bench_run("--backend", "gloo,mpi", "--ops", "all_reduce", "--sizes", "8,1K", "--repeat", "3",
                         target="benches/test_collectives.py", timeout=600)
    finally:
        attacker.close()
    assert proc.returncode == 0, proc.output[-3000:]
    assert "12 passed" in proc.output and "did not start" not in proc.output
    assert len(attacker.ports) >= 2 and len(attacker.sockets) >= 300   # the attacks really ran
    meta = json.loads(next(bench_run.results.glob("*/results.json")).read_text())["hccl_bench"]
    assert meta["failures"] == [] and meta["complete"] is True
    assert bench_run.leftovers() == []


def test_accept_group_serves_the_ranks_past_hostile_connections():
    """The accept loop itself: junk is dropped at once, a slow sender and idle sockets cost nothing."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(socket.SOMAXCONN)
    port, token = listener.getsockname()[1], "ab" * 16
    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(50)]
    junk = socket.create_connection(("127.0.0.1", port))
    junk.sendall(b"[]\n")
    wrong = socket.create_connection(("127.0.0.1", port))
    wrong.sendall(b'{"token":"' + b"cd" * 16 + b'","world":1,"ranks":[{"rank":0}]}\n')
    slow = socket.create_connection(("127.0.0.1", port))
    slow.sendall(b"{")
    watch = control.connect("127.0.0.1", port, token, {"watch": 0})
    rank0 = control.connect("127.0.0.1", port, token, {"world": 1, "ranks": [{"rank": 0, "host": "h"}]})
    chan, hello, watches = control.accept_group(listener, token, time.monotonic() + 30, lambda: None)
    assert hello["world"] == 1 and len(watches) == 1
    for bad in (junk, wrong):
        bad.settimeout(5)
        assert bad.recv(10) == b""                   # dropped, never answered
    chan.send({"cmd": "ping"})
    assert rank0.recv(timeout=5) == {"cmd": "ping"}
    for sock in [*idle, junk, wrong, slow, watch.sock, rank0.sock, *watches]:
        sock.close()
    chan.close()
    listener.close()


def test_a_channel_accepts_json_objects_only():
    a, b = socket.socketpair()
    chan = control.Channel(a)
    b.sendall(b"[1, 2]\n")
    with pytest.raises(control.ChannelClosed, match="not an object"):
        chan.recv(timeout=5)
    a.close()
    b.close()


HOSTILE = "x <script>alert(1)</script> <img src=x onerror=alert(1)> [click](javascript:alert(1))\n### no regression\n<!--"


def _hostile_runs(tmp_path):
    paths = []
    for i, slow in enumerate((1.0, 1.0, 1.0, 1.5, 1.5)):
        path = write_run(tmp_path / f"r{i}.json", i, lambda op, size, s=slow: s, launches=3, when=f"2026-01-0{i + 1}T00:00:00")
        data = json.loads(Path(path).read_text())
        for b in data["benchmarks"]:
            b["extra_info"]["algo"] = HOSTILE
        data["hccl_bench"]["label"] = HOSTILE
        data["hccl_bench"]["provenance"] = {"env": {"HCCL_BUFFSIZE": HOSTILE + str(i)}}
        Path(path).write_text(json.dumps(data))
        paths.append(path)
    return paths


def _assert_inert(markdown: str):
    assert "<script" not in markdown and "<img" not in markdown and "<!--" not in markdown
    assert "](javascript:" not in markdown
    headings = [line for line in markdown.splitlines() if line.lstrip().startswith("#")]
    assert all(line.startswith(("## hccl-bench", "### hccl-bench")) for line in headings), headings


def test_hostile_strings_reach_markdown_inert(tmp_path):
    runs = _hostile_runs(tmp_path)
    compare_md, history_md = tmp_path / "c.md", tmp_path / "h.md"
    cmp = _cli("compare", runs[0], runs[-1], "--markdown", compare_md)
    assert cmp.returncode == 1 and "regression" in compare_md.read_text()
    assert "\\<script" not in compare_md.read_text() and "&lt;script&gt;" in compare_md.read_text()
    hist = _cli("history", *runs, "--markdown", history_md)
    assert hist.returncode in (0, 1), hist.stderr
    rep = _cli("report", runs[0], runs[-1], "-o", tmp_path / "report")
    assert rep.returncode == 0, rep.stderr
    for md in (compare_md, history_md, tmp_path / "report" / "summary.md"):
        _assert_inert(md.read_text())


def _entry(info=None, data=None):
    info = {"op": "all_reduce", "algo": "default", "backend": "mpi", "bytes": 8, "nranks": 2, **(info or {})}
    return json.dumps({"benchmarks": [{"name": "case", "extra_info": info, "stats": {"data": data or [1e-5, 2e-5]}}]})


MALFORMED = {
    "benchmarks-not-a-list": '{"benchmarks": 5}', "a-list": "[1, 2, 3]", "not-json": "not json",
    "deep-nesting": "[" * 200_000, "deep-objects": '{"a":' * 100_000, "empty": "",
    "extra_info-a-list": '{"benchmarks": [{"extra_info": [1]}]}', "entry-a-number": '{"benchmarks": [7]}',
    "bytes-null": _entry({"bytes": None}), "bytes-missing": _entry({"bytes": None}).replace('"bytes": null, ', ""),
    "data-null": _entry(data=[None]), "zero-time": _entry(data=[0.0, 0.0]),
    "negative-time": _entry(data=[-2.6e-4]), "nan-time": _entry(data=[float("nan")]),
    "infinite-time": _entry(data=[float("inf")]), "data-a-string": _entry(data="fast"),
    "nranks-zero": _entry({"nranks": 0}), "op-a-list": _entry({"op": ["all_reduce"]}),
    "time_us-nan": _entry({"time_us": float("nan")}), "busbw-negative": _entry({"busbw_gbps": -1.0}),
    "launch-negative": _entry({"launch": -1}), "inplace-a-string": _entry({"inplace": "yes"}),
    "groups-a-list": json.dumps({"benchmarks": [], "hccl_bench": {"groups": [1]}}),
    "other-schema": json.dumps({"benchmarks": [], "hccl_bench": {"schema": "hccl-bench/0"}}),
}


@pytest.mark.parametrize("content", list(MALFORMED.values()), ids=list(MALFORMED))
def test_a_malformed_result_file_is_one_line_never_a_regression(tmp_path, content):
    """Each bad shape through each command that reads a file (in process: the CLI's own main):
    exit 2, one line naming the file, no traceback; `baseline save` stores nothing."""
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    good = write_run(tmp_path / "good.json", 1)
    for args in (("compare", good, bad), ("table", bad), ("history", good, bad, good),
                 ("baseline", "save", bad, "--name", "x"), ("report", good, bad, "-o", tmp_path / "page"),
                 ("import", bad, "-o", tmp_path / "imported.json")):
        proc = run_cli(*args)
        err = proc.stderr.strip()
        assert proc.returncode == 2 and len(err.splitlines()) == 1 and "Traceback" not in proc.stdout + err, (args, err)
        assert str(bad) in err or "HCCL_BENCH" in err, (args, err)
    assert not list(baselines.ROOT.glob("*/x")) and not (tmp_path / "imported.json").exists()


@pytest.mark.slow   # writes 400 MB
def test_huge_or_junk_files_are_refused_in_bounded_memory(tmp_path):
    """200 MB of junk text, a 200 MB JSON array and a 200 MB log: each command refuses them from
    their first bytes or their size. Peak memory of the process that ran them all is printed."""
    junk, array = tmp_path / "junk.json", tmp_path / "array.json"
    with open(junk, "wb") as f:
        f.write(b"x" * (200 << 20))
    with open(array, "wb") as f:
        f.write(b"[" + b"1," * (100 << 20) + b"1]")
    script = f"""
import resource, sys
from tests.conftest import run_cli
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
for path in ({str(junk)!r}, {str(array)!r}):
    for args in (("compare", path, path), ("table", path), ("baseline", "save", path, "--name", "x"),
                 ("import", path, "-o", {str(tmp_path / "o.json")!r})):
        proc = run_cli(*args)
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, (args, proc.stderr)
grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) >> 10
print(f"peak memory grew by {{grown}} MiB over 8 refusals of 200 MiB files")
sys.exit(0 if grown < 64 else 1)
"""
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    print(proc.stdout)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_an_incomplete_run_is_marked_and_refused_as_a_baseline(tmp_path):
    path = write_run(tmp_path / "cut.json", 1)
    data = json.loads(Path(path).read_text())
    data["hccl_bench"].update({"complete": False, "interrupted": "SIGTERM during all_reduce 8B"})
    Path(path).write_text(json.dumps(data))
    assert not load(path).complete
    proc = _cli("baseline", "save", path, "--name", "cut")
    assert proc.returncode == 2 and "incomplete run (SIGTERM during all_reduce 8B)" in proc.stderr
    assert "incomplete run" in _cli("compare", path, write_run(tmp_path / "b.json", 2)).stderr


def test_a_rank_exits_when_its_driver_connection_closes():
    """The watch thread ends a rank stuck anywhere (here: sleeping) once the driver's end closes."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    code = ("import time, sys; from harness.engine import control; "
            f"control.watch_driver('127.0.0.1', {listener.getsockname()[1]}, 'tok', 0); time.sleep(600)")
    child = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    conn, _ = listener.accept()
    conn.close()
    out = child.communicate(timeout=30)[0]
    assert child.returncode == control.DRIVER_GONE_EXIT and "the driver's connection closed" in out
    listener.close()


def test_a_session_under_nohup_ignores_sighup(bench_run):
    """nohup (SIGHUP ignored) is how many nightly jobs start: a hangup mid-case must not end the
    session. Rank 1 hangs in broadcast for --timeout 5 s while the hangup arrives."""
    child = subprocess.Popen(bench_run.command("--backend", "gloo", "--ops", "all_reduce,broadcast", "--sizes", "8",
                                               "--timeout", "5", target="benches/test_collectives.py"),
                             cwd=ROOT, env=bench_run.env({"HCCL_BENCH_FAULT": "hang:1:broadcast"}),
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
    _wait_for(lambda: bench_run.rank_said("asked this rank to hang in broadcast"), what="rank 1 to hang in broadcast")
    child.send_signal(signal.SIGHUP)
    output = child.communicate(timeout=120)[0]
    assert child.returncode == 1 and "1 failed, 1 passed" in output, output[-2000:]   # the hang, reported; no interrupt
    meta = json.loads(next(bench_run.results.glob("*/results.json")).read_text())["hccl_bench"]
    assert meta["complete"] is True and meta["interrupted"] is None
    assert bench_run.leftovers() == []
