"""The mission's tp-across-servers case on the emulated cluster (root): the same tensor-parallel
block at the same tp, once with its tp group inside one host and once spanning hosts, and the
ratio of their step times. Brings a 2-host cluster up (1 Gbit links) and down.

  python scripts/placement_ratio.py [--tp 2] [--link 1gbit]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable


def layer_run(launcher: str, driver: str, tp: int, results: Path) -> dict[str, float]:
    proc = subprocess.run([PY, "-m", "pytest", "benches/test_layers.py", "-k", "test_linear", "--benchmark",
                           "--backend", "gloo", "--nproc", str(tp), "--tp", str(tp), "--pp", "1", "--rounds", "5",
                           "--launcher", launcher, "--driver-host", driver, "--results", str(results), "-q"],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise SystemExit(f"layer run failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    data = json.loads(next(results.glob("*/results.json")).read_text())
    return {f"{i['layer']}{'+sp' if i['sequence_parallel'] else ''} {i['impl']}": i["step_us"]
            for b in data["benchmarks"] if (i := b["extra_info"]).get("bench") == "linear"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tp", type=int, default=2)
    parser.add_argument("--link", default="1gbit")
    args = parser.parse_args()
    cluster = [PY, "-m", "harness.cluster"]
    subprocess.run([*cluster, "down"], cwd=ROOT, capture_output=True)
    up = json.loads(subprocess.run([*cluster, "up", "--hosts", str(args.tp), "--link", args.link, "--json"], cwd=ROOT,
                                   capture_output=True, text=True, check=True).stdout)
    try:
        from harness.engine.launchers import find_mpiexec
        inside = f"{PY} -m harness.cluster exec node1 -- {find_mpiexec()} -n {{nproc}}"
        with tempfile.TemporaryDirectory() as tmp:
            one = layer_run(inside, up["driver_host"], args.tp, Path(tmp, "inside"))
            spanning = layer_run(up["launchers"]["mpi"], up["driver_host"], args.tp, Path(tmp, "spanning"))
    finally:
        subprocess.run([*cluster, "down"], cwd=ROOT, capture_output=True)
    print(f"# tp={args.tp} block step time: tp group inside one host vs spanning {args.tp} hosts ({args.link} links)")
    print(f"#{'block':>16} {'inside(us)':>12} {'spanning(us)':>13} {'ratio':>7}")
    for block in sorted(one):
        if block in spanning:
            print(f" {block:>16} {one[block]:>12.0f} {spanning[block]:>13.0f} {spanning[block] / one[block]:>7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
