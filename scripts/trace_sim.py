"""The doctor's trace judgement past this machine: the slow-link job of scripts/make_traces.py (one
rank per host, an all_reduce over the world, then one over each pair of neighbouring hosts of a
ring) simulated at 64-1,024 hosts, judged by the real code (reports.traces.judge on RankTraces),
with its noise fitted from real runs of that job on the emulated cluster. It prints the fit, then
per size the false alarms on healthy jobs, and the recall and precision of naming one host's slow
link.

What is measured and what is simulated: the fit reads real traces (make_traces.py --jobs
hosts-healthy,slow-link --hosts 16 --world 16); the simulated jobs are drawn from it. Per
collective on each rank the model draws
  gap (previous end to this start)  median and spread (MAD) of the real gaps, the world's
                                     all_reduce (after the step's work) and the pair groups' apart;
                                     per rank a normal draw (scheduling noise), never below 0
  floor (the transfer once the last rank arrived)  the group's base time x each member host's
                                     state x a log-normal draw per collective; a host's state is
                                     fixed for the job (a host a little slower or faster than its
                                     peers, as the real hosts were) with the log-spread of the real
                                     groups' medians; the slow host's groups x the fitted slowdown
and a rank's duration is the last member's arrival minus its own, plus the floor. One clock per
rank (no skew is needed: the judgement compares no clocks across ranks).

  python scripts/trace_sim.py FIT_DIR [--hosts 64,256,1024] [--jobs 10] [--steps 20]

FIT_DIR holds the folders make_traces.py wrote (hosts-healthy-N, slow-link-N).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from reports.traces import judge, kineto  # noqa: E402
from reports.traces.job import checked  # noqa: E402
from reports.traces.records import Collective, RankTrace  # noqa: E402


def pair_groups(hosts: int) -> list[list[int]]:
    """make_traces.py's groups at one rank per host: hosts h and h+1 of a ring."""
    return [sorted({h, (h + 1) % hosts}) for h in range(hosts)]


def fit(folder: Path) -> dict:
    """The model's parameters from the real runs: the gaps' median and spread, the pair groups' floor
    (median), the log-spread of floors within a group and of the groups' medians, and the slowdown
    of the slow host's groups."""
    gaps: dict[str, list[float]] = {"world": [], "pair": []}
    within, between, base, slow_ratio = [], [], [], []
    for run in sorted(folder.glob("hosts-healthy-*")) + sorted(folder.glob("slow-link-*")):
        traces, groups = checked(kineto.read_dir(run))
        v = judge.judge(traces)
        prev = judge._previous_ends(traces)
        for t in traces:
            for c in t.collectives:
                if (t.rank, c.group, c.seq) in prev:
                    kind = "world" if len(groups.get(c.group, [])) == t.world else "pair"
                    gaps[kind].append(c.start_us - prev[(t.rank, c.group, c.seq)])
        floors: dict[str, list[float]] = {}
        by_key: dict[tuple[str, int], list[float]] = {}
        for t in traces:
            for c in t.collectives:
                if 0 < len(groups.get(c.group, [])) < t.world:   # the pair groups
                    by_key.setdefault((c.group, c.seq), []).append(c.dur_us)
        for (g, _), durs in by_key.items():
            if len(durs) == len(groups[g]):
                floors.setdefault(g, []).append(min(durs))
        medians = {g: float(np.median(f)) for g, f in floors.items()}
        named_groups = {s2.group for s2 in v.suspects if s2.kind == "link"}
        slow_hosts = {s2.host for s2 in v.suspects if s2.kind == "link" and s2.group is None}
        healthy = {g: m for g, m in medians.items()
                   if not any(v.hosts[r] in slow_hosts for r in groups[g]) and g not in named_groups}
        if run.name.startswith("hosts-healthy"):
            base += list(healthy.values())
            between += list(np.log(list(healthy.values())) - np.log(np.median(list(healthy.values()))))
            for g in healthy:
                within += list(np.log(floors[g]) - np.log(medians[g]))
        elif slow_hosts:
            slow = [m for g, m in medians.items() if any(v.hosts[r] in slow_hosts for r in groups[g])]
            slow_ratio.append(float(np.median(slow) / np.median(list(healthy.values()))))
    if not base or not slow_ratio:
        raise SystemExit(f"{folder}: needs hosts-healthy-N and slow-link-N runs (make_traces.py) with the slow link named")
    spread = {k: (float(np.median(v)), float(1.4826 * np.median(np.abs(np.array(v) - np.median(v))))) for k, v in gaps.items()}
    return {"world_gap_us": spread["world"][0], "world_gap_sd_us": spread["world"][1],
            "pair_gap_us": spread["pair"][0], "pair_gap_sd_us": spread["pair"][1],
            "floor_us": float(np.median(base)), "within_sigma": float(np.std(within)),
            "host_sigma": float(np.std(between) / np.sqrt(2)),   # a pair group holds two hosts' states
            "slow_ratio": float(np.median(slow_ratio))}


