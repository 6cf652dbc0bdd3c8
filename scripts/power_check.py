"""How often does the interleaved sequential A/B flag a known slowdown, after how many launches, and
does an A/A ever confirm anything? Detection as a function of effect size, on real launches.

    python scripts/power_check.py [--backends mpi gloo] [--factors 1.02 1.05 1.10 1.25 1.5] [--runs 10] \
        [--aa 10] [--ops all_reduce,all_gather] [--sizes 4:4M:4] [--budget 12] [--min-effect 0.05] [--busy 1] [--out DIR]
    python scripts/power_check.py --replay DIR        # judge the runs already in DIR again, run nothing

An --out that holds runs already gets the new runs beside them (numbered on), so a grid can be
filled in over several calls and judged whole with --replay.

Each run is one real session, `pytest benches/test_collectives.py --benchmark --ab-until-decided
--max-repeat BUDGET --min-effect M --ops OPS --sizes SIZES -k float32` into DIR/<backend>/<condition>-<i>.
A regression needs its measured ratio past 1 + M, so a slowdown of exactly 1 + M is found about
half the time at best: a 5% slowdown wants M well below 0.05. Side B
of a factor run is `HCCL_BENCH_FAULT=slow:0:OP:FACTOR` (rank 0's timed calls of OP take FACTOR
times as long), OP taking each of OPS in turn, so the other ops of the run are untouched control
cells; side B of an A/A run sets HCCL_BENCH_AA=1, which nothing reads. --busy N runs N busy loops
beside every session, as a shared machine has them.

The looks are a pure function of the recorded launches, so every run is judged again offline with
each estimator (reports/estimators.py) on identical data. Per backend and estimator it prints, per
size, for each factor in how many runs the slowed cell was a confirmed regression and the median
launches it took; the A/A runs' confirmed cells and the control cells' confirmed cells (both should
be none); the share of cells confirmed over side-swapped draws of the A/A runs (at most alpha); and
per size band what the A/A runs could have seen (the minimum detectable effect at 80% power).
Exit status 0 when it ran (the numbers are the result), 1 when a session failed to run, 2 for bad arguments.
"""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))
from estimator_aa import draws  # noqa: E402

from collectives.sizes import format_size  # noqa: E402
from reports.estimators import ESTIMATORS  # noqa: E402
from reports.gate import recorded_min_effect, sequential_budget  # noqa: E402
from reports.result_files import load  # noqa: E402
from reports.sequential import run_looks  # noqa: E402
from schema.judgement import DEFAULT_MIN_EFFECT, IMPROVEMENT, REGRESSION  # noqa: E402
from schema.results import ResultError  # noqa: E402

AA = "aa"


def condition(name: str) -> tuple[str, float]:
    """'aa' -> (aa, 1.0); 'slow-all_reduce-1.05' -> (all_reduce, 1.05)."""
    if name == AA:
        return AA, 1.0
    _, op, factor = name.split("-")
    return op, float(factor)


