"""`hccl-bench doctor`: which host, link or rank is bad, judged against its peers. One worker group
of every rank measures links (adaptive group testing, harness/doctor/schedule.py, or --full's
pairwise sweep), a pair inside each host and each rank's arrival; with --traces or
--flight-recorder nothing is launched (reports/traces/ judges what the job recorded). What is
measured and how it is judged: docs/doctor.md. Exit 0 healthy, 1 suspect found, 2 unusable.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from collectives.backends import BACKENDS
from collectives.sizes import SizeError, format_size, parse_sizes
from harness import files
from harness.doctor import schedule
from harness.doctor.schedule import LATENCY_RESOLUTION_US
from harness.doctor.schedule import flagged as _flagged
from harness.doctor.schedule import worse as _worse
from harness.engine.groups import CaseFailure, GroupKey, GroupPool
from harness.provenance import numpy_torch_problem
from schema.exit_codes import ExitCode
from schema.stats import median
from schema.wire import DoctorSkewSpec, DoctorSpec

EXIT_HEALTHY, EXIT_SUSPECT, EXIT_UNUSABLE = ExitCode.OK, ExitCode.SUSPECT, ExitCode.BAD_INPUT
HEATMAP_HOSTS = 64     # a bigger host x host heatmap is unreadable


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
    bw_host = _flagged([_worse(r["host_bw"], True) for r in link_repeats], threshold)
    # a few microseconds between pairs is scheduling on shared cores, not a link: below LATENCY_RESOLUTION_US
    lat_host = _flagged([_worse(r["host_lat"], False, LATENCY_RESOLUTION_US) for r in link_repeats], threshold, share=0.75)
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
    pairs = _flagged([_worse(r["pair_bw"], True) for r in link_repeats], threshold, share=0.75)
    for (a, b), ratio in sorted(pairs.items(), key=lambda kv: -kv[1]):
        if a not in named and b not in named and len(diag.hosts) > 2:
            diag.suspects.append(Suspect(a, b, "link", round(ratio, 2),
                                         f"the {a}-{b} link runs {ratio:.1f}x below the median pair"))
    intra = _flagged([_worse(r["intra_bw"], True) for r in link_repeats if r["intra_bw"]], threshold)
    for host, ratio in intra.items():
        diag.suspects.append(Suspect(host, None, "node", round(ratio, 2),
                                     f"ranks inside {host} exchange {ratio:.1f}x slower than inside other hosts"))
    # the same work on every rank varies little, so a smaller effect counts; but ranks share cores
    # with whatever else runs, so a culprit must be slow in nearly every repeat
    late = _flagged([_worse(r["work"], False) for r in arrival_repeats], 1 + rank_effect, share=0.75)
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
    by_rank = dict(enumerate(results))
    pair_bw, pair_lat, intra_bw = {}, {}, {}
    for index, round_pairs in enumerate(schedule):
        for a, b in round_pairs:
            got = by_rank[rep_rank[hosts[a]]]["rounds"][index]
            pair_bw[(hosts[a], hosts[b])] = nbytes / median(got["big_ns"])      # bytes/ns = GB/s
            # latency by the floor of its ping-pong round trips: scheduling noise only ever adds to a round
            # trip, a slow link adds to all
            pair_lat[(hosts[a], hosts[b])] = min(got["small_ns"]) / 2 / 1e3
    if intra_pairs:
        index = len(schedule)
        for a, _ in intra_pairs:
            got = by_rank[a]["rounds"][index]
            intra_bw[host_of[a]] = nbytes / median(got["big_ns"])
    # a host is judged by its best link: a bad NIC, cable or port slows every link of the host, while a
    # healthy host keeps at least one good peer even when a slow pair beside it takes the CPUs or switch
    host_bw = {h: max(v for (a, b), v in pair_bw.items() if h in (a, b)) for h in hosts if len(hosts) > 1}
    host_lat = {h: min(v for (a, b), v in pair_lat.items() if h in (a, b)) for h in hosts if len(hosts) > 1}
    return {"pair_bw": pair_bw, "pair_lat": pair_lat, "intra_bw": intra_bw, "host_bw": host_bw, "host_lat": host_lat}


def _arrival_repeat(results: list[dict]) -> dict:
    """Per rank: median work time, lateness after the median rank's entry, wait inside the collective (us)."""
    rounds = len(results[0]["entry_ns"])
    late: dict[int, list[float]] = {rank: [] for rank in range(len(results))}
    for i in range(rounds):
        median_entry = median([r["entry_ns"][i] for r in results])
        for rank, r in enumerate(results):
            late[rank].append((r["entry_ns"][i] - median_entry) / 1e3)
    return {"work": {rank: median(r["work_ns"]) / 1e3 for rank, r in enumerate(results)},
            "late": {k: median(v) for k, v in late.items()},
            "wait": {rank: median([x - e for x, e in zip(r["exit_ns"], r["entry_ns"])]) / 1e3
                     for rank, r in enumerate(results)}}


