"""Which rank, host or group the job waits for, from every rank's collectives matched by (group,
order): lateness, the sign and last-arriver tests, holds and slow links (docs/doctor.md, How it judges a job)."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np
from scipy import stats

from reports.traces.job import checked, partial_note
from reports.traces.records import Collective, RankTrace
from schema.stats import median, medians

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
    cost_us: float = 0.0        # rank, host: what each peer waited for it alone, in all (its holds' sum)
    cost_step_us: float = 0.0   # ... a step (a collective where the traces mark no steps)

    @property
    def name(self) -> str:
        if self.kind == "link":
            return f"link group {self.group}" if self.group is not None else f"link of host {self.host}"
        return f"rank {self.ranks[0]}" if self.kind == "rank" else f"host {self.host}"

    def to_json(self) -> dict:
        return {"kind": self.kind, "name": self.name, "rank": self.ranks[0] if len(self.ranks) == 1 else None,
                "ranks": self.ranks, "host": self.host, "group": self.group, "late_us": round(self.late_us, 1),
                "ci_us": [round(x, 1) for x in self.ci_us], "share": round(self.share, 3), "ratio": round(self.ratio, 2),
                "cost_us": round(self.cost_us, 1), "cost_step_us": round(self.cost_step_us, 1), "evidence": self.evidence}


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
    cost_us: float = 0.0    # its holds' sum: what each peer waited for it alone, in all
    cost_step_us: float = 0.0   # ... per unit (a step, or a collective where no steps are marked)
    units: int = 0          # steps (or collectives) it took part in
    unit: str = "step"
    p_cost: float = 1.0     # its holds' sum is no more than chance (ranks exchangeable): permutation test
    how: str = ""           # where it is late, for a rank named by its cost ("at the first collective of each step")


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
    hold = np.zeros(len(matched))     # the last arriver's lead over the next: what each peer waited for it alone
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
            late[r, j] = arrival[i] - median(np.delete(arrival, i))
            wait[r, j] = d[i] - d.min()
        last[ranks[int(np.argmax(arrival))], j] = True
        if len(ranks) > 1:
            top = np.sort(arrival)
            hold[j] = top[-1] - top[-2]
        c = got[ranks[0]]
        floors[(g, c.op, c.shape)].append(float(d.min()))
    verdict = Verdict(world, hosts, groups, len(matched), unmatched, mismatched, [],
                      {g: float(median([x for (h, _, _), v in floors.items() if h == g for x in v]))
                       for g in sorted({k[0] for k in floors})},
                      late.tolist(), notes=sorted({t.note for t in traces if t.note}) + partial_note(traces),
                      settings={"min_late_us": min_late_us, "alpha": alpha, "min_link_ratio": min_link_ratio})
    p_cost = _cost(last, hold, ~np.isnan(late))
    places = _places(traces, matched)
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
        ci = stats.bootstrap((x,), medians, confidence_level=1 - alpha / world, n_resamples=2000,
                             method="percentile", rng=np.random.default_rng(r)).confidence_interval
        frac = float(np.mean(x > min_late_us))
        mine, unit = _per_unit(np.flatnonzero(member), places)
        held = np.array([sum(hold[j] * last[r, j] for j in js) for js in mine])
        chance = np.array([sum(hold[j] / np.sum(~np.isnan(late[:, j])) for j in js) for js in mine])
        cost = float(stats.trim_mean(held, TRIM))    # a step's cost, robust to a rare stall (anyone's)
        stat = RankStats(r, hosts[r], len(x), float(median(x)), (float(ci.low), float(ci.high)), frac,
                         float(np.nanmedian(wait[r])), float(p), float(p_sign), times_last, float(p_last),
                         float(held.sum()), cost, len(mine), unit, float(p_cost[r]))
        verdict.ranks.append(stat)
        # two readings, each at half the budget: late in most collectives (the per-collective view), or
        # costing its peers more than the margin a step beyond its chance share (late once a step, say)
        by_median = median(x) > min_late_us and p < alpha / (2 * world)
        by_cost = stats.trim_mean(held - chance, TRIM) > min_late_us and p_cost[r] < alpha / (2 * world)
        if by_cost and not by_median:
            stat.how = _where(late[r], last[r], hold, places, min_late_us, len(mine), unit)
        if by_median or by_cost:
            named.append(stat)
    _name_ranks_and_hosts(verdict, named, wait)
    _name_groups(verdict, floors, alpha, min_link_ratio)
    _host_link(verdict)
    return verdict


TRIM = 0.05    # a step's cost: the mean over steps less the highest and lowest 5% (a first step's connections)
DRAWS = 4000   # the cost test's permutations: its smallest p is 1 / 4001, under alpha / (2 x 8 ranks)


def _cost(last: np.ndarray, hold: np.ndarray, member: np.ndarray) -> np.ndarray:
    """Per rank, the permutation test that its holds (ranked, not timed) are more than chance: docs/doctor.md
    (What a rank costs)."""
    world, n = member.shape
    if n == 0:
        return np.ones(world)
    hold = stats.rankdata(hold)
    cost = (last * hold).sum(axis=1)
    sizes = member.sum(axis=0)
    members = np.full((n, int(sizes.max())), -1)
    for j in range(n):
        members[j, :sizes[j]] = np.flatnonzero(member[:, j])
    rng = np.random.default_rng(0)   # the same verdict for the same traces
    beaten = np.zeros(world)
    chunk = max(1, min(DRAWS, 2_000_000 // n))
    for done in range(0, DRAWS, chunk):
        k = min(chunk, DRAWS - done)
        who = members[np.arange(n), (rng.random((k, n)) * sizes).astype(int)]      # k x n: each collective's last
        drawn = np.bincount((who + world * np.arange(k)[:, None]).ravel(), weights=np.broadcast_to(hold, (k, n)).ravel(),
                            minlength=k * world).reshape(k, world)
        beaten += (drawn >= cost - 1e-9).sum(axis=0)
    return (1 + beaten) / (1 + DRAWS)


def _places(traces: list[RankTrace], matched: list[tuple[str, dict[int, Collective]]]) -> list[tuple[int | None, int]]:
    """Each matched collective's (step, place within the step), on its first member's clock, where that
    rank's trace marks steps (ProfilerStep#N); (None, order) otherwise."""
    by_rank = {t.rank: t for t in traces}
    out: list[tuple[int | None, int]] = []
    seen: dict[tuple[int, int], int] = defaultdict(int)
    for j, (_, got) in enumerate(matched):
        r = min(got)
        starts = by_rank[r].steps
        step = int(np.searchsorted(starts, got[r].start_us, side="right")) - 1 if starts else -1
        if step < 0:
            out.append((None, j))
            continue
        out.append((step, seen[(r, step)]))
        seen[(r, step)] += 1
    return out


