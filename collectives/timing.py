"""Warm-up, then R rounds of K back-to-back iterations, each round timed on the device's clock (why and
how: docs/method.md, Time, Graph capture, Where the cores sit; the slow fault: docs/faults.md)."""
from __future__ import annotations

import contextlib
import functools
import math
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace

MAX_ITERS = 1_000_000
MAX_GRAPH_ITERS = 10_000    # a captured round holds K kernels: capture time and graph memory grow with it
CALIBRATION_SHARE = 0.5     # a calibration run must last this share of the round time
# floor_ns: no device moves S faster than MAX_BYTES_PER_S nor ends a call in under MIN_CALL_NS (docs/method.md)
MAX_BYTES_PER_S = 10e12
MIN_CALL_NS = 100


@dataclass
class Plan:
    """How a case is measured. Defaults are --benchmark's; SMOKE is the quick check's."""
    warmup: int = 5
    rounds: int = 20
    iters: int = 0              # 0: choose K from the warm-up
    round_time_s: float = 0.02
    graph: bool = False         # time replays of the round captured as a device graph (--graph)
    slow: float = 1.0           # HCCL_BENCH_FAULT=slow on this rank: its timed rounds take this factor as long


SMOKE = Plan(warmup=1, rounds=3, round_time_s=0.002)


@dataclass(frozen=True)
class Calibrated:
    """K and what it rests on: the iterations of the last calibration run and how long they took
    (the slowest rank's); recorded with every case. iters 0: K was given (--iters)."""
    k: int
    iters: int = 0
    seconds: float = 0.0
    round_time_s: float = 0.0


class Captured:
    """loop(k) as a device graph: the k iterations captured once (`prime`, outside any timed span),
    each call replays them. A new k replaces the graph (one alive at a time)."""
    max_iters = MAX_GRAPH_ITERS

    def __init__(self, loop: Callable[[int], None], device):
        self.loop, self.device = loop, device
        self.k, self.replay = 0, None

    def prime(self, k: int) -> None:
        if k != self.k or self.replay is None:
            self.replay = None
            self.replay, self.k = self.device.capture(self.loop, k), k

    def __call__(self, k: int) -> None:
        self.prime(k)
        assert self.replay is not None
        self.replay()


class CpuWait:
    """The run delay (ns) of the threads alive when it is made, from /proc/self/task/TID/schedstat
    (docs/method.md, CPU waits); `read` is None where the kernel keeps no such counter."""

    def __init__(self) -> None:
        self._fds: list[int] = []
        with contextlib.suppress(OSError):
            for tid in os.listdir("/proc/self/task"):
                with contextlib.suppress(OSError):   # a thread gone since the listing
                    self._fds.append(os.open(f"/proc/self/task/{tid}/schedstat", os.O_RDONLY))

    def read(self) -> list[int | None] | None:
        """Each thread's run delay (None: that thread is gone), or None with no counter at all."""
        return [_run_delay(fd) for fd in self._fds] if self._fds else None

    @staticmethod
    def waited(before: list[int | None], after: list[int | None]) -> int:
        """ns the threads alive at both reads waited for a CPU in between (summed: conservative for overlaps)."""
        return sum(b - a for a, b in zip(before, after) if a is not None and b is not None)

    def close(self) -> None:
        for fd in self._fds:
            os.close(fd)
        self._fds = []


def _run_delay(fd: int) -> int | None:
    try:
        return int(os.pread(fd, 128, 0).split()[1])
    except (OSError, ValueError, IndexError):
        return None


def floor_ns(nbytes: int) -> float:
    """The least time a device can take for one call moving nbytes (MAX_BYTES_PER_S, MIN_CALL_NS)."""
    return max(MIN_CALL_NS, nbytes / MAX_BYTES_PER_S * 1e9)


def below_floor(round_ns: list[int], k: int, nbytes: int) -> str:
    """'' where every round of k captured calls took at least k x floor_ns(nbytes), else why not (a
    graph that holds less than its k calls replays faster than the bytes allow)."""
    fastest = min(round_ns, default=0) / max(1, k)
    floor = floor_ns(nbytes)
    if not round_ns or fastest >= floor:
        return ""
    return (f"a captured round took {fastest:.3g} ns a call for {nbytes} B, under the {floor:.3g} ns any device needs "
            f"(S / {MAX_BYTES_PER_S / 1e12:g} TB/s, at least {MIN_CALL_NS} ns): the graph did not hold its {k} calls")


def _prime(loop: Callable[[int], None], k: int) -> None:
    """Capture a graph loop's k iterations before its timed span (eager loops have nothing to do)."""
    if isinstance(loop, Captured):
        loop.prime(k)


def calibrate(loop: Callable[[int], None], backend, plan: Plan) -> Calibrated:
    """Runs of n iterations, n growing, until one lasts CALIBRATION_SHARE of the round time: K
    from that run's time per iteration. Every rank takes the max, so all make the same choices."""
    if plan.iters > 0:
        return Calibrated(plan.iters)
    timer = backend.device.timer()
    target = plan.round_time_s * CALIBRATION_SHARE
    limit = getattr(loop, "max_iters", MAX_ITERS)
    n = 1
    while True:
        _prime(loop, n)
        timer.start()
        loop(n)
        elapsed = backend.max_float(timer.stop() / 1e9)
        if elapsed >= target or n >= limit:
            break
        # aim past the target from what this run took, at most 16x more (a fast first run misleads)
        wanted = n * 16 if elapsed <= 0 else math.ceil(n * target / elapsed * 1.2)
        n = min(limit, max(n + 1, min(wanted, n * 16)))
    k = limit if elapsed <= 0 else max(1, min(limit, math.ceil(plan.round_time_s / (elapsed / n))))
    return Calibrated(k, n, elapsed, plan.round_time_s)


