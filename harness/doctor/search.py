"""The doctor's measurement and judgement: one worker group of every rank measures links (adaptive
group testing, schedule.py, or --full's pairwise sweep), a pair inside each host and each rank's
arrival, and each suspect is judged against its peers (docs/doctor.md)."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from harness.doctor.schedule import FIRST_GROUPS, LATENCY_RESOLUTION_US, Test, flagged, groups_of, worse
from harness.doctor.schedule import search as search_groups
from harness.engine.groups import GroupKey, GroupPool
from schema.stats import median
from schema.wire import DoctorSkewSpec, DoctorSpec


def pair_rounds(n: int) -> list[list[tuple[int, int]]]:
    """Rounds of disjoint pairs that together cover every pair of n items (round-robin tournament)."""
    items: list[int | None] = list(range(n)) + ([None] if n % 2 else [])
    m, rounds = len(items), []
    for _ in range(m - 1):
        pairs = [(items[i], items[m - 1 - i]) for i in range(m // 2)]
        rounds.append([(a, b) for a, b in pairs if a is not None and b is not None])
        items = [items[0], items[-1], *items[1:-1]]
    return [r for r in rounds if r]


@dataclass
class Suspect:
    host: str
    peer: str | None
    kind: str          # "link" (a host's links or one pair), "node" (inside a host), "rank"
    ratio: float       # how many times worse than the median of its peers
    evidence: str


@dataclass
class Diagnosis:
    hosts: list[str]
    ranks_per_host: dict[str, int]
    rounds: int                                  # rounds of the link sweep or search
    schedule: str = "groups"                     # "groups" (adaptive group testing) or "pairs" (--full)
    bandwidth_gbps: dict[str, dict[str, float]] = field(default_factory=dict)   # host -> peer -> GB/s
    latency_us: dict[str, dict[str, float]] = field(default_factory=dict)
    intra_gbps: dict[str, float] = field(default_factory=dict)
    arrival: dict[int, dict] = field(default_factory=dict)                      # rank -> work, lateness, wait
    suspects: list[Suspect] = field(default_factory=list)
    repeats: list[dict] = field(default_factory=list)   # each repeat's per-host and per-rank medians: the evidence
    search: list[dict] = field(default_factory=list)    # groups: each round's tests, measurements and verdicts

    @property
    def schedule_words(self) -> str:
        return ("rounds of disjoint host pairs" if self.schedule == "pairs"
                else "rounds of adaptive group tests (disjoint rings of hosts)")

    def to_json(self) -> dict:
        return {"suspects": [asdict(s) for s in self.suspects], "rounds": self.rounds, "schedule": self.schedule,
                "search": self.search, "hosts": self.hosts,
                "ranks_per_host": self.ranks_per_host, "bandwidth_gbps": self.bandwidth_gbps,
                "latency_us": self.latency_us, "intra_gbps": self.intra_gbps,
                "arrival": {str(k): v for k, v in self.arrival.items()}, "repeats": self.repeats}


def judge(diag: Diagnosis, link_repeats: list[dict], arrival_repeats: list[dict], min_effect: float,
          rank_effect: float) -> None:
    """Suspects from the repeats: hosts whose links are slow, single slow pairs, slow hosts inside,
    ranks that arrive late."""
    threshold = 1 + min_effect
    bw_host = flagged([worse(r["host_bw"], True) for r in link_repeats], threshold)
    # a few microseconds between pairs is scheduling on shared cores, not a link: below LATENCY_RESOLUTION_US
    lat_host = flagged([worse(r["host_lat"], False, LATENCY_RESOLUTION_US) for r in link_repeats], threshold, share=0.75)
    for host, ratio in sorted(bw_host.items(), key=lambda kv: -kv[1]):
        peers = diag.bandwidth_gbps.get(host, {})
        diag.suspects.append(Suspect(host, None, "link", round(ratio, 2),
                                     f"even its best link runs {ratio:.1f}x below the other hosts' best "
                                     f"(its links: median {median(list(peers.values())):.3f} GB/s)" if peers else "slow links"))
    for host, ratio in sorted(lat_host.items(), key=lambda kv: -kv[1]):
        if host not in bw_host:
            diag.suspects.append(Suspect(host, None, "link", round(ratio, 2),
                                         f"even its fastest link's latency is {ratio:.1f}x the other hosts' "
                                         f"(median {median(list(diag.latency_us[host].values())):.1f} us one way)"))
    named = set(bw_host) | set(lat_host)
    pairs = flagged([worse(r["pair_bw"], True) for r in link_repeats], threshold, share=0.75)
    for (a, b), ratio in sorted(pairs.items(), key=lambda kv: -kv[1]):
        if a not in named and b not in named and len(diag.hosts) > 2:
            diag.suspects.append(Suspect(a, b, "link", round(ratio, 2),
                                         f"the {a}-{b} link runs {ratio:.1f}x below the median pair"))
    intra = flagged([worse(r["intra_bw"], True) for r in link_repeats if r["intra_bw"]], threshold)
    for host, ratio in intra.items():
        diag.suspects.append(Suspect(host, None, "node", round(ratio, 2),
                                     f"ranks inside {host} exchange {ratio:.1f}x slower than inside other hosts"))
    # the same work on every rank varies little, so a smaller effect counts; but ranks share cores
    # with whatever else runs, so a culprit must be slow in nearly every repeat
    late = flagged([worse(r["work"], False) for r in arrival_repeats], 1 + rank_effect, share=0.75)
    for rank, ratio in sorted(late.items(), key=lambda kv: -kv[1]):
        a = diag.arrival[rank]
        victims = sorted(r for r, v in diag.arrival.items() if r != rank and v["wait_us"] > a["wait_us"])
        diag.suspects.append(Suspect(a["host"], None, "rank", round(ratio, 2),
                                     f"rank {rank} arrives {a['late_us']:.0f} us after the median rank (its work takes "
                                     f"{ratio:.1f}x the median); ranks {victims} wait for it inside the collective"))


def _link_repeat(results: list[dict], schedule: list[list[tuple[int, int]]], hosts: list[str], rep_rank: dict,
                 intra_pairs: list[tuple[int, int]], nbytes: int, host_of: dict[int, str]) -> dict:
    """One repeat's medians: GB/s and one-way latency per host pair, per host, and inside hosts
    (`results` in rank order, as the group returns them)."""
    pair_bw, pair_lat = {}, {}
    for index, round_pairs in enumerate(schedule):
        for a, b in round_pairs:
            got = results[rep_rank[hosts[a]]]["rounds"][index]
            pair_bw[(hosts[a], hosts[b])] = nbytes / median(got["big_ns"])      # bytes/ns = GB/s
            # latency by the floor of its ping-pong round trips: scheduling noise only ever adds to a round
            # trip, a slow link adds to all
            pair_lat[(hosts[a], hosts[b])] = min(got["small_ns"]) / 2 / 1e3
    intra_bw = {host_of[a]: nbytes / median(results[a]["rounds"][len(schedule)]["big_ns"]) for a, _ in intra_pairs}
    # a host is judged by its best link: a bad NIC, cable or port slows every link of the host, while a
    # healthy host keeps at least one good peer even when a slow pair beside it takes the CPUs or switch
    host_bw = {h: max(v for (a, b), v in pair_bw.items() if h in (a, b)) for h in hosts if len(hosts) > 1}
    host_lat = {h: min(v for (a, b), v in pair_lat.items() if h in (a, b)) for h in hosts if len(hosts) > 1}
    return {"pair_bw": pair_bw, "pair_lat": pair_lat, "intra_bw": intra_bw, "host_bw": host_bw, "host_lat": host_lat}


def _arrival_repeat(results: list[dict]) -> dict:
    """Per rank: median work time, lateness after the median rank's entry, wait inside the collective (us)."""
    entries = [median(each) for each in zip(*(r["entry_ns"] for r in results))]   # the median rank's, per round
    return {"work": {rank: median(r["work_ns"]) / 1e3 for rank, r in enumerate(results)},
            "late": {rank: median([(e - m) / 1e3 for e, m in zip(r["entry_ns"], entries)]) for rank, r in enumerate(results)},
            "wait": {rank: median([x - e for x, e in zip(r["exit_ns"], r["entry_ns"])]) / 1e3
                     for rank, r in enumerate(results)}}


