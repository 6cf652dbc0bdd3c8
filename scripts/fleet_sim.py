"""Fleet simulator for `hccl-bench doctor`'s link search: the real scheduling and judging code
(harness/doctor_schedule.search) driven by a link model instead of ranks, at fleet sizes this
machine cannot emulate. It plans; no test uses it in place of real ranks.

Link model: every host has a NIC rate (1.0 healthy, a culprit 1/SLOW) and a one-way latency
contribution (0 healthy, a culprit +DELAY us). A ring of hosts (a pair is a ring of two) is limited
by its slowest member: GB/s = BASE_GBPS x the smallest member rate, latency = BASE_US + the largest
member delay; each repeat of each test then gets its own noise.

Noise, fitted to the emulated cluster (`--fit DOCTOR_JSON...` recomputes it): the doctor measures
each round's tests `repeat` times in one call and writes every value to its JSON (`search`). For
each healthy test (not judged slow), each repeat against the median of that test's other repeats
is one residual (log ratio for bandwidth, difference in us for latency). No one normal law fits
them (4 hosts alone: robust sigma 0.03 with a third of the residuals beyond 3 sigmas, when another
process takes a core for a while; 16 hosts, 16 ranks on 2 cores: four times wider), so the
simulator draws from the pooled empirical distribution, kept as 21 quantiles (0, 5, ..., 100 %)
and sampled by inverse CDF. A residual keeps the noise common to
a repeat (another process slowing every ring at once), which the judge cancels by comparing rings
of the same repeat, so the simulated noise is, if anything, too large; `--noise-scale` widens it.
FIT_NOTE says which runs gave the constants below.

  python scripts/fleet_sim.py [--trials 200] [--sizes 64,256,1024] [--seed 1]
  python scripts/fleet_sim.py --fit results/doctor-*/doctor.json
"""
from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from harness.doctor import schedule  # noqa: E402

# fitted by --fit (see the docstring); BASE_* are the healthy medians, only their ratios to a culprit matter
BASE_GBPS, BASE_US = 0.0946, 3.9
BW_QUANTILES = (-0.511, -0.2459, -0.1856, -0.1376, -0.1111, -0.0826, -0.0598,
    -0.0447, -0.0273, -0.0053, -0.0, 0.0061, 0.0197, 0.0337,
    0.0518, 0.0793, 0.1039, 0.1322, 0.1842, 0.2476, 0.4417)
LAT_QUANTILES_US = (-6.853, -1.154, -0.7365, -0.5305, -0.3957, -0.3083, -0.2358,
    -0.1702, -0.0922, -0.0425, -0.0125, 0.02, 0.0707, 0.16,
    0.238, 0.3358, 0.4955, 0.681, 0.919, 1.3043, 10.6062)
FIT_NOTE = "16 doctor runs: 10 on 4 hosts, 6 on 16 hosts"


def _quantiles(values: list[float], k: int = 21) -> tuple[float, ...]:
    ordered = sorted(values)
    return tuple(round(ordered[round(i * (len(ordered) - 1) / (k - 1))], 4) for i in range(k))


def _draw(rng: random.Random, quantiles: tuple[float, ...]) -> float:
    """Inverse-CDF sample of the empirical distribution given by evenly spaced quantiles."""
    u = rng.random() * (len(quantiles) - 1)
    i = min(int(u), len(quantiles) - 2)
    return quantiles[i] + (u - i) * (quantiles[i + 1] - quantiles[i])


@dataclass
class Noise:
    bw_quantiles: tuple[float, ...] = BW_QUANTILES
    lat_quantiles_us: tuple[float, ...] = LAT_QUANTILES_US
    scale: float = 1.0

    def bandwidth(self, rng: random.Random, value: float) -> float:
        return value * math.exp(self.scale * _draw(rng, self.bw_quantiles))

    def latency(self, rng: random.Random, value: float) -> float:
        return max(0.5, value + self.scale * _draw(rng, self.lat_quantiles_us))

    def words(self) -> str:
        b, lat = self.bw_quantiles, self.lat_quantiles_us
        return (f"x{self.scale:g} the fitted noise: bandwidth 5-95% {math.exp(self.scale * b[1]) - 1:+.1%} "
                f"{math.exp(self.scale * b[-2]) - 1:+.1%} (extremes {math.exp(self.scale * b[0]) - 1:+.1%} "
                f"{math.exp(self.scale * b[-1]) - 1:+.1%}), latency 5-95% {self.scale * lat[1]:+.1f} "
                f"{self.scale * lat[-2]:+.1f} us")


def link_model(rate: list[float], delay_us: list[float], noise: Noise, rng: random.Random, repeat: int = 5):
    """The measure() of harness.doctor.schedule.search, from the link model."""
    def measure(tests: list[schedule.Test]) -> list[list[tuple[float, float]]]:
        true = [(BASE_GBPS * min(rate[h] for h in t.hosts), BASE_US + max(delay_us[h] for h in t.hosts)) for t in tests]
        return [[(noise.bandwidth(rng, bw), noise.latency(rng, lat)) for bw, lat in true] for _ in range(repeat)]
    return measure


@dataclass
class Row:
    hosts: int
    culprits: int
    fault: str
    rounds: list[int]
    tp: int = 0
    fp: int = 0
    fn: int = 0
    exact: int = 0
    unresolved: int = 0


