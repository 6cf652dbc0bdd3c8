"""Multi-host runs on the emulated cluster (hccl-bench cluster): real namespaces, a tc-shaped
bridge, hydra's proxies on each host, one torchrun per host, and a real Slurm. Needs root and
network namespaces (CI has both); skips with the reason where they are not allowed."""
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.test_openmpi import PYTHON as OPENMPI_PYTHON
from tests.test_openmpi import OpenMpiRun

pytestmark = pytest.mark.slow

DRIVER_SOCKETS_BESIDE_WATCHES = 4   # what the driver holds besides its watches: 8 hosts x 2 gloo ranks through torchrun held 12
SWEEP = ("--ops", "all_reduce,all_gather,broadcast", "--sizes", "8,64K", "--timeout", "120")


def _namespaces_allowed() -> str:
    if os.geteuid() != 0:
        return "the emulated cluster needs root"
    missing = [t for t in ("ip", "tc", "nsenter", "unshare") if shutil.which(t) is None]
    if missing:
        return f"missing {', '.join(missing)}"
    probe = subprocess.run(["unshare", "--net", "--uts", "true"], capture_output=True, text=True)
    return "" if probe.returncode == 0 else f"namespaces not allowed here: {probe.stderr.strip()}"


SKIP = _namespaces_allowed()
SLURM = shutil.which("slurmctld") and shutil.which("munged")