def _per_unit(mine: np.ndarray, places: list[tuple[int | None, int]]) -> tuple[list[list[int]], str]:
    """A rank's matched collectives by step, where the traces mark steps; else one collective a unit."""
    if all(places[j][0] is not None for j in mine):
        steps: dict = defaultdict(list)
        for j in mine:
            steps[places[j][0]].append(int(j))
        return [steps[k] for k in sorted(steps)], "step"
    return [[int(j)] for j in mine], "collective"


def _where(late: np.ndarray, last: np.ndarray, hold: np.ndarray, places: list[tuple[int | None, int]],
           min_late_us: float, units: int, unit: str) -> str:
    """Where a rank named by its cost is late: the collectives it held by over the margin, by their
    place in the step when one place holds most of them."""
    costly = [j for j in range(len(hold)) if last[j] and hold[j] > min_late_us]
    if not costly:
        return ""
    by = float(median(late[costly]))
    at = [places[j][1] for j in costly if places[j][0] is not None]
    if unit == "step" and at:
        place, count = max(((q, at.count(q)) for q in set(at)), key=lambda kv: kv[1])
        if count >= 0.75 * len(costly):
            each = "each step" if count >= 0.9 * units else f"{count} of its {units} steps"
            ordinal = {1: "first", 2: "second", 3: "third"}.get(place + 1, f"{place + 1}th")
            return f"late by ~{by / 1e3:.1f} ms at the {ordinal} collective of {each}"
    return f"late by ~{by / 1e3:.1f} ms in {len(costly)} of its {int(np.sum(~np.isnan(late)))} collectives"


