"""What each rank does for `hccl-bench doctor` (links, rings, clock offset, arrival skew), timed on its
own clocks; the driver judges them (harness/doctor/__init__.py; how: docs/method.md, The doctor's ranks)."""
from __future__ import annotations

import time

import numpy as np

from schema.wire import DoctorSkewSpec, DoctorSpec


def _timed(reps: int, once) -> list[int]:
    """Two untimed calls, then `reps` timed ones (ns each)."""
    for _ in range(2):
        once()
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter_ns()
        once()
        samples.append(time.perf_counter_ns() - t0)
    return samples


def _token_lap(backend, ring: list[int], buf):
    """One lap of 8 bytes around the ring from ring[0], one message in flight: the sum of the ring's
    one-way latencies (a ring of two is a ping-pong, the lower rank leading)."""
    k, i = len(ring), ring.index(backend.rank)
    nxt, prv = ring[(i + 1) % k], ring[(i - 1) % k]

    def once():
        if i == 0:
            backend.send(nxt, buf)
            backend.recv(prv, buf)
        else:
            backend.recv(prv, buf)
            backend.send(nxt, buf)
    return once


def links(backend, spec: DoctorSpec) -> dict:
    """For each round of disjoint pairs, all at once: `bytes` exchanged both ways `reps` times, and 8
    bytes ping-ponged `small_reps` times. Per round: (peer, big ns, small ns)."""
    def pair(peer: int, big, small) -> dict:
        small_ns = _timed(spec.small_reps or spec.reps, _token_lap(backend, sorted((backend.rank, peer)), small))
        return {"peer": peer, "small_ns": small_ns, "big_ns": _timed(spec.reps, lambda: backend.exchange(peer, *big))}
    def peer(pairs: list[list[int]]) -> int | None:
        return next((b if a == backend.rank else a for a, b in pairs if backend.rank in (a, b)), None)
    return _each_round(backend, spec, peer, pair)


def _each_round(backend, spec: DoctorSpec, part, measure) -> dict:
    """Every round of spec.rounds between barriers: measure(part(round), big buffers, small buffer), None if it sits out."""
    big = [backend.full(spec.bytes, 0, "uint8") for _ in range(2)]
    small = backend.full(8, 0, "uint8")
    out: list[dict | None] = []
    for r in spec.rounds:
        mine = part(r)
        backend.barrier()
        out.append(None if mine is None else measure(mine, big, small))
        backend.barrier()
    return {"rounds": out}


def clock_offset(backend, reps: int = 16) -> int:
    """This rank's wall clock minus rank 0's (ns): NTP's estimate from the exchange with rank 0 with the
    smallest round trip; rank 0 then sends each rank its offset."""
    send, recv = (backend.from_numpy(np.zeros(1, np.int64), "int64") for _ in range(2))
    mine = 0
    for other in range(1, backend.world):
        backend.barrier()
        if backend.rank not in (0, other):
            continue
        peer = other if backend.rank == 0 else 0
        best_rtt, best_offset = None, 0
        for _ in range(reps):
            t0 = time.time_ns()
            backend.write(send, np.array([t0], np.int64))
            backend.exchange(peer, send, recv)
            t3 = time.time_ns()
            if backend.rank == 0 and (best_rtt is None or t3 - t0 < best_rtt):
                best_rtt, best_offset = t3 - t0, int(backend.to_numpy(recv)[0]) - (t0 + t3) // 2
        backend.write(send, np.array([best_offset], np.int64))
        backend.exchange(peer, send, recv)       # rank 0 tells the rank its offset
        if backend.rank == other:
            mine = int(backend.to_numpy(recv)[0])
    backend.barrier()
    return mine


def skew(backend, spec: DoctorSkewSpec) -> dict:
    """`rounds` times: the same fixed work on every rank (a matmul), then an 8-byte all_reduce; per round
    this rank's entry and exit times on rank 0's clock (ns): a late arrival is the culprit."""
    offset = clock_offset(backend)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((spec.matrix, spec.matrix))
    call = backend.call("all_reduce", *([backend.from_numpy(np.ones(2), "float32")] * 2), "sum", True)
    entries, exits, work = [], [], []
    for _ in range(spec.rounds):
        backend.barrier()
        start = time.perf_counter_ns()
        for _ in range(spec.work):
            a = a @ a
            a /= np.abs(a).max()
        if spec.slow > 1.0:   # the fault hook's slow rank: late by sleeping, so it takes no core from its peers
            time.sleep((spec.slow - 1.0) * (time.perf_counter_ns() - start) / 1e9)
        work.append(time.perf_counter_ns() - start)
        entries.append(time.time_ns() - offset)
        call()
        backend.device.synchronize()   # nccl/hccl return once the collective is enqueued: exit is when it ended
        exits.append(time.time_ns() - offset)
    return {"offset_ns": offset, "entry_ns": entries, "exit_ns": exits, "work_ns": work}


def ring_steps(ring: list[int], rank: int) -> list[int]:
    """This rank's ring neighbours in the order of a proper edge colouring (edge i joins ring[i] and
    ring[i+1]: colours alternate, an odd ring's closing edge gets a third): every rank takes its
    exchanges in colour order, so blocking exchanges never wait in a cycle. A ring of 2 is one edge."""
    k = len(ring)
    edges = [(ring[i], ring[(i + 1) % k], i % 2 if (k % 2 == 0 or i < k - 1) else 2) for i in range(k if k > 2 else 1)]
    return [b if a == rank else a for a, b, _ in sorted((e for e in edges if rank in e[:2]), key=lambda e: e[2])]


def rings(backend, spec: DoctorSpec) -> dict:
    """For each round of disjoint rings: every member exchanges `bytes` with both neighbours `reps` times,
    no barrier inside (a ring runs at its slowest member's pace), and 8 bytes go `small_reps` laps around
    it, all rings at once. Per round: (ring, neighbours, ns per pass over the neighbours, ns per lap)."""
    def ring_of(groups: list[list[int]]) -> list[int] | None:
        return next((g for g in groups if backend.rank in g and len(g) >= 2), None)   # the rings are disjoint

    def exchanges(ring: list[int], big, small) -> dict:
        steps = ring_steps(ring, backend.rank)

        def passes():
            for peer in steps:
                backend.exchange(peer, *big)
        small_ns = _timed(spec.small_reps or spec.reps, _token_lap(backend, ring, small))
        return {"ring": ring, "steps": steps, "small_ns": small_ns, "big_ns": _timed(spec.reps, passes)}
    return _each_round(backend, spec, ring_of, exchanges)


class DoctorRank:
    """The rank half of `hccl-bench doctor` (the driver half: harness/doctor/__init__.py): a spec's kind names its task."""

    @staticmethod
    def run(backend, spec: DoctorSpec | DoctorSkewSpec) -> dict:
        if isinstance(spec, DoctorSkewSpec):
            return skew(backend, spec)
        return (links if spec.kind == "doctor_links" else rings)(backend, spec)
