"""One job's traces, or one line saying why they are not: each rank once, every rank of the world
there, the same world, groups that agree, windows that overlap in time (traces of two runs mixed), and
collectives to judge."""
from __future__ import annotations

from reports.traces.records import RankTrace
from schema.results import ResultError


def checked(traces: list[RankTrace]) -> tuple[list[RankTrace], dict[str, list[int]]]:
    """The traces in rank order and the job's process groups, refused in one line when they are not
    one whole job. Each rank's trace lists the groups it is in (torch keeps no other), so the job's
    groups are their union; one group name with two memberships is two jobs mixed."""
    first = traces[0]
    for t in traces:
        if t.world != first.world:
            raise ResultError(f"{t.path}: world size {t.world}, but {first.path} says {first.world}: traces of "
                              "different jobs mixed")
    by_rank: dict[int, RankTrace] = {}
    for t in traces:
        if t.rank in by_rank:
            raise ResultError(f"{t.path} and {by_rank[t.rank].path} are both rank {t.rank}: traces of different jobs "
                              "(or runs) mixed")
        by_rank[t.rank] = t
    missing = sorted(set(range(first.world)) - set(by_rank))
    if missing:
        raise ResultError(f"rank {', '.join(map(str, missing))} of {first.world}: no trace (each rank's file is needed "
                          "to tell the late rank from the ones waiting)")
    for t in traces:
        if not t.collectives:
            raise ResultError(f"{t.path}: rank {t.rank}'s trace holds no collective events (gloo:*): was the profiler "
                              "on during training steps?")
    spans = {t.rank: (t.collectives[0].start_us, max(c.start_us + c.dur_us for c in t.collectives)) for t in traces}
    for r, (lo, hi) in spans.items():
        others = [s for q, s in spans.items() if q != r]
        if others and (hi < max(s[0] for s in others) or lo > min(s[1] for s in others)):
            raise ResultError(f"{by_rank[r].path}: rank {r}'s collectives do not overlap the other ranks' in time: "
                              "traces of different runs mixed")
    groups: dict[str, list[int]] = {}
    said: dict[str, str] = {}
    for t in traces:
        for name, ranks in t.groups.items():
            if name in groups and groups[name] != ranks:
                raise ResultError(f"{t.path}: its process group {name} is ranks {ranks}, but {said[name]} says "
                                  f"{groups[name]}: traces of different jobs mixed")
            groups.setdefault(name, ranks)
            said.setdefault(name, t.path)
    return [by_rank[r] for r in range(first.world)], groups
