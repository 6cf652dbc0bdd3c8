"""An emulated cluster on one machine, to rehearse multi-host runs: `hccl-bench cluster up|status|exec|down`.

Each host a network and UTS namespace on a bridge, links shaped with tc, the real launchers. What `up`
makes is recorded before it is made, and `down` removes exactly that. Needs root (docs/clusters.md).
"""
from __future__ import annotations

import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
import typing
import uuid
from pathlib import Path

from harness.cluster.state import STATE_DIR, SUBNET, UCX_TLS, Cluster, ClusterError, Host
from schema.exit_codes import ExitCode

BRIDGE = "hbcbr0"
DRIVER_NAME = "hbc-driver"     # the bridge address's name in /etc/hosts: where ranks reach the driver
HOSTS_FILE = Path("/etc/hosts")
HOSTS_MARK = "# hccl-bench-cluster"
RATE_BITS = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12, "bps": 8, "kbps": 8e3, "mbps": 8e6, "gbps": 8e9}
RATE = re.compile(rf"^(\d+(?:\.\d+)?)({'|'.join(RATE_BITS)})$")
DELAY = re.compile(r"^\d+(\.\d+)?(us|ms|s)$")
MAX_HOSTS = 64
RELAY_ENV = "HCCL_BENCH_CLUSTER_RELAY"   # "1": a link delay goes through the userspace relay even where netem exists
RELAY_START_S = 10


