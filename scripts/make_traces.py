"""Real traces of small gloo training jobs on this machine, for `hccl-bench doctor --traces` and
`--flight-recorder` (tests/data/traces/ was made with it). Every rank runs the same loop: a step
(a small matmul, then a 4 ms sleep standing for the accelerator's step the host waits on, so the
2 cores here are not oversubscribed), then the job's collectives; torch.profiler traces the loop on
every rank and each rank exports its Kineto JSON. The faults are the job's own, deterministic
(a fixed sleep in the job's code, a rate-limited interface): never CPU contention.

  healthy     4 ranks, nothing wrong                                   -> nobody named
  late-once   4 ranks, rank 1 sleeps 30 ms before one collective only  -> nobody named
  late-rank   4 ranks, rank 2 sleeps 2 ms before 70% of its collectives (steps 0-6 of every 10) -> rank 2 named
  late-host   4 ranks on 2 hosts (each rank in a UTS namespace of its own: hostA ranks 0-1, hostB
              ranks 2-3, so Kineto's `host_name` is real), both hostB ranks sleep 3 ms -> hostB
  slow-group  4 ranks, two process groups over the same ranks doing the same all_reduce: the default
              group and group 1, whose
              gloo device is bound to a veth address whose traffic is rate-limited (tc htb on lo, in a
              private network namespace)                                -> group 1 (a link) named
  hang        4 ranks with the flight recorder on (TORCH_FR_BUFFER_SIZE): rank 2 skips the all_reduce
              of step 6 and is stuck elsewhere; the others time out (gloo, 4 s), and every rank writes
              its flight-recorder dump (nccl_trace_rank_<r>, torch's default name) -> rank 2 named

late-host, slow-group (namespaces, tc) need root. --trim keeps each trace's header and its gloo
collective events and thread names (the rest is Python and aten events the doctor does not read).

  python scripts/make_traces.py OUT [--jobs healthy,late-rank,...] [--runs 1] [--trim] [--judge]

--judge runs the doctor's judgement (reports.traces) on each job made and prints a tally: how often
the named suspects are exactly the ones expected (healthy jobs: nobody).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
JOBS = ("healthy", "late-once", "late-rank", "late-host", "slow-group", "hang")
EXPECT = {"healthy": [], "late-once": [], "late-rank": ["rank 2"], "late-host": ["host hostB"],
          "slow-group": ["link group 1"], "hang": ["hang rank 2"]}
STEPS, SKIP_STEP, HANG_TIMEOUT_S = 40, 6, 4
LATE_RANK_MS, LATE_HOST_MS = 2.0, 3.0
SLOW_ADDR = "10.77.0.1"   # group 2's interface (veth) in the job's private network namespace


# ---- a rank ----

def rank_main(job: str, rank: int, world: int, out: Path) -> None:
    import socket
    from datetime import timedelta

    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile

    if job == "late-host":   # this process has a UTS namespace of its own: name its host
        socket.sethostname("hostA" if rank < world // 2 else "hostB")
    if job == "hang":
        os.environ["TORCH_FR_BUFFER_SIZE"] = "2000"
    torch.set_num_threads(1)
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    dist.init_process_group("gloo", init_method=f"file://{out}/.store", rank=rank, world_size=world,
                            timeout=timedelta(seconds=HANG_TIMEOUT_S if job == "hang" else 120))
    groups = [dist.group.WORLD]
    if job == "slow-group":
        os.environ["GLOO_SOCKET_IFNAME"] = "v0"   # read when a gloo group is made: this group's device
        groups.append(dist.new_group(list(range(world))))
        os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    torch.manual_seed(rank)
    a, w = torch.randn(64, 64), torch.randn(64, 64)
    grad = torch.zeros(4096)
    skipped = False
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        try:
            for step in range(STEPS):
                a = torch.tanh(a @ w)   # the step's work on the host
                time.sleep(0.004)       # ... and on the device, waited for
                grad += a.sum()
                for g in groups:
                    if job == "late-rank" and rank == 2 and step % 10 < 7:
                        time.sleep(LATE_RANK_MS / 1e3)
                    if job == "late-host" and rank >= world // 2:
                        time.sleep(LATE_HOST_MS / 1e3)
                    if job == "late-once" and rank == 1 and step == STEPS // 2:
                        time.sleep(0.03)
                    if job == "hang" and rank == 2 and step == SKIP_STEP:
                        skipped = True
                        break
                    dist.all_reduce(grad, group=g)
                if skipped:
                    time.sleep(HANG_TIMEOUT_S + 3)   # stuck elsewhere (data loading, say) while the others wait
                    break
        except RuntimeError as exc:   # the hang: gloo's timeout on the ranks that waited
            print(f"rank {rank}: {str(exc).splitlines()[0][:160]}", file=sys.stderr)
    if job == "hang":
        from torch._C._distributed_c10d import _dump_fr_trace
        (out / f"nccl_trace_rank_{rank}").write_bytes(_dump_fr_trace(True, False, False))
    else:
        prof.export_chrome_trace(str(out / f"rank{rank}.trace.json"))
    if job == "hang":
        os._exit(0)   # the hung collective's peers are gone: no orderly teardown
    dist.destroy_process_group()


# ---- a job ----

_NET_SETUP = f"""set -e
ip link set lo up
ip link add v0 type veth peer name v1
ip addr add {SLOW_ADDR}/32 dev v0
ip link set v0 up; ip link set v1 up
tc qdisc add dev lo root handle 1: htb default 10 r2q 1000
tc class add dev lo parent 1: classid 1:10 htb rate 20gbit
tc class add dev lo parent 1: classid 1:20 htb rate 20mbit
tc filter add dev lo parent 1: protocol ip u32 match ip dst {SLOW_ADDR}/32 flowid 1:20
tc filter add dev lo parent 1: protocol ip u32 match ip src {SLOW_ADDR}/32 flowid 1:20
"""


def run_job(job: str, out: Path, world: int, trim: bool) -> None:
    """All ranks of one job, each a process of its own; in a private network namespace for slow-group."""
    out.mkdir(parents=True, exist_ok=True)
    me = [sys.executable, str(Path(__file__).resolve()), "--rank-of", job, "--world", str(world), str(out)]
    wrap = ["unshare", "--uts"] if job == "late-host" else []
    ranks = " & ".join(" ".join([*wrap, *me, "--rank", str(r)]) for r in range(world)) + " & wait"
    script = (_NET_SETUP if job == "slow-group" else "") + ranks
    cmd = ["unshare", "--net", "sh", "-c", script] if job == "slow-group" else ["sh", "-c", script]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    (out / ".store").unlink(missing_ok=True)
    made = sorted(out.glob("rank*.trace.json")) + sorted(out.glob("nccl_trace_rank_*"))
    if len(made) != world:
        raise SystemExit(f"{job}: {len(made)} of {world} ranks wrote their trace:\n{proc.stderr[-3000:]}")
    if trim and job != "hang":
        for path in made:
            trim_trace(path)


def trim_trace(path: Path) -> None:
    """Keep the header, the gloo collective events and the thread names (what the doctor reads)."""
    trace = json.loads(path.read_text())
    keep = [e for e in trace["traceEvents"] if str(e.get("name", "")).startswith("gloo:")
            or e.get("name") == "thread_name"]
    trace["traceEvents"] = keep
    path.write_text(json.dumps(trace, separators=(",", ":")))


# ---- the tally ----

def named(job: str, folder: Path) -> list[str]:
    sys.path.insert(0, str(ROOT))
    from reports.traces import flight_recorder, hang, judge, kineto
    if job == "hang":
        report = hang.forensics(flight_recorder.read_dir(folder))
        return [f"hang rank {r}" for r in report.culprits]
    verdict = judge.judge(kineto.read_dir(folder))
    return [s.name for s in verdict.suspects]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out")
    parser.add_argument("--jobs", default=",".join(JOBS))
    parser.add_argument("--runs", type=int, default=1, help="jobs of each kind (folders KIND-1, KIND-2, ...)")
    parser.add_argument("--world", type=int, default=4)
    parser.add_argument("--trim", action="store_true")
    parser.add_argument("--judge", action="store_true")
    parser.add_argument("--rank-of", help=argparse.SUPPRESS)
    parser.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    out = Path(args.out).resolve()
    if args.rank_of:
        rank_main(args.rank_of, args.rank, args.world, out)
        return
    tally: dict[str, list[bool]] = {}
    for job in args.jobs.split(","):
        if job not in JOBS:
            raise SystemExit(f"--jobs {job!r}: choose from {', '.join(JOBS)}")
        for run in range(1, args.runs + 1):
            folder = out / (f"{job}-{run}" if args.runs > 1 else job)
            t0 = time.monotonic()
            run_job(job, folder, args.world, args.trim)
            line = f"{job} run {run}: {time.monotonic() - t0:.0f} s"
            if args.judge:
                got = named(job, folder)
                tally.setdefault(job, []).append(got == EXPECT[job])
                line += f"; named {got or 'nobody'} (expected {EXPECT[job] or 'nobody'})"
            print(line, flush=True)
    for job, right in tally.items():
        print(f"{job}: right in {sum(right)} of {len(right)} runs")


if __name__ == "__main__":
    main()
