"""Driver <-> rank control: newline-delimited JSON objects over TCP, gated by a session token.

JSON only: nothing that arrives on a socket is ever unpickled. The driver's port is open to any
local user, so the start-up accept treats every connection as hostile until it shows the token:
all connections are served at once from one selector (a slow or silent one never delays the
ranks), each under its own short deadline and the group's, and a connection whose first bytes
are not the token line is dropped at once. Two kinds of connection authenticate: rank 0's
control channel, and one watch connection per rank that the driver never writes to; when the
driver dies its end closes and every rank exits (no orphans under any launcher).
"""
from __future__ import annotations

import json
import os
import secrets
import selectors
import socket
import threading
import time
from collections.abc import Callable

MAX_LINE = 64 << 20          # an authenticated message (a case's results for many ranks)
HELLO_TIMEOUT_S = 5.0        # a connection must authenticate this fast
MAX_PENDING = 256            # unauthenticated connections held at once; the oldest goes first
DRIVER_GONE_EXIT = 70        # a rank's exit status when its driver vanished


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
        try:
            self.sock.close()
        except OSError:
            pass


def connect(host: str, port: int, token: str, hello: dict, timeout: float = 60.0) -> Channel:
    sock = socket.create_connection((host, port), timeout=timeout)
    chan = Channel(sock)
    chan.send({"token": token, **hello})   # the token first: the driver checks it before reading on
    return chan


def watch_driver(host: str, port: int, token: str, rank: int, log=print) -> socket.socket:
    """Rank side: a connection the driver holds open for the group's life. A daemon thread blocks
    on it and ends the process when it closes, also while the main thread is stuck in a collective."""
    chan = connect(host, port, token, {"watch": rank})
    chan.sock.settimeout(None)

    def wait_for_close() -> None:
        try:
            while chan.sock.recv(1 << 10):
                pass
        except OSError:
            pass
        log(f"hccl-bench: rank {rank}: the driver's connection closed; exiting")
        os._exit(DRIVER_GONE_EXIT)

    threading.Thread(target=wait_for_close, name="hccl-bench-watch", daemon=True).start()
    return chan.sock


class _Pending:
    def __init__(self, sock: socket.socket):
        self.sock, self.buf, self.deadline = sock, b"", time.monotonic() + HELLO_TIMEOUT_S


def accept_group(listener: socket.socket, token: str, deadline: float, check: Callable[[], None],
                 expected_watches: int | None = None) -> tuple[Channel, dict, list[socket.socket]]:
    """Serve connections until rank 0's hello and every rank's watch connection have arrived:
    (control channel, hello, watch sockets). `check` runs between waits (raises if ranks died);
    TimeoutError at `deadline`. Unauthenticated, slow, oversized or malformed connections are
    dropped without delaying anyone."""
    prefix = b'{"token":"' + token.encode() + b'",'
    sel = selectors.DefaultSelector()
    listener.setblocking(False)
    sel.register(listener, selectors.EVENT_READ)
    pending: dict[socket.socket, _Pending] = {}
    watches: dict[int, socket.socket] = {}
    control: tuple[Channel, dict] | None = None

    def drop(sock: socket.socket) -> None:
        pending.pop(sock, None)
        sel.unregister(sock)
        sock.close()

    try:
        while True:
            if control and len(watches) >= control[1]["world"]:
                return control[0], control[1], list(watches.values())
            now = time.monotonic()
            if now > deadline:
                raise TimeoutError(f"{len(watches)} of {control[1]['world']} ranks connected" if control
                                   else "rank 0 did not connect")
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
                if "watch" in hello and isinstance(hello["watch"], int) and hello["watch"] not in watches:
                    watches[hello["watch"]] = item.sock
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
        except (BlockingIOError, InterruptedError):
            return
        except OSError:  # EMFILE and the like: serve what is pending, try again on the next wake-up
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


def _valid_control_hello(hello: dict) -> bool:
    ranks, world = hello.get("ranks"), hello.get("world")
    return (isinstance(world, int) and world >= 1 and isinstance(ranks, list) and len(ranks) == world
            and all(isinstance(r, dict) and isinstance(r.get("rank"), int) for r in ranks))
