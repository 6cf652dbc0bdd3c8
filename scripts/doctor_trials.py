"""Trials of `hccl-bench doctor` on the emulated cluster (root): how often it names the culprit and
nobody else. Prints one line per run and a tally.

  slow:      4 hosts x 1 rank, node3's link shaped to a tenth of the others' rate -> node3 named
  healthy:   4 hosts x 1 rank, every link the same rate                          -> nobody named
  slowrank:  2 hosts x 1 rank, node2's rank's work made 2x as long by the fault hook
             (HCCL_BENCH_FAULT=slow:1:doctor:2, no CPU contention)                 -> node2's rank named, node1 not
  hog:       2 hosts x 1 rank, a busy loop pinned to node2's rank's core          -> node2's rank named, node1 not
             (2 hosts: this machine has 2 cores; each rank gets a core of its own, the hog shares node2's)
  slow16:    16 hosts x 1 rank, node7's link at a tenth -> node7 named, in at most log2(16) + 3 = 7 rounds
  two16:     16 hosts x 1 rank, node5 and node12 at a tenth -> both named, nobody else
  healthy16: 16 hosts x 1 rank -> nobody named
  delay16:   16 hosts x 1 rank, node7's link +1 ms (needs a link delay: netem or the relay) -> node7 named

The doctor runs its default schedule (adaptive group testing); --full runs the pairwise sweep.

  python scripts/doctor_trials.py [--runs 20] [--only slow,healthy,hog] [--full]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
# kind: (hosts, --slow specs, the names a right run gives; None: the names must only all be node3's)
KINDS: dict[str, tuple[int, list[str], list[str] | None]] = {
    "slow": (4, ["node3=100mbit"], None), "healthy": (4, [], []), "slowrank": (2, [], ["rank:node2"]),
    "hog": (2, [], ["rank:node2"]),
    "slow16": (16, ["node7=100mbit"], ["link:node7"]), "two16": (16, ["node5=100mbit", "node12=100mbit"],
                                                              ["link:node12", "link:node5"]),
    "healthy16": (16, [], []), "delay16": (16, ["node7=1gbit,1ms"], ["link:node7"])}
ROUNDS_GOAL = {"slow16": 7}   # ceil(log2 16) + 3
SLOW_RANK = {"HCCL_BENCH_FAULT": "slow:1:doctor:2"}   # rank 1 (node2) does its work twice as slowly


def cluster(*args: str) -> dict:
    proc = subprocess.run([PY, "-m", "harness.cluster", *args], cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(proc.stdout) if "--json" in args else {}


def doctor(up: dict, nproc: int, out: Path, full: bool = False, env: dict | None = None) -> tuple[int, dict, float]:
    start = time.monotonic()
    proc = subprocess.run([PY, "-m", "harness.doctor", "--launcher", up["launchers"]["mpi"], "--nproc", str(nproc),
                           "--driver-host", up["driver_host"], "--json", str(out), "-o", str(out.parent / "page"),
                           *(["--full"] if full else [])],
                          cwd=ROOT, capture_output=True, text=True, timeout=1800, env={**os.environ, **(env or {})})
    took = time.monotonic() - start
    if proc.returncode not in (0, 1):
        raise RuntimeError(proc.stderr.strip() or proc.stdout[-500:])
    return proc.returncode, json.loads(out.read_text()), took


def ranks_in(netns: str) -> list[int]:
    """PIDs of hccl-bench ranks whose network namespace is `netns`."""
    target = os.stat(f"/run/netns/{netns}").st_ino
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.stat(entry / "ns" / "net").st_ino == target and b"harness.engine.worker" in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def pin_and_hog(stop: threading.Event, hogs: list, count: int = 1, yield_rank: bool = False) -> None:
    """`count` busy loops on core 0 from the start; as soon as the ranks exist, node2's rank joins
    them on core 0 and node1's rank gets core 1 to itself. yield_rank: node2's rank also gets nice
    19, its threads and its autogroup (the kernel shares a core between sessions first, so a rank
    started in another session kept half the core and ran only 1.25x slower in one CI run)."""
    hogs += [subprocess.Popen(["taskset", "-c", "0", PY, "-c", "while True: pass"]) for _ in range(count)]
    while not stop.is_set():
        one, two = ranks_in("hbc-h1"), ranks_in("hbc-h2")
        if one and two:
            for pid in one:
                subprocess.run(["taskset", "-a", "-p", "-c", "1", str(pid)], capture_output=True)
            for pid in two:
                subprocess.run(["taskset", "-a", "-p", "-c", "0", str(pid)], capture_output=True)
                if yield_rank:
                    _yield(pid)
            return
        time.sleep(0.02)


def _yield(pid: int) -> None:
    """nice 19 for every thread of `pid` (later threads inherit it) and for its autogroup."""
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            os.setpriority(os.PRIO_PROCESS, int(task.name), 19)
        Path(f"/proc/{pid}/autogroup").write_text("19")
    except OSError:
        pass   # the rank ended, or autogroups are off: the pinning alone stays


def named(result: dict) -> list[str]:
    return [f"{s['kind']}:{s['host']}" + (f"-{s['peer']}" if s["peer"] else "") for s in result["suspects"]]


def trial(kind: str, runs: int, work: Path, keep: Path | None = None, full: bool = False) -> tuple[int, int]:
    hosts, slow, want = KINDS[kind]
    nproc = hosts
    args = ["up", "--hosts", str(hosts), "--link", "1gbit", "--json"]
    for spec in slow:
        args += ["--slow", spec]
    cluster("down")
    up = cluster(*args)
    good = 0
    try:
        for i in range(runs):
            stop, hogs = threading.Event(), list[subprocess.Popen]()
            watcher = threading.Thread(target=pin_and_hog, args=(stop, hogs)) if kind == "hog" else None
            if watcher:
                watcher.start()
            try:
                code, result, took = doctor(up, nproc, work / f"{kind}{i}" / "doctor.json", full,
                                            SLOW_RANK if kind == "slowrank" else None)
            finally:
                stop.set()
                if watcher:
                    watcher.join()
                for h in hogs:
                    h.kill()
            names = named(result)
            if want is None:
                ok = code == 1 and names != [] and all(n.split(":")[1].startswith("node3") for n in names)
            else:
                ok = code == (1 if want else 0) and sorted(names) == want
            ok = ok and (full or result["rounds"] <= ROUNDS_GOAL.get(kind, result["rounds"]))
            good += ok
            if not ok and keep is not None:
                keep.mkdir(parents=True, exist_ok=True)
                (keep / f"{kind}{i}.json").write_text(json.dumps(result, indent=1))
            print(f"{kind:8} run {i + 1:>2}: exit {code}, named {names or 'nobody'}, {took:.1f} s "
                  f"({result['rounds']} rounds) {'ok' if ok else 'WRONG'}", flush=True)
    finally:
        cluster("down")
    return good, runs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--only", default="slow,healthy,slowrank,hog")
    parser.add_argument("--keep", help="write the doctor's JSON of every wrong run into this folder")
    parser.add_argument("--full", action="store_true", help="run the doctor's pairwise sweep instead of group testing")
    args = parser.parse_args()
    unknown = set(args.only.split(",")) - set(KINDS)
    if unknown:
        print(f"doctor_trials: --only {','.join(sorted(unknown))}: no such trial (trials: {', '.join(KINDS)})", file=sys.stderr)
        return 2
    tally = {}
    with tempfile.TemporaryDirectory() as tmp:
        for kind in args.only.split(","):
            tally[kind] = trial(kind, args.runs, Path(tmp), Path(args.keep) if args.keep else None, args.full)
    print("# tally: " + ", ".join(f"{k} {g}/{n} right" for k, (g, n) in tally.items()))
    return 0 if all(g == n for g, n in tally.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
