"""Where gloo's medium-size spread comes from: bare torch.distributed gloo all_reduce on 2 local
ranks, no harness, each round's time beside the time its process's threads waited for a CPU.

    python scripts/gloo_waits.py [--sizes 65536,1048576] [--threads 2,1] [--rounds 60] [--busy 0]

Per size and ProcessGroupGloo worker-thread count (`_Options._threads`, torch's default 2) it prints
rank 0's median and 10th-percentile time per op, the rounds' spread (sd of log time), the share
of a round its threads spent waiting for a CPU (/proc/self/task/*/schedstat run delay, summed
over the threads, as collectives/timing.py CpuWait reads it) and how closely a round's time
follows that wait (Pearson r over the rounds). A gloo op hands work from the calling thread to a
pt_gloo_runloop worker and its bytes through gloo_tcp_loop; where those threads outnumber the
cores, each hand-off waits for the scheduler (docs/statistics.md, "Until decided").
"""
from __future__ import annotations

import argparse
import datetime
import os
import socket
import subprocess
import sys
import time

import numpy as np

ROUND_S = 0.02


def run_delay_ns() -> int:
    total = 0
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                total += int(f.read().split()[1])
        except (OSError, ValueError, IndexError):
            pass   # a thread gone since the listing
    return total


def rank_main(rank: int, port: int, threads: int, size: int, rounds: int) -> None:
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    store = dist.TCPStore("127.0.0.1", port, 2, rank == 0, timeout=datetime.timedelta(seconds=60))
    opts = dist.ProcessGroupGloo._Options()
    opts._threads, opts._timeout = threads, datetime.timedelta(seconds=60)
    opts._devices = [dist.ProcessGroupGloo.create_default_device()]
    pg = dist.ProcessGroupGloo(store, rank, 2, opts)
    t = torch.ones(size // 4)
    for _ in range(20):
        pg.allreduce([t]).wait()
    start = time.perf_counter()
    pg.allreduce([t]).wait()
    k = max(1, int(ROUND_S / max(time.perf_counter() - start, 1e-6)))
    agreed = torch.tensor([float(k)])
    pg.allreduce([agreed]).wait()   # both ranks time the same ops a round: their mean k
    k = max(1, int(agreed.item() / 2))
    times, waits = [], []
    for _ in range(rounds):
        pg.barrier().wait()
        w0, t0 = run_delay_ns(), time.perf_counter_ns()
        for _ in range(k):
            pg.allreduce([t]).wait()
        times.append(time.perf_counter_ns() - t0)
        waits.append(run_delay_ns() - w0)
    if rank == 0:
        tt, ww = np.array(times, dtype=float), np.array(waits, dtype=float)
        op_us = tt / k / 1e3
        print(f"{size:>9} B  threads {threads}: median {np.median(op_us):7.0f} us  p10 {np.percentile(op_us, 10):7.0f} us  "
              f"round sd(log) {np.std(np.log(tt)):5.1%}  waited {np.median(ww / tt):4.0%} of a round  "
              f"r(time, wait) {np.corrcoef(tt, ww)[0, 1]:.2f}  ({k} ops a round, {rounds} rounds)", flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="65536,1048576")
    parser.add_argument("--threads", default="2,1", help="ProcessGroupGloo worker threads to try (torch's default: 2)")
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--busy", type=int, default=0, help="busy loops beside the ranks")
    parser.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank is not None:
        rank_main(args.rank, args.port, int(args.threads), int(args.sizes), args.rounds)
        return 0
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    try:
        for size in args.sizes.split(","):
            for threads in args.threads.split(","):
                port = free_port()
                ranks = [subprocess.Popen([sys.executable, __file__, "--rank", str(r), "--port", str(port), "--threads", threads,
                                           "--sizes", size, "--rounds", str(args.rounds)]) for r in (0, 1)]
                if any(p.wait(timeout=600) for p in ranks):
                    print(f"gloo_waits: a rank failed at {size} B, {threads} threads", file=sys.stderr)
                    return 1
    finally:
        for p in busy:
            p.kill()
            p.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
