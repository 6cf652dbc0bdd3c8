"""The quick sweep on the emulated cluster through each launcher: does it pass, and what does a group cost the driver?

    python scripts/cluster_sweep.py [--hosts 8] [--runs mpi:mpi:16 srun:mpi:16 torchrun:gloo:2] [--link RATE]
                                    [--timeout 1800]

Each run is LAUNCHER:BACKEND:RANKS_PER_HOST. `hccl-bench cluster up --hosts H` (with `--slurm`
when a run uses srun), then per run one session `pytest benches/test_collectives.py --backend
BACKEND --nproc H x RANKS_PER_HOST --ops all_reduce,all_to_all,broadcast --sizes 8,64K --rounds 5`
with that launcher's template from `up --json` (hydra or Open MPI's prterun, Slurm's srun, one torchrun per host), and
`cluster down` on every path (an error, Ctrl-C, SIGTERM). Prints one row per run: cases passed /
run, #wrong, whether every case recorded H hosts x RANKS_PER_HOST, and from the driver.log line
each group start writes (harness/engine/groups.py, as scripts/scale_check.py reads it) the start-up
time, watch connections, driver open sockets and RSS. Needs root; one cluster on the machine at a
time. Exit status 0 when every run passed, 1 otherwise, 2 for bad arguments or a failed `up`.
"""
from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from scale_check import session_counts, watch

ROOT = Path(__file__).resolve().parent.parent
SWEEP = ("--ops", "all_reduce,all_to_all,broadcast", "--sizes", "8,64K", "--rounds", "5")


def cluster(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness.cluster", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def run_one(up: dict, launcher: str, backend: str, per_host: int, timeout: float, tmp: Path) -> dict:
    hosts = len(up["hosts"])
    nproc = hosts * per_host
    results = tmp / f"{launcher}-{backend}"
    cmd = [sys.executable, "-m", "pytest", "benches/test_collectives.py", "-q", "-p", "no:cacheprovider",
           "--results", str(results), "--launcher", up["launchers"][launcher], "--driver-host", up["driver_host"],
           "--backend", backend, "--nproc", str(nproc), *SWEEP]
    run = watch(cmd, timeout)
    cases, failures, startups = session_counts(results)
    want = {h["name"]: per_host for h in up["hosts"]}
    row: dict[str, Any] = {"launcher": launcher, "backend": backend, "layout": f"{hosts}x{per_host}",
                           "wall_s": run.wall_s, "peak_used_gib": run.peak_used_gib, "ended": run.ended,
                           "code": run.code, "passed": sum(not c.get("wrong") for c in cases),
                           "cases": len(cases) + failures, "wrong": sum(int(c.get("wrong") or 0) for c in cases),
                           "placed": bool(cases) and all(c.get("hosts") == want for c in cases), "startups": startups}
    if run.code != 0 or not row["placed"]:
        row["tail"] = run.out[-2500:]
    return row


def _parse(spec: str) -> tuple[str, str, int]:
    launcher, backend, per_host = spec.split(":")
    if launcher not in ("mpi", "srun", "torchrun") or not per_host.isdigit() or int(per_host) < 1:
        raise ValueError(spec)
    return launcher, backend, int(per_host)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=8)
    ap.add_argument("--runs", nargs="+", default=["mpi:mpi:16", "srun:mpi:16", "torchrun:gloo:2"],
                    help="LAUNCHER:BACKEND:RANKS_PER_HOST (launcher mpi, srun or torchrun)")
    ap.add_argument("--link", default="", help="every host's link for `cluster up --link` (default: unshaped)")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds one session may run")
    args = ap.parse_args(argv)
    try:
        runs = [_parse(s) for s in args.runs]
    except ValueError:
        print(f"cluster_sweep: --runs takes LAUNCHER:BACKEND:RANKS_PER_HOST (mpi, srun, torchrun), not {' '.join(args.runs)}",
              file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))   # a SIGTERM still downs the cluster (finally below)
    up_args = ["up", "--hosts", str(args.hosts), "--json", *(["--link", args.link] if args.link else []),
               *(["--slurm"] if any(r[0] == "srun" for r in runs) else [])]
    ok = True
    try:
        proc = cluster(*up_args)
        if proc.returncode != 0:
            print(f"cluster_sweep: cluster {' '.join(up_args)} failed: {(proc.stderr or proc.stdout).strip()}",
                  file=sys.stderr)
            return 2
        up = json.loads(proc.stdout)
        print(f"# {args.hosts} emulated hosts{f', link {args.link}' if args.link else ''}; sweep {' '.join(SWEEP)}",
              flush=True)
        print(f"{'launcher':>8} {'backend':>7} {'hosts x r':>9} {'result':<14} {'#wrong':>6} {'placed':>6} {'start-up s':>10} "
              f"{'watches':>7} {'drv sockets':>11} {'drv RSS MiB':>15} {'wall s':>6} {'mem GiB':>7}", flush=True)
        with tempfile.TemporaryDirectory(prefix="cluster-sweep-") as tmp:
            for launcher, backend, per_host in runs:
                row = run_one(up, launcher, backend, per_host, args.timeout, Path(tmp))
                good = (row["code"] == 0 and not row["ended"] and row["cases"] > 0 and row["passed"] == row["cases"]
                        and row["placed"])
                ok &= good
                result = ("pass" if good else "FAIL") + f" {row['passed']}/{row['cases']}"
                result += f" ({row['ended']})" if row["ended"] else ""
                starts = row["startups"] or [(float("nan"),) * 5]
                print(f"{launcher:>8} {backend:>7} {row['layout']:>9} {result:<14} {row['wrong']:>6} "
                      f"{'yes' if row['placed'] else 'no':>6} {'/'.join(f'{s[0]:.1f}' for s in starts):>10} "
                      f"{'/'.join(f'{s[1]:.0f}' for s in starts):>7} {'/'.join(f'{s[2]:.0f}' for s in starts):>11} "
                      f"{'/'.join(f'{s[3]:.0f}' for s in starts) + f' (peak {max(s[4] for s in starts):.0f})':>15} "
                      f"{row['wall_s']:>6.0f} {row['peak_used_gib']:>7.1f}", flush=True)
                if "tail" in row:
                    print(row["tail"], file=sys.stderr, flush=True)
    finally:
        done = cluster("down")
        if done.returncode != 0:
            print(f"cluster_sweep: cluster down failed: {(done.stderr or done.stdout).strip()}", file=sys.stderr)
            ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
