"""The progress lines of a sweep: which backend and op it is on, how far it is, and about how long
is left; before each new launch of --ab-until-decided, which cells that launch still needs."""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from harness.session.session import BenchSession


@dataclass
class Progress:
    where: dict[str, tuple]          # nodeid -> (backend, op or bench, side)
    launch: dict[str, int] = field(default_factory=dict)   # nodeid -> launch
    bench: BenchSession | None = None
    started: float = field(default_factory=time.monotonic)
    done: int = 0
    current: tuple = ()
    top_ups: int = 0   # --top-up items started: counted once they start, as most are skipped

    def _planned(self) -> int:
        """The items to run: a --top-up launch's count once it starts."""
        if self.bench is None or not self.bench.opts.top_up:
            return len(self.where)
        return sum(1 for nodeid in self.where if self.launch.get(nodeid, 0) < self.bench.opts.repeat) + self.top_ups

    def lines_at(self, nodeid: str) -> list[str]:
        """What to print as the test `nodeid` starts (often nothing); counts it as started."""
        where = self.where.get(nodeid)
        if where is None:
            return []
        out: list[str] = []
        bench = self.bench
        budget = bench.budget if bench is not None else None
        if budget is not None and budget.stopped_at is None and budget.why_not(self.launch.get(nodeid, 0)):
            out.append(budget.line())   # the first launch the budget leaves out
        if bench is not None and bench.opts.ab_until_decided and self.launch.get(nodeid, 0) > bench.looked:
            out += bench.look(self.launch[nodeid])   # before a new launch: which cells it still needs
        elif bench is not None and bench.opts.top_up and self.launch.get(nodeid, 0) >= bench.opts.repeat:
            self.top_ups += 1
            if self.launch[nodeid] > bench.topped:
                out += bench.top_up(self.launch[nodeid])   # before a --top-up launch: which cells it runs
        if where != self.current:
            self.current = where
            total, elapsed = self._planned(), time.monotonic() - self.started
            left = elapsed / self.done * (total - self.done) if self.done else None
            if left and budget is not None:   # the budget ends the night's launches
                left = min(left, max(budget.budget_s - elapsed, 0))
            eta = f", about {left / 60:.0f} min left" if left and left >= 60 else f", about {left:.0f} s left" if left else ""
            out.append(f"# [{self.done}/{total}{eta}] now: {' '.join(w for w in where if w)}")
        self.done += 1
        return out
