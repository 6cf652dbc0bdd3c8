"""Where ranks 0 and 1 sit relative to each other, before and after every collective case: a cache
line's round trip between their cores over a shared /dev/shm page (ns), no library in it (why and how:
docs/method.md, Where the cores sit; a killed group's leftover page carries PREFIX: harness/engine/shm.py)."""
from __future__ import annotations

import contextlib
import mmap
import os
import sys
import time

import numpy as np

from schema.stats import median

PREFIX = "hccl_bench_cores."
BLOCKS, BLOCK = 8, 32       # one probe: 256 round trips, ~0.1-0.3 ms of Python on two free cores
GIVE_UP_S = 2.0             # no answer for this long (a dead or stopped partner): the probe gives up
YIELD_AFTER = 256           # unanswered checks (~20-50 us) before each sched_yield: the partner may share our core
_PAGE = 4096
_PING, _PONG = 0, 8         # int64 slots 64 bytes apart: their own cache lines
_SEQ_STRIDE = 1 << 16        # each probe's exchanges count from (id + 1) x this (> BLOCKS x BLOCK + 1)


class CorePair:
    """One side of the shared page: `me` 0 pings, 1 answers. A probe's exchanges count from its id's own
    base, so a probe one side missed cannot shift the next; a side spinning unanswered yields its core
    (docs/method.md, Where the cores sit)."""

    def __init__(self, page: mmap.mmap, me: int):
        self._page, self.me = page, me
        self.flags = np.frombuffer(page, dtype=np.int64)
        self.gave_up = 0            # probes that timed out on this side

    def _wait(self, slot: int, value: int) -> None:
        flags, checks, deadline = self.flags, 0, 0.0
        while flags[slot] != value:
            checks += 1
            if not checks % YIELD_AFTER:
                os.sched_yield()
                now = time.monotonic()
                if not deadline:
                    deadline = now + GIVE_UP_S
                elif now > deadline:
                    raise TimeoutError

    def round_trip_ns(self, probe: int) -> float | None:
        """Median over BLOCKS blocks of BLOCK round trips each (a preempted block is an outlier), after
        one untimed handshake; None when the partner stopped answering for GIVE_UP_S."""
        flags, blocks = self.flags, []
        seq = (probe + 1) * _SEQ_STRIDE
        try:
            for b in range(BLOCKS + 1):
                start = time.perf_counter_ns()
                for _ in range(BLOCK if b else 1):
                    seq += 1
                    if self.me == 0:
                        flags[_PING] = seq
                        self._wait(_PONG, seq)
                    else:
                        self._wait(_PING, seq)
                        flags[_PONG] = seq
                if b:
                    blocks.append((time.perf_counter_ns() - start) / BLOCK)
            return median(blocks)
        except TimeoutError:
            self.gave_up += 1
            print(f"hccl-bench: rank {self.me}: the cores' round trip {probe} got no answer from rank {1 - self.me} "
                  f"for {GIVE_UP_S:g} s; that case carries none", file=sys.stderr, flush=True)
            return None

    def close(self) -> None:
        del self.flags
        self._page.close()


def _map(path: str, create: bool) -> mmap.mmap:
    fd = os.open(path, os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0), 0o600)
    try:
        if create:
            os.ftruncate(fd, _PAGE)
        return mmap.mmap(fd, _PAGE)
    finally:
        os.close(fd)


def _usable_cores() -> int:
    """Cores the launcher's process may run on (a bound rank's own affinity is its one core; the
    parent's is the job's cpuset or the machine); the machine's count where that cannot be read."""
    try:
        return len(os.sched_getaffinity(os.getppid()))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def open_pair(backend, nodes: list[str], machines: list[str]) -> CorePair | None:
    """Ranks 0 and 1's page where they share a node (`nodes`) and its machine (`machines`: every rank's
    kernel) has a core for each of its ranks, else None. Every rank calls it (the side channel)."""
    path = None
    if backend.rank == 0 and len(nodes) >= 2 and nodes[0] == nodes[1] and machines.count(machines[0]) <= _usable_cores():
        path = f"/dev/shm/{PREFIX}{os.getpid()}"
        try:
            page = _map(path, create=True)
        except OSError:
            path = None
    path = backend.bcast_json(path)
    if path is None:
        return None
    pair = None
    if backend.rank == 1:
        with contextlib.suppress(OSError):
            pair = CorePair(_map(path, create=False), 1)
    mapped = backend.gather_json(pair is not None)
    if backend.rank == 0:
        with contextlib.suppress(OSError):
            os.unlink(path)
        pair = CorePair(page, 0) if mapped[1] else None
        if pair is None:
            page.close()
    return pair
