"""Feeds measured round times to pytest-benchmark so its stats are the ranks' clocks, not the driver's:
``pytest.mark.benchmark(timer=REPLAY_CLOCK)`` reads a clock only the replay moves (docs/method.md, Time)."""
from __future__ import annotations


class ReplayClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


REPLAY_CLOCK = ReplayClock()


def record(benchmark, per_op_seconds, group: str, extra_info: dict) -> None:
    """One pytest-benchmark round per measured round; extra_info carries everything else."""
    benchmark.group = group
    benchmark.extra_info.update(extra_info)
    times = iter([float(t) for t in per_op_seconds])
    benchmark.pedantic(lambda: REPLAY_CLOCK.advance(next(times)), rounds=len(per_op_seconds), iterations=1, warmup_rounds=0)
