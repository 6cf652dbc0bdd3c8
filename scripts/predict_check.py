"""`hccl-bench predict` from a small emulated cluster to bigger ones, against measured runs, at every size.

    python scripts/predict_check.py [--from-hosts 2] [--hosts 8 16] [--link 1gbit] [--sizes 8:4M:2]
                                    [--ops all_reduce,all_gather,reduce_scatter,all_to_all] [--rounds 5]
                                    [--out DIR] [--reuse]

For each host count (the small one first): `hccl-bench cluster up --hosts H --link LINK`, one
rank per host through hydra (`--backend mpi --benchmark`), the sweep's results.json kept in
OUT/hH, `cluster down` on every path. Then `hccl-bench predict OUT/h2 --hosts H
--ranks-per-host 1 --compare OUT/hH --json` for every bigger H, and from its JSON the median
absolute error of the ring prediction per op and size band: latency-bound (up to 4 KiB), middle
(8-128 KiB), bandwidth-bound (from 256 KiB: at 1 Gbit and ~100 us a step, S x beta > 10 alpha).
--reuse skips a host count whose results are already in OUT. Needs root for the cluster. Exit
status 0 when every bandwidth-bound median is within 10%, 1 otherwise, 2 for bad arguments or a failed run.
"""
from __future__ import annotations

import argparse
import json
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BANDS = (("latency <=4K", 0, 4096), ("middle 8K-128K", 4097, 262143), ("bandwidth >=256K", 262144, 1 << 62))
GOAL = 0.10


def cluster(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness.cluster", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)


def measure(hosts: int, args: argparse.Namespace, out: Path) -> Path:
    """The sweep at `hosts` x 1 rank; its results.json."""
    folder = out / f"h{hosts}"
    found = next(folder.glob("*/results.json"), None)
    if args.reuse and found is not None:
        print(f"# {hosts} hosts: reusing {found}", flush=True)
        return found
    up_args = ["up", "--hosts", str(hosts), "--json", *(["--link", args.link] if args.link else [])]
    try:
        proc = cluster(*up_args)
        if proc.returncode != 0:
            raise RuntimeError(f"cluster {' '.join(up_args)}: {(proc.stderr or proc.stdout).strip()}")
        up = json.loads(proc.stdout)
        began = time.monotonic()
        run = subprocess.run([sys.executable, "-m", "pytest", "benches/test_collectives.py", "-q", "-p", "no:cacheprovider",
                              "--results", str(folder), "--launcher", up["launchers"]["mpi"], "--driver-host",
                              up["driver_host"], "--backend", "mpi", "--nproc", str(hosts), "--benchmark", "--ops",
                              args.ops, "--sizes", args.sizes, "--rounds", str(args.rounds)],
                             cwd=ROOT, capture_output=True, text=True, timeout=args.timeout)
        if run.returncode != 0:
            raise RuntimeError(f"the {hosts}-host sweep failed (exit {run.returncode}):\n{(run.stdout + run.stderr)[-2500:]}")
        print(f"# {hosts} hosts x 1 rank measured in {time.monotonic() - began:.0f} s", flush=True)
    finally:
        cluster("down")
    return next(folder.glob("*/results.json"))


def band(size: int) -> str:
    return next((name for name, lo, hi in BANDS if lo <= size <= hi), "")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--from-hosts", type=int, default=2)
    ap.add_argument("--hosts", type=int, nargs="+", default=[8, 16])
    ap.add_argument("--link", default="1gbit")
    ap.add_argument("--sizes", default="8:4M:2")
    ap.add_argument("--ops", default="all_reduce,all_gather,reduce_scatter,all_to_all")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds one sweep may run")
    ap.add_argument("--out", help="folder for the runs (default: a temporary one, removed)")
    ap.add_argument("--reuse", action="store_true", help="reuse runs already in --out")
    args = ap.parse_args(argv)
    if args.from_hosts < 2 or any(h <= args.from_hosts for h in args.hosts):
        print(f"predict_check: --hosts {args.hosts} must all exceed --from-hosts {args.from_hosts} (>= 2)", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))   # a SIGTERM still downs the cluster
    with tempfile.TemporaryDirectory(prefix="predict-check-") as tmp:
        out = Path(args.out or tmp)
        try:
            runs = {h: measure(h, args, out) for h in [args.from_hosts, *args.hosts]}
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            print(f"predict_check: {e}", file=sys.stderr)
            return 2
        print(f"\n# predicted from {args.from_hosts} hosts x 1 rank (link {args.link or 'unshaped'}); median |error| of "
              "the ring prediction per op and size band (cells in the band)")
        print(f"{'hosts':>5} {'op':>15} " + " ".join(f"{name:>18}" for name, _, _ in BANDS) + f" {'all':>10}")
        ok = True
        for hosts in args.hosts:
            js = out / f"predict-{args.from_hosts}-to-{hosts}.json"
            proc = subprocess.run([sys.executable, "-m", "harness.cli", "predict", str(runs[args.from_hosts]), "--hosts",
                                   str(hosts), "--ranks-per-host", "1", "--compare", str(runs[hosts]), "--json", str(js)],
                                  cwd=ROOT, capture_output=True, text=True)
            if proc.returncode != 0:
                print(f"predict_check: hccl-bench predict failed: {proc.stderr.strip()}", file=sys.stderr)
                return 2
            (out / f"predict-{args.from_hosts}-to-{hosts}.txt").write_text(proc.stdout)
            rows = [r for r in json.loads(js.read_text())["predicted"] if "error" in r]
            for op in sorted({r["op"] for r in rows}):
                cells = []
                for name, _, _ in BANDS:
                    errs = [abs(r["error"]) for r in rows if r["op"] == op and band(r["size"]) == name]
                    cells.append(f"{statistics.median(errs):>13.0%} ({len(errs)})" if errs else f"{'-':>18}")
                    if name.startswith("bandwidth") and errs and statistics.median(errs) > GOAL:
                        ok = False
                every = [abs(r["error"]) for r in rows if r["op"] == op]
                print(f"{hosts:>5} {op:>15} " + " ".join(cells) + f" {statistics.median(every):>10.0%}")
        print("\n# per cell: predicted ring / measured - 1")
        for hosts in args.hosts:
            rows = [r for r in json.loads((out / f"predict-{args.from_hosts}-to-{hosts}.json").read_text())["predicted"]
                    if "error" in r]
            for op in sorted({r["op"] for r in rows}):
                mine = sorted((r for r in rows if r["op"] == op), key=lambda r: r["size"])
                print(f"{hosts:>5} {op:>15} " + " ".join(f"{r['size']}:{r['error']:+.0%}" for r in mine))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
