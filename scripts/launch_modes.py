"""What puts an mpi 1-4 MiB launch in one level or another: bare mpi4py launches, no harness code.

    python scripts/launch_modes.py [--launches 8] [--op all_gather] [--size 4M] [--busy 1] \
        [--buffers harness,huge] [--env MPIR_CVAR_CH4_CMA_ENABLE=0] [--env THP_MEM_ALLOC_ENABLE=1]

Each launch is `mpiexec -n 2 -bind-to core python launch_modes.py --rank-loop` on CPU buffers (--buffers):
20 warm-up calls, then 100 single-call rounds after a barrier.
Per launch it prints the 10th percentile and median of the rounds (us), ranks 0 and 1's cores' cache-line
round trip before and after them (ns, collectives/placement.py: what a launch's level follows on a
VM whose host moves its vCPUs between dies) and, per rank, what else might be the launch's state:
the buffers' offsets in their page, the process's huge pages (AnonHugePages) and how many physically
contiguous runs each buffer's pages form (/proc/self/pagemap: root only, else -1). --buffers: torch
tensors (torch's allocator, the default), numpy arrays (numpy's allocator, which asks for huge pages on
arrays of 4 MiB and more: each launch then sits at its own level, docs/statistics.md "Huge pages"),
the harness's own (collectives/backends page_aligned: base pages) or 2 MiB-aligned buffers wholly on
huge pages (huge: what the harness's launch spread would be without base pages). With --busy N, N
busy loops spin beside every launch, as a shared machine has them (a measuring script: contention
belongs here, never in a test). Each comma-separated --size and --buffers and each --env is one more
configuration; each launch index runs every configuration in turn, so the host's moves fall on all of
them alike. The last lines say, per configuration, how far its launches with the cores near lie apart
and whether that follows how contiguous their buffers were. Exit 0 when it ran, 1 when a launch failed.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from collectives.sizes import parse_size  # noqa: E402


def contiguous_runs(addr: int, nbytes: int) -> int:
    """Physically contiguous runs over a buffer's pages; -1 where pagemap hides the frames."""
    try:
        with open("/proc/self/pagemap", "rb") as pagemap:
            frames = []
            for page in range(addr // 4096, (addr + nbytes + 4095) // 4096):
                pagemap.seek(page * 8)
                frames.append(struct.unpack("Q", pagemap.read(8))[0] & ((1 << 55) - 1))
    except OSError:
        return -1
    if not any(frames):
        return -1
    return 1 + sum(1 for a, b in zip(frames, frames[1:]) if b != a + 1)


def huge_aligned(nbytes: int):
    """Bytes wholly on transparent huge pages where the kernel grants them: a 2 MiB-aligned part of an
    anonymous mapping, madvised before it is touched."""
    import mmap

    import numpy as np
    huge = 2 << 20
    span = -(-nbytes // huge) * huge
    region = mmap.mmap(-1, span + huge, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    whole = np.frombuffer(region, np.uint8)
    start = (-whole.ctypes.data) % huge
    region.madvise(mmap.MADV_HUGEPAGE, start, span)
    return whole[start:start + nbytes]


def _core_pair(comm):
    """Ranks 0 and 1's page for the cores' round trip (collectives/placement.py), as the harness's ranks have it."""
    from collectives import placement
    path = f"/dev/shm/{placement.PREFIX}{os.getpid()}" if comm.rank == 0 else None
    page = placement._map(path, create=True) if path else None
    path = comm.bcast(path)
    if comm.rank == 1:
        try:
            page = placement._map(path, create=False)
        except OSError:
            page = None
    mapped = comm.bcast(comm.rank != 1 or page is not None, root=1)
    if comm.rank == 0:
        os.unlink(path)
    return placement.CorePair(page, comm.rank) if page is not None and mapped else None


BUFFERS = ("torch", "numpy", "harness", "huge")


def rank_loop(op: str, size: int, buffers: str) -> None:
    """One rank of a launch: time the op, gather every rank's figures to rank 0, which prints JSON."""
    import numpy as np
    import torch
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    n_recv, n_send = size // 4, size // 4 // (comm.size if op == "all_gather" else 1)
    if buffers == "numpy":
        s, r = np.ones(n_send, np.float32), np.empty(n_recv, np.float32)
    elif buffers == "harness":
        from collectives.backends import page_aligned
        s, r = page_aligned(n_send * 4).view(np.float32), page_aligned(n_recv * 4).view(np.float32)
        s[:] = 1.0
    elif buffers == "huge":
        s, r = huge_aligned(n_send * 4).view(np.float32), huge_aligned(n_recv * 4).view(np.float32)
        s[:] = 1.0
    else:
        send, recv = torch.ones(n_send), torch.empty(n_recv)
        s, r = send.numpy(), recv.numpy()
    call = (lambda: comm.Allgather(s, r)) if op == "all_gather" else (lambda: comm.Allreduce(s, r))
    for _ in range(20):
        call()
    cores = _core_pair(comm)
    rt_before = cores.round_trip_ns(0) if cores else None
    times = []
    for _ in range(100):
        comm.Barrier()
        t = time.perf_counter()
        call()
        times.append(time.perf_counter() - t)
    rt_after = cores.round_trip_ns(1) if cores else None
    huge = next((line.split()[1] for line in open("/proc/self/smaps_rollup") if line.startswith("AnonHugePages")), "?")
    mine = {"p10_us": float(np.percentile(times, 10) * 1e6), "median_us": float(np.median(times) * 1e6),
            "offsets": [s.ctypes.data % 4096, r.ctypes.data % 4096], "huge_kb": huge,
            "runs": [contiguous_runs(s.ctypes.data, s.nbytes), contiguous_runs(r.ctypes.data, r.nbytes)],
            "cores_rt_ns": [rt_before, rt_after]}
    ranks = comm.gather(mine)
    if comm.rank == 0:
        print(json.dumps(ranks), flush=True)


def near_summary(seen: dict) -> list[str]:
    """Per configuration, its launches with both round trips in the near level's own mode (reports/placement.py
    NEAR_MODE; near level: the fastest probe of the whole run): how far their levels lie apart, and whether
    that follows how many physically contiguous runs their buffers formed."""
    import numpy as np

    from reports.placement import NEAR_MODE
    probes = [v for runs in seen.values() for ranks in runs for v in ranks[0]["cores_rt_ns"] if v is not None]
    if not probes:
        return ["# no launch carried the cores' round trip: nothing to say which ran near"]
    limit = NEAR_MODE * min(probes)
    out = []
    for label, runs in seen.items():
        near = [ranks for ranks in runs if None not in ranks[0]["cores_rt_ns"] and max(ranks[0]["cores_rt_ns"]) <= limit]
        p10 = np.array([max(r["p10_us"] for r in ranks) for ranks in near])
        pieces = np.array([sum(sum(r["runs"]) for r in ranks) for ranks in near])
        line = f"# {label}: {len(near)} of {len(runs)} launches near"
        if p10.size >= 2:
            line += (f": p10 {', '.join(f'{v:.0f}' for v in np.sort(p10))} us, sd {np.std(np.log(p10), ddof=1):.1%}")
            if pieces.min() > 0 and np.ptp(pieces) > 0:
                line += f"; r(log p10, log contiguous runs) {np.corrcoef(np.log(p10), np.log(pieces))[0, 1]:+.2f}"
        out.append(line)
    return out


def launch(mpiexec: str, op: str, size: int, buffers: str, env: dict) -> list[dict] | None:
    cmd = [mpiexec, "-n", "2", "-bind-to", "core", sys.executable, __file__, "--rank-loop", "--op", op, "--size", str(size),
           "--buffers", buffers]
    try:
        proc = subprocess.run(cmd, env={**os.environ, **env}, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as exc:
        print(f"launch failed: {exc}", file=sys.stderr)
        return None
    for line in reversed(proc.stdout.splitlines()):
        try:
            ranks = json.loads(line)
        except ValueError:
            continue
        if proc.returncode == 0 and isinstance(ranks, list):
            return ranks
    last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
    print(f"launch failed (exit {proc.returncode}): {last}", file=sys.stderr)
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--launches", type=int, default=8)
    parser.add_argument("--op", choices=("all_gather", "all_reduce"), default="all_gather")
    parser.add_argument("--size", default="4M", help="bytes; several, comma-separated, take turns")
    parser.add_argument("--busy", type=int, default=0)
    parser.add_argument("--buffers", default="torch", help="torch, numpy, harness or huge; several, comma-separated, take turns")
    parser.add_argument("--env", action="append", default=[], help="VAR=VALUE: one more configuration")
    parser.add_argument("--rank-loop", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    try:
        sizes = [(text, parse_size(text)) for text in args.size.split(",")]
    except ValueError as exc:
        parser.error(str(exc))
    if any(size % 8 for _, size in sizes):
        parser.error(f"--size {args.size}: multiples of 8 bytes (float32 elements split over 2 ranks)")
    bad = [e for e in args.env if "=" not in e or e.startswith("=")]
    if bad:
        parser.error(f"--env {bad[0]!r}: give VAR=VALUE")
    args.buffers = args.buffers.split(",")
    if not args.buffers or set(args.buffers) - set(BUFFERS):
        parser.error(f"--buffers {','.join(args.buffers)!r}: give one or more of {', '.join(BUFFERS)}, comma-separated")
    if args.rank_loop:
        rank_loop(args.op, sizes[0][1], args.buffers[0])
        return 0
    mpiexec = str(Path(sys.executable).parent / "mpiexec") if (Path(sys.executable).parent / "mpiexec").exists() \
        else shutil.which("mpiexec")
    if not mpiexec:
        print("launch_modes: no mpiexec beside this python or on PATH (pip install mpich)", file=sys.stderr)
        return 2
    envs = [("plain", {})] + [(e, dict([e.split("=", 1)])) for e in args.env]
    configs = [(f"{text} on {buffers} buffers, {name}", size, buffers, env) for text, size in sizes
               for buffers in args.buffers for name, env in envs]
    print(f"# {args.op}, 2 ranks bound to cores, {args.busy} busy loops beside; each launch index runs "
          f"{'; '.join(label for label, *_ in configs)} in turn", flush=True)
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    failed = 0
    seen: dict[str, list[list[dict]]] = {label: [] for label, *_ in configs}
    try:
        for i in range(args.launches):
            for label, size, buffers, env in configs:
                ranks = launch(mpiexec, args.op, size, buffers, env)
                if ranks is None:
                    failed += 1
                    continue
                seen[label].append(ranks)
                rt = [f"{v:4.0f}" if v is not None else "   -" for v in ranks[0]["cores_rt_ns"]]
                print(f"  launch {i}, {label}: p10 {max(r['p10_us'] for r in ranks):7.0f} us  median "
                      f"{max(r['median_us'] for r in ranks):7.0f} us  cores' round trip before/after "
                      f"{rt[0]}/{rt[1]} ns  | per rank offsets, huge pages (kB), "
                      f"contiguous runs: " + "; ".join(f"{r['offsets']} {r['huge_kb']} {r['runs']}" for r in ranks), flush=True)
    finally:
        for p in busy:
            os.kill(p.pid, signal.SIGKILL)
            p.wait()
    for line in near_summary(seen):
        print(line)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
