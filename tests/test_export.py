"""`hccl-bench export --prometheus`: figures and verdicts in the Prometheus text format, read back
by prometheus_client's own parser (what node_exporter's textfile collector accepts); and a real
session's results.json keeps what the pytest-benchmark adapters of Bencher, Conbench and
github-action-benchmark read (docs/results.md, "Where fleets look")."""
import json

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import run_cli
from tests.test_canary import SMALL_GATHER, with_canary
from tests.test_history import nightly
from tests.test_same_night import _same_night_run


def families(path) -> dict:
    """Metric name -> its samples, parsed as Prometheus parses a scrape; a malformed line raises."""
    return {f.name: f.samples for f in text_string_to_metric_families(path.read_text())}


def test_a_same_night_ab_exports_both_stacks_and_the_regression_previous_to_this(tmp_path):
    from harness.session.same_night import mark_direction
    run = tmp_path / "ab"
    _same_night_run(run, 1.3)
    mark_direction(run)
    out = run_cli("export", run, "--prometheus", tmp_path / "m.prom", "--job", "nightly-mpi", "--cluster", "ascend-a")
    assert out.returncode == 0 and "11 verdicts, exit status 1" in out.stdout, out.stdout + out.stderr
    got = families(tmp_path / "m.prom")
    assert {"hccl_bench_busbw_gbps", "hccl_bench_algbw_gbps", "hccl_bench_time_us", "hccl_bench_verdict",
            "hccl_bench_time_ratio", "hccl_bench_detectable_change", "hccl_bench_exit_code"} <= set(got)
    busbw = {(s.labels["side"], s.labels["stack"], int(s.labels["bytes"])): s.value for s in got["hccl_bench_busbw_gbps"]}
    assert len(busbw) == 22 and all(s.labels["job"] == "nightly-mpi" and s.labels["op"] == "all_reduce"
                                    for s in got["hccl_bench_busbw_gbps"])
    for size in (4, 1 << 20):   # this stack (side B, the candidate) 1.3x slower: its busbw 1/1.3 of the previous
        assert 0.72 < busbw[("B", "this stack", size)] / busbw[("A", "previous stack", size)] < 0.82
    verdicts = got["hccl_bench_verdict"]
    assert len(verdicts) == 11 and {s.labels["verdict"] for s in verdicts} == {"regression"}
    assert {s.labels["stack"] for s in verdicts} == {"previous stack -> this stack"}
    assert all(1.25 < s.value < 1.35 for s in got["hccl_bench_time_ratio"] if s.labels["bound"] == "estimate")
    assert [s.value for s in got["hccl_bench_exit_code"]] == [1.0]
    assert {s.labels["cluster"] for samples in got.values() for s in samples} == {"ascend-a"}   # on every sample


def test_a_history_exports_its_newest_night_and_its_verdicts(tmp_path, monkeypatch):
    """Nights 10-12 of 12 slower at all_reduce 256 KiB-4 MiB: the newest night's figures, the canary,
    the regressions; a machine improvement exports as such with exit status 0."""
    import socket
    folder = with_canary(nightly(tmp_path / "a", 12, slow_from=9, drift=0.02))
    monkeypatch.setenv("SLURM_CLUSTER_NAME", "ascend-b")   # what a Slurm job's export is labelled with
    out = run_cli("export", folder, "--prometheus", tmp_path / "h.prom")
    assert out.returncode == 0 and "the history of 12 runs" in out.stdout, out.stdout + out.stderr
    got = families(tmp_path / "h.prom")
    assert {s.labels["run"] for s in got["hccl_bench_time_us"]} == {"20261112-020000"}   # the newest night only
    assert len(got["hccl_bench_time_us"]) == 33 and {s.labels["workload"] for s in got["hccl_bench_canary_seconds"]} == {
        "memory", "loopback", "compute"}
    regressed = {(s.labels["op"], int(s.labels["bytes"])) for s in got["hccl_bench_verdict"]
                 if s.labels["verdict"] == "regression"}
    assert regressed == {("all_reduce", s) for s in (256 << 10, 1 << 20, 4 << 20)}
    assert all(s.labels["cause"] == "history" for s in got["hccl_bench_verdict"] if s.labels["verdict"] == "regression")
    assert [s.value for s in got["hccl_bench_exit_code"]] == [1.0]
    assert {s.labels["cluster"] for samples in got.values() for s in samples} == {"ascend-b"}
    monkeypatch.delenv("SLURM_CLUSTER_NAME")   # outside Slurm: this machine's name
    faster = with_canary(nightly(tmp_path / "b", 10, drift=0.02), lambda night: 0.7 if night >= 7 else 1.0,
                         lambda night, op, size: 0.67 if night >= 7 and SMALL_GATHER(op, size) else 1.0)
    assert run_cli("export", faster, "--prometheus", tmp_path / "f.prom").returncode == 0
    got = families(tmp_path / "f.prom")
    machine = {int(s.labels["bytes"]) for s in got["hccl_bench_verdict"] if s.labels["verdict"] == "machine improvement"}
    assert machine == {4, 16, 64, 256, 1024} and [s.value for s in got["hccl_bench_exit_code"]] == [0.0]
    assert {s.labels["cluster"] for s in got["hccl_bench_exit_code"]} == {socket.gethostname()}


