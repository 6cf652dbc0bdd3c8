"""Nightly guard trials: nights of one stack, then nights with a known regression; when is it confirmed,
and does a same-stack night ever cry wolf?

    python scripts/nightly_trials.py [--trials 5] [--same 10] [--changed 3] [--factor 1.25] \
        [--backend mpi] [--ops all_reduce,all_gather] [--sizes 4:4M:16] [--repeat 3] [--rounds N] [--round-time S] \
        [--estimator E] [--top-up N] [--busy 1] [--same-night]

Each trial is its own --results folder. A night is a real session, the README's nightly recipe as a
user types it: `pytest benches/test_collectives.py --benchmark --backend mpi --nproc 2 --ops
all_reduce,all_gather --sizes 4:4M:16 --repeat 3 --results DIR --history` (the canary included);
--rounds, --round-time, --estimator and --top-up are passed only when given (else the session's defaults
run, as a user's would). Each night prints, per size range, what its history could have seen (80%
power, its own night-to-night spread) and, on a changed night, what confirmed the change (the
history, or the same-night A/B). The changed nights run with
HCCL_BENCH_FAULT=slow:0:all_reduce:FACTOR, rank 0's timed all_reduce rounds FACTOR times as long.
After each night the history of the folder is judged as `hccl-bench history` does (reports/gate.py).
Per trial it prints the verdict night by night; at the end: in how many trials the change was a
confirmed regression by the second changed night, and how many software regressions (and machine
changes) the same-stack nights reported (the promise: no software regression, machine alerts
within the machine-alert rule's budget); a trial ends at its first confirmed
changed night, which settles its count. Nights here are minutes apart, not a
day; --busy N runs N busy loops beside the sweep, as a shared machine has them. With --same-night
every night runs with `--previous-stack` of a script that clears HCCL_BENCH_FAULT (the stack before
the change): on a same-stack night it changes nothing (no A/B runs; the night records that it kept
its stack), on a changed night it is another stack, so every cell is A/B-tested the same night
(harness/session/same_night.py) and the change can be confirmed on the first changed night.

    python scripts/nightly_trials.py --replay DIR [--figures-at 7] [--without-alert-rule] [--every-round] [--estimator E]

judges the nights an earlier --out DIR recorded again (by --estimator where given, else each
night's own), night by night as they were judged live, with
the code as it is now (a rule changed since is measured on the same nights); a night is a changed
one when its provenance recorded the slow fault (HCCL_BENCH_FAULT). A machine alert is a
same-stack night whose history reports a machine change (reports/history.py, alert_rule); a job it
fails is one that exits 7 (a machine regression). At night --figures-at of each trial's same-stack
nights it prints, for the mpi 1 MiB and 4 MiB cells, how far that night's launches spread (slowest
/ fastest launch) and what the history could have seen (80% power, its own night-to-night spread).
--without-alert-rule judges them as before the machine-alert rule (machine changes judged by the
software verdicts' rules alone), to count what the rule takes away on the same nights.
--every-round judges every round of every launch, as before rounds a rank waited for a CPU in were
left out (schema/stats.py undisturbed, result_files.leave_out_disturbed): the same nights without
that rule.
"""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from reports.estimators import launch_value  # noqa: E402
from reports.gate import judge_history  # noqa: E402
from reports.history import load_runs, too_few  # noqa: E402
from schema.judgement import REGRESSION, SUSPECTED_REGRESSION  # noqa: E402


def night(results: Path, args, changed: bool, previous: Path | None) -> int:
    """One night's session; its exit status (0, 1 regression, 7 machine changed, ...)."""
    env = {**os.environ, **({"HCCL_BENCH_FAULT": f"slow:0:all_reduce:{args.factor}"} if changed else {})}
    same_night = ["--previous-stack", str(previous), "--max-repeat", str(args.budget)] if previous else []
    tuned = [x for flag, value in (("--rounds", args.rounds), ("--round-time", args.round_time), ("--estimator", args.estimator),
                                   ("--top-up", args.top_up), ("--repeat", args.repeat),
                                   ("--night-budget", args.night_budget)) if value is not None for x in (flag, str(value))]
    cmd = [sys.executable, "-m", "pytest", "benches/test_collectives.py", "-p", "no:cacheprovider", "-q", "--benchmark",
           "--backend", args.backend, "--nproc", "2", "--ops", args.ops, "--sizes", args.sizes,
           "--results", str(results), "--history", *tuned, *same_night]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if proc.returncode not in (0, 1, 7):
        print(proc.stdout[-2000:] + proc.stderr[-2000:], file=sys.stderr)
    return proc.returncode


