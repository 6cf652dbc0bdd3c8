"""Real traces of small gloo training jobs on this machine, for `hccl-bench doctor --traces` and
`--flight-recorder` (tests/data/traces/ was made with it). Every rank runs the same loop: a step
(a small matmul, then a 4 ms sleep standing for the accelerator's step the host waits on, so the
2 cores here are not oversubscribed), then the job's collectives; torch.profiler traces the loop on
every rank and each rank exports its Kineto JSON. The faults are the job's own, deterministic
(a fixed sleep in the job's code, a rate-limited interface): never CPU contention.

  healthy     4 ranks, nothing wrong                                   -> nobody named
  late-once   4 ranks, rank 1 sleeps 30 ms before one collective only  -> nobody named
  late-rank   4 ranks, rank 2 sleeps --late-rank-ms (2) before 70% of its collectives (steps 0-6 of every 10) -> rank 2 named
  late-step   --world ranks, each step 3 gradient all_reduces back to back (DDP's buckets); rank 2
              does --late-step-ms (5) more work before each step's first one (a slow device, data
              loader or host: a sleep in the job's code standing for that work), the others then
              follow it back to back                                    -> rank 2 named
  healthy-step  the same job with no rank late                          -> nobody named
  late-host   4 ranks on 2 hosts (each rank in a UTS namespace of its own: hostA ranks 0-1, hostB
              ranks 2-3, so Kineto's `host_name` is real), both hostB ranks sleep 3 ms -> hostB
  slow-group  4 ranks, two process groups over the same ranks doing the same all_reduce: the default
              group and group 1, whose
              gloo device is bound to a veth address whose traffic is rate-limited (tc htb on lo, in a
              private network namespace)                                -> group 1 (a link) named
  slow-link   --world ranks on --hosts emulated hosts (`hccl-bench cluster up`, every link --link,
              one host's, --slow-host, at a tenth of that): each step an all_reduce over the world,
              then one over each pair of neighbouring hosts (hosts h and h+1 of a ring, all their
              ranks: the groups a pipeline's or a hierarchical job's neighbours make)
                                                                        -> the slow host's link
  hosts-healthy  the same job on the same cluster with every link alike  -> nobody named
  hang        4 ranks with the flight recorder on (TORCH_FR_BUFFER_SIZE): rank 2 skips the all_reduce
              of step 6 and is stuck elsewhere; the others time out (gloo, 4 s), and every rank writes
              its flight-recorder dump (nccl_trace_rank_<r>, torch's default name) -> rank 2 named

late-host, slow-group, slow-link and hosts-healthy (namespaces, tc) need root; the last two bring
the emulated cluster up for their runs and down after them. --trim keeps each trace's header, its gloo
collective events, the steps' ProfilerStep#N marks and thread names (the rest is Python and aten events the doctor does not read).

  python scripts/make_traces.py OUT [--jobs healthy,late-rank,...] [--runs 1] [--trim] [--judge]

--judge runs the doctor's judgement (reports.traces) on each job made and prints a tally: how often
the named suspects are exactly the ones expected (healthy jobs: nobody).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
JOBS = ("healthy", "late-once", "late-rank", "late-step", "healthy-step", "late-host", "slow-group", "hang", "slow-link",
        "hosts-healthy")
CLUSTER_JOBS = ("slow-link", "hosts-healthy")
EXPECT = {"healthy": [], "late-once": [], "late-rank": ["rank 2"], "late-step": ["rank 2"], "healthy-step": [],
          "late-host": ["host hostB"],
          "slow-group": ["link group 1"], "hang": ["hang rank 2"], "slow-link": ["link of host {slow}"],
          "hosts-healthy": []}
PAIR_ELEMENTS = 64 << 10   # float32: 256 KiB over each pair of neighbouring hosts a step
STEPS, SKIP_STEP, HANG_TIMEOUT_S = 40, 6, 4
LATE_HOST_MS = 3.0
STEP_GRADS = 3            # late-step, healthy-step: gradient all_reduces a step (buckets), back to back
SLOW_ADDR = "10.77.0.1"   # group 2's interface (veth) in the job's private network namespace


# ---- a rank ----

def rank_main(job: str, rank: int, world: int, out: Path, hosts: int = 1, late_step_ms: float = 5.0,
              late_rank_ms: float = 2.0) -> None:
    import socket
    from datetime import timedelta

    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile, record_function

    if job == "late-host":   # this process has a UTS namespace of its own: name its host
        socket.sethostname("hostA" if rank < world // 2 else "hostB")
    if job == "hang":
        os.environ["TORCH_FR_BUFFER_SIZE"] = "2000"
    torch.set_num_threads(1)
    if job not in CLUSTER_JOBS:   # on the emulated hosts gloo finds this host's address by its name
        os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    dist.init_process_group("gloo", init_method=f"file://{out}/.store", rank=rank, world_size=world,
                            timeout=timedelta(seconds=HANG_TIMEOUT_S if job == "hang" else 120))
    groups = [dist.group.WORLD]
    if job == "slow-group":
        os.environ["GLOO_SOCKET_IFNAME"] = "v0"   # read when a gloo group is made: this group's device
        groups.append(dist.new_group(list(range(world))))
        os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    pairs = []   # (group, its all_reduce's tensor): each pair of neighbouring hosts, in one order on every rank
    if job in CLUSTER_JOBS:
        per_host = world // hosts
        for h in range(hosts):
            members = sorted({*range(h * per_host, (h + 1) * per_host),
                              *range((h + 1) % hosts * per_host, ((h + 1) % hosts + 1) * per_host)})
            group = dist.new_group(members)   # every rank makes every group, in the same order
            if rank in members:
                pairs.append((group, torch.zeros(PAIR_ELEMENTS)))
    torch.manual_seed(rank)
    a, w = torch.randn(64, 64), torch.randn(64, 64)
    grad = torch.zeros(4096)
    buckets = [torch.zeros(4096) for _ in range(STEP_GRADS)] if job in ("late-step", "healthy-step") else []
    skipped = False
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        try:
            for step in range(STEPS):
                mark = record_function(f"ProfilerStep#{step}")   # what prof.step() marks: HTA reads steps by it
                mark.__enter__()
                a = torch.tanh(a @ w)   # the step's work on the host
                time.sleep(0.004)       # ... and on the device, waited for
                grad += a.sum()
                for g in groups if not buckets else []:
                    if job == "late-rank" and rank == 2 and step % 10 < 7:
                        time.sleep(late_rank_ms / 1e3)
                    if job == "late-host" and rank >= world // 2:
                        time.sleep(LATE_HOST_MS / 1e3)
                    if job == "late-once" and rank == 1 and step == STEPS // 2:
                        time.sleep(0.03)
                    if job == "hang" and rank == 2 and step == SKIP_STEP:
                        skipped = True
                        break
                    dist.all_reduce(grad, group=g)
                for group, tensor in pairs:
                    dist.all_reduce(tensor, group=group)
                if buckets and job == "late-step" and rank == 2:
                    time.sleep(late_step_ms / 1e3)   # this rank's extra work, once a step, before the gradients
                for bucket in buckets:
                    bucket += a.sum()
                    dist.all_reduce(bucket)
                mark.__exit__(None, None, None)
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


def run_job(job: str, out: Path, world: int, trim: bool, hosts: int = 1, late_step_ms: float = 5.0,
            late_rank_ms: float = 2.0) -> None:
    """All ranks of one job, each a process of its own; in a private network namespace for slow-group,
    on the emulated cluster's hosts (rank r on host r // (world / hosts) + 1) for the cluster jobs."""
    out.mkdir(parents=True, exist_ok=True)
    me = [sys.executable, str(Path(__file__).resolve()), "--rank-of", job, "--world", str(world), "--hosts", str(hosts),
          "--late-step-ms", str(late_step_ms), "--late-rank-ms", str(late_rank_ms), str(out)]
    wrap = ["unshare", "--uts"] if job == "late-host" else []

    def on_host(r: int) -> list[str]:
        if job in CLUSTER_JOBS:
            return [sys.executable, "-m", "harness.cluster", "exec", f"node{r // (world // hosts) + 1}", "--"]
        return wrap
    ranks = " & ".join(" ".join([*on_host(r), *me, "--rank", str(r)]) for r in range(world)) + " & wait"
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
    keep = [e for e in trace["traceEvents"] if str(e.get("name", "")).startswith(("gloo:", "ProfilerStep#"))
            or e.get("name") == "thread_name"]
    trace["traceEvents"] = keep
    path.write_text(json.dumps(trace, separators=(",", ":")))