def test_export_refuses_what_holds_no_run_in_one_line(tmp_path):
    (tmp_path / "empty").mkdir()
    out = run_cli("export", tmp_path / "empty", "--prometheus", tmp_path / "x.prom")
    assert out.returncode == 2 and "no results.json or cases.jsonl" in out.stderr and not (tmp_path / "x.prom").exists()


# What each pytest-benchmark reader takes from results.json (read from their sources):
#   Bencher `python_pytest` (lib/bencher_adapter/src/adapters/python/pytest.rs): top-level `machine_info`
#     and `commit_info` objects; per benchmark `fullname` and `stats.median`, `stats.iqr` (seconds).
#   Conbench `PytestAdapter` (benchadapt/adapters/pytest.py): top-level `datetime`; per benchmark
#     `fullname`, `param`, `params`, `group` and `stats.data` (the per-round times, seconds).
#   github-action-benchmark `tool: pytest` (src/extract.ts extractPytestResult): per benchmark
#     `fullname`, `stats.ops`, `stats.stddev`, `stats.mean`, `stats.rounds`.
NEEDS = {
    "bencher": {"top": {"machine_info": dict, "commit_info": dict}, "bench": {"fullname": str},
                "stats": {"median": float, "iqr": float}},
    "conbench": {"top": {"datetime": str}, "bench": {"fullname": str, "param": (str, type(None)),
                                                     "params": (dict, type(None)), "group": (str, type(None))},
                 "stats": {"data": list}},
    "github-action-benchmark": {"top": {}, "bench": {"fullname": str},
                                "stats": {"ops": float, "stddev": float, "mean": float, "rounds": int}},
}


def adapter_gaps(data: dict) -> list[str]:
    """What each adapter would miss in a results.json: '' for none."""
    gaps = []
    for tool, need in NEEDS.items():
        gaps += [f"{tool}: {k}" for k, t in need["top"].items() if not isinstance(data.get(k), t)]
        for i, b in enumerate(data.get("benchmarks") or [{}]):
            gaps += [f"{tool}: benchmarks[{i}].{k}" for k, t in need["bench"].items() if k not in b or not isinstance(b[k], t)]
            stats = b.get("stats") or {}
            gaps += [f"{tool}: benchmarks[{i}].stats.{k}" for k, t in need["stats"].items()
                     if not isinstance(stats.get(k), t) or isinstance(stats.get(k), bool)
                     or (t is float and not isinstance(stats.get(k), (int, float)))]
    names = [b.get("fullname") for b in data.get("benchmarks") or []]
    if len(set(names)) != len(names):
        gaps.append("bencher/conbench: fullname repeats (one benchmark would hide another)")
    return gaps


def with_machine_figures(folder):
    """Each night's collective rows given what a real session's ranks record beside a case: ranks 0 and
    1's cores' round trip and each round's longest CPU wait (a wait in every fourth round)."""
    for path in folder.glob("*/results.json"):
        data = json.loads(path.read_text())
        for b in data["benchmarks"]:
            e = b["extra_info"]
            e["cores_rt_ns"] = [300.0 + e["launch"], 310.0]
            e["iters_per_round"] = e.get("iters_per_round") or 1   # the synthetic rows' data are their rounds
            e["round_cpu_wait_ns"] = [10 ** 9 * (r % 4 == 0) for r in range(len(b["stats"]["data"]))]
        path.write_text(json.dumps(data))
    return folder


def test_a_cell_exports_where_the_cores_were_and_the_rounds_a_rank_waited_in(tmp_path):
    history = with_machine_figures(nightly(tmp_path, 5))
    assert run_cli("export", history, "--prometheus", tmp_path / "h.prom").returncode == 0
    got = families(tmp_path / "h.prom")
    assert {s.value for s in got["hccl_bench_cores_round_trip_ns"]} == {301.0}   # the median launch's faster probe
    assert len(got["hccl_bench_cores_round_trip_ns"]) == len(got["hccl_bench_time_us"]) > 0
    assert {s.value for s in got["hccl_bench_waited_rounds_ratio"]} == {0.25}


