"""Driver <-> rank control: newline-delimited JSON objects over TCP, gated by a session token.

JSON only: nothing that arrives on a socket is ever unpickled. Two kinds of connection
authenticate: rank 0's control channel, and one watch connection per host leader (the watch
tree, and why it is shaped so: docs/faults.md).
"""
from __future__ import annotations

import hashlib
import json
import os
import secrets
import selectors
import socket
import struct
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

from collectives.device import machine_id
from harness.engine.shm import release_own
from schema.exit_codes import ExitCode

MAX_LINE = 64 << 20          # an authenticated message (a case's results for many ranks)
HELLO_TIMEOUT_S = 5.0        # a connection must authenticate this fast
MAX_PENDING = 256            # unauthenticated connections held at once; the oldest goes first
DRIVER_GONE_EXIT = ExitCode.DRIVER_GONE   # a rank's exit status when its driver (or its host leader) vanished
HANDOFF_TIMEOUT_S = 120.0    # how long a leader serves its followers' hand-offs (the group's start-up limit)
FOLLOWERS_EXIT_S = 5.0       # how long a leader, closing normally, waits for its followers to exit first


class ChannelClosed(ConnectionError):
    pass


def _message(line: bytes) -> dict:
    try:
        obj = json.loads(line)
    except ValueError:
        raise ChannelClosed("control message is not JSON") from None
    if not isinstance(obj, dict):
        raise ChannelClosed(f"control message is a JSON {type(obj).__name__}, not an object")
    return obj


class Channel:
    def __init__(self, sock: socket.socket, buffered: bytes = b""):
        self.sock = sock
        self._buf = buffered

    def send(self, obj) -> None:
        self.sock.sendall(json.dumps(obj, separators=(",", ":")).encode() + b"\n")

    def recv(self, timeout: float | None = None) -> dict:
        """One JSON object; socket.timeout if none arrives within `timeout` seconds."""
        self.sock.settimeout(timeout)
        while b"\n" not in self._buf:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise ChannelClosed("peer closed the control connection")
            self._buf += chunk
            if len(self._buf) > MAX_LINE:
                raise ChannelClosed("control message too long")
        line, self._buf = self._buf.split(b"\n", 1)
        return _message(line)

    def close(self) -> None:
        with suppress(OSError):
            self.sock.close()


def connect(host: str, port: int, token: str, hello: dict, timeout: float = 60.0) -> Channel:
    chan = Channel(socket.create_connection((host, port), timeout=timeout))
    chan.send({"token": token, **hello})   # the token first: the driver checks it before reading on
    return chan


KEEPALIVE = (("TCP_KEEPIDLE", 30), ("TCP_KEEPINTVL", 10), ("TCP_KEEPCNT", 3))   # seconds, seconds, probes


def keep_alive(sock: socket.socket) -> None:
    """A driver that vanished with its network never closes the connection: TCP keepalive declares it
    gone after about a minute of unanswered probes, and the watch thread ends the ranks."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name, value in KEEPALIVE:
        if hasattr(socket, name):   # Linux names; elsewhere the system's defaults apply
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), value)


def watch_driver(host: str, port: int, token: str, rank: int, log=print, followers: list[int] | None = None) -> socket.socket:
    """Rank side (a host leader): a connection the driver holds open for the group's life, naming
    the ranks this one watches for; the process ends when it closes (_exit_when_closed)."""
    chan = connect(host, port, token, {"watch": rank, "followers": list(followers or [])})
    chan.sock.settimeout(None)
    keep_alive(chan.sock)
    _exit_when_closed(lambda: chan.sock.recv(1 << 10), f"hccl-bench: rank {rank}: the driver's connection closed; exiting",
                      log, "hccl-bench-watch")
    return chan.sock


def _exit_when_closed(read: Callable[[], bytes], message: str, log, name: str) -> None:
    """A daemon thread that blocks on `read` and ends the process (status 70) when it returns
    nothing or fails, also while the main thread is stuck in a collective."""
    def wait_for_close() -> None:
        with suppress(OSError):
            while read():
                pass
        log(message)
        release_own()
        os._exit(DRIVER_GONE_EXIT)

    threading.Thread(target=wait_for_close, name=name, daemon=True).start()


# -- the watch tree: one leader per node watches the driver, its followers watch the leader

def node_key() -> str:
    """Where an abstract Unix socket and a pid reach: this kernel (its boot id), network and pid namespace."""
    parts = [machine_id()]
    for ns in ("net", "pid"):
        try:
            parts.append(str(os.stat(f"/proc/self/ns/{ns}").st_ino))
        except OSError:
            parts.append("")
    return ":".join(parts)


def post_name(token: str, rank: int) -> str:
    """A rank's abstract socket name. Abstract names are listed in /proc/net/unix for every local
    user to read, so the name is a hash of the token, never the token itself."""
    return f"\0hccl-bench-{hashlib.sha256(f'{token}:post'.encode()).hexdigest()[:32]}-{rank}"


def open_post(token: str, rank: int) -> socket.socket:
    """Every rank, before the node keys are gathered: listen on this rank's abstract name, so the
    rank that turns out to lead its node is already listening when its followers connect."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(post_name(token, rank))
        sock.listen(socket.SOMAXCONN)
    except OSError:
        sock.close()
        raise
    return sock