def simulate(p: dict, hosts: int, steps: int, slow: int | None, rng: np.random.Generator) -> list[RankTrace]:
    """One job of the model: `hosts` ranks, one per host; host `slow`'s link slowed (None: healthy)."""
    groups = {"0": list(range(hosts)), **{str(i + 1): g for i, g in enumerate(pair_groups(hosts))}}
    state = np.exp(rng.normal(0, p["host_sigma"], hosts))
    traces = [RankTrace(r, hosts, f"node{r + 1}", f"sim/rank{r}", groups) for r in range(hosts)]
    clock = np.zeros(hosts)   # each rank's previous end on its own clock
    seq: dict[str, int] = {}
    order = [("0", groups["0"], 4096)] + [(str(i + 1), g, 65536) for i, g in enumerate(pair_groups(hosts))]
    for _ in range(steps):
        for name, members, elements in order:
            kind = "world" if name == "0" else "pair"
            arrive = clock[members] + np.maximum(rng.normal(p[f"{kind}_gap_us"], p[f"{kind}_gap_sd_us"], len(members)), 0.0)
            floor = p["floor_us"] * (np.prod(state[members]) if name != "0" else 1.0)
            if slow is not None and slow in members and name != "0":
                floor *= p["slow_ratio"]
            floor *= np.exp(rng.normal(0, p["within_sigma"]))
            end = arrive.max() + floor
            for r, a in zip(members, arrive):
                traces[r].collectives.append(Collective(name, seq.get(name, 0), "all_reduce", f"[[{elements}]] float",
                                                        float(a), float(end - a)))
            seq[name] = seq.get(name, 0) + 1
            clock[members] = end
    return traces


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("fit_dir")
    parser.add_argument("--hosts", default="64,256,1024")
    parser.add_argument("--jobs", type=int, default=10, help="healthy and slow-link jobs each, per size")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    p = fit(Path(args.fit_dir))
    print("fitted from " + args.fit_dir + ": " + ", ".join(f"{k} {v:.3g}" for k, v in p.items()))
    rng = np.random.default_rng(args.seed)
    for hosts in map(int, args.hosts.split(",")):
        false_alarms = hit = named_total = named_right = 0
        for _ in range(args.jobs):
            names = [s.name for s in judge.judge(simulate(p, hosts, args.steps, None, rng)).suspects]
            false_alarms += bool(names)
            named_total += len(names)
            slow = int(rng.integers(hosts))
            names = [s.name for s in judge.judge(simulate(p, hosts, args.steps, slow, rng)).suspects]
            right = f"link of host node{slow + 1}"
            hit += right in names
            named_total += len(names)
            named_right += names.count(right)
        precision = named_right / named_total if named_total else float("nan")
        print(f"{hosts:>5} hosts (simulated): healthy jobs with anyone named {false_alarms}/{args.jobs}; slow link named "
              f"{hit}/{args.jobs} (recall {hit / args.jobs:.2f}); precision {precision:.2f} "
              f"({named_right} right of {named_total} named)", flush=True)


if __name__ == "__main__":
    main()
