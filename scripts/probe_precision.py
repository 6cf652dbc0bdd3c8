"""The cores' round-trip probe (collectives/placement.py) measured as the worker uses it: two forked
processes on one shared page, PROBES probes back to back, with and without busy loops beside them
(a measuring script: contention belongs here, never in a test). Prints, per probe version and load,
how many probes gave up, the round trip's median and spread, and what one probe costs in time.

`--before REV` measures that commit's placement.py beside the checkout's (the probe before a change).

    python3 scripts/probe_precision.py --probes 300 --busy 0,1 --before fdf3214
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import mmap
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def measure(module, probes: int) -> dict:
    """Rank 1 answers in a forked child; rank 0 records each probe's value (None: gave up) and cost."""
    page = mmap.mmap(-1, 4096)
    pid = os.fork()
    if pid == 0:
        pair = module.CorePair(page, 1)
        for i in range(probes):
            pair.round_trip_ns(i)
        os._exit(0)
    pair, values, costs = module.CorePair(page, 0), [], []
    for i in range(probes):
        start = time.perf_counter()
        values.append(pair.round_trip_ns(i))
        costs.append(time.perf_counter() - start)
    os.waitpid(pid, 0)
    got = np.array([v for v in values if v is not None])
    out = {"probes": probes, "gave_up": probes - len(got), "cost_ms_p50": 1e3 * float(np.median(costs)),
           "cost_ms_max": 1e3 * float(np.max(costs))}
    if len(got):
        p10, p50, p90 = np.percentile(got, [10, 50, 90])
        out.update(rt_ns_p50=float(p50), rt_spread=float((p90 - p10) / p50))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--probes", type=int, default=300)
    ap.add_argument("--busy", default="0,1", help="busy loops beside the probe, a run per count (comma-separated)")
    ap.add_argument("--before", default="", help="a git revision whose collectives/placement.py to measure too")
    args = ap.parse_args()
    versions = {"checkout": ROOT / "collectives" / "placement.py"}
    tmp = tempfile.TemporaryDirectory()
    if args.before:
        old = Path(tmp.name) / "placement_before.py"
        old.write_text(subprocess.run(["git", "-C", str(ROOT), "show", f"{args.before}:collectives/placement.py"],
                                      check=True, capture_output=True, text=True).stdout)
        versions = {args.before: old, **versions}
    print(f"{'probe':>10} {'busy':>4} {'probes':>6} {'gave up':>7} {'rt p50 ns':>9} {'p90-p10/p50':>11} "
          f"{'cost p50 ms':>11} {'cost max ms':>11}")
    try:
        for busy in [int(b) for b in args.busy.split(",")]:
            loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
            try:
                time.sleep(0.5)
                for name, path in versions.items():
                    r = measure(load(path, f"placement_{len(name)}_{busy}"), args.probes)
                    print(f"{name:>10} {busy:>4} {r['probes']:>6} {r['gave_up']:>7} {r.get('rt_ns_p50', float('nan')):>9.0f} "
                          f"{r.get('rt_spread', float('nan')):>11.2f} {r['cost_ms_p50']:>11.2f} {r['cost_ms_max']:>11.1f}",
                          flush=True)
                    print("  " + json.dumps(r), file=sys.stderr)
            finally:
                for loop in loops:
                    loop.kill()
                    loop.wait()
    finally:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
