"""Do a launch's rounds in which no rank waited for a CPU measure what an idle machine measures?

    python scripts/cpu_wait_check.py [--launches 8] [--busy 1] [--ops all_reduce,all_gather] [--sizes 1M,4M] \
        [--round-time 0.002] [--rounds 100]

Launches of the collectives bench (`pytest benches/test_collectives.py --benchmark --backend mpi`), with
N busy loops beside every other one (a measuring script: contention belongs here, never in a test).
Per launch and cell it prints the ranks 0 and 1's placement (near/far, collectives/placement.py),
the median over every round, the median over the rounds no rank waited for a CPU in (what verdicts
judge: schema/stats.py undisturbed) and how many rounds those were. Per cell and placement at the
end: the idle launches' medians beside the busy launches' every-round and undisturbed medians,
and undisturbed / idle. Exit 0 when every launch ran, 1 when one failed.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from reports.placement import FAR  # noqa: E402
from reports.result_files import load  # noqa: E402
from schema.stats import waited_rounds  # noqa: E402


def launch(results: Path, args) -> bool:
    cmd = [sys.executable, "-m", "pytest", "benches/test_collectives.py", "-p", "no:cacheprovider", "-q", "--benchmark",
           "--backend", "mpi", "--ops", args.ops, "--sizes", args.sizes, "--rounds", str(args.rounds),
           "--round-time", str(args.round_time), "--results", str(results), "-k", "float32"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode:
        print(proc.stdout[-1500:] + proc.stderr[-1500:], file=sys.stderr)
    return proc.returncode == 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--launches", type=int, default=8)
    parser.add_argument("--busy", type=int, default=1, help="busy loops beside every other launch (default 1)")
    parser.add_argument("--ops", default="all_reduce,all_gather")
    parser.add_argument("--sizes", default="1M,4M")
    parser.add_argument("--round-time", type=float, default=0.002)
    parser.add_argument("--rounds", type=int, default=100)
    args = parser.parse_args()
    seen: dict = defaultdict(lambda: defaultdict(list))   # (op, size) -> (placement, busy) -> [(all, undisturbed)]
    ok = True
    with tempfile.TemporaryDirectory(prefix="cpu-wait-") as tmp:
        for n in range(args.launches):
            busy = n % 2 == 1
            loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy if busy else 0)]
            try:
                ok &= launch(Path(tmp) / str(n), args)
            finally:
                for p in loops:
                    p.kill()
                    p.wait()
            for path in sorted((Path(tmp) / str(n)).glob("*/results.json")):
                for (series, size), cell in sorted(load(path).cells.items(), key=lambda kv: (kv[0][0].op, kv[0][1])):
                    row = cell.rows[0]
                    k = row.iters_per_round or 1
                    every = np.max(np.asarray(row.round_ns_per_rank, dtype=float), axis=0) / k / 1e3
                    judged = np.asarray(cell.launches[0]) * 1e6
                    waited, rounds = waited_rounds(list(every / 1e6), row.round_cpu_wait_ns, k) or (0, 0)
                    rt = min(row.cores_rt_ns) if row.cores_rt_ns else float("nan")
                    seen[series.op, size][rt, busy].append((float(np.median(every)), float(np.median(judged))))
                    print(f"launch {n} {'busy' if busy else 'idle'} {series.op} {size >> 20} MiB: round trip {rt:.0f} ns, "
                          f"median every round {np.median(every):.1f} us, undisturbed {np.median(judged):.1f} us "
                          f"({rounds - waited} of {rounds} rounds)", flush=True)
    near = min((rt for cells in seen.values() for rt, _ in cells), default=float("nan"))
    print("\n# per cell and placement: idle median | busy every-round | busy undisturbed | undisturbed / idle")
    for (op, size), cells in sorted(seen.items()):
        for place in ("near", "far"):
            pick = [(busy, v) for (rt, busy), values in cells.items() for v in values if (rt <= FAR * near) == (place == "near")]
            idle = [v[0] for busy, v in pick if not busy]
            loaded = [v for busy, v in pick if busy]
            if not idle or not loaded:
                continue
            every, undisturbed = [v[0] for v in loaded], [v[1] for v in loaded]
            print(f"{op} {size >> 20} MiB {place}: {min(idle):.0f}-{max(idle):.0f} | {min(every):.0f}-{max(every):.0f} | "
                  f"{min(undisturbed):.0f}-{max(undisturbed):.0f} | {np.median(undisturbed) / np.median(idle):.2f}x")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