@pytest.mark.slow
def test_a_real_session_exports_and_its_results_json_feeds_the_pytest_benchmark_adapters(bench_run, tmp_path):
    proc = bench_run("--backend", "mpi", "--ops", "all_reduce", "--sizes", "1K,64K", "--rounds", "10",
                     "--round-time", "0.005", "--repeat", "2", "--benchmark", target="benches/test_collectives.py")
    assert proc.returncode == 0, proc.output[-3000:]
    results = next(bench_run.results.glob("*/results.json"))
    data = json.loads(results.read_text())
    assert adapter_gaps(data) == [], adapter_gaps(data)[:10]
    assert all(len(b["stats"]["data"]) == b["stats"]["rounds"] for b in data["benchmarks"])
    broken = {**data, "benchmarks": [{k: v for k, v in b.items() if k != "param"} for b in data["benchmarks"]]}
    assert "conbench: benchmarks[0].param" in adapter_gaps(broken)   # the check sees a missing field
    out = run_cli("export", results.parent, "--prometheus", tmp_path / "run.prom")
    assert out.returncode == 0, out.stdout + out.stderr
    got = families(tmp_path / "run.prom")
    assert {(s.labels["op"], s.labels["bytes"], s.labels["hosts"], s.labels["nranks"]) for s in got["hccl_bench_busbw_gbps"]} \
        == {("all_reduce", "1024", "1", "2"), ("all_reduce", "65536", "1", "2")}
    assert all(s.value > 0 for s in got["hccl_bench_busbw_gbps"] + got["hccl_bench_time_us"])
    assert "hccl_bench_verdict" not in got or not got["hccl_bench_verdict"]   # one run: figures, nothing judged
    probes: dict[str, list[float]] = {}   # ranks 0 and 1 on one node: each case probed unless its probe gave up
    for b in data["benchmarks"]:
        if len(b["extra_info"].get("cores_rt_ns") or []) == 2:
            probes.setdefault(str(b["extra_info"]["bytes"]), []).append(min(b["extra_info"]["cores_rt_ns"]))
    rt = {s.labels["bytes"]: s.value for s in got["hccl_bench_cores_round_trip_ns"]}
    assert rt.keys() == probes.keys() and probes   # a cell's launches left out for CPU waits may move its median
    assert all(0 < min(probes[size]) <= value <= max(probes[size]) for size, value in rt.items())
    assert all(0 <= s.value <= 1 for s in got.get("hccl_bench_waited_rounds_ratio", []))


def test_the_grafana_dashboard_reads_only_metrics_and_labels_that_an_export_writes(tmp_path):
    """examples/grafana/hccl-bench-nightly.json against two real exports (a history with its canary
    and a same-night A/B): every metric a panel or variable queries is written, with every label
    it selects, groups or prints by."""
    import re
    from pathlib import Path

    from harness.session.same_night import mark_direction
    history = with_machine_figures(with_canary(nightly(tmp_path / "h", 12, slow_from=9, drift=0.02)))
    ab = tmp_path / "ab"
    _same_night_run(ab, 1.3)
    mark_direction(ab)
    labels: dict[str, set[str]] = {}
    for n, folder in enumerate((history, ab)):
        assert run_cli("export", folder, "--prometheus", tmp_path / f"{n}.prom").returncode == 0
        for name, samples in families(tmp_path / f"{n}.prom").items():
            labels.setdefault(name, set()).update(k for s in samples for k in s.labels)
    dash = json.loads((Path(__file__).parent.parent / "examples/grafana/hccl-bench-nightly.json").read_text())
    queries = [(t["expr"], t.get("legendFormat", "")) for p in dash["panels"] for t in p["targets"]]
    queries += [(v["definition"], "") for v in dash["templating"]["list"]]
    assert len(queries) >= 10
    for expr, legend in queries:
        metrics = re.findall(r"\bhccl_bench_[a-z_]+", expr)
        assert metrics, expr
        for metric in metrics:
            assert metric in labels, f"{metric} is not exported (exported: {sorted(labels)})"
        used = set(re.findall(r"(\w+)\s*[=!]~?\"", expr)) | set(re.findall(r"\{\{(\w+)\}\}", legend))
        used |= {x.strip() for by in re.findall(r"by \(([^)]*)\)", expr) for x in by.split(",")}
        used |= set(re.findall(r"label_values\(\w+(?:\{[^}]*\})?, (\w+)\)", expr))
        have = set.intersection(*(labels[m] for m in metrics))
        assert used <= have, f"{expr}: {sorted(used - have)} not among {sorted(have)}"
