"""--night-budget: a --history night's wall-clock budget, spent on launches while another fits. A busy
machine only ever makes a launch slower, so a night judged by its fastest launch (--estimator fastest)
gains power from launches, not from longer rounds (docs/statistics.md, "What a busy machine lets a
nightly see"); every cell gets the same launches, as that estimator's level depends on their number."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from collectives.timing import Plan

DEFAULT_BUDGET_S = 300.0   # --night-budget auto: a --history night that does not give --repeat
MAX_LAUNCHES = 40          # ... launches at most (--repeat's place); a night needs MIN_LAUNCHES to be judged
MIN_LAUNCHES = 3
END_RESERVE_S = 20.0       # kept for the session's end: the canary again, the history's judgement, the files
NIGHT_PLAN = Plan(rounds=200, round_time_s=0.002)   # rounds short enough that most fit between a busy core's slices


def parse_budget(text: str) -> float:
    """'auto' (-1), '0'/'off' (0) or a duration: 300, 300s, 5m, 1.5h; ValueError with what is allowed."""
    value = str(text).strip().lower()
    if value == "auto":
        return -1.0
    if value == "off":
        return 0.0
    scale = {"s": 1, "m": 60, "h": 3600}.get(value[-1:], 0)
    try:
        seconds = float(value[:-1] if scale else value) * (scale or 1)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds < float("inf"):
        raise ValueError(f"--night-budget {text!r}: give auto, 0 (off) or a duration such as 300, 300s, 5m or 1h")
    return seconds


def duration(seconds: float) -> str:
    return f"{int(seconds // 60)}m{seconds % 60:02.0f}s"


@dataclass
class NightBudget:
    """Before each launch past the first MIN_LAUNCHES: does one more, at the launches' mean cost so far, end
    within the budget? The first that does not stops the night's launches."""
    budget_s: float
    cap: int
    clock: Callable[[], float] = time.monotonic
    started: float = field(init=False)
    allowed: int = MIN_LAUNCHES - 1   # the latest launch found to fit
    stopped_at: int | None = None     # the first launch left out
    why: str = ""

    def __post_init__(self) -> None:
        self.started = self.clock()

    def why_not(self, launch: int) -> str:
        """'' while launch `launch` (0-based) fits; once one does not, the reason for it and every later one."""
        if self.stopped_at is not None and launch >= self.stopped_at:
            return self.why
        if launch <= self.allowed:
            return ""
        elapsed = self.clock() - self.started
        each = elapsed / launch
        if elapsed + each <= self.budget_s - END_RESERVE_S:
            self.allowed = launch
            return ""
        self.stopped_at = launch
        self.why = (f"the night's budget ({duration(self.budget_s)}) is spent: {launch} launches took {duration(elapsed)} "
                    f"(about {each:.1f} s each), and another would end past it with the session's end "
                    f"({END_RESERVE_S:.0f} s) kept")
        return self.why

    def line(self) -> str:
        """What was chosen and why, for the progress and the closing block."""
        ran = self.stopped_at if self.stopped_at is not None else self.cap
        end = (f"launches {self.stopped_at + 1}-{self.cap} not run: {self.why}" if self.stopped_at is not None
               else f"every launch up to the cap ({self.cap}, --repeat) fit")
        return (f"# night budget {duration(self.budget_s)}: {ran} launches, every cell the same (a night is judged by its "
                f"fastest launch); {end}")

    def record(self) -> dict:
        return {"budget_s": self.budget_s, "cap": self.cap, "launches": self.stopped_at or self.cap, "why": self.why}
