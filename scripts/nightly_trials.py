"""Nightly guard trials: nights of one stack, then nights with a known regression; when is it confirmed,
and does a same-stack night ever cry wolf?

    python scripts/nightly_trials.py [--trials 5] [--same 10] [--changed 3] [--factor 1.25] \
        [--backend mpi] [--ops all_reduce,all_gather] [--sizes 4:4M:4] [--repeat 3] [--busy 1] [--same-night]

Each trial is its own --results folder. A night is a real session, `pytest benches/test_collectives.py
--benchmark --repeat R --results DIR --history` (the canary included); the changed nights run with
HCCL_BENCH_FAULT=slow:0:all_reduce:FACTOR, rank 0's timed all_reduce rounds FACTOR times as long.
After each night the history of the folder is judged as `hccl-bench history` does (reports/gate.py).
Per trial it prints the verdict night by night; at the end: in how many trials the change was a
confirmed regression by the second changed night, and how many software regressions (and machine
changes) the same-stack nights reported (the promise: none); a trial ends at its first confirmed
changed night, which settles its count. Nights here are minutes apart, not a
day; --busy N runs N busy loops beside the sweep, as a shared machine has them. With --same-night
every night runs with `--previous-stack` of a script that clears HCCL_BENCH_FAULT (the stack before
the change): on a same-stack night it changes nothing (no A/B runs; the night records that it kept
its stack), on a changed night it is another stack, so every cell is A/B-tested the same night
(harness/session/same_night.py) and the change can be confirmed on the first changed night.
"""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from reports.gate import judge_history  # noqa: E402
from reports.history import load_runs, too_few  # noqa: E402
from schema.judgement import REGRESSION, SUSPECTED_REGRESSION  # noqa: E402


def night(results: Path, args, changed: bool, previous: Path | None) -> int:
    """One night's session; its exit status (0, 1 regression, 7 machine changed, ...)."""
    env = {**os.environ, **({"HCCL_BENCH_FAULT": f"slow:0:all_reduce:{args.factor}"} if changed else {})}
    same_night = ["--previous-stack", str(previous), "--max-repeat", str(args.budget)] if previous else []
    cmd = [sys.executable, "-m", "pytest", "benches/test_collectives.py", "-p", "no:cacheprovider", "-q", "--benchmark",
           "--backend", args.backend, "--ops", args.ops, "--sizes", args.sizes, "--repeat", str(args.repeat),
           "--rounds", str(args.rounds), "--round-time", str(args.round_time), "--results", str(results), "--history",
           "-k", "float32", *same_night]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if proc.returncode not in (0, 1, 7):
        print(proc.stdout[-2000:] + proc.stderr[-2000:], file=sys.stderr)
    return proc.returncode


def verdict(results: Path) -> dict:
    """The history's judgement of the folder as it stands."""
    runs, _ = load_runs([str(results)])
    if too_few(runs):
        return {"text": "too few nights", "regressed": False, "machine": False, "all_reduce": False, "suspected": False}
    j = judge_history(runs)
    hist = j.history
    assert hist is not None
    return {"text": j.headline, "regressed": j.regressed, "machine": j.machine_changed,
            "all_reduce": any(c.series.op == "all_reduce" for c in hist.judged.by_verdict(REGRESSION)),
            "suspected": any(c.series.op == "all_reduce" and c.outcome.kind == SUSPECTED_REGRESSION
                             for c in hist.suspected.cells),
            "noisy": len(hist.left_out)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--same", type=int, default=10, help="same-stack nights first (default 10)")
    parser.add_argument("--changed", type=int, default=3, help="then nights with the slow all_reduce (default 3)")
    parser.add_argument("--factor", type=float, default=1.25)
    parser.add_argument("--backend", default="mpi")
    parser.add_argument("--ops", default="all_reduce,all_gather")
    parser.add_argument("--sizes", default="4:4M:4")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--round-time", type=float, default=0.02)
    parser.add_argument("--busy", type=int, default=0, help="busy loops beside the sweep (default none)")
    parser.add_argument("--same-night", action="store_true", help="every night with --previous-stack (the stack before)")
    parser.add_argument("--budget", type=int, default=12, help="the same-night A/B's --max-repeat (default 12)")
    parser.add_argument("--out", help="folder for the trials' results (default: a new temporary folder)")
    args = parser.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="nightly-trials-"))
    out.mkdir(parents=True, exist_ok=True)
    previous = None
    if args.same_night:
        previous = out / "previous_stack.sh"   # the stack before the change: no slow fault
        previous.write_text("unset HCCL_BENCH_FAULT\n")
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    confirmed_by_second, confirmed_first, wolf, machine_same, confirmed_at = 0, 0, 0, 0, []
    try:
        for trial in range(1, args.trials + 1):
            results = out / f"trial-{trial}"
            print(f"# trial {trial}: {args.same} nights of one stack, then {args.changed} with slow "
                  f"{args.factor:g} on all_reduce ({results})", flush=True)
            at = None
            for n in range(args.same + args.changed):
                changed = n >= args.same
                code = night(results, args, changed, previous)
                v = verdict(results)
                kind = f"changed night {n - args.same + 1}" if changed else f"same-stack night {n + 1}"
                print(f"  {kind}: exit {code}; {v['text']}" + (f"; {v['noisy']} noisy nights left out" if v.get("noisy") else ""),
                      flush=True)
                if not changed:
                    wolf += v["regressed"]
                    machine_same += v["machine"]
                elif at is None and v["all_reduce"]:
                    at = n - args.same + 1
                    break   # confirmed: the trial's count is settled, its later changed nights cannot change it
            confirmed_at.append(at)
            confirmed_by_second += at is not None and at <= 2
            confirmed_first += at == 1
            print(f"  trial {trial}: " + (f"confirmed on changed night {at}" if at else "not confirmed"), flush=True)
    finally:
        for p in busy:
            os.kill(p.pid, signal.SIGKILL)
            p.wait()
    print(f"# confirmed by the second changed night in {confirmed_by_second} of {args.trials} trials, on the first in "
          f"{confirmed_first}{' (same-night A/B)' if previous else ''} (nights confirmed: {confirmed_at}); "
          f"same-stack nights: {wolf} software regressions, "
          f"{machine_same} machine changes reported")
    return 0


if __name__ == "__main__":
    sys.exit(main())
