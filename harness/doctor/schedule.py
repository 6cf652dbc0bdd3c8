"""The doctor's link search as pure functions over measurements: which groups of hosts to test next,
which ran slow, which hosts are named; run on real ranks (search.py) and on a link model
(scripts/fleet_sim.py). Why it is shaped so: docs/doctor.md (What it measures).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from schema.stats import median

LATENCY_RESOLUTION_US = 10.0   # one-way latency floors 2-7 us apart between healthy pairs here (2 shared cores)
FIRST_GROUPS = 8


def worse(values: dict, higher_is_better: bool, resolution: float = 0.0) -> dict:
    """Each key's ratio to the median of the others (> 1: worse than its peers); a difference below
    `resolution` counts as none. Sorted once, the key's own place skipped: 500 groups stay fast."""
    ordered = sorted(values.values())
    place = {v: i for i, v in reversed(list(enumerate(ordered)))}   # a value's first place
    n, out = len(ordered) - 1, {}
    for key, value in values.items():
        if n < 1 or value <= 0:
            continue
        skip = place[value]
        mid = [ordered[i if i < skip else i + 1] for i in ((n // 2,) if n % 2 else (n // 2 - 1, n // 2))]
        ref = sum(mid) / len(mid)
        out[key] = 1.0 if abs(value - ref) <= resolution else (ref / value if higher_is_better else value / ref)
    return out


def flagged(per_repeat: list[dict], threshold: float, share: float = 0.5) -> dict:
    """Keys worse than `threshold` in more than `share` of the independent repeats, with their median ratio."""
    keys = set().union(*per_repeat) if per_repeat else set()
    ratios = {key: [r[key] for r in per_repeat if key in r] for key in keys}
    return {key: median(rs) for key, rs in ratios.items() if sum(x > threshold for x in rs) > share * len(per_repeat)}


@dataclass
class Test:
    hosts: tuple[int, ...]      # measured together, in ring order
    role: str                   # "search" (part of a slow group), "confirm" (one suspect + a helper), "control"
    subject: tuple[int, ...]    # the hosts the verdict is about (a confirmation's helper is not)


@dataclass
class Verdict:
    ratio: float                # x worse than the median of the round's other tests (the worse of bw, latency)
    by: str                     # "bandwidth" or "latency"


@dataclass
class Round:
    tests: list[Test]
    slow: dict[int, Verdict] = field(default_factory=dict)   # test index -> verdict


@dataclass
class Search:
    hosts: int
    rounds: list[Round] = field(default_factory=list)
    named: dict[int, tuple[Verdict, int]] = field(default_factory=dict)   # host -> (its confirmation, round index)
    unresolved: list[tuple[int, ...]] = field(default_factory=list)      # slow groups left with no helper or rounds


# measure(tests) -> one list per repeat, one (GB/s, one-way latency us) per test: a test is limited by its slowest member
Measure = Callable[[list[Test]], list[list[tuple[float, float]]]]


def chunks(items: Sequence[int], size: int) -> list[tuple[int, ...]]:
    """Consecutive groups of `size` (the last one absorbs a remainder smaller than 2)."""
    out = [tuple(items[i:i + size]) for i in range(0, len(items), size)]
    if len(out) > 1 and len(out[-1]) < 2:
        out[-2:] = [out[-2] + out[-1]]
    return out


def first_round(n: int, groups: int = FIRST_GROUPS) -> list[Test]:
    """`groups` strided rings of hosts 0..n-1 (fewer when n is small: every ring has 2 hosts or more)."""
    g = max(1, min(groups, n // 2))
    return [Test(t, "search", t) for t in (tuple(range(j, n, g)) for j in range(g))]


def plan(suspects: list[tuple[int, ...]], cleared: list[int], avoid: dict[int, int] | None = None,
         turn: int = 0) -> tuple[list[Test], list[tuple[int, ...]]]:
    """The next round: each suspect group halved, a lone host tested with a cleared helper (not
    `avoid[host]`, its first), control rings of the halves' size from the other cleared hosts (rotated
    by `turn`). Returns the tests and the suspects that found no helper."""
    tests: list[Test] = []
    free = list(cleared)
    stuck = []
    avoid = avoid or {}
    for group in suspects:
        half = (len(group) + 1) // 2
        for part in (group[:half], group[half:]) if len(group) > 1 else (group,):
            helper = next((h for h in free if h != avoid.get(part[0])), None) if len(part) == 1 else None
            if len(part) >= 2:
                tests.append(Test(part, "search", part))
            elif helper is not None:
                free.remove(helper)
                tests.append(Test((part[0], helper), "confirm", part))
            elif part:
                stuck.append(part)
    size = max(2, min((len(t.hosts) for t in tests), default=2))
    if len(free) >= 2:
        start = turn * size % len(free)
        controls = chunks(free[start:] + free[:start], size)[:max(FIRST_GROUPS, 2 * len(tests))]
        tests += [Test(c, "control", c) for c in controls]
    return tests, stuck


def judge_round(tests: list[Test], measured: list[list[tuple[float, float]]], min_effect: float) -> dict[int, Verdict]:
    """Tests worse than 1 + min_effect times the median of the others in most repeats."""
    threshold = 1 + min_effect
    bw = flagged([worse({i: m[0] for i, m in enumerate(rep)}, True) for rep in measured], threshold)
    lat = flagged([worse({i: m[1] for i, m in enumerate(rep)}, False, LATENCY_RESOLUTION_US) for rep in measured],
                  threshold, share=0.75)
    out = {}
    for i in set(bw) | set(lat):
        b, a = bw.get(i, 0.0), lat.get(i, 0.0)
        out[i] = Verdict(round(b, 2), "bandwidth") if b >= a else Verdict(round(a, 2), "latency")
    return out


def max_rounds(n: int) -> int:
    return 2 * math.ceil(math.log2(max(n, 2))) + 6


def search(n: int, measure: Measure, min_effect: float = 0.5, groups: int = FIRST_GROUPS) -> Search:
    """Adaptive group testing over hosts 0..n-1 (n >= 4), `measure` running each round."""
    result = Search(n)
    cleared: set[int] = set()
    once: dict[int, int] = {}     # host -> the helper of its first slow confirmation
    tests: list[Test] = first_round(n, groups)
    while tests:
        rnd = Round(tests, judge_round(tests, measure(tests), min_effect))
        result.rounds.append(rnd)
        suspects = []
        for i, test in enumerate(tests):
            if i not in rnd.slow:
                cleared.update(test.subject)
                for h in test.subject:
                    once.pop(h, None)
                continue
            cleared.difference_update(test.subject)
            if test.role == "confirm" and test.subject[0] in once:
                result.named[test.subject[0]] = (rnd.slow[i], len(result.rounds) - 1)
                continue
            if test.role == "confirm":
                once[test.subject[0]] = test.hosts[1]
            suspects.append(test.subject)
        if not suspects:
            break
        if len(result.rounds) >= max_rounds(n):
            result.unresolved += suspects
            break
        tests, stuck = plan(suspects, sorted(cleared), once, len(result.rounds))
        result.unresolved += stuck
    return result


def groups_of(result: Search, host: int) -> list[tuple[int, Test, Verdict | None]]:
    """Each round's test of `host`: (round index, test, verdict or None if it ran healthy)."""
    return [(r, t, rnd.slow.get(i)) for r, rnd in enumerate(result.rounds) for i, t in enumerate(rnd.tests) if host in t.hosts]