def whoami() -> dict:
    """What a rank contributes to the node gather: its node key, machine (kernel) and pid."""
    return {"node": node_key(), "machine": machine_id(), "pid": os.getpid()}


@dataclass
class Watch:
    """This rank's place in the watch tree."""
    rank: int
    leader: int
    followers: dict[int, int] = field(default_factory=dict)   # a leader's followers: rank -> pid

    def release(self, timeout: float = FOLLOWERS_EXIT_S) -> None:
        """A leader closing normally: wait (bounded) for its followers to exit first, so that none
        of them reads the leader's exit as a lost driver."""
        deadline = time.monotonic() + timeout
        while any(running(pid) for pid in self.followers.values()) and time.monotonic() < deadline:
            time.sleep(0.05)


def join_watch(post: socket.socket, driver: tuple[str, int, str], rank: int, peers: list[dict], log=print) -> Watch:
    """Take this rank's place in the tree from `peers` (every rank's `whoami`, in rank order): the
    lowest rank of a node leads it, the others follow. The process exits (70) if its leader is gone."""
    if not (isinstance(peers, list) and len(peers) > rank and all(isinstance(p, dict) for p in peers)):
        raise ValueError(f"rank {rank}: malformed node list from the gather")
    mine = peers[rank].get("node")
    group = [r for r, p in enumerate(peers) if p.get("node") == mine]
    if group[0] != rank:
        post.close()
        _follow(driver[2], rank, group[0], log)
        return Watch(rank, group[0])
    followers = {r: int(peers[r]["pid"]) for r in group[1:]}
    watch_driver(driver[0], driver[1], driver[2], rank, log, followers=sorted(followers))
    read_end, write_end = os.pipe()          # the write end is this process's alone: it closes when the leader ends
    os.register_at_fork(after_in_child=lambda: os.close(write_end))   # a forked child must not keep the followers alive
    threading.Thread(target=_hand_off, args=(post, read_end, set(followers.values())),
                     name="hccl-bench-lead", daemon=True).start()
    return Watch(rank, rank, followers)


def _hand_off(post: socket.socket, read_end: int, pids: set[int]) -> None:
    """Give the pipe's read end to each follower once; anyone else is closed on sight."""
    deadline = time.monotonic() + HANDOFF_TIMEOUT_S
    try:
        with suppress(OSError):
            while pids and (left := deadline - time.monotonic()) > 0:
                post.settimeout(left)
                try:
                    conn, _ = post.accept()
                except socket.timeout:   # not TimeoutError on 3.9
                    break
                with conn, suppress(OSError):
                    pid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))[0]
                    if pid in pids:
                        conn.settimeout(1.0)
                        socket.send_fds(conn, [b"w"], [read_end])
                        pids.discard(pid)
    finally:
        post.close()
        os.close(read_end)


def _follow(token: str, rank: int, leader: int, log) -> None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(HANDOFF_TIMEOUT_S)
    fds: list[int] = []
    with sock, suppress(OSError):
        sock.connect(post_name(token, leader))
        fds = socket.recv_fds(sock, 16, 1)[1]
    if not fds:
        log(f"hccl-bench: rank {rank}: its host leader, rank {leader}, is gone; exiting")
        release_own()
        os._exit(DRIVER_GONE_EXIT)
    os.set_inheritable(fds[0], False)
    _exit_when_closed(lambda: os.read(fds[0], 1 << 10),
                      f"hccl-bench: rank {rank}: its host leader, rank {leader}, exited; exiting", log, "hccl-bench-follow")


