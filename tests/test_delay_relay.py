"""The link-delay relay (harness/cluster/delay_relay.py): its queue (fast), and on the emulated cluster (slow,
root, /dev/net/tun) a delayed host's round trips grow by the delay both ways, and `down` ends the
relay and its device exactly, also one killed by SIGKILL. Run the slow ones under the cluster lock
(`flock /tmp/hccl-cluster.lock pytest ...`)."""
import json
import os
import signal
import subprocess
import sys

import pytest

from harness.cluster.delay_relay import DelayQueue, parse_delay
from tests.conftest import ROOT
from tests.test_cluster import SKIP, cluster, leftovers


def test_delay_parses_as_tc_writes_it():
    parsed = [parse_delay(text) for text in ("1ms", "200us", "0.5s", "0ms")]
    assert parsed == pytest.approx([1e-3, 2e-4, 0.5, 0.0])
    for bad in ("1", "1 ms", "-1ms", "1min"):
        with pytest.raises(ValueError, match="delay"):
            parse_delay(bad)


def test_the_queue_holds_each_frame_its_delay_and_keeps_arrival_order():
    queue = DelayQueue(0.002, limit=3)
    for i, now in enumerate((10.0, 10.0005, 10.001, 10.0012)):
        queue.push(b"%d" % i, now)
    assert queue.dropped == 1 and queue.next_release() == pytest.approx(10.002)   # the fourth is past the limit
    assert queue.due(10.0019) == []
    assert queue.due(10.0026) == [b"0", b"1"]
    assert queue.due(10.01) == [b"2"] and queue.next_release() is None


def _relay_skip() -> str:
    if SKIP:
        return SKIP
    return "" if os.path.exists("/dev/net/tun") else "no /dev/net/tun: the delay relay needs TAP devices"


def _rtt_ms() -> float:
    proc = subprocess.run([sys.executable, "-m", "harness.cluster", "exec", "node1", "--", sys.executable,
                           str(ROOT / "scripts" / "relay_check.py"), "--ping", "node2", "--pings", "20"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout)["median_ms"]


def _relays() -> list[str]:
    found = subprocess.run(["pgrep", "-a", "-f", "harness.cluster.delay_relay"], capture_output=True, text=True)
    return found.stdout.splitlines()


@pytest.fixture
def relayed(monkeypatch):
    """Delays through the relay (forced, so netem kernels test it too); no cluster before or after,
    and no relay, TAP or namespace left on any path."""
    if _relay_skip():
        pytest.skip(_relay_skip())
    monkeypatch.setenv("HCCL_BENCH_CLUSTER_RELAY", "1")
    cluster("down")
    yield
    cluster("down")
    assert _relays() == [] and leftovers() == []


@pytest.mark.slow
def test_a_relayed_delay_grows_round_trips_and_down_ends_the_relay(relayed):
    """node2 at 1gbit,20ms through the relay: ping node1 -> node2 grows by about 2 x 20 ms (both
    directions, as netem on eth0 and the veth); after a SIGKILL of the relay, `down` says so and
    removes its TAP."""
    cluster("up", "--hosts", "2", "--link", "1gbit")
    plain = _rtt_ms()
    cluster("down")
    up = json.loads(cluster("up", "--hosts", "2", "--link", "1gbit", "--slow", "node2=1gbit,20ms", "--json").stdout)
    assert [h.get("delay_via") for h in up["hosts"]] == [None, "relay"]
    delayed = _rtt_ms()
    print(f"ping node1 -> node2: {plain:.3f} ms plain, {delayed:.3f} ms with node2 at +20 ms each way")
    # a frame never leaves the relay early: at least the delay both ways. How late the relay (a
    # Python process) wakes is the scheduler's, a time slice or more per frame on a busy machine, so
    # the upper bound is halfway to a delay held twice in each direction (+80 ms): 20 ms of lateness
    # in the median round trip, several slices; a 2 ms delay left it 3 ms, about one slice
    assert delayed - plain >= 2 * 20 * 0.9, (plain, delayed)
    assert delayed - plain < 2 * 20 + 20, (plain, delayed)
    (relay,) = [d for d in json.loads(cluster("status").stdout)["daemons"] if d["what"] == "delay relay node2"]
    assert relay["alive"] and any(str(relay["pid"]) in line for line in _relays())
    os.kill(relay["pid"], signal.SIGKILL)
    down = cluster("down")
    assert f"daemon delay relay node2 (pid {relay['pid']}, had already ended)" in down.stdout, down.stdout
    assert "relay device hbc2t" in down.stdout and down.stderr == ""
    assert subprocess.run(["ip", "link", "show", "hbc2t"], capture_output=True).returncode != 0


@pytest.mark.slow
def test_down_ends_a_running_relay_and_removes_its_device(relayed):
    cluster("up", "--hosts", "2", "--link", "1gbit,1ms")
    assert len(_relays()) == 2
    down = cluster("down")
    assert "daemon delay relay node1" in down.stdout and "relay device hbc1t" in down.stdout
