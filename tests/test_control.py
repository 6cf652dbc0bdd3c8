"""The watch tree (harness/engine/control.py) with real processes: one watch connection per node reaches
the driver, a host leader's death ends exactly its followers, and the driver's end closing ends
them all. Then a real 8-rank MPI group: the driver holds one watch connection."""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest

from harness.engine import control
from tests.conftest import ROOT

RANK = """
import json, sys, time
from harness.engine import control
token, rank, port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
post = control.open_post(token, rank)
print(json.dumps(control.whoami()), flush=True)
peers = json.loads(sys.stdin.readline())            # what the ranks' gather would give every rank
watch = control.join_watch(post, ("127.0.0.1", port, token), rank, peers, log=lambda line: print(line, flush=True))
print("watched by", watch.leader, flush=True)
time.sleep(600)
"""


class Ranks:
    """`n` rank processes that join the tree with the node keys given (all really on this machine)."""

    def __init__(self, n: int, nodes: list[str]):
        self.token = os.urandom(16).hex()
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        port = self.listener.getsockname()[1]
        self.procs = [subprocess.Popen([sys.executable, "-c", RANK, self.token, str(r), str(port)], cwd=ROOT,
                                       env={**os.environ, "PYTHONPATH": str(ROOT)}, stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(n)]
        self.peers = [{**json.loads(p.stdout.readline()), "node": node} for p, node in zip(self.procs, nodes)]

    def join(self):
        for p in self.procs:
            if p.poll() is not None:
                continue
            p.stdin.write(json.dumps(self.peers) + "\n")
            p.stdin.flush()

    def watches(self, expect: int) -> dict[int, tuple[socket.socket, dict]]:
        """The watch connections that reach the driver: `expect` of them, then none for a second more."""
        found = {}
        self.listener.settimeout(30)
        while len(found) < expect:
            conn, _ = self.listener.accept()
            hello = json.loads(conn.makefile().readline())
            assert hello.pop("token") == self.token
            found[hello["watch"]] = (conn, hello)
        self.listener.settimeout(1.0)
        with pytest.raises(socket.timeout):   # not TimeoutError on 3.9
            self.listener.accept()
        return found

    def watched(self) -> list[str]:
        return [p.stdout.readline().strip() for p in self.procs]

    def exits(self, ranks, timeout: float = 15.0) -> dict[int, tuple[int, str]]:
        return {r: (self.procs[r].wait(timeout=timeout), self.procs[r].stdout.read()) for r in ranks}

    def alive(self) -> list[int]:
        return [r for r, p in enumerate(self.procs) if p.poll() is None]

    def close(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait()
            for stream in (p.stdin, p.stdout):
                stream.close()
        self.listener.close()


def test_one_watch_connection_per_node_and_a_leaders_death_ends_its_followers():
    """Ranks 0-1 and 2-4 are two nodes: two watch connections, each naming its followers. An
    impostor on leader 2's socket gets nothing and delays nobody. SIGKILL of leader 2 ends ranks
    3 and 4 (status 70) and nothing else; closing the driver's end of leader 0 then ends 0 and 1."""
    ranks = Ranks(5, ["a", "a", "b", "b", "b"])
    try:
        impostor = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        impostor.connect(control.post_name(ranks.token, 2))   # in the backlog before the real followers
        ranks.join()
        watches = ranks.watches(expect=2)
        assert {r: hello for r, (_, hello) in watches.items()} == {0: {"watch": 0, "followers": [1]},
                                                                  2: {"watch": 2, "followers": [3, 4]}}
        assert ranks.watched() == ["watched by 0", "watched by 0", "watched by 2", "watched by 2", "watched by 2"]
        impostor.settimeout(5)
        msg, fds, _, _ = socket.recv_fds(impostor, 16, 1)
        assert (msg, fds) == (b"", [])                       # closed on sight, no descriptor
        impostor.close()

        ranks.procs[2].send_signal(signal.SIGKILL)
        ended = ranks.exits([3, 4])
        assert all(code == control.DRIVER_GONE_EXIT and "its host leader, rank 2, exited" in out
                   for code, out in ended.values()), ended
        time.sleep(0.5)
        assert ranks.alive() == [0, 1]

        watches[0][0].close()                                # the driver's end, as when the driver dies
        ended = ranks.exits([0, 1])
        assert ended[0][0] == ended[1][0] == control.DRIVER_GONE_EXIT, ended
        assert "the driver's connection closed" in ended[0][1] and "its host leader, rank 0, exited" in ended[1][1]
    finally:
        ranks.close()


def test_a_follower_whose_leader_is_gone_exits_at_once():
    """The leader dies before its followers take the pipe: they find no socket and exit (status 70)."""
    ranks = Ranks(3, ["a", "a", "a"])
    try:
        ranks.procs[0].kill()
        ranks.procs[0].wait()
        ranks.join()
        ended = ranks.exits([1, 2])
        assert all(code == control.DRIVER_GONE_EXIT and "its host leader, rank 0, is gone" in out
                   for code, out in ended.values()), ended
    finally:
        ranks.close()


def test_the_driver_waits_for_every_rank_to_be_watched():
    """accept_group returns only when the watches cover every rank; overlapping claims are refused."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    port, token = listener.getsockname()[1], "ab" * 16
    rank0 = control.connect("127.0.0.1", port, token, {"world": 4, "ranks": [{"rank": r} for r in range(4)]})
    first = control.connect("127.0.0.1", port, token, {"watch": 0, "followers": [1]})
    overlap = control.connect("127.0.0.1", port, token, {"watch": 1, "followers": [2, 3]})
    with pytest.raises(TimeoutError, match="2 of 4 ranks watched, by 1 host leaders"):
        control.accept_group(listener, token, time.monotonic() + 2, lambda: None)
    for sock in (rank0.sock, first.sock, overlap.sock):
        sock.close()
    rank0 = control.connect("127.0.0.1", port, token, {"world": 4, "ranks": [{"rank": r} for r in range(4)]})
    others = [control.connect("127.0.0.1", port, token, {"watch": w, "followers": f}) for w, f in ((0, [1]), (2, [3]))]
    chan, hello, watches = control.accept_group(listener, token, time.monotonic() + 30, lambda: None)
    assert hello["world"] == 4 and len(watches) == 2
    for sock in [rank0.sock, *(o.sock for o in others), *watches]:
        sock.close()
    chan.close()
    listener.close()


@pytest.mark.slow
def test_an_mpi_group_of_8_ranks_on_one_host_costs_the_driver_one_watch_socket(bench_run):
    proc = bench_run("--backend", "mpi", "--nproc", "8", "--ops", "all_reduce", "--sizes", "8",
                     target="benches/test_collectives.py", timeout=300)
    assert proc.returncode == 0, proc.output[-3000:]
    lines = [line for log in bench_run.results.glob("*/logs/*/driver.log") for line in log.read_text().splitlines()]
    assert len(lines) == 1, lines
    m = re.search(r"8 ranks on 1 host started in [0-9.]+ s; watch connections (\d+); driver open sockets (\d+)", lines[0])
    assert m, lines[0]
    watches, sockets = map(int, m.groups())
    assert watches == 1 and sockets <= watches + 3, lines[0]   # + rank 0's control channel and little else
    assert bench_run.leftovers() == []


def test_the_watch_connection_finds_a_vanished_driver_by_keepalive():
    """A real TCP connection gets keepalive probes: a driver gone without a FIN is noticed."""
    import socket as socketlib

    from harness.engine.control import KEEPALIVE, keep_alive
    server = socketlib.create_server(("127.0.0.1", 0))
    client = socketlib.create_connection(server.getsockname())
    try:
        keep_alive(client)
        assert client.getsockopt(socketlib.SOL_SOCKET, socketlib.SO_KEEPALIVE) == 1
        for name, value in KEEPALIVE:
            assert client.getsockopt(socketlib.IPPROTO_TCP, getattr(socketlib, name)) == value
    finally:
        client.close()
        server.close()
