"""Independent reference for an A/B verdict: bare mpi4py Allreduce loops, no harness code.

    python scripts/bare_ab.py --launches 6 --ab-env MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM=recexch

Each launch is `mpiexec -n 2 python bare_ab.py --rank-loop` with the environment of side A (as
is) or B (plus --ab-env), in ABBA order; ranks bound to cores, buffers page-aligned and malloc
pinned as the harness's ranks have them (--cold-malloc leaves glibc's moving mmap threshold alone). Prints the
per-size median time of each side and the geometric-mean B/A ratio with its paired-t 95% CI, so
the size ranges the harness flags can be checked against a measurement that shares none of its code.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness.engine.groups import RANK_ENV_DEFAULTS  # noqa: E402  (the ranks' environment, not measuring code)

SIZES = [4 << (2 * i) for i in range(11)]   # 4 B .. 4 MiB, x4


def rank_loop() -> None:
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    out = {}
    for size in SIZES:
        n = max(1, size // 4)
        bufs = []
        for fill in (1.0, 0.0):
            raw = np.zeros(n * 4 + 4096, np.uint8)
            start = -raw.ctypes.data % 4096
            buf = raw[start:start + n * 4].view(np.float32)
            buf[:] = fill
            bufs.append(buf)
        send, recv = bufs
        for _ in range(5):
            comm.Allreduce(send, recv)
        t0 = time.perf_counter()
        comm.Allreduce(send, recv)
        k = max(1, int(0.02 / max(comm.allreduce(time.perf_counter() - t0, op=MPI.MAX), 1e-7)))
        rounds = []
        for _ in range(15):
            comm.Barrier()
            t0 = time.perf_counter()
            for _ in range(k):
                comm.Allreduce(send, recv)
            rounds.append(comm.allreduce((time.perf_counter() - t0) / k, op=MPI.MAX))
        out[size] = float(np.median(rounds))
    if comm.rank == 0:
        print(json.dumps(out), flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--launches", type=int, default=6)
    ap.add_argument("--ab-env", default="", help="VAR=VALUE,... set on side B")
    ap.add_argument("--cold-malloc", action="store_true", help="don't pin glibc's malloc thresholds")
    ap.add_argument("--rank-loop", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.rank_loop:
        rank_loop()
        return 0
    b_env = dict(item.split("=", 1) for item in args.ab_env.split(",") if item)
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    times: dict[str, list[dict]] = {"A": [], "B": []}
    for launch in range(args.launches):
        for side in ("A", "B") if launch % 2 == 0 else ("B", "A"):
            env = {**({} if args.cold_malloc else RANK_ENV_DEFAULTS), **os.environ, **(b_env if side == "B" else {})}
            out = subprocess.run([mpiexec, "-n", "2", "-bind-to", "core", sys.executable, __file__, "--rank-loop"], env=env,
                                 capture_output=True, text=True, check=True).stdout
            times[side].append({int(k): v for k, v in json.loads(out.strip().splitlines()[-1]).items()})
    from scipy import stats
    print(f"# bare mpi4py Allreduce, 2 ranks, {args.launches} ABBA launches, "
          f"{'cold' if args.cold_malloc else 'pinned'} malloc; B = {b_env}")
    print(f"{'size':>9} {'A us':>9} {'B us':>9}  B/A [95% CI]")
    for size in SIZES:
        a = np.array([t[size] for t in times["A"]])
        b = np.array([t[size] for t in times["B"]])
        d = np.log(b / a)
        half = stats.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / np.sqrt(len(d))
        print(f"{size:>9} {np.median(a) * 1e6:9.1f} {np.median(b) * 1e6:9.1f}  "
              f"{np.exp(d.mean()):.2f} [{np.exp(d.mean() - half):.2f}, {np.exp(d.mean() + half):.2f}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