# ---- the tally ----

def named(job: str, folder: Path, min_link_ratio: float) -> list[str]:
    sys.path.insert(0, str(ROOT))
    from reports.traces import flight_recorder, hang, judge, kineto
    if job == "hang":
        report = hang.forensics(flight_recorder.read_dir(folder))
        return [f"hang rank {r}" for r in report.culprits]
    verdict = judge.judge(kineto.read_dir(folder), min_link_ratio=min_link_ratio)
    return [s.name for s in verdict.suspects]


class Cluster:
    """The emulated cluster for a cluster job's runs: up (hccl-bench cluster up) on entry, down on exit."""

    def __init__(self, hosts: int, link: str, slow: str):
        self.cmd = [sys.executable, "-m", "harness.cluster"]
        self.up = [*self.cmd, "up", "--hosts", str(hosts), "--link", link, *(["--slow", slow] if slow else [])]

    def __enter__(self):
        proc = subprocess.run(self.up, cwd=ROOT, capture_output=True, text=True)
        if proc.returncode:
            raise SystemExit(f"cluster up: {(proc.stderr or proc.stdout).strip()}")
        return self

    def __exit__(self, *exc):
        subprocess.run([*self.cmd, "down"], cwd=ROOT, capture_output=True, text=True)


def _tenth(rate: str) -> str:
    """A tenth of a tc rate ("1gbit" -> "100mbit")."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([a-z]+)", rate)
    if not m:
        raise SystemExit(f"--link {rate!r}: give a rate as tc writes it, e.g. 1gbit")
    return f"{float(m.group(1)) * 100:g}{'m' if m.group(2)[0] == 'g' else 'k'}{m.group(2)[1:]}" \
        if m.group(2)[0] in "gm" else f"{float(m.group(1)) / 10:g}{m.group(2)}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out")
    parser.add_argument("--jobs", default=",".join(JOBS))
    parser.add_argument("--runs", type=int, default=1, help="jobs of each kind (folders KIND-1, KIND-2, ...)")
    parser.add_argument("--run-from", type=int, default=None, help="number the runs from here (folders KIND-N, ...): "
                        "to make a tally's runs in rounds, one kind after another")
    parser.add_argument("--world", type=int, default=4)
    parser.add_argument("--hosts", type=int, default=4, help="slow-link, hosts-healthy: emulated hosts (--world / "
                        "--hosts ranks each)")
    parser.add_argument("--link", default="1gbit", help="slow-link, hosts-healthy: every host's link, as tc writes it")
    parser.add_argument("--slow-host", default="node2", help="slow-link: the host whose link runs at a tenth of --link")
    parser.add_argument("--late-step-ms", type=float, default=5.0, help="late-step: rank 2's extra work before each "
                        "step's first all_reduce")
    parser.add_argument("--late-rank-ms", type=float, default=2.0, help="late-rank: rank 2's sleep before 70%% of its "
                        "collectives")
    parser.add_argument("--min-link-ratio", type=float, default=None, help="--judge: the doctor's setting (its default "
                        "if not given)")
    parser.add_argument("--trim", action="store_true")
    parser.add_argument("--judge", action="store_true")
    parser.add_argument("--judge-only", action="store_true", help="judge the jobs already in OUT (KIND-1, ...) again, "
                        "making none: after a change to the judgement")
    parser.add_argument("--rank-of", help=argparse.SUPPRESS)
    parser.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    out = Path(args.out).resolve()
    if args.rank_of:
        rank_main(args.rank_of, args.rank, args.world, out, args.hosts, args.late_step_ms, args.late_rank_ms)
        return
    if set(args.jobs.split(",")) & set(CLUSTER_JOBS) and args.world % args.hosts:
        raise SystemExit(f"--world {args.world} does not split over --hosts {args.hosts}")
    tally: dict[str, list[bool]] = {}
    for job in args.jobs.split(","):
        if job not in JOBS:
            raise SystemExit(f"--jobs {job!r}: choose from {', '.join(JOBS)}")
        slow = f"{args.slow_host}={_tenth(args.link)}" if job == "slow-link" else ""
        expect = [e.format(slow=args.slow_host) for e in EXPECT[job]]
        with Cluster(args.hosts, args.link, slow) if job in CLUSTER_JOBS and not args.judge_only \
                else contextlib.nullcontext():
            first = args.run_from or 1
            for run in range(first, first + args.runs):
                folder = out / (f"{job}-{run}" if args.runs > 1 or args.run_from else job)
                t0 = time.monotonic()
                if not args.judge_only:
                    run_job(job, folder, args.world, args.trim, args.hosts if job in CLUSTER_JOBS else 1,
                            args.late_step_ms, args.late_rank_ms)
                elif not (folder.is_dir() and len(list(folder.glob("rank*.trace.json")) + list(
                        folder.glob("nccl_trace_rank_*"))) == args.world):
                    print(f"{job} run {run}: {folder} not made (or not whole)", flush=True)
                    continue
                line = f"{job} run {run}: {time.monotonic() - t0:.0f} s"
                if args.judge or args.judge_only:
                    got = named(job, folder, args.min_link_ratio)
                    tally.setdefault(job, []).append(got == expect)
                    line += f"; named {got or 'nobody'} (expected {expect or 'nobody'})"
                print(line, flush=True)
    for job, right in tally.items():
        print(f"{job}: right in {sum(right)} of {len(right)} runs ({args.world} ranks)", flush=True)


if __name__ == "__main__":
    main()
