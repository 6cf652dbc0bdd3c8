"""What a comparison or a history decided, as types (ARCHITECTURE.md, Comparing runs): nothing
decides on a verdict's words, and `VerdictKind.text` is the one place they are written."""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from schema.exit_codes import ExitCode

DEFAULT_ESTIMATOR = "median"   # each launch's statistic a verdict rests on (--estimator; docs/statistics.md)
DEFAULT_MIN_EFFECT = 0.05      # the smallest change a verdict counts (reports/compare.py; --min-effect)


class Samples(str, Enum):
    """What a cell's two sides' samples are, which decides its test (reports/compare.py) and whether a
    calibration applies; a str so the JSON and the calibration file hold its value."""
    ROUNDS = "rounds"                    # one launch a side: a suspicion at most, never a failure
    LAUNCHES = "launches"                # each launch's statistic, separate runs (Welch)
    PAIRED = "paired launches"           # an A/B's launch pairs
    RUNS = "runs"                        # history: the nights before and after a change point
    NEWEST_RUN = "newest run"            # history: the newest night against the level before it
    MIXED = "mixed"                      # a calibration made of cells sampled more than one way

    def __str__(self) -> str:
        return self.value


class Direction(Enum):
    REGRESSION = "regression"
    IMPROVEMENT = "improvement"
    NO_CHANGE = "no change"
    INCONCLUSIVE = "inconclusive"


CHANGES = (Direction.REGRESSION, Direction.IMPROVEMENT)


class Cause(Enum):
    """What a verdict rests on. The last three say a change is the machine's, never the stack's."""
    BASELINE = "baseline"              # the cell's samples against the baseline's (compare, an A/B's sides, --baseline)
    HISTORY = "history"                # nightly: a change point held by the nights after it, or the newest night off its level
    SAME_NIGHT_AB = "same-night A/B"   # a same-day interleaved A/B of the stack before against the stack after
    CANARY = "canary"                  # the canary stepped with it
    KEPT_STACK = "kept stack"          # every night since ran the stack of the night before, nothing recorded changed
    STACKS_ALIKE = "stacks alike"      # the same-night A/B ran the two stacks alike


MACHINE = (Cause.CANARY, Cause.KEPT_STACK, Cause.STACKS_ALIKE)


@dataclass(frozen=True)
class VerdictKind:
    """What a reader is told of a verdict; a machine change reads alike whatever showed it."""
    direction: Direction
    confirmed: bool = True       # False: suspected (or inconclusive)
    standing: bool = False
    machine: bool = False
    by_ab: bool = False          # the newest night's suspicion, confirmed by a same-night A/B

    def text(self) -> str:
        """The verdict's words: the only place they are written."""
        d = self.direction.value
        if self.direction not in CHANGES:
            return d
        if not self.confirmed:
            return f"suspected {d}"
        if self.by_ab:
            return f"{d} (confirmed by A/B)"
        if self.machine:
            return f"machine {d}"
        return f"standing {d}" if self.standing else d


REGRESSION = VerdictKind(Direction.REGRESSION)     # a confirmed change of the stack within the window: fails a job
IMPROVEMENT = VerdictKind(Direction.IMPROVEMENT)
SUSPECTED_REGRESSION = VerdictKind(Direction.REGRESSION, confirmed=False)
SUSPECTED_IMPROVEMENT = VerdictKind(Direction.IMPROVEMENT, confirmed=False)
NO_CHANGE = VerdictKind(Direction.NO_CHANGE)
INCONCLUSIVE = VerdictKind(Direction.INCONCLUSIVE, confirmed=False)
MACHINE_REGRESSION = VerdictKind(Direction.REGRESSION, machine=True)
MACHINE_IMPROVEMENT = VerdictKind(Direction.IMPROVEMENT, machine=True)
STANDING_REGRESSION = VerdictKind(Direction.REGRESSION, standing=True)
STANDING_IMPROVEMENT = VerdictKind(Direction.IMPROVEMENT, standing=True)


@dataclass(frozen=True)
class Verdict:
    """One cell's verdict: `confirmed` by independent samples, else suspected (never fails a job);
    `standing`: began before the window; `newest`: on the newest night alone. Impossible combinations are refused."""
    direction: Direction = Direction.INCONCLUSIVE
    confirmed: bool = False
    standing: bool = False
    cause: Cause = Cause.BASELINE
    newest: bool = False

    def __post_init__(self) -> None:
        if self.direction not in CHANGES and self.confirmed != (self.direction is Direction.NO_CHANGE):
            raise ValueError(f"{self}: 'no change' is always confirmed, 'inconclusive' never")
        if (self.standing or self.machine) and not (self.direction in CHANGES and self.confirmed) \
                or self.standing and (self.machine or self.newest):
            raise ValueError(f"{self}: only a confirmed change stands or is the machine's, and not both")
        if self.newest and self.cause is not (Cause.SAME_NIGHT_AB if self.confirmed else Cause.HISTORY):
            raise ValueError(f"{self}: a newest night's verdict is the history's, or confirmed by a same-night A/B")

    @property
    def machine(self) -> bool:
        """The change is the machine's (the canary, a kept stack, stacks alike), not the software stack's."""
        return self.cause in MACHINE

    @property
    def suspected(self) -> bool:
        return self.direction in CHANGES and not self.confirmed

    @property
    def kind(self) -> VerdictKind:
        return VerdictKind(self.direction, self.confirmed, self.standing, self.machine, self.newest and self.confirmed)

    def text(self) -> str:
        return self.kind.text()

    def to_json(self) -> dict:
        """The typed fields the JSON outputs carry beside the verdict's words."""
        return {"direction": self.direction.value, "confirmed": self.confirmed, "standing": self.standing,
                "cause": self.cause.value, "machine": self.machine, "newest": self.newest}


@dataclass(frozen=True)
class GateResult:
    """One of a session's gates at its end (--baseline, --ab-until-decided, --history)."""
    text: str
    exit: ExitCode = ExitCode.OK
    headline: str = ""

    @property
    def fail(self) -> bool:
        return self.exit != ExitCode.OK

    def as_dict(self) -> dict:
        """The form the session's list of verdicts holds (harness/session/session.py, run_output.py)."""
        return {"text": self.text, "fail": self.fail, "exit": self.exit, "headline": self.headline}
