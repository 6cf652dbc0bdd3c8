"""The emulated cluster's state (hosts, daemons, the state folder) and its error: what both the
cluster commands (emulated.py) and its Slurm (slurm.py) read, so neither imports the other back."""
from __future__ import annotations

import json
import os
import shlex
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

STATE_DIR = Path(os.environ.get("HCCL_BENCH_CLUSTER_DIR", "/run/hccl-bench-cluster"))
SUBNET = "10.213.0"            # /24 on the bridge; the driver side is .1, host i is .(10+i)
SLURM_PORTS = (6817, 6818)     # slurmctld on the bridge address, slurmd in each host's namespace
UCX_TLS = "tcp,self"           # no shared memory between emulated hosts (they share one kernel)
FI_PROVIDER = "tcp"            # the same for libfabric, which MPICH's ranks use under srun (mpi_ranks.slurm_pmi1_netmod)


class ClusterError(Exception):
    """What stops a cluster command, in one line."""


@dataclass
class Host:
    name: str          # its hostname (node1, node2, ...)
    address: str
    netns: str
    uts: str           # the file holding its UTS namespace
    veth: str          # the bridge side of its link
    link: str = ""     # RATE[,DELAY] of its link, "" for unshaped
    delay_via: str = ""   # what holds its link's delay: "netem", "relay" (harness/cluster/delay_relay.py) or ""


@dataclass
class Cluster:
    hosts: list[Host] = field(default_factory=list)
    driver_host: str = f"{SUBNET}.1"
    state_dir: str = str(STATE_DIR)
    python: str = sys.executable
    created: list[list[str]] = field(default_factory=list)   # [kind, name] in creation order
    daemons: list[dict] = field(default_factory=list)        # {"what", "pid", "exe"}
    slurm_conf: str = ""

    def save(self) -> None:
        Path(self.state_dir, "state.json").write_text(json.dumps(asdict(self), indent=1))

    @classmethod
    def load(cls) -> Cluster | None:
        path = STATE_DIR / "state.json"
        if not path.exists():
            return None
        data = json.loads(path.read_text())
        return cls(**{**data, "hosts": [Host(**h) for h in data["hosts"]]})

    def host(self, name: str) -> Host:
        for h in self.hosts:
            if name in (h.name, h.address, h.netns):
                return h
        raise ClusterError(f"no host {name!r} in this cluster (hosts: {', '.join(h.name for h in self.hosts)})")

    def enter(self, host: Host) -> list[str]:
        """The prefix that runs a command on `host`: its network and its hostname."""
        return ["nsenter", f"--net=/run/netns/{host.netns}", f"--uts={host.uts}", "--"]

    def launchers(self) -> dict[str, str]:
        """--launcher templates: ranks spread evenly over the hosts, blocks of consecutive ranks per host."""
        wrapper = f"{shlex.quote(self.python)} -m harness.cluster launch"
        out = {"mpi": f"{wrapper} -n {{nproc}} mpi --", "torchrun": f"{wrapper} -n {{nproc}} torchrun --"}
        if self.slurm_conf:
            ucx, ofi = os.environ.get("UCX_TLS", UCX_TLS), os.environ.get("FI_PROVIDER", FI_PROVIDER)
            out["srun"] = (f"env SLURM_CONF={shlex.quote(self.slurm_conf)} UCX_TLS={ucx} FI_PROVIDER={ofi} srun --mpi=pmi2 "
                           f"--nodes {len(self.hosts)} --ntasks {{nproc}} --distribution block --kill-on-bad-exit=1")
        return out

    def describe(self) -> dict:
        return {"hosts": [{"name": h.name, "address": h.address, "link": h.link or "unshaped",
                           **({"delay_via": h.delay_via} if h.delay_via else {})} for h in self.hosts],
                "driver_host": self.driver_host, "launchers": self.launchers(), "state_dir": self.state_dir,
                "slurm_conf": self.slurm_conf or None}
