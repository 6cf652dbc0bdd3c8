"""How far a history's nights spread, cell by cell, and what that lets it see: the measurement
behind issue 50 (docs/statistics.md, "What a busy machine lets a nightly see").

    python scripts/night_spread.py RESULTS_DIR [--nights 7]

RESULTS_DIR is a --results folder of nights (a nightly, or one trial of scripts/nightly_trials.py).
For each cell of its first N nights it prints the night-to-night sd of log time for several ways
of making a night's point from its launches (the mean of their logs, which the history judges;
their median, 25th percentile, second fastest, fastest; then from the launches with ranks 0 and 1's
cores near, each by its 10th percentile: their mean, and their fastest, which `--estimator
fastest` judges; draw: how much of that a night's luck in its launches explains, fastest_draw;
half: the fastest with half of each night's near launches, fastest_half) and the share of rounds
in which no rank waited for a CPU (schema/stats.py UNDISTURBED_SHARE; a launch with at least
MIN_UNDISTURBED of them is judged on those alone, as the reader already gives it). Then whether
the widest cell's nights follow the canary's (canary_line), and what a night-to-night sd lets 7
nights see (the history's own detectable_change on simulated nights): about 1% for a 5% change,
2% for 8%.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from reports import canary  # noqa: E402
from reports.estimators import launch_value  # noqa: E402
from reports.history import detectable_change, load_runs, night_values  # noqa: E402
from reports.placement import of as placements  # noqa: E402
from schema.records import ResultError  # noqa: E402
from schema.stats import UNDISTURBED_SHARE, per_op_seconds  # noqa: E402

POINTS = {   # a night's point from its launches' per-launch medians
    "mean": lambda v: np.mean(np.log(v)), "median": lambda v: np.log(np.median(v)),
    "p25": lambda v: np.log(np.percentile(v, 25)), "2nd": lambda v: np.log(np.sort(v)[min(1, v.size - 1)]),
    "min": lambda v: np.log(v.min()),
}


def undisturbed_share(row) -> float:
    """The share of the launch's rounds in which no rank waited for a CPU (0 where none was recorded)."""
    k = row.iters_per_round or 1
    t = per_op_seconds(row.round_ns_per_rank, k)
    waits = np.asarray(row.round_cpu_wait_ns or [], dtype=float)
    return float(np.mean(waits <= UNDISTURBED_SHARE * t * k * 1e9)) if waits.size == t.size else 0.0


def near_logs(runs, key, near) -> list:
    """Per night, the log p10 of the cell's near launches (all of them where no placement was probed)."""
    return [np.log([launch_value(run.cells[key].launches[i], "p10") for i in (run.cells[key].launches if kept is None else kept)])
            for run, kept in zip(runs, near)]


def fastest_draw(runs, key, near, resamples: int = 500) -> float:
    """How much of `fastest`'s night-to-night sd is the luck of which launches a night drew: per
    night with 3 or more near launches (all of them where no placement was probed), the sd of their
    fastest over bootstrap resamples of them; the mean over nights (near the fastest column: the
    launches' own spread; far below it: the host's level moved)."""
    rng = np.random.default_rng(0)
    sds = [np.std(rng.choice(logs, (resamples, logs.size)).min(axis=1)) for logs in near_logs(runs, key, near) if logs.size >= 3]
    return float(np.mean(sds)) if sds else np.nan


def fastest_half(runs, key, near, resamples: int = 200) -> float:
    """What `fastest`'s night-to-night sd would be with half the launches: each night's fastest of a
    random half of its near launches, the nights' sd averaged over resamples (against the fastest
    column: how much more launches would buy)."""
    rng = np.random.default_rng(0)
    nights = [logs for logs in near_logs(runs, key, near) if logs.size >= 2]
    if len(nights) < 3:
        return np.nan
    return float(np.mean([np.std([rng.choice(v, v.size // 2, replace=False).min() for v in nights], ddof=1)
                          for _ in range(resamples)]))


def canary_line(runs, fastest_nights: dict) -> str:
    """Whether the machine's own figure of a night (the canary's workloads) follows the widest cell's
    fastest: a correlation near 1 would let a night be judged relative to its machine."""
    spread = {key: v for key, v in fastest_nights.items() if np.isfinite(v[0])}
    if not spread:
        return "# no cell has 3 nights with a fastest launch: nothing to hold against the canary"
    key = max(spread, key=lambda k: spread[k][0])
    sd, at, points = spread[key]
    seconds = canary.judge(runs, 0.05).seconds
    rs = []
    for workload, values in seconds.items():
        pairs = [(p, values[i]) for i, p in zip(at, points) if values[i] is not None]
        if len(pairs) >= 3:
            x, y = np.array(pairs).T
            rs.append(f"{workload} {np.corrcoef(x, np.log(y))[0, 1]:+.2f}")
    return (f"# the widest by fastest, {key[0].label()} {key[1]} B ({sd:.1%}): r of its nights with the canary's "
            + (", ".join(rs) if rs else "none (no night carries a canary)"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results")
    parser.add_argument("--nights", type=int, default=7)
    args = parser.parse_args()
    try:
        runs = sorted(load_runs([args.results])[0], key=lambda r: r.started)[:args.nights]
    except ResultError as exc:
        print(f"night_spread: {exc}; give a --results folder of nights", file=sys.stderr)
        return 2
    if len(runs) < 3:
        print(f"night_spread: {args.results} holds {len(runs)} nights; give at least 3", file=sys.stderr)
        return 2
    print(f"# {len(runs)} nights of {args.results}: night-to-night sd of log time by night point; "
          "undisturbed: the share of rounds without a CPU wait")
    placement = placements(runs, near_judged=True)
    keys = sorted(set.intersection(*(set(r.cells) for r in runs)), key=lambda k: (str(k[0].op), k[1]))
    fastest_nights = {}
    for key in keys:
        cells = [r.cells[key] for r in runs]
        values = [np.array([launch_value(v, "median") for v in c.launches.values()]) for c in cells]
        sds = {name: np.std([point(v) for v in values], ddof=1) for name, point in POINTS.items()}
        near = [placement.kept(c) if placement else None for c in cells]
        usable = [(r, k) for r, k in zip(runs, near) if k != []]
        points = {name: [night_values(r, key, estimator, k) for r, k in usable]
                  for name, estimator in (("near mean(p10)", "p10"), ("fastest", "fastest"))}
        sds.update({name: np.std(p, ddof=1) if len(usable) > 2 else np.nan for name, p in points.items()})
        fastest_nights[key] = (sds["fastest"], [runs.index(r) for r, _ in usable], points["fastest"])
        sds["draw"] = fastest_draw(runs, key, near)
        sds["half"] = fastest_half(runs, key, near)
        share = np.mean([undisturbed_share(row) for c in cells for row in c.rows.values()])
        print(f"{key[0].label():45s} {key[1]:>8d} B  " + "  ".join(f"{n} {sd:6.1%}" for n, sd in sds.items())
              + f"  | undisturbed {share:4.0%}")
    print(canary_line(runs, fastest_nights))
    rng = np.random.default_rng(1)
    for sd in (0.01, 0.02, 0.05):
        seen = np.median([detectable_change(rng.normal(0, sd, 7), []) for _ in range(200)])
        print(f"# a night-to-night sd of {sd:.0%}: 7 nights could have seen {seen:.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