def trials(n: int, culprits: int, fault: str, count: int, noise: Noise, rng: random.Random) -> Row:
    row = Row(n, culprits, fault, [])
    for _ in range(count):
        bad = set(rng.sample(range(n), culprits))
        rate = [1.0] * n
        delay = [0.0] * n
        for h in bad:
            if fault.startswith("rate"):
                rate[h] = 1 / float(fault.split("/")[1])
            else:
                delay[h] = float(fault.split("+")[1].removesuffix("us"))
        found = schedule.search(n, link_model(rate, delay, noise, rng))
        named = set(found.named) | {h for g in found.unresolved for h in g}
        row.rounds.append(len(found.rounds))
        row.tp += len(named & bad)
        row.fp += len(named - bad)
        row.fn += len(bad - named)
        row.exact += named == bad
        row.unresolved += bool(found.unresolved)
    return row


def table(sizes: list[int], count: int, faults: list[str], noise: Noise, seed: int) -> bool:
    print(f"# doctor link search, simulated: {count} trials per row, 5 repeats per round, min effect 1.5x; "
          f"{noise.words()} ({FIT_NOTE})")
    print(f"{'hosts':>6} {'culprits':>8} {'fault':>12} {'goal':>5} {'rounds med':>10} {'max':>4} {'<=goal':>7} "
          f"{'precision':>9} {'recall':>7} {'exact':>6} {'--full':>6}")
    ok = True
    for n in sizes:
        goal = math.ceil(math.log2(n)) + 3
        for culprits in (1, 3):
            for fault in faults:
                start = time.monotonic()
                r = trials(n, culprits, fault, count, noise, random.Random(f"{seed}-{n}-{culprits}-{fault}"))
                precision = r.tp / (r.tp + r.fp) if r.tp + r.fp else 1.0
                recall = r.tp / (r.tp + r.fn)
                within = sum(x <= goal for x in r.rounds) / len(r.rounds)
                ok &= precision >= 0.99 and recall >= 0.95 and (culprits > 1 or within == 1.0)
                print(f"{n:>6} {culprits:>8} {fault:>12} {goal:>5} {sorted(r.rounds)[len(r.rounds) // 2]:>10} "
                      f"{max(r.rounds):>4} {within:>7.1%} {precision:>9.2%} {recall:>7.2%} {r.exact / count:>6.1%} "
                      f"{n - 1:>6}   ({time.monotonic() - start:.1f} s)", flush=True)
    print(f"# goals: rounds <= ceil(log2 N) + 3 for one culprit, precision >= 99%, recall >= 95%: "
          f"{'met' if ok else 'NOT met'}")
    return ok


def fit(paths: list[str]) -> None:
    """Residuals of the repeated measurements in the doctors' JSON (see the docstring), printed as constants."""
    bw_res, lat_res, bw_base, lat_base = [], [], [], []
    for path in paths:
        for rnd in json.loads(Path(path).read_text()).get("search", []):
            for test in rnd["tests"]:
                if test["slow"]:
                    continue
                bw, lat = test["gbps"], test["latency_us"]
                for i in range(len(bw)):
                    bw_res.append(math.log(bw[i] / schedule.median(bw[:i] + bw[i + 1:])))
                    lat_res.append(lat[i] - schedule.median(lat[:i] + lat[i + 1:]))
                bw_base.append(schedule.median(bw))
                lat_base.append(schedule.median(lat))
    if not bw_res:
        raise SystemExit("fleet_sim --fit: no search records in these files (run the doctor without --full)")
    sigma = 1.4826 * schedule.median([abs(v) for v in bw_res])
    print(f"# {len(paths)} runs, {len(bw_res)} residuals of healthy tests; bandwidth: robust sigma {sigma:.4f}, "
          f"{sum(abs(v) > 3 * sigma for v in bw_res) / len(bw_res):.0%} beyond 3 sigma")
    print(f"BASE_GBPS, BASE_US = {schedule.median(bw_base):.4f}, {schedule.median(lat_base):.1f}")
    for name, values in (("BW_QUANTILES", _quantiles(bw_res)), ("LAT_QUANTILES_US", _quantiles(lat_res))):
        print(f"{name} = (" + ",\n    ".join(", ".join(map(str, values[i:i + 7])) for i in range(0, len(values), 7)) + ")")
    print(f'FIT_NOTE = "{len(paths)} doctor runs, {len(bw_res)} residuals"')


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--sizes", default="64,256,1024")
    parser.add_argument("--faults", default="rate/10,rate/2,delay+1000us",
                        help="comma list: rate/K (a culprit's NIC at 1/K) or delay+Dus (a culprit's latency +D us)")
    parser.add_argument("--seed", default="1")
    parser.add_argument("--noise-scale", type=float, default=1.0, help="multiply the fitted residuals (robustness)")
    parser.add_argument("--fit", nargs="+", metavar="DOCTOR_JSON", help="fit the noise to these doctor runs and print it")
    args = parser.parse_args()
    if args.fit:
        fit(args.fit)
        return 0
    return 0 if table([int(s) for s in args.sizes.split(",")], args.trials, args.faults.split(","), Noise(scale=args.noise_scale),
                      args.seed) else 1


if __name__ == "__main__":
    sys.exit(main())
