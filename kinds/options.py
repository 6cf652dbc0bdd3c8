"""What a bench session was asked for (`Options`), below the kinds so they import it plainly;
harness/session/options.py declares the flags, converts and checks them, and fills it. The
converters' shared shapes live here too, where the kinds, the session and the CLI all may import them."""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from collectives.ops import OPS
from collectives.sizes import parse_size
from collectives.timing import Plan
from schema.judgement import DEFAULT_ESTIMATOR, DEFAULT_MIN_EFFECT

COMM_DTYPES = ("float32", "bfloat16", "float16", "int8")
BUCKETS = "0,1M,4M,16M,64M,256M"   # the bucketing bench's default bucket sizes (0: one all_reduce per tensor)

T = TypeVar("T")


def items(text) -> list[str]:
    """A comma list's items, blanks dropped."""
    return [s.strip() for s in str(text).split(",") if s.strip()]


def checked(parse: Callable[[str], T], ok: Callable[[T], bool], message: str) -> Callable[[str], T]:
    """An option's converter: `parse`, then `ok`, else ValueError(`message`)."""
    def convert(text: str) -> T:
        try:
            value = parse(text)
        except ValueError:
            raise ValueError(message) from None
        if not ok(value):
            raise ValueError(message)
        return value
    return convert


def names_in(allowed, message: str) -> Callable[[str], list[str]]:
    """A comma list of `allowed` names, as given (order and repeats kept), else ValueError(`message`)."""
    return checked(items, lambda names: bool(names) and all(n in allowed for n in names), message)


def bucket_size(text: str) -> int:
    """A gradient bucket cap: 0 (a bucket per gradient / tensor) or a size; a bad size: SizeError, a ValueError."""
    return 0 if text == "0" else parse_size(text)


def number(text) -> float:
    """The text as a float, nan when it is none (nan fails every range check)."""
    try:
        return float(text)
    except (TypeError, ValueError):
        return math.nan


def fraction(text, flag: str = "") -> float:
    """--min-effect: a fraction above 0 and below 1 (0 would leave no "no change" band: nothing decided early)."""
    if not 0 < (value := number(text)) < 1:
        raise ValueError(f"{flag} {text!r}: give a fraction above 0 and below 1 (0.05 = 5%)".lstrip())
    return value


@dataclass
class Options:
    benchmark: bool = False
    backends: list[str] = field(default_factory=list)
    nproc: int = 2
    launcher: str = ""
    ops: list[str] = field(default_factory=lambda: list(OPS))
    sizes: list[int] = field(default_factory=list)
    dtypes: list[str] = field(default_factory=lambda: ["float32"])
    redops: list[str] = field(default_factory=lambda: ["sum"])
    algos: list[str] = field(default_factory=lambda: ["default"])
    inplace: tuple[str, ...] = ("auto",)
    graph: tuple[bool, ...] = (False,)   # --graph: which of eager (False) and graph-captured (True) rounds to time
    iters: int = 0
    warmup: int = Plan.warmup
    rounds: int = Plan.rounds
    round_time_s: float = Plan.round_time_s
    timeout_s: float = 300.0
    repeat: int = 1
    baseline: str = ""
    history: bool = False
    night_budget_s: float = 0.0       # --night-budget: launches added while another fits (harness/session/night_budget.py)
    top_up: int = 0                   # --top-up: launches added for cells short of --repeat launches in the usual placement
    previous_stack: str = ""          # --previous-stack: the night before's stack, A/B-tested against this one the same night
    previous_is_python: bool = False  # ... given as its python interpreter (else a shell script to source)
    previous_differs: bool = False    # ... and it is another stack than this one: the A/B measures every cell (else none runs)
    invocation: list[str] = field(default_factory=list)   # pytest's arguments (set by the plugin): the same-night A/B reruns them
    ab_env: dict = field(default_factory=dict)
    ab_source: str = ""              # --ab-source: the script side B's environment is sourced from
    only_cases: list = field(default_factory=list)   # --cases: the case ids to run (none: all)
    ab_until_decided: bool = False   # sequential A/B: --repeat is the budget (--max-repeat), undecided cells rerun
    inconclusive: str = "fail"       # the gate on cells without enough evidence: "fail" (exit 6) or "pass"
    estimator: str = DEFAULT_ESTIMATOR   # each launch's statistic of its rounds that verdicts rest on (reports/estimators.py)
    min_effect: float = DEFAULT_MIN_EFFECT   # the smallest change a verdict counts (reports/compare.py assign_verdicts)
    labels: dict = field(default_factory=dict)   # side -> what to call it ("A": "mpich 4.2.3")
    knobs: dict = field(default_factory=dict)    # --knobs: variable -> values, each value a series in its own group
    buckets: list[int] = field(default_factory=lambda: [bucket_size(b) for b in BUCKETS.split(",")])
    comm_dtypes: list[str] = field(default_factory=lambda: list(COMM_DTYPES))
    mpi_thread_level: str = ""   # "" = mpi4py's default (multiple)
    results: str = "results"
    driver_host: str = "127.0.0.1"
    # layer benches
    tp: list[int] = field(default_factory=lambda: [1, 2])
    pp: list[int] = field(default_factory=lambda: [1, 2])
    microbatches: list[int] = field(default_factory=lambda: [4])
    schedules: list[str] = field(default_factory=lambda: ["gpipe", "1f1b", "interleaved1f1b"])
    hidden: int = 256
    seq: int = 128
    batch: int = 8
    layers: int = 8
    settings: list = field(default_factory=list)   # each bench kind's own options, typed (kinds.base.KindSettings.of)

    def plan(self) -> dict:
        return {"warmup": self.warmup, "rounds": self.rounds, "iters": self.iters, "round_time_s": self.round_time_s}

    @property
    def two_sides(self) -> bool:
        """An A/B session: --ab-env or --ab-source, even one that changes nothing here (an A/A then)."""
        return bool(self.ab_env or self.ab_source)