def _ring_repeats(results: list[dict], rings: list[list[int]], repeat: int, nbytes: int) -> list[list[tuple[float, float]]]:
    """Per repeat, per ring: (GB/s of its slowest member, bytes / (median pass / neighbours); one-way latency
    us per hop, the floor of ring[0]'s 8-byte laps over the hops, as noise only adds to a lap)."""
    def one(index: int, ring: list[int]) -> tuple[float, float]:
        got = [results[r]["rounds"][index] for r in ring]
        return min(nbytes * len(m["steps"]) / median(m["big_ns"]) for m in got), min(got[0]["small_ns"]) / len(ring) / 1e3
    return [[one(index, ring) for ring in rings] for index in range(repeat)]


def _search_links(pool, key, diag: Diagnosis, rep_rank: dict, repeat: int, nbytes: int, min_effect: float,
                  timeout_s: float, groups: int) -> None:
    """Adaptive group testing (harness/doctor/schedule.py), each round's rings measured `repeat` times
    in one call; the suspects, the pairs measured on the way (heatmap) and each round's record into diag."""
    hosts = diag.hosts
    measured: list[list[list[tuple[float, float]]]] = []

    def measure(tests: list[Test]) -> list[list[tuple[float, float]]]:
        rings = [[rep_rank[hosts[h]] for h in t.hosts] for t in tests]
        results, _ = pool.run(key, DoctorSpec(kind="doctor_rings", rounds=[rings] * repeat, bytes=nbytes, reps=5,
                                               small_reps=20), timeout_s)
        measured.append(_ring_repeats(results, rings, repeat, nbytes))
        return measured[-1]

    found = search_groups(len(hosts), measure, min_effect, groups)
    diag.rounds = len(found.rounds)
    for r, (rnd, reps) in enumerate(zip(found.rounds, measured)):
        tests = []
        for i, test in enumerate(rnd.tests):
            gbps, lat = [rep[i][0] for rep in reps], [rep[i][1] for rep in reps]
            verdict = rnd.slow.get(i)
            tests.append({"hosts": [hosts[h] for h in test.hosts], "role": test.role, "gbps": gbps, "latency_us": lat,
                          "slow": asdict(verdict) if verdict else None})
            if len(test.hosts) == 2:   # a pair: its link goes into the host x host matrix (the latest measurement)
                a, b = (hosts[h] for h in test.hosts)
                for x, y in ((a, b), (b, a)):
                    diag.bandwidth_gbps.setdefault(x, {})[y] = median(gbps)
                    diag.latency_us.setdefault(x, {})[y] = median(lat)
        diag.search.append({"round": r + 1, "tests": tests})
    for host, (verdict, _) in sorted(found.named.items(), key=lambda kv: -kv[1][0].ratio):
        slow = [(i, t) for i, t, v in groups_of(found, host) if v]
        helpers = " and ".join(f"{hosts[t.hosts[1]]} (round {i + 1})" for i, t in slow if t.role == "confirm")
        how = "below the median ring's bandwidth" if verdict.by == "bandwidth" else "above the median ring's latency"
        diag.suspects.append(Suspect(hosts[host], None, "link", verdict.ratio,
                                     f"paired with known-good {helpers} it ran {verdict.ratio:.1f}x {how}; the rings it "
                                     f"was in ran slow in rounds {[i + 1 for i, _ in slow]}"))
    for group in found.unresolved:
        names = [hosts[h] for h in group]
        diag.suspects.append(Suspect(names[0], None, "group", 0.0,
                                     f"hosts {', '.join(names)} ran slow together and no known-good host or round was "
                                     "left to tell which (run with --full)"))


