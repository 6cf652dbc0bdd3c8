"""`hccl-bench cluster up|status|exec|launch|down`: the emulated cluster's command line (emulated.py)."""
from __future__ import annotations

import argparse
import json
import os
import sys

from harness.cluster.emulated import LAUNCHERS, alive, down, launch, up
from harness.cluster.state import Cluster, ClusterError
from schema.exit_codes import ExitCode


def _parse_slow(items: list[str]) -> dict[str, str]:
    for item in items:
        if "=" not in item:
            raise ClusterError(f"--slow {item!r}: give HOST=RATE[,DELAY], e.g. node2=100mbit")
    return dict(item.split("=", 1) for item in items)


def main(argv: list[str] | None = None) -> ExitCode:
    parser = argparse.ArgumentParser(prog="hccl-bench cluster", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="action", required=True)
    u = sub.add_parser("up", help="make N emulated hosts (needs root)")
    u.add_argument("--hosts", type=int, required=True)
    u.add_argument("--link", default="", help="every host's link: RATE[,DELAY] as tc writes them (1gbit, 1gbit,200us)")
    u.add_argument("--slow", action="append", default=[], help="one host's link: HOST=RATE[,DELAY] (repeatable)")
    u.add_argument("--slurm", action="store_true", help="also start Slurm: slurmctld, one slurmd per host, munge")
    u.add_argument("--json", action="store_true", help="print hosts, driver host and launcher templates as JSON")
    sub.add_parser("status", help="the cluster that is up, as JSON")
    e = sub.add_parser("exec", help="run a command on one host: exec HOST -- CMD...")
    e.add_argument("host")
    e.add_argument("command", nargs=argparse.REMAINDER)
    sub.add_parser("down", help="remove everything up made (idempotent)")
    la = sub.add_parser("launch", help="(what the templates call) start ranks across the hosts")
    la.add_argument("kind", choices=list(LAUNCHERS))
    la.add_argument("-n", "--nproc", type=int, required=True)
    la.add_argument("--ppn", type=int, default=0, help="(mpi) ranks on a host before the next host's turn: 1 places "
                    "them round robin (Slurm's --distribution=cyclic); default: a host's share at once")
    la.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    try:
        if args.action == "up":
            cluster = up(args.hosts, args.link, _parse_slow(args.slow), args.slurm)
            print(json.dumps(cluster.describe(), indent=1) if args.json else
                  f"# cluster up: {', '.join(f'{h.name} {h.address}' for h in cluster.hosts)}; "
                  f"driver host {cluster.driver_host}; down: hccl-bench cluster down")
            return ExitCode.OK
        if args.action == "down":
            removed = down()
            print(f"# removed: {', '.join(removed)}" if removed else "# nothing to remove: no cluster is up")
            return ExitCode.OK
        current = Cluster.load()
        if current is None:
            raise ClusterError("no emulated cluster is up (hccl-bench cluster up --hosts N)")
        if args.action == "status":
            print(json.dumps({**current.describe(), "daemons": [{**d, "alive": alive(d)} for d in current.daemons]},
                             indent=1))
            return ExitCode.OK
        command = args.command[1:] if args.command[:1] == ["--"] else args.command
        if args.action == "exec":
            if not command:
                raise ClusterError("exec HOST -- COMMAND...")
            os.execvp("nsenter", [*current.enter(current.host(args.host)), *command])
        return launch(args.kind, args.nproc, command, args.ppn)   # mpiexec replaces this process: its status is hydra's
    except ClusterError as exc:
        print(f"hccl-bench cluster: {exc}", file=sys.stderr)
        return ExitCode.BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