def _ring_repeats(results: list[dict], rings: list[list[int]], repeat: int, nbytes: int) -> list[list[tuple[float, float]]]:
    """Per repeat, per ring: (GB/s of its slowest member, one-way latency us per hop).
    A member's bandwidth is per exchange with one neighbour: bytes / (median pass / neighbours); the
    latency is the floor of the 8-byte laps (ring[0] times them) over the ring's hops (scheduling
    noise only adds to a lap, a slow link adds to every one)."""
    out = []
    for index in range(repeat):
        row = []
        for ring in rings:
            got = [results[r]["rounds"][index] for r in ring]
            row.append((min(nbytes * len(m["steps"]) / median(m["big_ns"]) for m in got),
                        min(got[0]["small_ns"]) / len(ring) / 1e3))
        out.append(row)
    return out


def _search_links(pool, key, diag: Diagnosis, rep_rank: dict, repeat: int, nbytes: int, min_effect: float,
                  timeout_s: float, groups: int) -> None:
    """Adaptive group testing (harness/doctor/schedule.py), each round's rings measured `repeat` times
    in one call; the suspects, the pairs measured on the way (heatmap) and each round's record into diag."""
    hosts = diag.hosts
    measured: list[list[list[tuple[float, float]]]] = []

    def measure(tests: list[schedule.Test]) -> list[list[tuple[float, float]]]:
        rings = [[rep_rank[hosts[h]] for h in t.hosts] for t in tests]
        results, _ = pool.run(key, DoctorSpec(kind="doctor_rings", rounds=[rings] * repeat, bytes=nbytes, reps=5,
                                               small_reps=20), timeout_s)
        measured.append(_ring_repeats(results, rings, repeat, nbytes))
        return measured[-1]

    found = schedule.search(len(hosts), measure, min_effect, groups)
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
        slow = [(i, t) for i, t, v in schedule.groups_of(found, host) if v]
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
             groups: int = schedule.FIRST_GROUPS) -> Diagnosis:
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
        diag.arrival[rank] = {"host": host_of[rank], "work_us": median([r["work"][rank] for r in arrival_repeats]),
                              "late_us": median([r["late"][rank] for r in arrival_repeats]),
                              "wait_us": median([r["wait"][rank] for r in arrival_repeats])}
    for i, arrival in enumerate(arrival_repeats):
        links = link_repeats[i] if i < len(link_repeats) else {}
        diag.repeats.append({"host_gbps": links.get("host_bw", {}), "host_latency_us": links.get("host_lat", {}),
                             "intra_gbps": links.get("intra_bw", {}), "work_us": arrival["work"]})
    judge(diag, link_repeats, arrival_repeats, min_effect, rank_effect)
    return diag


# ---- what people read ----

def _hosts_words(names: list[str]) -> str:
    return "+".join(names) if len(names) <= 4 else f"{names[0]}+{len(names) - 1} more"


def text(diag: Diagnosis) -> str:
    out = [f"# doctor: {len(diag.hosts)} hosts x ranks {diag.ranks_per_host}; link "
           f"{'sweep' if diag.schedule == 'pairs' else 'search'} in {diag.rounds} {diag.schedule_words}"]
    for rnd in diag.search:
        sizes = sorted({len(t["hosts"]) for t in rnd["tests"]})
        slow = [f"{_hosts_words(t['hosts'])} ({t['role']}, {t['slow']['ratio']:.1f}x {t['slow']['by']})"
                for t in rnd["tests"] if t["slow"]]
        out.append(f"# round {rnd['round']}: {len(rnd['tests'])} rings of {'/'.join(map(str, sizes))} hosts; "
                   f"slow: {', '.join(slow) or 'none'}")
    if diag.bandwidth_gbps and len(diag.hosts) <= 16:
        out.append("# inter-host GB/s (rows: host, columns: peer)")
        out.append(f"#{'':>12} " + " ".join(f"{h[:10]:>10}" for h in diag.hosts))
        for h in diag.hosts:
            out.append(f" {h[:12]:>12} " + " ".join(f"{diag.bandwidth_gbps.get(h, {}).get(p, float('nan')):>10.3f}"
                                                    if p != h else f"{'-':>10}" for p in diag.hosts))
    if diag.intra_gbps:
        out.append("# inside each host GB/s: " + ", ".join(f"{h} {v:.3f}" for h, v in diag.intra_gbps.items()))
    out.append("# arrival at the collective after the same work (us): "
               + ", ".join(f"rank {r} {a['work_us']:.0f} work / {a['late_us']:+.0f} late / {a['wait_us']:.0f} wait"
                           for r, a in sorted(diag.arrival.items())))
    if diag.suspects:
        out.append(f"SUSPECTS ({len(diag.suspects)}):")
        out += [f"  {s.kind} {s.host}{' - ' + s.peer if s.peer else ''}: {s.evidence}" for s in diag.suspects]
    else:
        out.append("healthy: no host, link or rank stands out from its peers")
    return "\n".join(out)