def diagnose(launcher: str, nproc: int, backend: str = "mpi", driver_host: str = "127.0.0.1",
             log_dir: Path = Path("results/doctor/logs"), repeat: int = 5, nbytes: int = 1 << 20, min_effect: float = 0.5,
             rank_effect: float = 0.25, timeout_s: float = 300.0, full: bool = False,
             groups: int = FIRST_GROUPS) -> Diagnosis:
    pool = GroupPool(log_dir, driver_host)
    key = GroupKey(backend, nproc, launcher=launcher)
    try:
        group = pool.get(key)
        ranks = sorted(group.ranks, key=lambda r: r["rank"])
        host_of = {r["rank"]: r["host"] for r in ranks}
        hosts = list(dict.fromkeys(r["host"] for r in ranks))
        per_host = {h: [r["rank"] for r in ranks if r["host"] == h] for h in hosts}
        rep_rank = {h: members[0] for h, members in per_host.items()}
        full = full or len(hosts) < 4      # under 4 hosts the sweep is at most 3 rounds and groups have no peers
        schedule_pairs = pair_rounds(len(hosts)) if full else []
        intra_pairs = [(m[0], m[1]) for m in per_host.values() if len(m) >= 2]
        rounds = [[[rep_rank[hosts[a]], rep_rank[hosts[b]]] for a, b in r] for r in schedule_pairs]
        if intra_pairs:
            rounds.append([list(p) for p in intra_pairs])
        diag = Diagnosis(hosts, {h: len(m) for h, m in per_host.items()}, len(schedule_pairs),
                         "pairs" if full else "groups")
        link_repeats, arrival_repeats = [], []
        if not full:
            if intra_pairs:
                results, _ = pool.run(key, DoctorSpec(kind="doctor_links", rounds=rounds * repeat, bytes=nbytes, reps=5,
                                                       small_reps=20), timeout_s)
                link_repeats = [{"host_bw": {}, "host_lat": {}, "pair_bw": {}, "pair_lat": {},
                                 "intra_bw": {host_of[a]: nbytes / median(results[a]["rounds"][i]["big_ns"])
                                              for a, _ in intra_pairs}} for i in range(repeat)]
            _search_links(pool, key, diag, rep_rank, repeat, nbytes, min_effect, timeout_s, groups)
        for _ in range(repeat):
            if full and rounds:
                results, _ = pool.run(key, DoctorSpec(kind="doctor_links", rounds=rounds, bytes=nbytes, reps=5, small_reps=20),
                                         timeout_s)
                link_repeats.append(_link_repeat(results, schedule_pairs, hosts, rep_rank, intra_pairs, nbytes, host_of))
            # ~15 ms of work a round: long against the scheduler's time slices, so a rank that shares
            # its core with something else shows it in every round, not only when a slice lands inside
            results, _ = pool.run(key, DoctorSkewSpec(rounds=9, work=48, matrix=160), timeout_s)
            arrival_repeats.append(_arrival_repeat(results))
    finally:
        pool.close_all()
    for (a, b) in (link_repeats[0]["pair_bw"] if link_repeats else {}):
        for x, y in ((a, b), (b, a)):
            diag.bandwidth_gbps.setdefault(x, {})[y] = median([r["pair_bw"][(a, b)] for r in link_repeats])
            diag.latency_us.setdefault(x, {})[y] = median([r["pair_lat"][(a, b)] for r in link_repeats])
    for host in (link_repeats[0]["intra_bw"] if link_repeats else {}):
        diag.intra_gbps[host] = median([r["intra_bw"][host] for r in link_repeats])
    for rank in host_of:
        diag.arrival[rank] = {"host": host_of[rank],
                              **{f"{k}_us": median([r[k][rank] for r in arrival_repeats]) for k in ("work", "late", "wait")}}
    for i, arrival in enumerate(arrival_repeats):
        links = link_repeats[i] if i < len(link_repeats) else {}
        diag.repeats.append({"host_gbps": links.get("host_bw", {}), "host_latency_us": links.get("host_lat", {}),
                             "intra_gbps": links.get("intra_bw", {}), "work_us": arrival["work"]})
    judge(diag, link_repeats, arrival_repeats, min_effect, rank_effect)
    return diag
