"""The canary: a fixed workload measured beside every --benchmark sweep, so a history can tell a change
of the machine from one of the software stack (reports/canary.py; docs/options.md, The canary)."""
from __future__ import annotations

import socket
import threading
import time

import numpy as np

VERSION = 2                   # 2: samples before and after the sweep (spanning); 1: before it only
SAMPLES = 7
COPY_BYTES = 32 << 20         # one sample: 2 copies of 32 MiB (past the caches)
COPIES = 2
EXCHANGE_BYTES = 4 << 10      # one sample: 50 round trips of 4 KiB
ROUND_TRIPS = 50
LOOP_N = 300_000             # one sample: a pure-Python loop of this many steps


def _memory() -> tuple[list[float], dict]:
    src = np.ones(COPY_BYTES // 8)
    dst = np.empty_like(src)
    np.copyto(dst, src)   # fault the pages in before timing
    samples = []
    for _ in range(SAMPLES):
        t0 = time.perf_counter()
        for _ in range(COPIES):
            np.copyto(dst, src)
        samples.append(time.perf_counter() - t0)
    return samples, {"bytes": COPY_BYTES * COPIES, "unit": "GB/s"}


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = sock.recv(n - got)
        if not chunk:
            raise ConnectionError("the canary's loopback peer closed")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _loopback() -> tuple[list[float], dict]:
    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname()[:2], timeout=30)
    peer, _ = server.accept()
    server.close()
    total = SAMPLES * ROUND_TRIPS + 1

    def echo() -> None:
        for _ in range(total):
            peer.sendall(_recv_exactly(peer, EXCHANGE_BYTES))

    thread = threading.Thread(target=echo, daemon=True)
    thread.start()
    message = b"x" * EXCHANGE_BYTES
    try:
        for sock in (client, peer):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        client.sendall(message)
        _recv_exactly(client, EXCHANGE_BYTES)   # warm
        samples = []
        for _ in range(SAMPLES):
            t0 = time.perf_counter()
            for _ in range(ROUND_TRIPS):
                client.sendall(message)
                _recv_exactly(client, EXCHANGE_BYTES)
            samples.append(time.perf_counter() - t0)
    finally:
        thread.join(timeout=30)
        client.close()
        peer.close()
    return samples, {"round_trips": ROUND_TRIPS, "bytes": EXCHANGE_BYTES, "unit": "us per round trip"}


def _compute() -> tuple[list[float], dict]:
    samples = []
    for _ in range(SAMPLES):
        t0 = time.perf_counter()
        acc = 0
        for i in range(LOOP_N):
            acc = (acc + i * i) % 1_000_003
        samples.append(time.perf_counter() - t0)
    return samples, {"steps": LOOP_N, "unit": "ms per loop"}


WORKLOADS = {"memory": _memory, "loopback": _loopback, "compute": _compute}


def measure() -> dict:
    """{"version", "workloads": {name: {"samples": [s, ...], ...what one sample is}}}; a workload
    that cannot run here (no loopback) is recorded with its error instead of samples."""
    out: dict = {"version": VERSION, "workloads": {}}
    for name, run in WORKLOADS.items():
        try:
            samples, what = run()
            out["workloads"][name] = {"samples": samples, **what}
        except OSError as exc:
            out["workloads"][name] = {"error": f"{type(exc).__name__}: {exc}"}
    return out


def spanning(before: dict, after: dict) -> dict:
    """One night's canary: the samples before and after the sweep together, so a change during it shows in the median."""
    out: dict = {"version": VERSION, "workloads": {}}
    for name in WORKLOADS:
        first, second = before["workloads"].get(name, {}), after["workloads"].get(name, {})
        out["workloads"][name] = first if "samples" not in second else {
            **(first if "samples" in first else second), "samples": first.get("samples", []) + second["samples"],
            "after_sweep": len(second["samples"])}
    return out