def session(out: Path, backend: str, name: str, args) -> int:
    """One A/B session into `out`; its exit status."""
    op, factor = condition(name)
    side_b = "HCCL_BENCH_AA=1" if op == AA else f"HCCL_BENCH_FAULT=slow:0:{op}:{factor:g}"
    cmd = [sys.executable, "-m", "pytest", "benches/test_collectives.py", "-q", "-p", "no:cacheprovider", "--benchmark",
           "--backend", backend, "--ops", args.ops, "--sizes", args.sizes, "-k", "float32", "--ab-until-decided",
           "--max-repeat", str(args.budget), "--min-effect", str(args.min_effect), "--ab-env", side_b, "--results", str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode not in (0, 1, 6):
        print((proc.stdout + proc.stderr)[-2000:], file=sys.stderr)
    return proc.returncode


def result_file(run_dir: Path) -> str:
    return str(next(run_dir.glob("*/results.json")))


def judged(path: Path, estimator: str):
    a, b = load(result_file(path), side="A"), load(result_file(path), side="B")
    return run_looks(a, b, sequential_budget(a, b), min_effect=recorded_min_effect(b), estimator=estimator)


def report(backend_dir: Path, trials: int) -> None:
    """Every table of the module docstring for the runs under one backend's folder."""
    runs = sorted(p for p in backend_dir.iterdir() if p.is_dir() and any(p.glob("*/results.json")))
    by_cond: dict[str, list[Path]] = defaultdict(list)
    for p in runs:
        try:
            judged(p, ESTIMATORS[0])
        except ResultError as exc:   # a run stopped before its first launch ended: nothing to judge
            print(f"# skipped {p}: {exc}")
            continue
        by_cond[p.name.rsplit("-", 1)[0]].append(p)
    factors = sorted({condition(c)[1] for c in by_cond if c != AA})
    for estimator in ESTIMATORS:
        flagged: dict[tuple, list[int]] = defaultdict(list)     # (op, size, factor) -> launches of each run that flagged it
        tried: dict[tuple, int] = defaultdict(int)
        control: dict[int, list[int]] = defaultdict(lambda: [0, 0])   # size -> [cells confirmed, cells]
        aa_cells, aa_confirmed, seen = 0, 0, defaultdict(list)
        for cond, paths in by_cond.items():
            slowed, factor = condition(cond)
            for path in paths:
                seq = judged(path, estimator)
                for c in seq.comparison.cells:
                    confirmed = c.outcome.kind in (REGRESSION, IMPROVEMENT)
                    if slowed == AA:
                        aa_cells += 1
                        aa_confirmed += confirmed
                    elif c.series.op == slowed:
                        tried[(c.series.op, c.size, factor)] += 1
                        if c.outcome.kind == REGRESSION:
                            flagged[(c.series.op, c.size, factor)].append(seq.decided_at.get(c.key, seq.max_launches))
                    else:
                        control[c.size][0] += confirmed
                        control[c.size][1] += 1
                if slowed == AA:
                    for b in seq.comparison.bands:
                        seen[b.band].append(b.detectable)
        runs_text = ", ".join(f"{c} x{len(p)}" for c, p in sorted(by_cond.items()))
        print(f"## {backend_dir.name}, --estimator {estimator}: runs {runs_text}")
        ops = sorted({k[0] for k in tried})
        print(f"{'op':>10} {'size':>7} " + " ".join(f"{f'x{f:g} flagged (launches)':>24}" for f in factors)
              + f" {'control confirmed':>17}")
        for op in ops:
            for size in sorted({k[1] for k in tried if k[0] == op}):
                cols = []
                for f in factors:
                    n, hits = tried.get((op, size, f), 0), flagged.get((op, size, f), [])
                    cols.append(f"{len(hits)}/{n} ({np.median(hits):.0f})" if hits else f"0/{n}" if n else "-")
                ctl = control.get(size, [0, 0])
                print(f"{op:>10} {format_size(size):>7} " + " ".join(f"{c:>24}" for c in cols) + f" {ctl[0]:>9}/{ctl[1]:<7}")
        if AA in by_cond:
            print(f"# A/A: {aa_confirmed} of {aa_cells} cells confirmed over {len(by_cond[AA])} runs")
            shares = [draws(result_file(p), estimator, trials, seed=i)[1] for i, p in enumerate(by_cond[AA])]
            print(f"# A/A side-swapped draws ({trials} a run): {np.mean(shares):.2%} of cells confirmed "
                  f"(per run {', '.join(f'{s:.2%}' for s in shares)}; at most 1% is the aim)")
            for band, values in seen.items():
                print(f"# {band}: could have seen {np.median(values):.1%} (median of {len(values)} A/A runs; "
                      f"range {min(values):.1%}-{max(values):.1%})")
        print()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", nargs="+", default=["mpi", "gloo"])
    parser.add_argument("--factors", nargs="+", type=float, default=[1.02, 1.05, 1.10, 1.25, 1.5])
    parser.add_argument("--runs", type=int, default=10, help="runs per factor (the slowed op taking each of --ops in turn)")
    parser.add_argument("--aa", type=int, default=10, help="A/A runs per backend")
    parser.add_argument("--ops", default="all_reduce,all_gather")
    parser.add_argument("--sizes", default="4:4M:4")
    parser.add_argument("--budget", type=int, default=12, help="--max-repeat of each A/B (default 12)")
    parser.add_argument("--min-effect", type=float, default=DEFAULT_MIN_EFFECT,
                        help="each session's --min-effect (a regression's ratio must be past 1 + it)")
    parser.add_argument("--busy", type=int, default=1, help="busy loops beside each session (default 1)")
    parser.add_argument("--draws", type=int, default=200, help="side-swapped draws per A/A run")
    parser.add_argument("--out", help="folder for the runs (default: a new temporary folder)")
    parser.add_argument("--replay", help="judge the runs in this folder (an earlier --out) again; run nothing")
    args = parser.parse_args()
    if any(f < 1 for f in args.factors) or args.runs < 0 or args.aa < 0 or args.budget < 6 or not 0 < args.min_effect < 1:
        print("power_check: factors must be >= 1, --runs and --aa >= 0, --budget >= 6 (the first look), "
              "--min-effect above 0 and below 1", file=sys.stderr)
        return 2
    if args.replay:
        for backend_dir in sorted(p for p in Path(args.replay).iterdir() if p.is_dir()):
            report(backend_dir, args.draws)
        return 0
    out = Path(args.out or tempfile.mkdtemp(prefix="power-check-"))
    ops = args.ops.split(",")
    each = [[AA] * args.aa, *([f"slow-{ops[i % len(ops)]}-{f:g}" for i in range(args.runs)] for f in args.factors)]
    plan = [name for turn in range(max(map(len, each))) for names in each if turn < len(names) for name in [names[turn]]]
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    try:
        for backend in args.backends:
            counts: dict[str, int] = defaultdict(int)
            for name in plan:   # interleaved over conditions, so a slow stretch of the machine hits them all
                counts[name] += 1
                while (out / backend / f"{name}-{counts[name]}").exists():
                    counts[name] += 1   # an earlier call's run in the same --out: add to it, never over it
                run_dir = out / backend / f"{name}-{counts[name]}"
                code = session(run_dir, backend, name, args)
                print(f"# {backend} {name} run {counts[name]}: exit {code} ({run_dir})", flush=True)
                if code not in (0, 1, 6):   # bad options, an internal error, an interruption: the rest would fail alike
                    print(f"power_check: the session ended with exit {code} (its output above); stopping", file=sys.stderr)
                    return 1
            report(out / backend, args.draws)
    finally:
        for p in busy:
            os.kill(p.pid, signal.SIGKILL)
            p.wait()
    print(f"# runs kept in {out}; judge them again with --replay {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
