"""The expert-parallel layer and the hybrid step across emulated hosts (hccl-bench cluster): real
namespaces and a tc-shaped 100 Mbit link per host, hydra placing the ranks. Its own cluster (the
link is slower than tests/test_cluster.py's, so where a group sits decides the step by physics, not
by noise). Needs root and network namespaces; skips with the reason elsewhere."""
import json

import pytest

from tests.test_cluster import SKIP, cluster, leftovers

pytestmark = [pytest.mark.slow, pytest.mark.skipif(bool(SKIP), reason=SKIP or "-")]

SMALL = ("--tokens", "64", "--hidden", "64", "--seq", "32", "--batch", "4", "--layers", "4", "--microbatches", "2",
         "--experts", "8", "--routing", "uniform,skewed:0.5", "--timeout", "180")


@pytest.fixture(scope="module")
def slow_link_hosts():
    cluster("down")
    try:
        yield json.loads(cluster("up", "--hosts", "2", "--link", "100mbit", "--json").stdout)
    finally:
        cluster("down")
    assert leftovers() == []


def _rows(bench_run, tmp_path, name: str, launcher: str, driver: str, *args: str) -> tuple[str, list[dict]]:
    results = tmp_path / name
    proc = bench_run("--launcher", launcher, "--driver-host", driver, "--results", str(results), *args,
                     target="benches/", timeout=900)
    assert proc.returncode == 0, proc.output[-4000:]
    data = json.loads(next(results.glob("*/results.json")).read_text())
    return proc.stdout, [b["extra_info"] for b in data["benchmarks"]]


@pytest.mark.parametrize("nproc, backends, layouts", [(4, "gloo,mpi", "1x1x4,1x2x2,2x1x2,2x2x1"), (8, "gloo", "2x2x2")])
def test_expert_and_hybrid_run_checked_across_two_hosts(slow_link_hosts, bench_run, tmp_path, nproc, backends, layouts):
    """`-k "expert or hybrid"` under hydra on 2 hosts: every case checked against its single-rank
    model (#wrong 0) with its ranks on both hosts, and the ep group spanning them warned."""
    out, rows = _rows(bench_run, tmp_path, "both", slow_link_hosts["launchers"]["mpi"], slow_link_hosts["driver_host"],
                      "-k", "expert or hybrid", "--backend", backends, "--nproc", str(nproc), "--layouts", layouts, *SMALL)
    half = nproc // 2
    benches = {r["bench"] for r in rows}
    assert benches == {"expert", "hybrid"} and {r["backend"] for r in rows} == set(backends.split(","))
    assert all(r["wrong"] == 0 and r["checked"] > 0 and r["hosts"] == {"node1": half, "node2": half} for r in rows), \
        [(r["bench"], r["wrong"], r["hosts"]) for r in rows]
    assert "expert-parallel group(s) span hosts" in out


def test_a_tp_group_across_the_link_is_slower_and_warned(slow_link_hosts, bench_run, tmp_path):
    """The hybrid step 2x1x2 on 4 ranks placed twice: a host's two ranks together (tp inside a host, dp
    across) and round robin (hydra's -ppn 1: tp across the 100 Mbit link, dp inside). The shape makes tp
    carry 8x dp's bytes (batch x seq x hidden activations against hidden^2 weights), so the second
    placement must be slower, and it is the one warned."""
    shape = ("--layouts", "2x1x2", "--hidden", "64", "--seq", "256", "--batch", "8", "--layers", "4",
             "--microbatches", "2", "--hybrid-knobs", "plain", "--benchmark", "--rounds", "3", "--timeout", "300")
    block = slow_link_hosts["launchers"]["mpi"]
    cyclic = block.replace(" mpi --", " --ppn 1 mpi --")
    assert cyclic != block
    runs = {}
    for name, launcher in (("block", block), ("cyclic", cyclic)):
        out, (row,) = _rows(bench_run, tmp_path, name, launcher, slow_link_hosts["driver_host"],
                            "-k", "hybrid", "--backend", "gloo", "--nproc", "4", *shape)
        runs[name] = (out, row)
    (block_out, b), (cyclic_out, c) = runs["block"], runs["cyclic"]
    assert b["wrong"] == 0 and c["wrong"] == 0
    assert "tp group [0, 1] spans 2 hosts" in cyclic_out and "tp group" not in block_out
    print(f"2x1x2 step: tp inside a host {b['step_us'] / 1e3:.1f} ms (exposed tp {b['tp_us'] / 1e3:.1f} ms), "
          f"tp across the 100 Mbit link {c['step_us'] / 1e3:.1f} ms (exposed tp {c['tp_us'] / 1e3:.1f} ms)")
    # tp moves 2 x layers x batch x seq x hidden x 4 B = 4.2 MB a step: 335 ms on 100 Mbit (tc's burst
    # and a difference of medians can take some off; loopback gloo moves it in tens of ms here), a
    # floor no busy machine lowers. No ordering of the two placements' steps: they are separate runs,
    # and ranks on loopback beside other work take turns on a core (a 1 MiB intra-host all_reduce
    # read 12 ms against 9 ms across a 1 Gbit link with load 28 on 2 cores, tests/test_cluster.py)
    assert c["tp_us"] > 0.6 * 335e3
