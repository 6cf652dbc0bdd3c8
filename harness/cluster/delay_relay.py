"""A link delay without netem: a userspace relay that holds every frame of one emulated host's link
for D, both directions, so it and netem are interchangeable. How it sits between the veth and a TAP
and what it costs: docs/clusters.md ("The delay relay"). Plain ioctl, no dependency. Needs root.

  python -m harness.cluster.delay_relay --dev VETH --tap TAP --delay 1ms
"""
from __future__ import annotations

import argparse
import collections
import fcntl
import os
import re
import select
import signal
import socket
import struct
import sys
import time
from dataclasses import dataclass, field

from schema.exit_codes import ExitCode

TUNSETIFF = 0x400454CA
TUNSETOFFLOAD = 0x400454D0
IFF_TAP, IFF_NO_PI, IFF_VNET_HDR = 0x0002, 0x1000, 0x4000
TUN_F_CSUM, TUN_F_TSO4, TUN_F_TSO6, TUN_F_TSO_ECN = 0x01, 0x02, 0x04, 0x08
SOL_PACKET, PACKET_VNET_HDR, PACKET_IGNORE_OUTGOING = 263, 15, 23
ETH_P_ALL = 0x0003
LIMIT = 10000          # frames held per direction, as the netem path's `limit 10000`; past it a frame is dropped
BATCH = 64             # frames read per device per wake-up, so neither side starves the other's releases
FRAME_MAX = 65536 + 64
UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0}


def parse_delay(text: str) -> float:
    """`1ms`, `200us`, `0.5s` (as tc writes them) in seconds."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(us|ms|s)", text)
    if not match:
        raise ValueError(f"delay {text!r}: give a number with us, ms or s (e.g. 1ms, 200us)")
    return float(match.group(1)) * UNITS[match.group(2)]


@dataclass
class DelayQueue:
    """Frames held `delay` seconds from arrival, released in arrival order; at most `limit` held."""
    delay: float
    limit: int = LIMIT
    frames: collections.deque = field(default_factory=collections.deque)
    dropped: int = 0

    def push(self, frame: bytes, now: float) -> None:
        if len(self.frames) >= self.limit:
            self.dropped += 1
            return
        self.frames.append((now + self.delay, frame))

    def due(self, now: float) -> list[bytes]:
        out = []
        while self.frames and self.frames[0][0] <= now:
            out.append(self.frames.popleft()[1])
        return out

    def next_release(self) -> float | None:
        return self.frames[0][0] if self.frames else None


def open_tap(name: str) -> int:
    """Attach to the TAP `name` (made by `ip tuntap add ... vnet_hdr` or made here), offloads on."""
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TAP | IFF_NO_PI | IFF_VNET_HDR))
    fcntl.ioctl(fd, TUNSETOFFLOAD, TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6 | TUN_F_TSO_ECN)
    return fd


def open_dev(name: str) -> socket.socket:
    """Every frame arriving on `name` (not the ones this relay sends out of it), with its virtio-net header."""
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    sock.setsockopt(SOL_PACKET, PACKET_VNET_HDR, 1)
    sock.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
    for opt in (33, 32):   # SO_RCVBUFFORCE, SO_SNDBUFFORCE: room for a burst at the link's rate
        sock.setsockopt(socket.SOL_SOCKET, opt, 32 << 20)
    sock.bind((name, ETH_P_ALL))
    sock.setblocking(False)
    return sock


def relay(tap: int, dev: socket.socket, delay: float) -> None:
    """Until SIGTERM: VETH -> TAP (the host's egress) and TAP -> VETH (its ingress), each through a DelayQueue."""
    up, down = DelayQueue(delay), DelayQueue(delay)
    dev_fd = dev.fileno()
    # (queue, where its frames go, the descriptor that fills it, how to read a frame from that)
    ways = ((up, lambda frame: os.write(tap, frame), dev_fd, lambda: dev.recv(FRAME_MAX)),
            (down, dev.send, tap, lambda: os.read(tap, FRAME_MAX)))
    while True:
        now = time.monotonic()
        for queue, send, _, _ in ways:
            for frame in queue.due(now):
                try:
                    send(frame)
                except OSError:   # a link that is down or full drops it too (TAP not up: EIO; veth: EAGAIN, ENOBUFS)
                    queue.dropped += 1
        nexts = [t for t in (up.next_release(), down.next_release()) if t is not None]
        timeout = max(0.0, min(nexts) - time.monotonic()) if nexts else None
        readable, _, _ = select.select([tap, dev_fd], [], [], timeout)
        now = time.monotonic()
        for queue, _, fd, read in ways:
            for _ in range(BATCH if fd in readable else 0):
                try:
                    queue.push(read(), now)
                except BlockingIOError:
                    break


def main(argv: list[str] | None = None) -> ExitCode:
    parser = argparse.ArgumentParser(prog="python -m harness.cluster.delay_relay", description=__doc__.split("\n\n")[0])
    parser.add_argument("--dev", required=True, help="the bridge side of the host's veth (out of the bridge)")
    parser.add_argument("--tap", required=True, help="the TAP device that is the host's bridge port")
    parser.add_argument("--delay", required=True, help="held this long each way: 1ms, 200us")
    args = parser.parse_args(argv)
    try:
        delay = parse_delay(args.delay)
        tap, dev = open_tap(args.tap), open_dev(args.dev)
    except (ValueError, OSError) as exc:
        print(f"delay_relay: {exc}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print(f"ready: {args.dev} <-> {args.tap}, {delay * 1e3:g} ms each way", flush=True)
    relay(tap, dev, delay)
    return ExitCode.OK


if __name__ == "__main__":
    sys.exit(main())