def write_outputs(diag: Diagnosis, out_dir: Path | None, json_path: str | None) -> None:
    if json_path:
        files.write_atomic(json_path, json.dumps(diag.to_json(), indent=1))
    if out_dir is None:
        return
    from reports import doctor_page  # matplotlib and jinja2: only when a page is asked for
    out_dir.mkdir(parents=True, exist_ok=True)
    files.write_atomic(out_dir / "doctor.html", doctor_page.html(diag, text(diag), heatmap=1 < len(diag.hosts) <= HEATMAP_HOSTS))
    files.write_atomic(out_dir / "doctor.md", doctor_page.markdown(diag) + "\n")


def from_traces(args: argparse.Namespace) -> ExitCode:
    """--traces / --flight-recorder: judge what a job recorded (reports/traces/), print, write --json and -o."""
    from reports.traces import flight_recorder, formats, hang, job, judge, output
    from schema.results import ResultError
    try:
        if args.ranks_per_host is not None and args.ranks_per_host < 1:
            raise ValueError(f"--ranks-per-host {args.ranks_per_host}: give at least 1")
        if args.min_link_ratio is not None and not args.min_link_ratio > 1:
            raise ValueError(f"--min-link-ratio {args.min_link_ratio:g}: give a ratio above 1 (3: a group three times "
                             "slower than the groups apart from it)")
        if args.traces:
            traces = formats.read_job(Path(args.traces))
            if why := job.alone(traces):
                words, named = f"# doctor --traces: 1 rank\nhealthy: {why}", False
                data = {"source": "traces", "suspects": [], "world": 1, "notes": [why]}
            else:
                verdict = judge.judge(traces, args.ranks_per_host, args.min_late_ms * 1e3,
                                      min_link_ratio=args.min_link_ratio)
                words, data, named = output.text(verdict), output.to_json(verdict), bool(verdict.suspects)
        else:
            report = hang.forensics(flight_recorder.read_dir(Path(args.flight_recorder)), args.ranks_per_host)
            skipped = flight_recorder.not_dumps(Path(args.flight_recorder))
            words, data = output.hang_text(report, skipped), output.hang_json(report, skipped)
            named = bool(report.stops or report.mismatches)
    except (ResultError, ValueError) as exc:
        line = f"hccl-bench doctor: {(str(exc).splitlines() or [''])[0]}"
        # one short line whatever the path: a long one loses its middle, the reason at the end stays
        print(line if len(line) < 200 else f"{line[:90]}...{line[-105:]}", file=sys.stderr)
        return EXIT_UNUSABLE
    print(words)
    if args.json:
        files.write_atomic(args.json, json.dumps(data, indent=1))
    if args.output:
        from reports import doctor_page
        out = Path(args.output)
        out.mkdir(parents=True, exist_ok=True)
        files.write_atomic(out / "doctor.html", doctor_page.traces_html(data, words))
        files.write_atomic(out / "doctor.md", doctor_page.traces_markdown(data) + "\n")
        print(f"# doctor.html and doctor.md: {out}")
    return EXIT_SUSPECT if named else EXIT_HEALTHY