def running(pid: int) -> bool:
    """Alive and not a zombie (a local rank stays one until the driver reaps it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2:][:1] not in ("Z", "X", "")


class _Pending:
    def __init__(self, sock: socket.socket):
        self.sock, self.buf, self.deadline = sock, b"", time.monotonic() + HELLO_TIMEOUT_S


def accept_group(listener: socket.socket, token: str, deadline: float,
                 check: Callable[[], None]) -> tuple[Channel, dict, list[socket.socket]]:
    """Serve connections until rank 0's hello has arrived and the host leaders' watches cover every rank:
    (control channel, hello, watch sockets). `check` runs between waits (raises if ranks died); TimeoutError
    at `deadline`. Unauthenticated, slow, oversized or malformed connections are dropped at once."""
    prefix = b'{"token":"' + token.encode() + b'",'
    sel = selectors.DefaultSelector()
    listener.setblocking(False)
    sel.register(listener, selectors.EVENT_READ)
    pending: dict[socket.socket, _Pending] = {}
    watches: dict[int, socket.socket] = {}   # leader rank -> its watch connection
    covered: set[int] = set()                # the leaders and the followers they watch for
    control: tuple[Channel, dict] | None = None

    def drop(sock: socket.socket) -> None:
        pending.pop(sock, None)
        sel.unregister(sock)
        sock.close()

    try:
        while True:
            if control and covered >= set(range(control[1]["world"])):
                return control[0], control[1], list(watches.values())
            now = time.monotonic()
            if now > deadline:
                raise TimeoutError(f"{len(covered)} of {control[1]['world']} ranks watched, by {len(watches)} host leaders"
                                   if control else "rank 0 did not connect")
            check()
            for key, _ in sel.select(timeout=min(0.2, max(0.0, deadline - now))):
                if key.fileobj is listener:
                    _accept_all(listener, sel, pending, drop)
                    continue
                item = pending[key.fileobj]  # type: ignore[index]  # every other registered object is a pending socket
                hello = _read_hello(item, prefix)
                if hello is None:
                    continue
                if hello is False:
                    drop(item.sock)
                    continue
                sel.unregister(item.sock)
                del pending[item.sock]
                item.sock.setblocking(True)
                if (ranks := _watched_ranks(hello)) and not ranks & covered:
                    watches[hello["watch"]] = item.sock
                    covered |= ranks
                elif control is None and _valid_control_hello(hello):
                    control = (Channel(item.sock, item.buf), hello)
                else:
                    item.sock.close()
            for item in [p for p in pending.values() if p.deadline < time.monotonic()]:
                drop(item.sock)
    except BaseException:
        for sock in watches.values():
            sock.close()
        if control:
            control[0].close()
        raise
    finally:
        for sock in list(pending):
            drop(sock)
        sel.close()


def _accept_all(listener, sel, pending, drop) -> None:
    while True:
        try:
            sock, _ = listener.accept()
        except OSError:  # none left (EAGAIN), or EMFILE and the like: serve what is pending, try again on the next wake-up
            return
        sock.setblocking(False)
        if len(pending) >= MAX_PENDING:
            drop(next(iter(pending)))
        pending[sock] = _Pending(sock)
        sel.register(sock, selectors.EVENT_READ)


def _read_hello(item: _Pending, prefix: bytes):
    """The hello dict; None while incomplete; False to drop (closed, not ours, too long, not an object)."""
    try:
        chunk = item.sock.recv(1 << 16)
    except (BlockingIOError, InterruptedError):
        return None
    except OSError:
        return False
    if not chunk:
        return False
    item.buf += chunk
    head = item.buf[:len(prefix)]
    if not secrets.compare_digest(head, prefix[:len(head)]):
        return False
    if b"\n" not in item.buf:
        return None if len(item.buf) <= MAX_LINE else False
    line, item.buf = item.buf.split(b"\n", 1)
    if len(line) < len(prefix):
        return False
    try:
        return _message(line)
    except ChannelClosed:
        return False


def _watched_ranks(hello: dict) -> set[int]:
    """The ranks a leader's watch hello covers (itself and its followers); empty if it is not one."""
    leader, followers = hello.get("watch"), hello.get("followers", [])
    if not (isinstance(leader, int) and isinstance(followers, list) and all(isinstance(r, int) for r in followers)):
        return set()
    ranks = {leader, *followers}
    return ranks if len(ranks) == len(followers) + 1 else set()


def _valid_control_hello(hello: dict) -> bool:
    ranks, world = hello.get("ranks"), hello.get("world")
    return (isinstance(world, int) and world >= 1 and isinstance(ranks, list) and len(ranks) == world
            and all(isinstance(r, dict) and isinstance(r.get("rank"), int) for r in ranks))
