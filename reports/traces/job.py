"""One job's traces, or one line why not (a rank twice, worlds or groups that disagree, windows apart,
nothing to judge); a partial job is judged over its ranks present, the missing named as ranges."""
from __future__ import annotations

from itertools import groupby
from pathlib import Path

from reports.traces.records import RankTrace
from schema.results import ResultError

MIN_RANKS = 2   # lateness is against peers: one rank has none


def ranges(ranks: list[int]) -> str:
    """[0, 1, 2, 5, 7, 8] -> "0-2, 5, 7-8": a rank list of any length in a few characters."""
    runs = [[r for _, r in run] for _, run in groupby(enumerate(sorted(set(ranks))), lambda x: x[1] - x[0])]
    return ", ".join(str(rs[0]) if len(rs) == 1 else f"{rs[0]}-{rs[-1]}" for rs in runs)


def short_ranges(ranks: list[int], limit: int = 60) -> str:
    """ranges(), cut to `limit` characters (a line must stay short whatever the job)."""
    text = ranges(ranks)
    return text if len(text) <= limit else text[:limit].rsplit(",", 1)[0] + ", ..."


def alone(traces: list[RankTrace]) -> str | None:
    """Why nobody can be named in a one-rank job (world size 1), or None: there is no peer to wait."""
    if len(traces) == 1 and traces[0].world == 1:
        return (f"{traces[0].path}: a one-rank job (world size 1): no peer waits for it and none to compare it "
                "with, so nobody is named")
    return None


def missing(traces: list[RankTrace]) -> list[int]:
    return sorted(set(range(traces[0].world)) - {t.rank for t in traces})


def partial_note(traces: list[RankTrace]) -> list[str]:
    """The judgement's note for a partial job: who was judged, who could not be."""
    gone = missing(traces)
    if not gone:
        return []
    there = [t.rank for t in traces]
    return [f"{'rank' if len(gone) == 1 else 'ranks'} {short_ranges(gone)} of {traces[0].world}: no trace; judged "
            f"ranks {short_ranges(there)} against each other only (a late rank among the missing cannot be named)"]


def checked(traces: list[RankTrace]) -> tuple[list[RankTrace], dict[str, list[int]]]:
    """The traces in rank order and the job's groups (their union over ranks, members restricted to the
    ranks present), refused in one line when they are not one job or too few of it."""
    first = traces[0]
    for t in traces:
        if t.world != first.world:
            raise ResultError(f"{_file(t)}: world size {t.world}, but {_file(first)} says {first.world}: traces of "
                              "different jobs mixed")
    by_rank: dict[int, RankTrace] = {}
    for t in traces:
        if not 0 <= t.rank < t.world:
            raise ResultError(f"{_file(t)}: rank {t.rank} of a world of {t.world}: not one of its ranks")
        if t.rank in by_rank:
            raise ResultError(f"{_file(t)} and {_file(by_rank[t.rank])} are both rank {t.rank}: traces of different jobs "
                              "(or runs) mixed")
        by_rank[t.rank] = t
    gone = missing(traces)
    if len(by_rank) < MIN_RANKS:
        raise ResultError(f"only rank {first.rank} of {first.world} has a trace (ranks {short_ranges(gone)} missing): "
                          "a late rank is told from its peers, give at least 2 ranks' files")
    for t in traces:
        if not t.collectives:
            kind = "NCCL kernels or gloo:*" if t.backend in ("nccl", "gloo", "") else f"{t.backend} collectives"
            raise ResultError(f"{_file(t)}: rank {t.rank}'s trace holds no collective events ({kind}): was the profiler "
                              "on during training steps?")
    spans = {t.rank: (t.collectives[0].start_us, max(c.start_us + c.dur_us for c in t.collectives)) for t in traces}
    for r, (lo, hi) in spans.items():
        others = [s for q, s in spans.items() if q != r]
        if others and (hi < max(s[0] for s in others) or lo > min(s[1] for s in others)):
            raise ResultError(f"{_file(by_rank[r])}: rank {r}'s collectives do not overlap the other ranks' in time: "
                              "traces of different runs mixed")
    groups: dict[str, list[int]] = {}
    said: dict[str, str] = {}
    for t in traces:
        for name, ranks in t.groups.items():
            if name in groups and groups[name] != ranks:
                raise ResultError(f"{_file(t)}: its process group {name} is ranks {short_ranges(ranks)}, but {said[name]} "
                                  f"says {short_ranges(groups[name])}: traces of different jobs mixed")
            groups.setdefault(name, ranks)
            said.setdefault(name, _file(t))
    return [by_rank[r] for r in sorted(by_rank)], {g: [r for r in ranks if r in by_rank] for g, ranks in groups.items()}


def _file(t: RankTrace) -> str:
    """A trace's file name: the folder is the one given, and a refusal must stay one short line."""
    return Path(t.path).name
