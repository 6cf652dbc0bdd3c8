"""Driver <-> rank 0 control channel: newline-delimited JSON over TCP, gated by a session token.

JSON only: nothing that arrives on a socket is ever unpickled.
"""
from __future__ import annotations

import json
import socket

MAX_LINE = 64 << 20


class ChannelClosed(ConnectionError):
    pass


class Channel:
    def __init__(self, sock: socket.socket):
        self.sock = sock
        self._buf = b""

    def send(self, obj) -> None:
        self.sock.sendall(json.dumps(obj, separators=(",", ":")).encode() + b"\n")

    def recv(self, timeout: float | None = None):
        """One message; socket.timeout if none arrives within `timeout` seconds."""
        self.sock.settimeout(timeout)
        while b"\n" not in self._buf:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise ChannelClosed("peer closed the control connection")
            self._buf += chunk
            if len(self._buf) > MAX_LINE:
                raise ChannelClosed("control message too long")
        line, self._buf = self._buf.split(b"\n", 1)
        return json.loads(line)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def connect(host: str, port: int, token: str, hello: dict, timeout: float = 60.0) -> Channel:
    sock = socket.create_connection((host, port), timeout=timeout)
    chan = Channel(sock)
    chan.send({"token": token, **hello})
    return chan