def verdict(runs: list, estimator: str | None = None) -> dict:
    """The history's judgement of these nights (a folder as it stood after its newest night); by
    `estimator`, else the one the newest night recorded."""
    if too_few(runs):
        return {"text": "too few nights", "regressed": False, "machine": False, "machine_failed": False,
                "all_reduce": False, "suspected": False, "history": None}
    j = judge_history(runs, estimator=estimator)
    hist = j.history
    assert hist is not None
    return {"text": j.headline, "regressed": j.regressed, "machine": j.machine_changed, "machine_failed": j.machine_regressed,
            "all_reduce": any(c.series.op == "all_reduce" for c in hist.judged.by_verdict(REGRESSION)),
            "by": sorted({c.outcome.cause.value for c in hist.judged.by_verdict(REGRESSION) if c.series.op == "all_reduce"}),
            "suspected": any(c.series.op == "all_reduce" and c.outcome.kind == SUSPECTED_REGRESSION
                             for c in hist.suspected.cells),
            "noisy": len(hist.left_out), "history": hist}


def nights_of(results: Path) -> list:
    """A trial folder's nights, oldest first."""
    runs, _ = load_runs([str(results)])
    return sorted(runs, key=lambda r: r.started)


def made_slow(run) -> bool:
    """The night ran with the slow fault (its provenance recorded HCCL_BENCH_FAULT): a changed night."""
    return "HCCL_BENCH_FAULT" in run.meta.provenance.get("env", {})


def could_have_seen(hist) -> str:
    """Per size range, the largest change a cell of it could have missed (80% power, the history's
    own night-to-night spread): the Done-when's 'at most X% at 64 KiB and above, Y% below'."""
    if hist is None:
        return ""
    parts = []
    for name, inside in (("below 64 KiB", lambda size: size < 64 << 10), ("64 KiB and above", lambda size: size >= 64 << 10)):
        seen = [c.detectable for c in hist.judged.cells if inside(c.size)]
        if seen:
            parts.append(f"{name} {max(seen):.1%} (median {float(np.median(seen)):.1%}, {len(seen)} cells)")
    return "could have seen at most: " + "; ".join(parts) if parts else ""


def large_size_figures(runs: list, hist) -> list[str]:
    """The 1 MiB and 4 MiB cells of the newest night: slowest / fastest launch (each launch by the
    statistic the history judges by; * a launch outside the usual placement, reports/placement.py),
    and what the history could have seen."""
    out = []
    for c in hist.judged.cells if hist else []:
        if c.size not in (1 << 20, 4 << 20):
            continue
        cell = runs[-1].cells[c.key]
        kept = set(hist.placement.kept(cell)) if hist.placement else set(cell.launches)
        values = sorted((launch_value(v, hist.estimator), i in kept) for i, v in cell.launches.items())
        usual = [v for v, k in values if k]
        within = f", {usual[-1] / usual[0]:.2f}x in the usual placement" if usual else ", none in the usual placement"
        out.append(f"{c.series.op} {c.size >> 20} MiB: launches ({hist.estimator}) {values[-1][0] / values[0][0]:.2f}x apart"
                   f"{within} ({', '.join(f'{v * 1e6:.0f}' + ('' if k else '*') for v, k in values)} us), "
                   f"could have seen {c.detectable:.0%}")
    return out


class Tally:
    """What the trials found, night by night."""
    def __init__(self, same: int, figures_at: int):
        self.same, self.figures_at = same, figures_at
        self.confirmed_at: list = []
        self.wolf = self.alerts = self.failed = self.nights = 0

    def night(self, n: int, code, v: dict, runs: list, changed: bool) -> bool:
        """Count night n (0-based) of a trial; True when the change is confirmed (the trial ends)."""
        kind = f"changed night {n - self.same + 1}" if changed else f"same-stack night {n + 1}"
        print(f"  {kind}: " + (f"exit {code}; " if code is not None else "") + v["text"]
              + (f"; {v['noisy']} noisy nights left out" if v.get("noisy") else "")
              + (f"; all_reduce confirmed by {', '.join(v['by'])}" if changed and v.get("by") else ""), flush=True)
        if seen := could_have_seen(v.get("history")):
            print(f"    {seen}", flush=True)
        if n + 1 == self.figures_at and not changed:
            for line in large_size_figures(runs, v["history"]):
                print(f"    {line}", flush=True)
        if not changed:
            self.nights += 1
            self.wolf += v["regressed"]
            self.alerts += v["machine"]
            self.failed += v["machine_failed"] and not v["regressed"]
            return False
        if v["all_reduce"]:
            self.confirmed_at.append(n - self.same + 1)
            return True
        return False

    def summary(self, trials: int, same_night: bool) -> str:
        at = self.confirmed_at
        by_second = sum(a is not None and a <= 2 for a in at)
        return (f"# confirmed by the second changed night in {by_second} of {trials} trials, on the first in "
                f"{sum(a == 1 for a in at)}{' (same-night A/B)' if same_night else ''} (nights confirmed: {at}); "
                f"{self.nights} same-stack nights: {self.wolf} software regressions, {self.alerts} machine alerts, "
                f"{self.failed} jobs failed by the machine (exit 7)")


