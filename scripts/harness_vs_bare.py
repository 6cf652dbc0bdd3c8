"""How much the harness itself costs: its all_reduce times against a bare loop in its own process tree.

    python scripts/harness_vs_bare.py --launches 6 [--busy] [--backends gloo,mpi] [--sizes 64K,1M]

Each launch pair runs, in ABBA order, (H) the harness: `pytest benches/test_collectives.py
--benchmark` for float32 sum all_reduce at the sizes, time_us read from its results.json; and
(B) a bare loop that shares none of the harness's measuring code: gloo under `torchrun
--nproc-per-node 2` (torch.distributed.all_reduce on a tensor), mpi under `mpiexec -n 2 -bind-to
core` (mpi4py Allreduce on numpy arrays, out of place as the harness's default). The bare loop
measures the same way on paper: warm-up, K from a run lasting half a round, rounds of K calls
timed with perf_counter, a round's time the slowest rank's, the median over rounds.

`--busy` starts one busy loop (a process spinning on a core) beside every launch, as a loaded
node has. Prints per backend and size the median of each side and the geometric-mean H/B
ratio with its paired-t 95% CI over the launches, and the median of the per-launch ratios (robust
to a launch the machine disturbed, as the harness's own A/B is): a ratio above 1.10 means the
harness is slower than the bare loop it should match. `--env VAR=VALUE` sets a variable on the bare side only (to
test a suspected cause, e.g. the ranks' malloc settings the harness sets: RANK_ENV_DEFAULTS).
`--aa` runs the bare loop on both sides: how far the ratio strays when nothing differs.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
ROUNDS = 20
ROUND_TIME_S = 0.02     # the harness's --benchmark default (collectives.timing.Plan)
WARMUP = 5


def _calibrated_rounds(call, sync_max) -> float:
    """Warm-up, K from a run lasting half a round, ROUNDS rounds: the median slowest-rank time per call."""
    for _ in range(WARMUP):
        call()
    n = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(n):
            call()
        took = sync_max(time.perf_counter() - t0)
        if took >= ROUND_TIME_S / 2:
            break
        n = min(n * 16, max(n + 1, int(n * ROUND_TIME_S / 2 / max(took, 1e-9) * 1.2)))
    k = max(1, int(np.ceil(ROUND_TIME_S / (took / n))))
    rounds = []
    for _ in range(ROUNDS):
        t0 = time.perf_counter()
        for _ in range(k):
            call()
        rounds.append(sync_max(time.perf_counter() - t0) / k)
    return float(np.median(rounds))


def bare_gloo(sizes: list[int]) -> dict[int, float]:
    import torch
    import torch.distributed as dist
    dist.init_process_group("gloo")
    peak = torch.zeros(1, dtype=torch.float64)

    def sync_max(x: float) -> float:
        peak[0] = x
        dist.all_reduce(peak, op=dist.ReduceOp.MAX)
        return float(peak[0])

    out = {}
    for size in sizes:
        buf = torch.ones(size // 4, dtype=torch.float32)
        out[size] = _calibrated_rounds(lambda b=buf: dist.all_reduce(b), sync_max)
    dist.destroy_process_group()
    return out


def bare_mpi(sizes: list[int]) -> dict[int, float]:
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    out = {}
    for size in sizes:
        send, recv = np.ones(size // 4, np.float32), np.zeros(size // 4, np.float32)
        out[size] = _calibrated_rounds(lambda s=send, r=recv: comm.Allreduce(s, r),
                                       lambda x: comm.allreduce(x, op=MPI.MAX))
    return out


def run_bare(backend: str, sizes: list[int], env: dict) -> dict[int, float]:
    py = sys.executable
    me = [__file__, "--rank-loop", backend, "--sizes", ",".join(map(str, sizes))]
    if backend == "gloo":
        cmd = [py, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--standalone", *me]
    else:
        cmd = [os.path.join(os.path.dirname(py), "mpiexec"), "-n", "2", "-bind-to", "core", py, *me]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise SystemExit(f"harness_vs_bare: the bare {backend} loop failed: {out.stderr.strip()[:1500]}")
    line = next(x for x in out.stdout.splitlines() if x.startswith("{"))
    return {int(k): v for k, v in json.loads(line).items()}


def run_harness(backend: str, sizes: list[int], env: dict) -> dict[int, float]:
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "pytest", "benches/test_collectives.py", "-q", "-p", "no:cacheprovider",
               "--benchmark", "--backend", backend, "--nproc", "2", "--ops", "all_reduce", "--dtypes", "float32",
               "--redops", "sum", "--algos", "default", "--sizes", ",".join(map(str, sizes)), "--results", tmp]
        out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
        if out.returncode != 0:
            raise SystemExit(f"harness_vs_bare: the harness run failed: {out.stdout[-800:]}")
        data = json.loads(next(Path(tmp).glob("*/results.json")).read_text())
    return {b["extra_info"]["size"]: b["extra_info"]["time_us"] / 1e6 for b in data["benchmarks"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--launches", type=int, default=6)
    ap.add_argument("--backends", default="gloo,mpi")
    ap.add_argument("--sizes", default="64K,1M")
    ap.add_argument("--busy", action="store_true", help="one busy loop beside every launch")
    ap.add_argument("--env", default="", help="VAR=VALUE,... set on the bare side only")
    ap.add_argument("--aa", action="store_true", help="both sides bare: how far a ratio strays with no difference")
    ap.add_argument("--rank-loop", help=argparse.SUPPRESS)
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from collectives.sizes import format_size, parse_sizes
    sizes = parse_sizes(args.sizes) if not args.rank_loop else [int(s) for s in args.sizes.split(",")]
    if args.rank_loop:
        result = (bare_gloo if args.rank_loop == "gloo" else bare_mpi)(sizes)
        if int(os.environ.get("RANK", os.environ.get("PMI_RANK", "0"))) == 0:
            print(json.dumps(result), flush=True)
        return 0
    bare_env = {**os.environ, **dict(kv.split("=", 1) for kv in args.env.split(",") if kv)}
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if args.busy else None
    try:
        from scipy import stats
        print(f"# harness vs bare all_reduce float32, 2 ranks, {args.launches} launches each (ABBA), "
              f"{'beside one busy loop' if args.busy else 'quiet'}; bare side env {args.env or '(as is)'}"
              f"{'; A/A: the H side is bare too' if args.aa else ''}")
        print(f"{'backend':>8} {'size':>8} {'harness us':>11} {'bare us':>9}  median H/B  geo-mean H/B [95% CI]")
        for backend in args.backends.split(","):
            times: dict[str, list[dict[int, float]]] = {"H": [], "B": []}
            for launch in range(args.launches):
                for side in ("H", "B") if launch % 2 == 0 else ("B", "H"):
                    times[side].append(run_harness(backend, sizes, dict(os.environ)) if side == "H" and not args.aa
                                       else run_bare(backend, sizes, bare_env))
            for size in sizes:
                h = np.array([t[size] for t in times["H"]])
                b = np.array([t[size] for t in times["B"]])
                d = np.log(h / b)
                half = stats.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / np.sqrt(len(d))
                lo, mid, hi = np.exp([d.mean() - half, d.mean(), d.mean() + half])
                print(f"{backend:>8} {format_size(size):>8} {np.median(h) * 1e6:11.1f} {np.median(b) * 1e6:9.1f}  "
                      f"{np.exp(np.median(d)):10.2f}  {mid:.2f} [{lo:.2f}, {hi:.2f}]  "
                      f"per launch H/B: {' '.join(f'{x:.2f}' for x in np.exp(d))}", flush=True)
    finally:
        if hog:
            hog.kill()
            hog.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
