"""Which rank, host or group the job waits for, from every rank's collectives (records.RankTrace).

Matching: a collective is (group, order within the group) on each of the group's ranks; it counts
when every member has it with the same op and shape. A collective ends at about the same moment on
every member, so what a rank did between its previous collective's end and this one's start (its
**gap**, one clock) says when it arrived: a rank's **lateness** in a collective is its gap minus its
peers' median gap (no clocks compared across hosts); in a rank's first collective, which has no
previous end, the median duration of its peers minus its own (the rank that arrived last spent the
least time in it). The gap reads arrival better than the duration: a collective's end on each rank
carries its own scheduling noise, the gap the previous end's, and the late rank's lateness shows
whole (8 gloo ranks on 2 cores, one 2 ms late in 70% of collectives: the gap reads 2.0 ms, and that
rank arrives last in 20-25 of 39 collectives against 12-18 by duration, in 7 of the 20 jobs). Its **wait** is its duration
minus the group's shortest. The late arriver is the culprit; the
ranks that wait for it are its victims, never suspects (as the synthetic doctor judges).

A rank is named when, over all its collectives, (1) it arrives late more often than a healthy
rank would, by two one-sided tests at alpha / ranks together (Bonferroni over ranks; the smaller
p-value doubled, Bonferroni over the two): the sign test (it arrives after its peers' median more
often than not; a healthy rank, like its peers, does so half the time by symmetry, whatever the
noise) and the last-arriver test (it is the last of its group to arrive, the longest gap; in a
first collective the shortest time, more often than 1 / group size per collective allows: a
Poisson-binomial tail); the sign test sees a rank a little late nearly always, the last-arriver test one much late
in part of its collectives (at 8 ranks, 2 ms late in 70% of 40 collectives: last in about 28, where
5 is a healthy rank's share); so this is the false-alarm budget, alpha a job, for collectives that
are independent; and (2) its median lateness is above `min_late_us`, so a consistent but harmless
skew is not named. Medians and signs, with a
bootstrap interval of the median: a job's first collective (connections made) or a descheduled
moment can last a second and must not outweigh forty ordinary steps. A rank late once, however
much, is not named; one late by 2 ms in 70% of 40 collectives is. When every rank of a host (two
or more) is named, the host is the suspect. A group is named (a link) when its collectives' floor
(the shortest member's time: the transfer once the last rank arrived) is over `min_link_ratio`
times other groups' floor for the same op and shape, by a one-sided Mann-Whitney test at alpha /
groups; the baseline is the groups that share no host with it where there are such (a slow host's
link slows every group through it). Slow groups that hold one host in common and no other are
named once, as that host's link.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np
from scipy import stats

from reports.traces.job import checked, partial_note
from reports.traces.records import Collective, RankTrace

MIN_LATE_US = 1000.0   # below a millisecond, gloo collectives on shared cores differ by scheduling alone
ALPHA = 0.05
MIN_LINK_RATIO = 3.0   # a group's floor over the other groups' for the same op and shape


@dataclass
class Suspect:
    kind: str              # "rank", "host" or "link" (a group's collectives slow)
    host: str              # its host(s), "+"-joined for a link over several
    ranks: list[int]
    group: str | None      # the group, for a link
    late_us: float         # median lateness (rank, host) or the floor's excess over the other groups (link)
    ci_us: tuple[float, float]
    share: float           # of its collectives late by more than min_late_us (rank, host); 1.0 for a link
    ratio: float           # its peers' time over its own (rank, host); its floor over the others' (link)
    evidence: str

    @property
    def name(self) -> str:
        if self.kind == "link":
            return f"link group {self.group}" if self.group is not None else f"link of host {self.host}"
        return f"rank {self.ranks[0]}" if self.kind == "rank" else f"host {self.host}"

    def to_json(self) -> dict:
        return {"kind": self.kind, "name": self.name, "rank": self.ranks[0] if len(self.ranks) == 1 else None,
                "ranks": self.ranks, "host": self.host, "group": self.group, "late_us": round(self.late_us, 1),
                "ci_us": [round(x, 1) for x in self.ci_us], "share": round(self.share, 3), "ratio": round(self.ratio, 2),
                "evidence": self.evidence}


@dataclass
class RankStats:
    rank: int
    host: str
    collectives: int
    late_us: float          # median over its collectives
    ci_us: tuple[float, float]   # the median's bootstrap interval at 1 - alpha / ranks
    share: float
    wait_us: float          # median
    p: float                # both tests': twice the smaller of p_sign and p_last (at most 1)
    p_sign: float           # arrives after its peers' median more often than not
    last: int               # collectives it arrived last in (the longest gap; in a first collective the shortest time)
    p_last: float           # ... more often than 1 / group size per collective allows


@dataclass
class Verdict:
    world: int
    hosts: dict[int, str]
    groups: dict[str, list[int]]
    matched: int
    unmatched: int
    mismatched: list[str]
    ranks: list[RankStats]
    floors_us: dict[str, float]                  # group -> median floor
    lateness: list[list[float]]                  # rank x matched collective, us (NaN: not a member)
    suspects: list[Suspect] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    settings: dict = field(default_factory=dict)


def _matched(traces: list[RankTrace], groups: dict[str, list[int]],
             present: list[int]) -> tuple[list[tuple[str, dict[int, Collective]]], int, list[str]]:
    by_key: dict[tuple[str, int], dict[int, Collective]] = defaultdict(dict)
    for t in traces:
        for c in t.collectives:
            by_key[(c.group, c.seq)][t.rank] = c
    out, unmatched, mismatched = [], 0, []
    for (g, seq), got in sorted(by_key.items(), key=lambda kv: min(c.start_us for c in kv[1].values())):
        members = groups.get(g, present) if g else present
        if sorted(got) != sorted(members):
            unmatched += 1       # the profiler's window cut it on some rank
            continue
        if len({(c.op, c.shape) for c in got.values()}) > 1:
            said = ", ".join(f"rank {r} {c.op} {c.shape}" for r, c in sorted(got.items()))
            mismatched.append(f"group {g or '?'} #{seq}: {said}")
            continue
        out.append((g, got))
    return out, unmatched, mismatched


def judge(traces: list[RankTrace], ranks_per_host: int | None = None, min_late_us: float = MIN_LATE_US,
          alpha: float = ALPHA, min_link_ratio: float | None = None) -> Verdict:
    traces, groups = checked(traces)
    min_link_ratio = MIN_LINK_RATIO if min_link_ratio is None else min_link_ratio
    world = traces[0].world
    hosts = {t.rank: (f"host{t.rank // ranks_per_host}" if ranks_per_host else t.host or "?") for t in traces}
    matched, unmatched, mismatched = _matched(traces, groups, sorted(hosts))
    late = np.full((world, len(matched)), np.nan)
    wait = np.full((world, len(matched)), np.nan)
    last = np.zeros((world, len(matched)), dtype=bool)
    floors: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    prev_end = _previous_ends(traces)
    for j, (g, got) in enumerate(matched):
        ranks = sorted(got)
        d = np.array([got[r].dur_us for r in ranks])
        ends = [prev_end.get((r, g, got[r].seq), np.nan) for r in ranks]
        arrival = np.array([got[r].start_us - e for r, e in zip(ranks, ends)])   # the gap
        if np.isnan(arrival).any():
            arrival = -d   # a first collective: minus the duration
        for i, r in enumerate(ranks):
            late[r, j] = arrival[i] - np.median(np.delete(arrival, i))
            wait[r, j] = d[i] - d.min()
        last[ranks[int(np.argmax(arrival))], j] = True
        c = got[ranks[0]]
        floors[(g, c.op, c.shape)].append(float(d.min()))
    verdict = Verdict(world, hosts, groups, len(matched), unmatched, mismatched, [],
                      {g: float(np.median([x for (h, _, _), v in floors.items() if h == g for x in v]))
                       for g in {k[0] for k in floors}},
                      late.tolist(), notes=sorted({t.note for t in traces if t.note}) + partial_note(traces),
                      settings={"min_late_us": min_late_us, "alpha": alpha, "min_link_ratio": min_link_ratio})
    named = []
    for r in sorted(hosts):   # the ranks present (a partial job: the others have no row to judge)
        x = late[r][~np.isnan(late[r])]
        if len(x) < 3:
            verdict.notes.append(f"rank {r}: {len(x)} matched collectives, too few to judge")
            continue
        p_sign = stats.binomtest(int(np.sum(x > 0)), len(x), 0.5, alternative="greater").pvalue
        member = ~np.isnan(late[r])
        sizes = np.sum(~np.isnan(late[:, member]), axis=0)
        times_last = int(np.sum(last[r, member]))
        p_last = poisson_binomial_sf(times_last, 1.0 / sizes)
        p = min(1.0, 2 * min(p_sign, p_last))
        ci = stats.bootstrap((x,), np.median, confidence_level=1 - alpha / world, n_resamples=2000,
                             method="percentile", rng=np.random.default_rng(r)).confidence_interval
        frac = float(np.mean(x > min_late_us))
        verdict.ranks.append(RankStats(r, hosts[r], len(x), float(np.median(x)), (float(ci.low), float(ci.high)), frac,
                                       float(np.nanmedian(wait[r])), float(p), float(p_sign), times_last, float(p_last)))
        if np.median(x) > min_late_us and p < alpha / world:
            named.append(verdict.ranks[-1])
    _name_ranks_and_hosts(verdict, named, wait)
    _name_groups(verdict, floors, alpha, min_link_ratio)
    _host_link(verdict)
    return verdict


def _previous_ends(traces: list[RankTrace]) -> dict[tuple[int, str, int], float]:
    """(rank, group, seq) -> when that rank's last collective before this one (any group) ended, on
    its own clock; absent where one of its collectives was still running when this one started
    (overlapped, as DDP's bucket all_reduces are: the gap would measure another collective's wait)."""
    out = {}
    for t in traces:
        latest_end = None   # of every collective of this rank so far
        for c in sorted(t.collectives, key=lambda c: c.start_us):
            if latest_end is not None and latest_end <= c.start_us:
                out[(t.rank, c.group, c.seq)] = latest_end
            latest_end = max(latest_end if latest_end is not None else c.start_us, c.start_us + c.dur_us)
    return out


def poisson_binomial_sf(k: int, probs: np.ndarray) -> float:
    """P(K >= k) for K a sum of independent Bernoulli(probs): how often a healthy rank is the last
    to arrive k times or more, its group sizes differing. By convolution, exact (scipy.stats.poisson_binom
    needs SciPy 1.15, hence Python 3.10; this project runs on 3.9)."""
    if k <= 0:
        return 1.0
    pmf = np.zeros(len(probs) + 1)
    pmf[0] = 1.0
    for n, q in enumerate(probs, start=1):
        pmf[1:n + 1] = pmf[1:n + 1] * (1 - q) + pmf[0:n] * q
        pmf[0] *= 1 - q
    return float(min(1.0, max(0.0, pmf[k:].sum())))


def _name_ranks_and_hosts(verdict: Verdict, named: list[RankStats], wait: np.ndarray) -> None:
    on_host: dict[str, list[int]] = defaultdict(list)
    for r, h in verdict.hosts.items():
        on_host[h].append(r)
    named_ranks = {s.rank for s in named}
    for host, ranks in sorted(on_host.items()):
        mine = [s for s in named if s.host == host]
        if not mine:
            continue
        victims = sorted(r for r in verdict.hosts if r not in named_ranks
                         and np.nanmean(wait[r]) > max(s.wait_us for s in mine))
        if len(ranks) >= 2 and len(mine) == len(ranks) and host != "?":
            mean = float(np.mean([s.late_us for s in mine]))
            verdict.suspects.append(Suspect(
                "host", host, ranks, None, mean, (min(s.ci_us[0] for s in mine), max(s.ci_us[1] for s in mine)),
                float(np.mean([s.share for s in mine])), 0.0,
                f"every rank of {host} ({', '.join(map(str, ranks))}) arrives late together: {mean / 1e3:.2f} ms "
                f"(median), in {min(s.share for s in mine):.0%}+ of collectives; ranks {victims} wait for them"))
            continue
        for s in mine:
            verdict.suspects.append(Suspect(
                "rank", host, [s.rank], None, s.late_us, s.ci_us, s.share, 0.0,
                f"rank {s.rank} on {host} arrives {s.late_us / 1e3:.2f} ms after its peers (median) "
                f"({s.ci_us[0] / 1e3:.2f}-{s.ci_us[1] / 1e3:.2f} ms), late by over "
                f"{verdict.settings['min_late_us'] / 1e3:g} ms in {s.share:.0%} of its {s.collectives} collectives; "
                f"ranks {victims} wait for it inside them"))


def _name_groups(verdict: Verdict, floors: dict[tuple[str, str, str], list[float]], alpha: float,
                 min_link_ratio: float) -> None:
    by_sig: dict[tuple[str, str], dict[str, list[float]]] = defaultdict(dict)
    for (g, op, shape), v in floors.items():
        if g:
            by_sig[(op, shape)][g] = v
    for (op, shape), per_group in sorted(by_sig.items()):
        if len(per_group) < 2:
            continue
        hosts_of = {g: {verdict.hosts[r] for r in verdict.groups.get(g, [])} for g in per_group}
        for g, mine in sorted(per_group.items()):
            apart = [h for h in per_group if h != g and not hosts_of[h] & hosts_of[g]]
            others = [x for h in (apart or [h for h in per_group if h != g]) for x in per_group[h]]
            ratio = float(np.median(mine) / np.median(others))
            p = stats.mannwhitneyu(mine, others, alternative="greater").pvalue
            if ratio > min_link_ratio and p < alpha / len(per_group) and len(mine) >= 3:
                ranks = verdict.groups.get(g, [])
                hosts = sorted({verdict.hosts[r] for r in ranks})
                lo, hi = np.percentile(mine, [25, 75])
                verdict.suspects.append(Suspect(
                    "link", "+".join(hosts), ranks, g, float(np.median(mine) - np.median(others)), (float(lo), float(hi)),
                    1.0, round(ratio, 2),
                    f"group {g}'s {op} ({shape}) takes {np.median(mine) / 1e3:.2f} ms once its last rank arrived, "
                    f"{ratio:.1f}x the {np.median(others) / 1e3:.2f} ms of the same op over "
                    f"{'the groups that share no host with it' if apart else 'the other groups'} (it is on "
                    f"{', '.join(hosts)}): its link or transport, not a rank"))


def _host_link(verdict: Verdict) -> None:
    """Slow groups that hold one host in common, and no other, are that host's link (a host's NIC or
    cable slows every group through it): one suspect instead of each group, where that reading is
    the only one: no other host of those groups has a slow group of its own that avoids this host
    (two slow hosts close together leave every group named on its own), and hosts are known."""
    links = [s for s in verdict.suspects if s.kind == "link" and s.group is not None]
    hosts_of = {s.group: {verdict.hosts[r] for r in verdict.groups.get(s.group or "", [])} for s in links}
    through: dict[str, list[Suspect]] = defaultdict(list)
    for s in links:
        for h in sorted(hosts_of[s.group]):
            through[h].append(s)
    merged: list[Suspect] = []
    for host, mine in sorted(through.items(), key=lambda kv: -len(kv[1])):
        partners = set.union(*(hosts_of[s.group] for s in mine)) - {host}
        if (host == "?" or len(mine) < 2 or set.intersection(*(hosts_of[s.group] for s in mine)) != {host}
                or any(s in merged for s in mine)
                or any(host not in hosts_of[s.group] for p in partners for s in through[p])):
            continue
        merged += mine
        ranks = sorted(r for r, h in verdict.hosts.items() if h == host)
        ratio = min(s.ratio for s in mine)
        verdict.suspects.append(Suspect(
            "link", host, ranks, None, float(np.median([s.late_us for s in mine])),
            (min(s.ci_us[0] for s in mine), max(s.ci_us[1] for s in mine)), 1.0, ratio,
            f"every slow group through {host} ({', '.join(sorted(s.group or '' for s in mine))}: {ratio:.1f}x or more "
            f"the time of the groups apart from them once their last rank arrived) holds no other host in common: "
            f"{host}'s link or NIC"))
    verdict.suspects = [s for s in verdict.suspects if s not in merged]
