"""Warm-up, then R rounds of K back-to-back iterations, each round timed on the device's clock.

K is agreed by every rank (the max of their warm-up estimates) so a round lasts about
``round_time_s``; all ranks run the same K. Returns this rank's round times; the driver takes
the max over ranks per round (DESIGN §4).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

MAX_ITERS = 1_000_000


@dataclass
class Plan:
    """How a case is measured. Defaults are --benchmark's; SMOKE is the quick check's."""
    warmup: int = 5
    rounds: int = 20
    iters: int = 0              # 0: choose K from the warm-up
    round_time_s: float = 0.02


SMOKE = Plan(warmup=1, rounds=3, round_time_s=0.002)


def choose_iters(per_iter_s: float, plan: Plan) -> int:
    if plan.iters > 0:
        return plan.iters
    if per_iter_s <= 0:
        return MAX_ITERS
    return max(1, min(MAX_ITERS, math.ceil(plan.round_time_s / per_iter_s)))


def warm_up(loops: list[Callable[[int], None]], backend, plan: Plan) -> int:
    """Run every loop's warm-up; return K, agreed by all ranks from the first loop's estimate."""
    timer = backend.device.timer()
    warm = max(1, plan.warmup)
    timer.start()
    loops[0](warm)
    per_iter = timer.stop() / warm / 1e9
    for loop in loops[1:]:
        loop(warm)
    return choose_iters(backend.max_float(per_iter), plan)


def one_round(loop: Callable[[int], None], k: int, backend, timer) -> int:
    """All ranks start together, then k back-to-back iterations on the device's clock (ns)."""
    backend.barrier()
    backend.device.synchronize()
    timer.start()
    loop(k)
    return timer.stop()


def measure(loops: list[Callable[[int], None]], backend, plan: Plan) -> tuple[int, list[list[int]]]:
    """Time each loop in `loops` (interleaved round by round) with one shared K.

    Each loop(k) runs k iterations. Returns (K, [round ns per loop])."""
    k = warm_up(loops, backend, plan)
    timer = backend.device.timer()
    times: list[list[int]] = [[] for _ in loops]
    for _ in range(plan.rounds):
        for loop, out in zip(loops, times):
            out.append(one_round(loop, k, backend, timer))
    return k, times


def begin(loops: list[Callable[[int], None]], finish: Callable, backend, plan: Plan) -> None:
    """Round-interleaved A/B: warm up now and keep the loops on this rank, so the driver can
    alternate single rounds of two worker groups (two stacks) milliseconds apart; `end` then
    returns finish(K, round ns per loop), what `measure` gives in one go."""
    backend.prepared = (loops, warm_up(loops, backend, plan), backend.device.timer(), [[] for _ in loops], finish)


def time_round(backend) -> dict:
    """One round of every prepared loop, in `measure`'s order; the times stay here until `end`."""
    loops, k, timer, times, _ = backend.prepared
    for loop, out in zip(loops, times):
        out.append(one_round(loop, k, backend, timer))
    return {}


def end(backend) -> dict:
    _, k, _, times, finish = backend.prepared
    backend.prepared = None
    return finish(k, times)


def repeat(call: Callable[[], object]) -> Callable[[int], None]:
    """The harness's timed loop: nothing but the prepared call, k times."""
    def loop(k: int) -> None:
        for _ in range(k):
            call()
    return loop