def one_round(loop: Callable[[int], None], k: int, backend, timer) -> int:
    """All ranks start together, then k back-to-back iterations on the device's clock (ns)."""
    _prime(loop, k)
    backend.barrier()
    backend.device.synchronize()
    timer.start()
    loop(k)
    return timer.stop()


SLOW_SPIN_NS = 200_000   # slowed_round spins only the wait's last 200 us: past a sleep's usual overshoot


def slowed_round(loop: Callable[[int], None], k: int, backend, timer, factor: float) -> int:
    """one_round, then a wait of (factor - 1) x the round's own time before the clock stops, so the
    round takes `factor` times as long; why a wait per round, slept then spun: docs/faults.md."""
    def slowed(k: int) -> None:
        t0 = time.perf_counter_ns()
        loop(k)
        backend.device.synchronize()
        deadline = t0 + factor * (time.perf_counter_ns() - t0)
        while (left := deadline - time.perf_counter_ns()) > SLOW_SPIN_NS:
            time.sleep((left - SLOW_SPIN_NS) / 1e9)
        while time.perf_counter_ns() < deadline:
            pass
    _prime(loop, k)   # one_round primes only a Captured loop, which `slowed` is not
    return one_round(slowed, k, backend, timer)


def round_step(plan: Plan) -> Callable:
    """How a round is timed: one_round, or slowed_round under the fault hook's slow mode (the
    unfaulted loop is exactly one_round: no check inside it)."""
    return one_round if plan.slow == 1.0 else functools.partial(slowed_round, factor=plan.slow)


class Rounds:
    """A case's loops (graphs with plan.graph) after their warm-up and K's calibration on the first, with
    their round times so far: `measure` runs all rounds; `begin` keeps it for the driver's A/B rounds."""

    def __init__(self, loops: list[Callable[[int], None]], backend, plan: Plan, finish: Callable | None = None):
        self.loops = [Captured(loop, backend.device) for loop in loops] if plan.graph else loops
        for loop in self.loops:
            loop(max(1, plan.warmup))
        self.cal = calibrate(self.loops[0], backend, plan)
        self.backend, self.finish = backend, finish
        self.timer, self.step, self.clock = backend.device.timer(), round_step(plan), CpuWait()
        self.times: list[list[int]] = [[] for _ in loops]
        self.waits: list[int] = []

    def round(self) -> None:
        """One round of every loop, its time appended to its list, and the first loop's CPU wait."""
        for i, (loop, out) in enumerate(zip(self.loops, self.times)):
            before = self.clock.read() if i == 0 else None
            out.append(self.step(loop, self.cal.k, self.backend, self.timer))
            if before is not None and (after := self.clock.read()) is not None:
                self.waits.append(self.clock.waited(before, after))

    def close(self) -> list[int]:
        """The first loop's CPU wait per round in ns ([] unless every round has one)."""
        self.clock.close()
        return self.waits if len(self.waits) == len(self.times[0]) else []


def measure(loops: list[Callable[[int], None]], backend, plan: Plan) -> tuple[Calibrated, list[list[int]], list[int]]:
    """Time each loop in `loops` (interleaved round by round) with one shared K: (K's calibration,
    [round ns per loop], the first loop's CPU wait per round: [] where the kernel does not say)."""
    rounds = Rounds(loops, backend, plan)
    try:
        for _ in range(plan.rounds):
            rounds.round()
    finally:
        waits = rounds.close()
    return rounds.cal, rounds.times, waits


def begin(loops: list[Callable[[int], None]], finish: Callable, backend, plan: Plan) -> None:
    """Round-interleaved A/B: warm up now and keep the loops, so the driver can alternate single rounds
    of two worker groups milliseconds apart; StepRank's "end" then returns what LoopRank.run would."""
    if getattr(backend, "prepared", None):   # a begun case that never ended (its A/B failed): its clock's files
        backend.prepared.clock.close()
    backend.prepared = Rounds(loops, backend, plan, finish)


def with_calibration(result, cal, waits: list[int] | None = None):
    """The schema.wire result with how K was chosen (and each round's CPU wait, where measured)."""
    return replace(result, calibration=asdict(cal), **({"cpu_wait_ns": waits} if waits else {}))


class LoopRank:
    """A rank half made of timed loops, `build(backend, spec) -> (loops, finish)`: `run` measures, `begin` keeps them."""

    def __init__(self, build: Callable):
        self.build = build

    def run(self, backend, spec):
        """`measure`, then finish(K, round ns per loop) (a schema.wire result) with the calibration and waits."""
        loops, finish = self.build(backend, spec)
        cal, times, waits = measure(loops, backend, Plan(**spec.plan))
        return with_calibration(finish(cal.k, times), cal, waits)

    def begin(self, backend, spec) -> None:
        loops, finish = self.build(backend, spec)
        begin(loops, finish, backend, Plan(**spec.plan))


class StepRank:
    """The driver's steps of a begun A/B case (schema.wire.Step): "round" times one round, "end" returns the result."""

    @staticmethod
    def run(backend, spec):
        if spec.kind == "round":   # one round of every prepared loop, in `measure`'s order; the times stay here
            backend.prepared.round()
            return {}
        rounds, backend.prepared = backend.prepared, None
        waits = rounds.close()
        return with_calibration(rounds.finish(rounds.cal.k, rounds.times), rounds.cal, waits)


def repeat(call: Callable[[], object]) -> Callable[[int], None]:
    """The harness's timed loop: nothing but the prepared call, k times."""
    def loop(k: int) -> None:
        for _ in range(k):
            call()
    return loop