def main(argv: list[str] | None = None) -> ExitCode:
    parser = argparse.ArgumentParser(prog="hccl-bench doctor", description=__doc__.split("\n\n")[0])
    parser.add_argument("--launcher", help="launcher template with {nproc} (as for the benches)")
    parser.add_argument("--nproc", type=int, help="ranks in all; each host needs at least one")
    parser.add_argument("--traces", metavar="DIR", help="judge a job's own traces instead of launching anything: "
                        "torch.profiler (Kineto) files of gloo, NCCL or RCCL jobs (one per rank), torch_npu profiler "
                        "folders (*_ascend_pt: communication.json) or msprof-analyze's cluster_analysis_output")
    parser.add_argument("--flight-recorder", metavar="DIR", help="a hung job's flight-recorder dumps (one per rank): "
                        "where each rank stopped, and the ranks that never reached the collective the others wait in")
    parser.add_argument("--ranks-per-host", type=int, help="--traces/--flight-recorder: ranks 0..N-1 are host0, ... "
                        "(for files that do not name their host)")
    parser.add_argument("--min-link-ratio", type=float, default=None, help="--traces: how much slower a group's "
                        "collectives must run once its last rank arrived, against other groups' same op and shape, "
                        "to name its link (default 3)")
    parser.add_argument("--min-late-ms", type=float, default=1.0, help="--traces: how late a rank must arrive in a "
                        "collective to count as late in it (default 1 ms)")
    parser.add_argument("--backend", default="mpi", choices=list(BACKENDS))
    parser.add_argument("--driver-host", default="127.0.0.1", help="the address every rank reaches the driver at")
    parser.add_argument("-o", "--output", help="folder for doctor.html (heatmap), doctor.md and the ranks' logs "
                        "(default: a new results/doctor-<timestamp>/)")
    parser.add_argument("--json", help="write the suspects and measurements as JSON")
    parser.add_argument("--repeat", type=int, default=5, help="independent measurements each judgement rests on (>= 3)")
    parser.add_argument("--bytes", default="1M", help="message size of the bandwidth exchanges (default 1M)")
    parser.add_argument("--min-effect", type=float, default=0.5,
                        help="how much worse than its peers a host or link must be (default 0.5: 1.5x)")
    parser.add_argument("--rank-effect", type=float, default=0.25,
                        help="how much longer a rank's fixed work must take than its peers' (default 0.25: 1.25x)")
    parser.add_argument("--full", action="store_true",
                        help="measure every host pair (N-1 rounds for N hosts) instead of adaptive group testing "
                        "(about log2 N rounds); also finds a single slow pair between two healthy hosts")
    parser.add_argument("--groups", type=int, default=schedule.FIRST_GROUPS,
                        help=f"rings in the search's first round (default {schedule.FIRST_GROUPS}; "
                        "fewer: bigger rings, more rounds)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds before a measurement counts as hung")
    args = parser.parse_args(argv)
    if args.traces or args.flight_recorder:
        if args.traces and args.flight_recorder or args.launcher:
            print("hccl-bench doctor: give one of --traces, --flight-recorder or --launcher", file=sys.stderr)
            return EXIT_UNUSABLE
        return from_traces(args)
    if not args.launcher or args.nproc is None:
        print("hccl-bench doctor: give --launcher and --nproc (or --traces DIR, --flight-recorder DIR)", file=sys.stderr)
        return EXIT_UNUSABLE
    try:
        if args.repeat < 3:
            raise ValueError(f"--repeat {args.repeat}: give at least 3 (a suspect needs a majority of repeats)")
        if args.nproc < 2:
            raise ValueError(f"--nproc {args.nproc}: the doctor compares ranks, give at least 2")
        if args.groups < 4:
            raise ValueError(f"--groups {args.groups}: give at least 4 (a ring is judged against the median of the "
                             "others: with 2 rings, one culprit in each leaves no healthy peer)")
        if not (args.min_effect > 0 and args.rank_effect > 0):
            raise ValueError(f"--min-effect {args.min_effect} --rank-effect {args.rank_effect}: give numbers > 0")
        (nbytes,) = parse_sizes(args.bytes)
        if BACKENDS[args.backend].family == "torch" and (abi := numpy_torch_problem()):
            raise ValueError(abi)   # every rank's torch.from_numpy would fail: said once, before any rank starts
        out = Path(args.output) if args.output else files.new_run_dir("results", time.strftime("doctor-%Y%m%d-%H%M%S"))
        diag = diagnose(args.launcher, args.nproc, args.backend, args.driver_host, out / "logs", args.repeat, nbytes,
                        args.min_effect, args.rank_effect, args.timeout, args.full, args.groups)
    except (ValueError, SizeError) as exc:
        print(f"hccl-bench doctor: {exc}", file=sys.stderr)
        return EXIT_UNUSABLE
    except CaseFailure as exc:
        print(f"hccl-bench doctor: the ranks failed: {str(exc).splitlines()[0]}", file=sys.stderr)
        return EXIT_UNUSABLE
    except Exception as exc:  # a bug: one line, and never the exit status of a suspect
        print(f"hccl-bench doctor: internal error: {type(exc).__name__}: {exc} (please report it)", file=sys.stderr)
        return ExitCode.INTERNAL
    print(text(diag))
    full_rounds = len(pair_rounds(len(diag.hosts)))
    print(f"# rounds: {diag.rounds} ({len(diag.hosts)} hosts, "
          + ("every pair" if diag.schedule == "pairs" else f"adaptive group testing; --full takes {full_rounds}")
          + f"); message {format_size(nbytes)}; {args.repeat} repeats")
    write_outputs(diag, out, args.json)
    print(f"# doctor.html, doctor.md and the ranks' logs: {out}")
    return EXIT_SUSPECT if diag.suspects else EXIT_HEALTHY


if __name__ == "__main__":
    sys.exit(main())
