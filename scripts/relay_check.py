"""What the link-delay relay gives on the emulated cluster (root): ping RTT node1 -> node2 and TCP
throughput node1 -> node2 (one connection, bulk send for 2 s), per link setting, as a table.

Rows: node2's link unshaped; tbf only (1gbit, no relay); the relay at 0 / 1 / 5 ms (1gbit); the
relay at 0 ms on a 100gbit tbf (the relay's own ceiling). The relay is forced
(HCCL_BENCH_CLUSTER_RELAY=1) so the rows measure it even on a kernel with netem. Hold the
cluster lock around it: `flock /tmp/hccl-cluster.lock python scripts/relay_check.py`.

  python scripts/relay_check.py [--seconds 2] [--pings 20]
  python scripts/relay_check.py --ping ADDR [--pings N]        (inside a host: median RTT in ms, JSON)
  python scripts/relay_check.py --sink PORT | --send ADDR PORT   (inside hosts: bulk TCP, Mbit/s, JSON)
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import struct
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
PORT = 5201
ROWS = [("unshaped", []), ("tbf 1gbit, no relay", ["--slow", "node2=1gbit"]),
        ("relay 0 ms, 1gbit", ["--slow", "node2=1gbit,0ms"]), ("relay 1 ms, 1gbit", ["--slow", "node2=1gbit,1ms"]),
        ("relay 5 ms, 1gbit", ["--slow", "node2=1gbit,5ms"]), ("relay 0 ms, 100gbit", ["--slow", "node2=100gbit,0ms"])]


def _checksum(data: bytes) -> int:
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    total = (total >> 16) + (total & 0xFFFF)
    return ~(total + (total >> 16)) & 0xFFFF


def ping(address: str, count: int) -> list[float]:
    """ICMP echo round trips in ms (raw socket; the peer's kernel answers): one warm-up (ARP) not counted."""
    ident = os.getpid() & 0xFFFF
    rtts = []
    with socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP) as sock:
        sock.settimeout(1.0)
        for seq in range(count + 1):
            body = struct.pack("!HH", ident, seq) + b"hccl-bench relay_check".ljust(48, b".")
            packet = struct.pack("!BBH", 8, 0, 0) + body
            packet = struct.pack("!BBH", 8, 0, _checksum(packet)) + body
            start = time.perf_counter()
            sock.sendto(packet, (address, 0))
            while True:
                try:
                    reply = sock.recv(2048)
                except socket.timeout:   # not TimeoutError on 3.9
                    break
                header = (reply[0] & 0x0F) * 4
                kind, _, _, rid, rseq = struct.unpack("!BBHHH", reply[header:header + 8])
                if kind == 0 and rid == ident and rseq == seq:
                    if seq:
                        rtts.append((time.perf_counter() - start) * 1e3)
                    break
            time.sleep(0.02)
    return rtts


def sink(port: int) -> dict:
    with socket.create_server(("", port)) as server:
        server.settimeout(30)
        conn, _ = server.accept()
        with conn:
            total, first = 0, None
            while chunk := conn.recv(1 << 20):
                first = first or time.perf_counter()
                total += len(chunk)
            took = time.perf_counter() - (first or time.perf_counter())
    return {"bytes": total, "seconds": took, "mbit_s": total * 8 / took / 1e6 if took else 0.0}


def send(address: str, port: int, seconds: float) -> dict:
    block = b"\0" * (1 << 20)
    for _ in range(100):            # the sink may not listen yet
        try:
            conn = socket.create_connection((address, port), timeout=5)
            break
        except ConnectionRefusedError:
            time.sleep(0.05)
    else:
        raise SystemExit(f"relay_check: nobody listens at {address}:{port}")
    with conn:
        end, total = time.perf_counter() + seconds, 0
        while time.perf_counter() < end:
            conn.sendall(block)
            total += len(block)
    return {"bytes": total}


def on_host(host: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([PY, "-m", "harness.cluster", "exec", host, "--", PY, str(Path(__file__).resolve()), *args],
                            cwd=ROOT, stdout=subprocess.PIPE, text=True)


def measure(up_args: list[str], pings: int, seconds: float) -> tuple[float, float, str]:
    """(median RTT ms, Mbit/s, what holds node2's delay) for one cluster made with `up_args`."""
    env = {**os.environ, "HCCL_BENCH_CLUSTER_RELAY": "1"}
    subprocess.run([PY, "-m", "harness.cluster", "down"], cwd=ROOT, capture_output=True, check=True)
    up = subprocess.run([PY, "-m", "harness.cluster", "up", "--hosts", "2", "--json", *up_args], cwd=ROOT, env=env,
                        capture_output=True, text=True)
    if up.returncode != 0:
        raise SystemExit(f"relay_check: cluster up {' '.join(up_args)}: {up.stderr.strip()}")
    try:
        via = json.loads(up.stdout)["hosts"][1].get("delay_via", "-")
        rtt = json.loads(on_host("node1", "--ping", "node2", "--pings", str(pings)).communicate()[0])["median_ms"]
        receiver = on_host("node2", "--sink", str(PORT))
        on_host("node1", "--send", "node2", str(PORT), "--seconds", str(seconds)).communicate()
        rate = json.loads(receiver.communicate()[0])["mbit_s"]
    finally:
        subprocess.run([PY, "-m", "harness.cluster", "down"], cwd=ROOT, capture_output=True, check=True)
    return rtt, rate, via


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--pings", type=int, default=20)
    parser.add_argument("--ping", metavar="ADDR")
    parser.add_argument("--sink", type=int, metavar="PORT")
    parser.add_argument("--send", nargs=2, metavar=("ADDR", "PORT"))
    args = parser.parse_args()
    if args.ping:
        rtts = ping(args.ping, args.pings)
        print(json.dumps({"median_ms": statistics.median(rtts) if rtts else None, "rtts_ms": rtts}))
        return 0 if rtts else 1
    if args.sink:
        print(json.dumps(sink(args.sink)))
        return 0
    if args.send:
        print(json.dumps(send(args.send[0], int(args.send[1]), args.seconds)))
        return 0
    if os.geteuid() != 0:
        print("relay_check: the emulated cluster needs root", file=sys.stderr)
        return 2
    print(f"| node2's link | delay by | ping RTT node1 -> node2 (median of {args.pings}) | TCP node1 -> node2, "
          f"{args.seconds:g} s bulk |\n|---|---|---|---|")
    for label, up_args in ROWS:
        rtt, rate, via = measure(up_args, args.pings, args.seconds)
        print(f"| {label} | {via} | {rtt:.3f} ms | {rate:.0f} Mbit/s |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