def _previous_ends(traces: list[RankTrace]) -> dict[tuple[int, str, int], float]:
    """(rank, group, seq) -> when that rank's previous collective (any group) ended, on its own clock; absent
    where one was still running when this one started (overlapped, as DDP's bucket all_reduces are)."""
    out = {}
    for t in traces:
        latest_end = None   # of every collective of this rank so far
        for c in sorted(t.collectives, key=lambda c: c.start_us):
            if latest_end is not None and latest_end <= c.start_us:
                out[(t.rank, c.group, c.seq)] = latest_end
            latest_end = max(latest_end if latest_end is not None else c.start_us, c.start_us + c.dur_us)
    return out


def poisson_binomial_sf(k: int, probs: np.ndarray) -> float:
    """P(K >= k) for K a sum of independent Bernoulli(probs), exact by convolution (scipy.stats.poisson_binom
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
        victims = sorted(r for r in verdict.hosts if r not in named_ranks and np.nanmean(wait[r]) > max(s.wait_us for s in mine))
        if len(ranks) >= 2 and len(mine) == len(ranks) and host != "?":
            mean = float(np.mean([s.late_us for s in mine]))
            verdict.suspects.append(Suspect(
                "host", host, ranks, None, mean, (min(s.ci_us[0] for s in mine), max(s.ci_us[1] for s in mine)),
                float(np.mean([s.share for s in mine])), 0.0,
                f"every rank of {host} ({', '.join(map(str, ranks))}) arrives late together: {mean / 1e3:.2f} ms "
                f"(median), in {min(s.share for s in mine):.0%}+ of collectives; ranks {victims} wait for them"))
            continue
        for s in mine:
            costs = (f"costing its peers {s.cost_step_us / 1e3:.1f} ms a {s.unit} ({s.cost_us / 1e3:.0f} ms in all over "
                     f"{s.units} {s.unit}s, p {s.p_cost:.2g})")
            if s.how:   # named by what it costs: late in a few collectives, on time in the rest
                said = f"rank {s.rank} on {host} is {s.how}, {costs}; ranks {victims} wait for it"
            else:
                said = (f"rank {s.rank} on {host} arrives {s.late_us / 1e3:.2f} ms after its peers (median) "
                        f"({s.ci_us[0] / 1e3:.2f}-{s.ci_us[1] / 1e3:.2f} ms), late by over "
                        f"{verdict.settings['min_late_us'] / 1e3:g} ms in {s.share:.0%} of its {s.collectives} "
                        f"collectives, {costs}; ranks {victims} wait for it inside them")
            verdict.suspects.append(Suspect("rank", host, [s.rank], None, s.late_us, s.ci_us, s.share, 0.0, said,
                                            s.cost_us, s.cost_step_us))


def _name_groups(verdict: Verdict, floors: dict[tuple[str, str, str], list[float]], alpha: float, min_link_ratio: float) -> None:
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
            ratio = float(median(mine) / median(others))
            p = stats.mannwhitneyu(mine, others, alternative="greater").pvalue
            if ratio > min_link_ratio and p < alpha / len(per_group) and len(mine) >= 3:
                ranks = verdict.groups.get(g, [])
                hosts = sorted({verdict.hosts[r] for r in ranks})
                lo, hi = np.percentile(mine, [25, 75])
                verdict.suspects.append(Suspect(
                    "link", "+".join(hosts), ranks, g, float(median(mine) - median(others)), (float(lo), float(hi)),
                    1.0, round(ratio, 2),
                    f"group {g}'s {op} ({shape}) takes {median(mine) / 1e3:.2f} ms once its last rank arrived, "
                    f"{ratio:.1f}x the {median(others) / 1e3:.2f} ms of the same op over "
                    f"{'the groups that share no host with it' if apart else 'the other groups'} (it is on "
                    f"{', '.join(hosts)}): its link or transport, not a rank"))


def _host_link(verdict: Verdict) -> None:
    """Slow groups that hold one host in common, and no other, as one suspect: that host's link, where
    that reading is the only one (docs/doctor.md, How it judges a job)."""
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
            "link", host, ranks, None, float(median([s.late_us for s in mine])),
            (min(s.ci_us[0] for s in mine), max(s.ci_us[1] for s in mine)), 1.0, ratio,
            f"every slow group through {host} ({', '.join(sorted(s.group or '' for s in mine))}: {ratio:.1f}x or more "
            f"the time of the groups apart from them once their last rank arrived) holds no other host in common: "
            f"{host}'s link or NIC"))
    verdict.suspects = [s for s in verdict.suspects if s not in merged]