def replay(out: Path, same: int, figures_at: int, estimator: str | None = None) -> int:
    """Judge the recorded trials again, each night as it was judged live."""
    trials = sorted((d for d in out.glob("trial-*") if d.is_dir() and d.name[6:].isdigit()), key=lambda d: int(d.name[6:]))
    if not trials:
        print(f"nightly_trials: {out} holds no trial-N folders to replay", file=sys.stderr)
        return 2
    tally = Tally(same, figures_at)
    for trial in trials:
        nights = nights_of(trial)
        print(f"# {trial.name}: {len(nights)} nights recorded", flush=True)
        # a night is a changed one by what it recorded (the slow fault), not by its place: a session
        # that left no run must not move the boundary
        first_changed = next((i for i, r in enumerate(nights) if made_slow(r)), len(nights))
        tally.same = first_changed
        for n in range(len(nights)):
            if tally.night(n, None, verdict(nights[:n + 1], estimator), nights[:n + 1], made_slow(nights[n])):
                break
        else:
            tally.confirmed_at.append(None)   # not confirmed on any recorded changed night
    print(tally.summary(len(trials), (out / "previous_stack.sh").exists()))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--same", type=int, default=10, help="same-stack nights first (default 10)")
    parser.add_argument("--changed", type=int, default=3, help="then nights with the slow all_reduce (default 3)")
    parser.add_argument("--factor", type=float, default=1.25)
    parser.add_argument("--backend", default="mpi")
    parser.add_argument("--ops", default="all_reduce,all_gather")
    parser.add_argument("--sizes", default="4:4M:16")
    parser.add_argument("--repeat", type=int, help="passed on when given (default: the session's, its --night-budget)")
    parser.add_argument("--night-budget", help="passed on when given (default: the session's, 5m)")
    parser.add_argument("--rounds", type=int, help="passed on when given (default: the session's)")
    parser.add_argument("--round-time", type=float, help="passed on when given (default: the session's)")
    parser.add_argument("--estimator", help="each launch's statistic the nights are judged by; passed on when given")
    parser.add_argument("--top-up", type=int, help="passed on when given (default: the session's)")
    parser.add_argument("--busy", type=int, default=0, help="busy loops beside the sweep (default none)")
    parser.add_argument("--same-night", action="store_true", help="every night with --previous-stack (the stack before)")
    parser.add_argument("--budget", type=int, default=12, help="the same-night A/B's --max-repeat (default 12)")
    parser.add_argument("--out", help="folder for the trials' results (default: a new temporary folder)")
    parser.add_argument("--replay", help="judge the trials an earlier --out recorded again; run nothing")
    parser.add_argument("--figures-at", type=int, default=7, help="same-stack night whose 1/4 MiB figures to print (default 7)")
    parser.add_argument("--without-alert-rule", action="store_true",
                        help="with --replay: machine changes judged by the software rules alone, as before the rule")
    parser.add_argument("--every-round", action="store_true",
                        help="with --replay: every round of a launch judged, as before rounds with a CPU wait were left out")
    args = parser.parse_args()
    if (args.without_alert_rule or args.every_round) and not args.replay:
        parser.error("--without-alert-rule and --every-round judge recorded nights: give them with --replay DIR")
    if args.every_round:
        import reports.result_files
        reports.result_files.undisturbed = lambda per_op, waits, iters: per_op
        reports.result_files.leave_out_disturbed = lambda cells: None
    if args.without_alert_rule:
        import reports.gate
        import reports.history
        reports.history.alert_rule = reports.gate.alert_rule = lambda *_, **__: None
    if args.replay:
        return replay(Path(args.replay), args.same, args.figures_at, args.estimator)
    out = Path(args.out or tempfile.mkdtemp(prefix="nightly-trials-"))
    out.mkdir(parents=True, exist_ok=True)
    previous = None
    if args.same_night:
        previous = out / "previous_stack.sh"   # the stack before the change: no slow fault
        previous.write_text("unset HCCL_BENCH_FAULT\n")
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    tally = Tally(args.same, args.figures_at)
    try:
        for trial in range(1, args.trials + 1):
            results = out / f"trial-{trial}"
            print(f"# trial {trial}: {args.same} nights of one stack, then {args.changed} with slow "
                  f"{args.factor:g} on all_reduce ({results})", flush=True)
            for n in range(args.same + args.changed):
                code = night(results, args, n >= args.same, previous)
                runs = nights_of(results)
                if tally.night(n, code, verdict(runs), runs, n >= args.same):
                    break   # confirmed: the trial's count is settled, its later changed nights cannot change it
            else:
                tally.confirmed_at.append(None)   # not confirmed on any changed night
    finally:
        for p in busy:
            os.kill(p.pid, signal.SIGKILL)
            p.wait()
    print(tally.summary(args.trials, previous is not None))
    return 0


if __name__ == "__main__":
    sys.exit(main())