def cluster(*args, check=True):
    proc = subprocess.run([sys.executable, "-m", "harness.cluster", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=180)
    if check:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def leftovers() -> list[str]:
    """What a cluster leaves on the machine: namespaces, the bridge, daemons, /etc/hosts lines, state."""
    found = [line.split()[0] for line in subprocess.run(["ip", "netns", "list"], capture_output=True,
                                                        text=True).stdout.splitlines() if line.startswith("hbc-")]
    if subprocess.run(["ip", "link", "show", "hbcbr0"], capture_output=True).returncode == 0:
        found.append("bridge hbcbr0")
    daemons = subprocess.run(["pgrep", "-a", "-f", "slurmctld|slurmd|munged"], capture_output=True, text=True).stdout
    found += [f"daemon {line}" for line in daemons.splitlines() if "hccl-bench-cluster" in line]
    found += [f"/etc/hosts: {line}" for line in Path("/etc/hosts").read_text().splitlines()
              if line.endswith("# hccl-bench-cluster")]
    if Path("/run/hccl-bench-cluster").exists():
        found.append("/run/hccl-bench-cluster")
    return found


def test_down_is_idempotent_and_up_without_root_is_one_line():
    """First in this file, before any fixture's cluster is up; `down` twice: the second finds nothing."""
    if SKIP:
        pytest.skip(SKIP)
    cluster("down")
    assert "nothing to remove" in cluster("down").stdout
    as_nobody = ("import os, sys; from harness.cluster import main; "   # imported first: nobody cannot read /root
                 "os.setgroups([]); os.setegid(65534); os.seteuid(65534); sys.exit(main(['up', '--hosts', '2']))")
    nobody = subprocess.run([sys.executable, "-c", as_nobody], cwd=ROOT, capture_output=True, text=True)
    assert nobody.returncode == 2 and nobody.stderr.strip() == ("hccl-bench cluster: the emulated cluster needs root "
                                                                "(network namespaces, a bridge, tc): run it as root")
    bad = cluster("up", "--hosts", "2", "--link", "1gigabit", check=False)
    assert bad.returncode == 2 and "--link '1gigabit'" in bad.stderr and leftovers() == []


@pytest.fixture(scope="module")
def two_hosts():
    """Two hosts for this module; `down` runs on every path after `up` was tried (a failed or
    skipped test included), and the machine is checked to hold nothing of it afterwards."""
    if SKIP:
        pytest.skip(SKIP)
    cluster("down")
    try:
        up = cluster("up", "--hosts", "2", "--link", "1gbit", *(["--slurm"] if SLURM else []), "--json")
        yield json.loads(up.stdout)
    finally:
        cluster("down")
    assert leftovers() == []


def bench(bench_run, tmp_path, name, launcher, driver, *args):
    results = tmp_path / name
    proc = bench_run("--launcher", launcher, "--driver-host", driver, "--results", str(results), *args,
                     target="benches/test_collectives.py")
    assert proc.returncode == 0, proc.output[-3000:]
    data = json.loads(next(results.glob("*/results.json")).read_text())
    return proc, data


@pytest.mark.parametrize("launcher, backends", [("mpi", "mpi,gloo"), ("torchrun", "gloo"), ("srun", "mpi,gloo")])
def test_a_sweep_crosses_two_hosts_through_each_launcher(two_hosts, bench_run, tmp_path, launcher, backends):
    """2 hosts x 2 ranks under hydra, torchrun (one per host) and Slurm's srun: every case records
    both hosts with 2 ranks each and passes its exact check."""
    if launcher not in two_hosts["launchers"]:
        pytest.skip("Slurm (slurm-wlm, munge) is not installed: apt-get install slurm-wlm munge")
    proc, data = bench(bench_run, tmp_path, launcher, two_hosts["launchers"][launcher], two_hosts["driver_host"],
                       "--backend", backends, "--nproc", "4", *SWEEP)
    rows = [b["extra_info"] for b in data["benchmarks"]]
    assert len(rows) == 3 * 2 * len(backends.split(","))
    assert all(r["hosts"] == {"node1": 2, "node2": 2} and r["wrong"] == 0 and r["link_class"] == "mixed" for r in rows)
    assert "(2 hosts x 2, mixed)" in proc.stdout
    # MPICH's ranks under srun take OFI (mpi_ranks.slurm_pmi1_netmod), under hydra their own choice
    netmods = {g["versions"].get("mpich_netmod", "")[:3] for g in data["hccl_bench"]["groups"].values()
               if "mpi_library" in g["versions"]}
    assert netmods == ({"ofi"} if launcher == "srun" else {""} if "mpi" in backends.split(",") else set())
    if launcher == "torchrun":   # ranks meet at torchrun's agent store: the driver holds a watch per host, no store peer per rank
        sockets = [int(m) for log in tmp_path.glob(f"{launcher}/*/logs/*/driver.log")
                   for m in re.findall(r"driver open sockets (\d+)", log.read_text())]
        assert sockets and max(sockets) <= 2 + DRIVER_SOCKETS_BESIDE_WATCHES, sockets
    assert bench_run.leftovers() == []


PMI1_PUT = """
import os, socket, sys
pmi = socket.socket(fileno=int(os.environ["PMI_FD"]))
pmi.settimeout(10)
def ask(line):
    pmi.sendall(line.encode())
    return pmi.recv(4096).decode().strip()
ask("cmd=init pmi_version=1 pmi_subversion=1\\n")
kvs = ask("cmd=get_my_kvsname\\n").split("kvsname=")[1].split()[0]
line = f"cmd=put kvsname={kvs} key=k{os.environ['PMI_RANK']} value={'A' * int(sys.argv[1])}\\n"
print(len(line), ask(line), flush=True)
"""


def test_slurms_pmi2_plugin_cuts_a_pmi1_request_at_1024_bytes(two_hosts, tmp_path):
    """Why MPICH's ranks under srun use OFI (collectives/backends/mpi_ranks.py): a PMI-1 put within
    Slurm's own vallen_max (1,024) but over 1,024 bytes in all is cut, and its tail read as a request
    of its own, exactly the errors that failed every MPICH group with UCX's 9-segment business card."""
    if "srun" not in two_hosts["launchers"]:
        pytest.skip("Slurm (slurm-wlm, munge) is not installed: apt-get install slurm-wlm munge")
    script = tmp_path / "pmi1_put.py"
    script.write_text(PMI1_PUT)
    srun = two_hosts["launchers"]["srun"].replace("{nproc}", "2")
    outs = {}
    for vallen in (900, 1024):
        proc = subprocess.run([*srun.split(), sys.executable, str(script), str(vallen)], capture_output=True,
                              text=True, timeout=120)
        outs[vallen] = proc.stdout + proc.stderr
    assert "request not begin with 'cmd='" not in outs[900] and outs[900].count("cmd=put_result rc=0") == 2, outs[900]
    assert "mpi/pmi2: request not begin with 'cmd='" in outs[1024], outs[1024]


def _shaper(host: str) -> tuple[int, int]:
    """Bytes sent and packets held back (tbf's overlimits) by the rate shaper on `host`'s eth0: tc's
    own counters, which say the link was shaped whatever the scheduler did to the timings."""
    out = subprocess.run([sys.executable, "-m", "harness.cluster", "exec", host, "--", "tc", "-s", "qdisc", "show",
                          "dev", "eth0"], cwd=ROOT, capture_output=True, text=True, timeout=60).stdout
    m = re.search(r"qdisc tbf .* rate 1Gbit .*\n Sent (\d+) bytes \d+ pkt \(dropped \d+, overlimits (\d+)", out)
    assert m, out
    return int(m.group(1)), int(m.group(2))


def test_the_shaped_link_makes_inter_host_slower_than_intra_host(two_hosts, bench_run, tmp_path):
    """Two ranks on node1's loopback against one rank on each host across the 1 Gbit links."""
    from harness.engine.launchers import find_mpiexec
    inside = f"{sys.executable} -m harness.cluster exec node1 -- {find_mpiexec()} -n {{nproc}}"
    args = ("--backend", "mpi", "--nproc", "2", "--ops", "all_reduce", "--sizes", "1M", "--benchmark",
            "--rounds", "10")
    _, intra = bench(bench_run, tmp_path, "intra", inside, two_hosts["driver_host"], *args)
    before = {h: _shaper(h) for h in ("node1", "node2")}
    _, inter = bench(bench_run, tmp_path, "inter", two_hosts["launchers"]["mpi"], two_hosts["driver_host"], *args)
    after = {h: _shaper(h) for h in ("node1", "node2")}
    (a,), (b,) = intra["benchmarks"], inter["benchmarks"]
    assert a["extra_info"]["link_class"] == "intra-host" and b["extra_info"]["link_class"] == "inter-host"
    # a 2-rank ring all_reduce moves 1 MiB each way: at least 8.4 ms on 1 Gbit, a floor no busy machine
    # lowers (the shaping is what makes it; unshaped, it is well under 1 ms on a quiet machine). No
    # ratio to the intra-host time: two spinning MPICH ranks beside other work take turns on a core,
    # and with load 28 on 2 cores the intra-host case read 12215 us against the link's 9187 us
    print(f"1 MiB all_reduce: intra-host {a['extra_info']['time_us']:.0f} us, inter-host {b['extra_info']['time_us']:.0f} us")
    assert b["extra_info"]["time_us"] > 8000
    # and tc's counters: each host's uplink sent the case's MiBs through its 1 Gbit shaper and held
    # packets back (1 MiB a call is past its 500 kB burst), which no busy machine can fake: unshaped,
    # the same case read 8783 us with load 28 on 2 cores, past the floor above
    for host in ("node1", "node2"):
        sent, held = (x - y for x, y in zip(after[host], before[host]))
        assert sent > 8 * (1 << 20) and held > 0, (host, before[host], after[host])


def test_a_tp_group_across_hosts_is_warned(two_hosts, bench_run, tmp_path):
    proc = bench_run("--launcher", two_hosts["launchers"]["mpi"], "--driver-host", two_hosts["driver_host"],
                     "--backend", "gloo", "--nproc", "4", "--tp", "4", "--pp", "1",
                     "--results", str(tmp_path / "tp"), "-k", "test_linear", target="benches/test_layers.py")
    assert proc.returncode == 0, proc.output[-3000:]
    assert "# WARNING: tp group [0, 1, 2, 3] spans 2 hosts (node1, node2)" in proc.stdout


def test_the_nightly_sbatch_runs_twice_against_slurm(two_hosts, tmp_path):
    if "srun" not in two_hosts["launchers"]:
        pytest.skip("Slurm (slurm-wlm, munge) is not installed")
    env = {**os.environ, "SLURM_CONF": two_hosts["slurm_conf"], "HCCL_BENCH_RESULTS": str(tmp_path / "nightly"),
           "HCCL_BENCH_PYTHON_EXE": sys.executable, "HCCL_BENCH_BACKENDS": "mpi", "HCCL_BENCH_REPO": str(ROOT),
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "HCCL_BENCH_TEXTFILE_DIR": str(tmp_path / "textfile")}
    outputs = []
    for night in (1, 2):
        job = subprocess.run(["sbatch", "--wait", f"--output={tmp_path}/night{night}.out", "examples/nightly.sbatch",
                              "--ops", "all_reduce", "--sizes", "8,1K", "--rounds", "5", "--round-time", "0.002",
                              "--repeat", "1"],   # one launch a night: the budget (--night-budget) is another test's
                             cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
        outputs.append((tmp_path / f"night{night}.out").read_text())
        assert job.returncode == 0, job.stdout + job.stderr + outputs[-1][-3000:]
    assert len(list((tmp_path / "nightly").glob("*/results.json"))) == 2
    assert "nothing to judge yet" in outputs[1] or "# verdict: history" in outputs[1], outputs[1][-2000:]
    # the recipe exported the nights for node_exporter's textfile collector, labelled with the job and cluster
    from prometheus_client.parser import text_string_to_metric_families
    prom = (tmp_path / "textfile" / "hccl_bench_hccl-bench-nightly.prom").read_text()
    busbw = [s for f in text_string_to_metric_families(prom) if f.name == "hccl_bench_busbw_gbps" for s in f.samples]
    assert busbw and {(s.labels["job"], s.labels["cluster"]) for s in busbw} == {("hccl-bench-nightly", "hcclbench")}, busbw[:2]


@pytest.mark.skipif(bool(SKIP) or not SLURM, reason=SKIP or "Slurm is not installed")
def test_four_hosts_one_rank_each_full_sweep_through_srun(bench_run, tmp_path):
    """Every op on 4 hosts x 1 rank through srun; the time it took is printed for the record."""
    cluster("down")
    up = json.loads(cluster("up", "--hosts", "4", "--slurm", "--json").stdout)
    try:
        start = time.monotonic()
        proc, data = bench(bench_run, tmp_path, "four", up["launchers"]["srun"], up["driver_host"],
                           "--backend", "mpi", "--nproc", "4")
        print(f"4 hosts x 1 rank, every op, smoke sizes, through srun: {time.monotonic() - start:.1f} s, "
              f"{len(data['benchmarks'])} cases")
        assert {b["extra_info"]["op"] for b in data["benchmarks"]} >= {"all_reduce", "all_gather", "reduce_scatter",
                                                                      "all_to_all", "broadcast", "reduce", "sendrecv"}
        assert all(b["extra_info"]["link_class"] == "inter-host" for b in data["benchmarks"])
    finally:
        cluster("down")
    assert leftovers() == []


@pytest.mark.skipif(bool(SKIP) or not os.access(OPENMPI_PYTHON, os.X_OK),
                    reason=SKIP or "HCCL_BENCH_OPENMPI_PYTHON names no Open MPI python (.ci/run sets it)")
@pytest.mark.parametrize("hosts, per_host", [(2, 2), (4, 1)])
def test_open_mpi_sweeps_across_hosts_through_cluster_launch(tmp_path, hosts, per_host):
    """Open MPI's own launcher (prterun, its daemons on each host through the enter script) from the
    same `launch mpi` template as hydra: the quick sweep exact on 2 hosts x 2 and 4 hosts x 1."""
    cluster("down")
    up = json.loads(cluster("up", "--hosts", str(hosts), "--json").stdout)
    run = OpenMpiRun(tmp_path)
    try:
        proc, data = bench(run, tmp_path, "ompi", up["launchers"]["mpi"], up["driver_host"],
                           "--backend", "openmpi", "--nproc", str(hosts * per_host), *SWEEP)
        rows = [b["extra_info"] for b in data["benchmarks"]]
        assert len(rows) == 3 * 2 and all(r["wrong"] == 0 for r in rows)
        assert all(r["hosts"] == {f"node{i + 1}": per_host for i in range(hosts)} for r in rows)
        assert all(g["versions"]["mpi_library"].startswith("Open MPI") for g in data["hccl_bench"]["groups"].values())
        assert run.leftovers() == []
    finally:
        cluster("down")
    assert leftovers() == []