def _run(cmd: list[str], what: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if check and proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip().splitlines()
        raise ClusterError(f"{what}: {' '.join(cmd)}: {detail[-1] if detail else f'exit status {proc.returncode}'}")
    return proc


def _link_spec(text: str, what: str) -> tuple[str, str]:
    rate, _, delay = text.partition(",")
    if not RATE.match(rate) or (delay and not DELAY.match(delay)):
        raise ClusterError(f"{what} {text!r}: give RATE[,DELAY] as tc writes them, e.g. 1gbit or 1gbit,200us")
    return rate, delay


def _shape(cluster: Cluster, host: Host, link: str) -> None:
    """The host's link both ways (egress of its eth0 and of the bridge's veth): netem where the kernel has
    it; else, or with HCCL_BENCH_CLUSTER_RELAY=1, tbf for the rate and delay_relay.py for the delay."""
    rate, delay = _link_spec(link, "--link")
    number, unit = RATE.match(rate).groups()  # type: ignore[union-attr]
    bits = float(number) * RATE_BITS[unit]
    burst = max(int(bits / 8 * 0.004), 32 * 1024)      # 4 ms at the rate, at least 32 KiB
    devices: list[tuple[list[str], str]] = [(["ip", "netns", "exec", host.netns], "eth0"), ([], host.veth)]
    host.link = link
    if delay and os.environ.get(RELAY_ENV) != "1":
        netem = ["netem", "delay", delay, "rate", rate, "limit", "10000"]
        first = _run([*devices[0][0], "tc", "qdisc", "replace", "dev", "eth0", "root", *netem], "shaping", check=False)
        if first.returncode == 0:
            _run(["tc", "qdisc", "replace", "dev", host.veth, "root", *netem], f"shaping {host.name}")
            host.delay_via = "netem"
            return
        if "unknown" not in first.stderr.lower():
            raise ClusterError(f"shaping {host.name}: tc: {first.stderr.strip() or first.returncode}")
    for prefix, dev in devices:
        _run([*prefix, "tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate", rate, "burst", str(burst),
              "latency", "200ms"], f"shaping {host.name}")
    if delay:
        _start_relay(cluster, host, delay)


def _start_relay(cluster: Cluster, host: Host, delay: str) -> None:
    """The host's veth leaves the bridge, a TAP takes its port, and a relay daemon between them holds
    every frame `delay` each way; both are recorded before they are made, so `down` ends them exactly."""
    tap = f"{host.veth}t"
    _record(cluster, "tap", tap)
    _run(["ip", "tuntap", "add", "dev", tap, "mode", "tap", "vnet_hdr"], f"making {host.name}'s relay device")
    _run(["ip", "link", "set", host.veth, "nomaster"], f"moving {host.name} behind its relay")
    log = Path(cluster.state_dir, f"relay-{host.name}.log")
    with open(log, "ab") as err:
        proc = subprocess.Popen([cluster.python, "-m", "harness.cluster.delay_relay", "--dev", host.veth, "--tap", tap,
                                 "--delay", delay], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err,
                                start_new_session=True)
    cluster.daemons.append({"what": f"delay relay {host.name}", "pid": proc.pid,
                            "exe": os.path.realpath(cluster.python), "mark": "harness.cluster.delay_relay"})
    cluster.save()
    assert proc.stdout is not None
    ready = select.select([proc.stdout], [], [], RELAY_START_S)[0] and proc.stdout.readline().startswith(b"ready")
    proc.stdout.close()
    if not ready:
        tail = log.read_text(errors="replace").strip().splitlines()[-1:]
        raise ClusterError(f"{host.name}'s delay relay did not start ({tail[0] if tail else 'no word'}); log: {log}")
    _run(["ip", "link", "set", tap, "master", BRIDGE, "up"], f"linking {host.name}'s relay")
    host.delay_via = "relay"


def _record(cluster: Cluster, kind: str, name: str) -> None:
    """Written down before it is made: a failed `up` leaves nothing `down` does not know about."""
    cluster.created.append([kind, name])
    cluster.save()


def _preflight(hosts: int) -> None:
    if os.geteuid() != 0:
        raise ClusterError("the emulated cluster needs root (network namespaces, a bridge, tc): run it as root")
    if missing := [tool for tool in ("ip", "tc", "nsenter", "unshare") if shutil.which(tool) is None]:
        raise ClusterError(f"the emulated cluster needs {', '.join(missing)} (Debian: iproute2, util-linux)")
    if not 1 <= hosts <= MAX_HOSTS:
        raise ClusterError(f"--hosts {hosts}: give 1 to {MAX_HOSTS}")
    if (STATE_DIR / "state.json").exists():
        raise ClusterError(f"a cluster is already up ({STATE_DIR}): hccl-bench cluster down first")
    if re.search(rf"\b{BRIDGE}\b", _run(["ip", "-o", "link", "show"], "listing links").stdout):
        raise ClusterError(f"a link named {BRIDGE} exists and this cluster did not make it: remove it or run down")
    if re.search(r"^hbc-h\d+\b", _run(["ip", "netns", "list"], "listing namespaces").stdout, re.M):
        raise ClusterError("network namespaces named hbc-h* exist and no cluster state records them: remove them first")


def up(hosts: int, link: str = "", slow: dict[str, str] | None = None, slurm: bool = False) -> Cluster:
    """Make the cluster; on any failure remove what was made and say why."""
    _preflight(hosts)
    for name, spec in (slow or {}).items():
        _link_spec(spec, f"--slow {name}=")
    if link:
        _link_spec(link, "--link")
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    cluster = Cluster(state_dir=str(STATE_DIR))
    try:
        _make(cluster, hosts, link, slow or {})
        if slurm:
            from harness.cluster import slurm as slurm_daemons  # slurmctld, slurmd and munge on the hosts
            slurm_daemons.start(cluster)
    except BaseException:
        down()
        raise
    return cluster


def _make(cluster: Cluster, count: int, link: str, slow: dict[str, str]) -> None:
    uts_dir = Path(cluster.state_dir, "uts")
    uts_dir.mkdir(exist_ok=True)
    _record(cluster, "link", BRIDGE)
    _run(["ip", "link", "add", BRIDGE, "type", "bridge"], "making the bridge")
    _run(["ip", "addr", "add", f"{cluster.driver_host}/24", "dev", BRIDGE], "addressing the bridge")
    _run(["ip", "link", "set", BRIDGE, "up"], "starting the bridge")
    names = [f"node{i}" for i in range(1, count + 1)]
    if unknown := set(slow) - set(names):
        raise ClusterError(f"--slow {', '.join(sorted(unknown))}: no such host (hosts: {', '.join(names)})")
    for i, name in enumerate(names, 1):
        host = Host(name, f"{SUBNET}.{10 + i}", f"hbc-h{i}", str(uts_dir / name), f"hbc{i}")
        cluster.hosts.append(host)
        _record(cluster, "netns", host.netns)
        _run(["ip", "netns", "add", host.netns], f"making {name}")
        _record(cluster, "link", host.veth)   # until its peer is inside the namespace, deleting that misses it
        _run(["ip", "link", "add", host.veth, "type", "veth", "peer", "name", f"{host.veth}p"], f"linking {name}")
        _run(["ip", "link", "set", f"{host.veth}p", "netns", host.netns], f"linking {name}")
        _run(["ip", "link", "set", host.veth, "master", BRIDGE, "up"], f"linking {name}")
        inside = ["ip", "-n", host.netns]
        _run([*inside, "link", "set", f"{host.veth}p", "name", "eth0"], f"linking {name}")
        _run([*inside, "addr", "add", f"{host.address}/24", "dev", "eth0"], f"addressing {name}")
        _run([*inside, "link", "set", "eth0", "up"], f"starting {name}")
        _run([*inside, "link", "set", "lo", "up"], f"starting {name}")
        _run([*inside, "route", "add", "default", "via", cluster.driver_host], f"routing {name}")
        _record(cluster, "uts", host.uts)
        Path(host.uts).touch()
        _run(["unshare", f"--uts={host.uts}", "hostname", name], f"naming {name}")
        if slow.get(name) or link:
            _shape(cluster, host, slow.get(name) or link)
        cluster.save()
    _record(cluster, "hosts-file", str(HOSTS_FILE))
    lines = [f"{cluster.driver_host} {DRIVER_NAME} {HOSTS_MARK}"] + [f"{h.address} {h.name} {HOSTS_MARK}"
                                                                    for h in cluster.hosts]
    text = HOSTS_FILE.read_text()
    with open(HOSTS_FILE, "a") as f:   # in place: /etc/hosts is often a bind mount that cannot be replaced
        f.write(("" if text.endswith("\n") or not text else "\n") + "\n".join(lines) + "\n")
    _write_enter_script(cluster)
    cluster.save()


def _write_enter_script(cluster: Cluster) -> None:
    """What hydra's ssh launcher calls (`-launcher-exec`): HOST COMMAND... run on that host."""
    cases = "\n".join(f"  {h.name}|{h.address}) exec {' '.join(cluster.enter(h))} sh -c \"$*\" ;;" for h in cluster.hosts)
    script = Path(cluster.state_dir, "enter")
    script.write_text("#!/bin/sh\n# hydra calls: enter [ssh options] HOST COMMAND...\n"
                      "while [ $# -gt 0 ]; do case \"$1\" in -*) shift;; *) break;; esac; done\n"
                      f"host=\"$1\"; shift\ncase \"$host\" in\n{cases}\n"
                      "  *) echo \"hccl-bench cluster: no host $host\" >&2; exit 255 ;;\nesac\n")
    script.chmod(0o755)


def alive(daemon: dict) -> bool:
    """Its pid still runs its executable (and, for a Python daemon, its module: the pid was not reused)."""
    try:
        return (os.readlink(f"/proc/{daemon['pid']}/exe") == daemon["exe"]
                and daemon.get("mark", "").encode() in Path(f"/proc/{daemon['pid']}/cmdline").read_bytes())
    except OSError:
        return False


def down() -> list[str]:
    """Remove what `up` recorded, newest first; what is already gone is skipped. Idempotent."""
    cluster = Cluster.load()
    if cluster is None:
        if STATE_DIR.exists() and not any(STATE_DIR.iterdir()):
            STATE_DIR.rmdir()
        return []
    removed = []
    for daemon in reversed(cluster.daemons):
        if running := alive(daemon):
            os.kill(daemon["pid"], signal.SIGTERM)
        removed.append(f"daemon {daemon['what']} (pid {daemon['pid']}{'' if running else ', had already ended'})")
    deadline = time.monotonic() + 10
    while any(alive(d) for d in cluster.daemons) and time.monotonic() < deadline:
        time.sleep(0.1)
    for daemon in cluster.daemons:
        if alive(daemon):
            os.kill(daemon["pid"], signal.SIGKILL)
    for kind, name in reversed(cluster.created):
        if kind == "netns" and Path("/run/netns", name).exists():
            _run(["ip", "netns", "delete", name], f"removing {name}", check=False)   # its veth goes with it
            removed.append(f"namespace {name}")
        elif kind in ("tap", "link") and _run(["ip", "link", "show", name], "", check=False).returncode == 0:
            tap = kind == "tap"
            _run(["ip", "tuntap", "del", "dev", name, "mode", "tap"] if tap else ["ip", "link", "delete", name],
                 f"removing {name}", check=False)
            removed.append(f"{'relay device' if tap else 'link'} {name}")
        elif kind == "uts" and Path(name).exists():
            subprocess.run(["umount", name], capture_output=True)
            Path(name).unlink(missing_ok=True)
        elif kind == "hosts-file":
            lines = HOSTS_FILE.read_text().splitlines(keepends=True)
            kept = [line for line in lines if not line.rstrip().endswith(HOSTS_MARK)]
            if kept != lines:
                with open(HOSTS_FILE, "r+") as f:
                    f.write("".join(kept))
                    f.truncate()
                removed.append(f"{len(lines) - len(kept)} lines of {HOSTS_FILE}")
    shutil.rmtree(cluster.state_dir, ignore_errors=True)
    return removed


# ---- launching across the hosts: the wrappers the templates call ----

def launch(kind: str, nproc: int, command: list[str], ppn: int = 0) -> ExitCode:
    """Start `command` as nproc ranks, nproc / hosts per host, with the real launcher `kind`; `ppn` (hydra's
    -ppn, mpi only): ranks on a host before the next host's turn (1: round robin, as Slurm's cyclic)."""
    cluster = Cluster.load()
    if cluster is None:
        raise ClusterError("no emulated cluster is up (hccl-bench cluster up --hosts N)")
    if not command:
        raise ClusterError("launch needs the rank command after --")
    hosts = len(cluster.hosts)
    if nproc % hosts:
        raise ClusterError(f"{nproc} ranks do not spread evenly over {hosts} hosts: give a multiple of {hosts}")
    per_host = nproc // hosts
    if kind not in LAUNCHERS:
        raise ClusterError(f"launch {kind!r}: allowed {', '.join(LAUNCHERS)} (Slurm's srun is a template of its own)")
    if ppn and kind != "mpi":
        raise ClusterError(f"launch {kind}: --ppn is hydra's (launch mpi); {kind} places ranks a host at a time")
    if ppn < 0 or (ppn and per_host % ppn):
        raise ClusterError(f"--ppn {ppn}: give a whole number that divides the {per_host} ranks per host")
    return LAUNCHERS[kind](cluster, ppn or per_host, nproc, command)


def _mpiexec(cluster: Cluster, per_host: int, nproc: int, command: list[str]) -> typing.NoReturn:
    """The MPI library's own launcher over the hosts' ssh stand-in (the enter script), replacing this process:
    MPICH's hydra, or Open MPI's prterun where the ranks' interpreter loads Open MPI (other flags, daemons)."""
    from collectives.backends.mpi_ranks import variant
    from collectives.device import DeviceUnavailable
    from harness.engine.launchers import find_mpiexec
    os.environ.setdefault("UCX_TLS", UCX_TLS)
    mpiexec = find_mpiexec(command[0])   # the MPI library beside the ranks' interpreter
    enter = str(Path(cluster.state_dir, "enter"))
    library = "mpich"   # hydra starts anything; prterun only where the ranks' python loads Open MPI
    if Path(command[0]).name.startswith("python"):
        try:
            library = variant(command[0])
        except (DeviceUnavailable, ImportError, RuntimeError, OSError, subprocess.TimeoutExpired):
            pass   # no mpi4py or MPI there (a gloo group through this launcher)
    if library == "openmpi":
        argv = [mpiexec, *_prterun_flags(cluster, nproc // len(cluster.hosts), per_host, mpiexec, enter), "-n", str(nproc)]
    else:
        argv = [mpiexec, "-localhost", DRIVER_NAME, "-launcher", "ssh", "-launcher-exec", enter,
                "-hosts", ",".join(h.name for h in cluster.hosts), "-ppn", str(per_host), "-n", str(nproc)]
    os.execvp(mpiexec, [*argv, *command])


def _prterun_flags(cluster: Cluster, per_host: int, ppn: int, mpiexec: str, enter: str) -> list[str]:
    """Open MPI 5 (PRRTE) across the emulated hosts (docs/clusters.md): prted started on each host
    through the enter script, no tree spawn, its wire and the ranks' TCP on the hosts' subnet, ob1/tcp,
    unbound as hydra leaves them; a user's MCA setting wins. A host's share at once, or round robin."""
    if ppn not in (per_host, 1):
        raise ClusterError(f"--ppn {ppn}: Open MPI's prterun places a host's {per_host} ranks at once or round robin "
                           "(--ppn 1), not in blocks of another size")
    subnet = f"{SUBNET}.0/24"
    for name, value in (("PRTE_MCA_plm_ssh_agent", enter), ("PRTE_MCA_prte_launch_agent", str(Path(mpiexec).parent / "prted")),
                        ("PRTE_MCA_plm_ssh_no_tree_spawn", "1"), ("PRTE_MCA_oob_tcp_if_include", subnet),
                        ("OMPI_MCA_pml", "ob1"), ("OMPI_MCA_btl", "self,sm,tcp"), ("OMPI_MCA_btl_tcp_if_include", subnet)):
        os.environ.setdefault(name, value)
    hosts = ",".join(f"{h.name}:{per_host}" for h in cluster.hosts)
    root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    return ["--host", hosts, "--map-by", "slot" if ppn == per_host else "node", "--bind-to", "none", *root]


def _torchrun(cluster: Cluster, per_host: int, nproc: int, command: list[str]) -> ExitCode:
    """One torchrun per host, rendezvous (c10d) on the first host; the first to fail ends them all."""
    first = cluster.hosts[0]
    with socket.socket() as probe:     # a port free on the first host: its namespace is otherwise empty
        probe.bind(("", 0))
        port = 20000 + probe.getsockname()[1] % 20000
    run_id = uuid.uuid4().hex[:12]
    procs = []
    for rank, host in enumerate(cluster.hosts):
        cmd = [*cluster.enter(host), cluster.python, "-m", "torch.distributed.run", "--nnodes", str(len(cluster.hosts)),
               "--node-rank", str(rank), "--nproc-per-node", str(per_host), "--rdzv-backend", "c10d",
               "--rdzv-endpoint", f"{first.address}:{port}", "--rdzv-id", run_id, "--max-restarts", "0",
               "--no-python", *command]
        procs.append(subprocess.Popen(cmd))

    stopped_by: list[int] = []   # the signal that asked this launch to stop

    def stop(signum, _frame):
        stopped_by.append(signum)
        for p in procs:
            if p.poll() is None:
                p.send_signal(signum)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, stop)
    while True:
        codes = [p.poll() for p in procs]
        failed = next((c for c in codes if c not in (None, 0)), None)
        if failed is not None:
            interrupted = bool(stopped_by)
            if not interrupted:
                stop(signal.SIGTERM, None)
            for p in procs:
                p.wait()
            if interrupted:
                print(f"hccl-bench cluster: launch stopped by {signal.Signals(stopped_by[0]).name}", file=sys.stderr)
                return ExitCode.INTERRUPTED
            print(f"hccl-bench cluster: torchrun on {cluster.hosts[codes.index(failed)].name} ended with status "
                  f"{failed}; the others were stopped", file=sys.stderr)
            return ExitCode.RANKS_FAILED
        if all(c == 0 for c in codes):
            return ExitCode.OK
        time.sleep(0.1)


LAUNCHERS = {"mpi": _mpiexec, "torchrun": _torchrun}   # `launch KIND`: the real launcher that starts the ranks
