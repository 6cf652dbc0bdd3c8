"""What names a worker group (backend, ranks, environment, launch, side): a plain value, apart
from the process management in groups.py, so a case can hold one without pulling that in."""
from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class GroupKey:
    backend: str
    nproc: int
    env: tuple[tuple[str, str], ...] = ()        # the algorithm's variables: the same on both A/B sides
    launcher: str = ""
    launch: int = 0              # --repeat: each launch gets fresh groups (the statistical sample)
    side: str = ""               # --ab-env/--ab-source: "A" or "B"
    side_env: tuple[tuple[str, str | None], ...] = ()   # side B's --ab-env variables, None: unset (empty for A)
    python: str = ""             # side B's interpreter (HCCL_BENCH_PYTHON in --ab-env); "" = this one

    @property
    def rank_env(self) -> dict[str, str | None]:
        """Every variable the harness sets (None: removes) for this group's ranks; the case's own win
        over side B's, since the case's label says what ran."""
        return {**dict(self.side_env), **dict(self.env)}

    def slot(self) -> GroupKey:
        """The key with its A/B side taken out: both sides of a case share one slot in the run order."""
        return replace(self, side="", side_env=(), python="")
