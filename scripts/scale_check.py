"""The quick sweep at growing rank counts on this host: does the harness hold up, and what does a group cost the driver?

    python scripts/scale_check.py 8 64 256 512 [--backend mpi] [--timeout 1200] [--max-used-gib 18]

For each rank count, one session: `pytest benches/test_collectives.py --backend mpi --nproc N
--ops all_reduce,all_to_all,broadcast --sizes 8,64K --rounds 5` in a temporary results folder.
Prints per rank count: cases passed / run, #wrong summed over the cases, the group's start-up
time, its watch connections and the driver's open sockets and RSS (the driver.log line each
group start writes, harness/engine/groups.py), the session's wall time, and the most memory the
machine had in use while it ran. A session that passes --timeout, or the machine past
--max-used-gib in use, is ended (SIGTERM, then SIGKILL: the watch tree ends its ranks) and its
row says so. Exit status 0 when every row passed, 1 otherwise, 2 for bad arguments.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SWEEP = ("--ops", "all_reduce,all_to_all,broadcast", "--sizes", "8,64K", "--rounds", "5")
STARTUP = re.compile(r"started in ([0-9.]+) s; watch connections (\d+); driver open sockets (\d+), "
                     r"RSS (\d+) MiB \(peak (\d+) MiB\)")


def used_gib() -> float:
    info = {}
    for line in Path("/proc/meminfo").read_text().splitlines():
        name, _, value = line.partition(":")
        info[name] = int(value.split()[0])
    return (info["MemTotal"] - info["MemAvailable"]) / (1 << 20)


@dataclass
class Session:
    """How one watched pytest session ended: its exit code, wall time, the machine's peak memory in use."""
    code: int
    wall_s: float
    peak_used_gib: float
    ended: str                      # why it was ended ("" = it finished on its own)
    out: str                        # its stdout and stderr


def watch(cmd: list[str], timeout: float, max_used: float = float("inf")) -> Session:
    """Run `cmd` in ROOT, sampling memory in use; past `timeout` s or `max_used` GiB it is ended (_end)."""
    began, peak, ended = time.monotonic(), used_gib(), ""
    child = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             start_new_session=True)
    out: list[str] = []
    reader = threading.Thread(target=lambda: out.extend(child.stdout), daemon=True)   # type: ignore[arg-type]
    reader.start()
    try:
        while child.poll() is None:
            peak = max(peak, used_gib())
            if peak > max_used:
                ended = f"memory in use passed {max_used:g} GiB"
            elif time.monotonic() - began > timeout:
                ended = f"ran past {timeout:g} s"
            if ended:
                _end(child)
                break
            time.sleep(0.5)
    except BaseException:
        _end(child)
        raise
    child.wait()
    reader.join(timeout=10)
    return Session(child.returncode, time.monotonic() - began, peak, ended, "".join(out))


def session_counts(results: Path) -> tuple[list[dict], int, list[tuple[float, ...]]]:
    """A results folder's case rows, its failures, and each group start's driver.log figures (STARTUP)."""
    startups = [tuple(float(g) for g in m.groups())
                for log in sorted(results.glob("*/logs/*/driver.log")) for m in STARTUP.finditer(log.read_text())]
    meta = next(results.glob("*/results.json"), None)
    if meta is None:
        return [], 0, startups
    data = json.loads(meta.read_text())
    return [b["extra_info"] for b in data["benchmarks"]], len(data["hccl_bench"]["failures"]), startups


def run_one(nproc: int, backend: str, timeout: float, max_used: float) -> dict:
    with tempfile.TemporaryDirectory(prefix=f"scale-{nproc}-") as tmp:
        results = Path(tmp) / "results"
        cmd = [sys.executable, "-m", "pytest", "benches/test_collectives.py", "-q", "-p", "no:cacheprovider",
               "--results", str(results), "--backend", backend, "--nproc", str(nproc), *SWEEP]
        run = watch(cmd, timeout, max_used)
        cases, failures, startups = session_counts(results)
        row = {"ranks": nproc, "wall_s": run.wall_s, "peak_used_gib": run.peak_used_gib, "ended": run.ended,
               "code": run.code, "passed": sum(not c.get("wrong") for c in cases), "cases": len(cases) + failures,
               "wrong": sum(int(c.get("wrong") or 0) for c in cases), "failures": failures, "startups": startups}
        if run.code != 0 and not run.ended:
            row["tail"] = run.out[-1500:]
        return row


def _end(child: subprocess.Popen) -> None:
    """The session's SIGTERM path first (groups closed, results written), then SIGKILL."""
    child.send_signal(signal.SIGTERM)
    try:
        child.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("ranks", nargs="+", help="rank counts, e.g. 8 64 256 512")
    ap.add_argument("--backend", default="mpi")
    ap.add_argument("--timeout", type=float, default=1200.0, help="seconds one session may run")
    ap.add_argument("--max-used-gib", type=float, default=18.0, help="end a session when the machine has this much in use")
    args = ap.parse_args(argv)
    if not all(r.isdigit() and int(r) >= 1 for r in args.ranks):
        print(f"scale_check: rank counts must be positive integers, not {' '.join(args.ranks)}", file=sys.stderr)
        return 2
    print(f"{'ranks':>6} {'result':<22} {'#wrong':>6} {'start-up s':>10} {'watches':>7} {'drv sockets':>11} "
          f"{'drv RSS MiB':>11} {'wall s':>7} {'mem used GiB':>12}", flush=True)
    ok = True
    for nproc in map(int, args.ranks):
        row = run_one(nproc, args.backend, args.timeout, args.max_used_gib)
        good = row["code"] == 0 and not row["ended"] and row["cases"] > 0 and row["passed"] == row["cases"]
        ok &= good
        result = "pass" if good else "FAIL"
        result += f" {row['passed']}/{row['cases']}" + (f" ({row['ended']})" if row["ended"] else "")
        starts = row["startups"] or [(float("nan"),) * 5]
        startup = "/".join(f"{s[0]:.1f}" for s in starts)
        watches = "/".join(f"{s[1]:.0f}" for s in starts)
        sockets = "/".join(f"{s[2]:.0f}" for s in starts)
        rss = "/".join(f"{s[3]:.0f}" for s in starts) + f" (peak {max(s[4] for s in starts):.0f})"
        print(f"{nproc:>6} {result:<22} {row['wrong']:>6} {startup:>10} {watches:>7} {sockets:>11} {rss:>11} "
              f"{row['wall_s']:>7.0f} {row['peak_used_gib']:>12.1f}", flush=True)
        if "tail" in row:
            print(row["tail"], file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
