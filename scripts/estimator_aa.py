"""Which per-launch statistic (--estimator) sees the smallest change at the promised false-positive
rate, measured on recorded runs.

    python scripts/estimator_aa.py --aa results/<A/A run> ... [--ab results/<A/B run> ...] [--trials 200]

The looks of an --ab-until-decided run are a pure function of its recorded launches, so every
estimator can be judged offline on identical data. For each estimator (reports/estimators.py):

- each A/A run (side B sets a variable nothing reads) replayed: cells confirmed (should be none)
  and what each size band could have seen (80% power) with the launches taken;
- side-swapped A/A draws (scripts/sequential_aa.py): the two sides of a launch are exchangeable,
  so swapping them in a random half of the launches draws another A/A from the same machine; the
  share of draws confirming anything and the share of cells confirmed;
- each A/B run (a known effect, e.g. HCCL_BENCH_FAULT=slow:0:all_reduce:1.10 as --ab-env)
  replayed: cells found and the could-have-seen per band.

The last line names the estimator whose could-have-seen is smallest in every band of every A/A
run while its draws stay within alpha, or says that the data does not single one out (a default
should change only when it clearly does). A run stopped early by its session has fewer launches
in its decided cells; every estimator sees the same launches.
"""
from __future__ import annotations

import argparse
import os
import sys
from collections import defaultdict

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)
from sequential_aa import swapped  # noqa: E402

from reports.compare import ALPHA  # noqa: E402
from reports.estimators import ESTIMATORS  # noqa: E402
from reports.gate import recorded_min_effect  # noqa: E402
from reports.result_files import load  # noqa: E402
from reports.sequential import run_looks  # noqa: E402
from schema.judgement import DEFAULT_ESTIMATOR, IMPROVEMENT, REGRESSION  # noqa: E402

CLEARLY = 0.8   # a new default must see at most this share of the default's detectable change in every band


def _budget(run) -> int:
    return int(run.meta.options and run.meta.options.repeat or 0)


def bands(seq) -> dict[str, float]:
    return {b.band.split(" (")[0]: b.detectable for b in seq.comparison.bands}


def judge(path: str, estimator: str) -> tuple[dict[str, float], dict[str, int], int]:
    """(could-have-seen per band, verdict counts, launches used) of one run's replay."""
    a, b = load(path, side="A"), load(path, side="B")
    seq = run_looks(a, b, _budget(a), min_effect=recorded_min_effect(b), estimator=estimator)
    counts: dict[str, int] = defaultdict(int)
    for c in seq.comparison.cells:
        counts[c.verdict] += 1
    return bands(seq), dict(counts), seq.launches_used


def draws(path: str, estimator: str, trials: int, seed: int) -> tuple[float, float]:
    """(share of side-swapped A/A draws confirming any cell, share of cells confirmed over all draws)."""
    a, b = load(path, side="A"), load(path, side="B")
    launches = sorted({i for c in a.cells.values() for i in c.launches})
    rng = np.random.default_rng(seed)   # the same draws for every estimator
    any_flagged, cells_flagged, cells = 0, 0, 0
    for _ in range(trials):
        flip = {i for i in launches if rng.random() < 0.5}
        seq = run_looks(*swapped(a, b, flip), _budget(a), min_effect=recorded_min_effect(b), estimator=estimator)
        flagged = sum(c.outcome.kind in (REGRESSION, IMPROVEMENT) for c in seq.comparison.cells)
        any_flagged += flagged > 0
        cells_flagged += flagged
        cells += len(seq.comparison.cells)
    return any_flagged / trials, cells_flagged / max(1, cells)


def _seen(values: dict[str, float]) -> str:
    return ", ".join(f"{band} {v:.0%}" if np.isfinite(v) else f"{band} -" for band, v in values.items())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--aa", nargs="+", required=True, help="--ab-until-decided A/A runs (a variable nothing reads)")
    parser.add_argument("--ab", nargs="*", default=[], help="--ab-until-decided A/B runs with a known effect")
    parser.add_argument("--trials", type=int, default=200, help="side-swapped draws per A/A run (default 200)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    seen: dict[str, list[dict[str, float]]] = defaultdict(list)
    within: dict[str, bool] = {}
    print(f"# estimators on {len(args.aa)} A/A and {len(args.ab)} A/B runs; could have seen: 80% power, the launches taken")
    for est in ESTIMATORS:
        ok = True
        for path in args.aa:
            det, counts, used = judge(path, est)
            share, cell_share = draws(path, est, args.trials, args.seed)
            ok &= share <= ALPHA
            seen[est].append(det)
            confirmed = counts.get("regression", 0) + counts.get("improvement", 0)
            print(f"{est:>6}  A/A {path}: {used} launches, {confirmed} cells confirmed, {counts.get('no change', 0)} no change; "
                  f"could have seen {_seen(det)}; swapped draws confirming: {share:.1%} of {args.trials} "
                  f"({cell_share:.2%} of cells)")
        within[est] = ok
        for path in args.ab:
            det, counts, used = judge(path, est)
            print(f"{est:>6}  A/B {path}: {used} launches, {counts.get('regression', 0)} regression, "
                  f"{counts.get('improvement', 0)} improvement, {counts.get('no change', 0)} no change, "
                  f"{counts.get('inconclusive', 0)} inconclusive; could have seen {_seen(det)}")
    default = seen[DEFAULT_ESTIMATOR]
    better = [est for est in ESTIMATORS if est != DEFAULT_ESTIMATOR and within[est] and all(
        all(np.isfinite(theirs[k]) and theirs[k] <= CLEARLY * mine[k] for k in mine) for theirs, mine in zip(seen[est], default))]
    if better:
        best = min(better, key=lambda e: float(np.median([v for d in seen[e] for v in d.values()])))
        print(f"# clearly better than {DEFAULT_ESTIMATOR}: {best} (could have seen <= {CLEARLY:.0%} of the {DEFAULT_ESTIMATOR}'s "
              f"in every band of every A/A run, swapped draws within {ALPHA:.0%})")
    else:
        print(f"# no estimator is clearly better than {DEFAULT_ESTIMATOR} on these runs (<= {CLEARLY:.0%} of its "
              f"could-have-seen in every band of every A/A run, swapped draws within {ALPHA:.0%}): keep {DEFAULT_ESTIMATOR}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
