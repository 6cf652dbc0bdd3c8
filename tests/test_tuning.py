"""Tuning benches and knob sweeps without ranks: bucket plans, the cases they make, knob values as
series of their own in tables, reports and compare (the slow tests run them on real ranks)."""
import json

import pytest

import kinds
from collectives.ops import OPS
from kinds import bucket, compress, overlap
from kinds.collective import build
from layers.memory import bucket_plan, mlp_gradient_sizes
from reports import table
from reports.result_files import load
from schema.results import CollectiveRow, TuningRow, bench_entry, result_file
from tests.conftest import run_cli
from tests.test_options import parsed


def test_buckets_fill_back_to_front_like_ddp():
    sizes = [4 * n for n in mlp_gradient_sizes(8, 2)]          # 1024, 128, 1024, 32 bytes, twice
    assert bucket_plan(sizes, 0) == [[7], [6], [5], [4], [3], [2], [1], [0]]
    assert bucket_plan(sizes, 300) == [[7, 6], [5, 4], [3, 2], [1, 0]]   # closed once it holds the cap
    assert bucket_plan(sizes, 2000) == [[7, 6, 5, 4], [3, 2, 1, 0]]
    assert bucket_plan(sizes, 10 ** 9) == [[7, 6, 5, 4, 3, 2, 1, 0]]


def test_tuning_cases_skip_what_would_repeat_or_cannot_run():
    opts = parsed(["--backend", "gloo,mpi", "--sizes", "1K", "--hidden", "64", "--layers", "4",
                   "--buckets", "0,16K,64K,1M,4M"])
    cases = {c.id: c for c in [*overlap.build(opts), *bucket.KIND.build(opts), *compress.build(opts)]}
    model = 4 * sum(mlp_gradient_sizes(64, 4))                   # 260 KiB
    assert cases["gloo-bucket-1MiB"].skip == "" and "the same 1 bucket as 1MiB" in cases["gloo-bucket-4MiB"].skip
    assert cases["gloo-compress-float16"].skip == "" and "MPI has no float16" in cases["mpi-compress-float16"].skip
    assert {c.gradient_bytes for c in cases.values() if isinstance(c, compress.CompressCase)} == {model}
    assert sorted(c.op for c in cases.values() if isinstance(c, overlap.OverlapCase) and c.backend == "mpi") == \
        sorted(name for name, op in OPS.items() if op.has_async)   # every op with an asynchronous form


def test_each_knob_value_is_its_own_group_and_series():
    opts = parsed(["--backend", "mpi", "--ops", "all_reduce", "--sizes", "1K",
                   "--knobs", "MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM=ring,recursive_doubling",
                   "--knobs", "MPIR_CVAR_DEVICE_COLLECTIVES=none"])
    cases = build(opts)
    assert len(cases) == 2 and len({c.group for c in cases}) == 2
    assert [dict(c.group.env)["MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM"] for c in cases] == ["ring", "recursive_doubling"]
    assert all(dict(c.group.env)["MPIR_CVAR_DEVICE_COLLECTIVES"] == "none" for c in cases)
    assert cases[0].id.endswith("-MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM=ring-MPIR_CVAR_DEVICE_COLLECTIVES=none")


def _knob_run(path, slow_value="400", launches=3):
    """A run with HCCL_BUFFSIZE=200 and =400 as knob values; 400 is 1.3x slower."""
    import numpy as np
    rng = np.random.default_rng(3)
    entries = []
    for value in ("200", "400"):
        for launch in range(launches):
            for size in (1 << 10, 1 << 16, 1 << 20):
                data = list((5e-6 + size / 2e9) * (1.3 if value == slow_value else 1.0) * np.exp(rng.normal(0, 0.01, 10)))
                row = CollectiveRow(backend="mpi", algo="default", op="all_reduce", redop="sum", nranks=2, bytes=size,
                                    count=size // 4, launch=launch, knobs={"HCCL_BUFFSIZE": value},
                                    time_us=float(np.median(data)) * 1e6, busbw_gbps=1.0)
                entries.append(bench_entry(f"{value}-{launch}-{size}", row, data))
    path.write_text(json.dumps(result_file(entries, {"groups": {}})))
    return path


def test_knob_values_are_series_in_table_report_and_compare(tmp_path):
    path = _knob_run(tmp_path / "knobs.json")
    run = load(path)
    assert sorted({c.series.knobs for c in run.cells.values()}) == ["HCCL_BUFFSIZE=200", "HCCL_BUFFSIZE=400"]
    text = table.render(table.rows_of(run))
    assert "# knobs: HCCL_BUFFSIZE=200  HBM for HCCL buffers: 2 x 200 MB x 1 communicator = 400 MB per rank" in text
    assert "HCCL_BUFFSIZE=400  HBM for HCCL buffers: 2 x 400 MB x 1 communicator = 800 MB per rank" in text
    proc = run_cli("compare", path, "--knob", "HCCL_BUFFSIZE=200,400")
    assert proc.returncode == 1 and "# 3 cells: 3 regression" in proc.stdout, proc.stdout + proc.stderr
    assert "# baseline:  HCCL_BUFFSIZE=200" in proc.stdout
    proc = run_cli("compare", path, "--knob", "HCCL_BUFFSIZE=200,800")
    assert proc.returncode == 2 and "no cells with HCCL_BUFFSIZE=800 (it has: HCCL_BUFFSIZE=200, HCCL_BUFFSIZE=400)" \
        in proc.stderr
    proc = run_cli("report", path, "-o", tmp_path / "rep")
    html = (tmp_path / "rep" / "report.html").read_text()
    assert proc.returncode == 0 and html.count("[HCCL_BUFFSIZE=200]") >= 1 and "[HCCL_BUFFSIZE=400]" in html


def test_the_tuning_table_names_the_best_bucket_and_the_speed_up():
    common = dict(backend="gloo", nranks=2, model_bytes=1 << 20, tensors=8, wrong=0)
    rows = [TuningRow(bench="bucket", bytes=b, bucket_bytes=b, calls=c, step_us=t, **common)
            for b, c, t in ((0, 8, 900.0), (256 << 10, 4, 500.0), (1 << 20, 1, 600.0))]
    rows += [TuningRow(bench="compress", bytes=1 << 20, comm_dtype=d, step_us=t, max_rel_error=e, error_bound=2 * e,
                       **common) for d, t, e in (("float32", 600.0, 1e-7), ("int8", 300.0, 4e-3))]
    text = kinds.tables(rows)[0] + "\n" + kinds.tables(rows)[1]
    assert "# best: 256KiB buckets (500.0 us per step), 1.80x faster than one all_reduce per tensor" in text
    assert "   per-tensor " in text and " 2.00x " in text and "4.00e-03" in text


@pytest.mark.slow
def test_the_tuning_benches_run_checked_on_real_ranks(bench_run):
    """The issue's command, small: overlap, bucketing and compression on gloo and MPI ranks; every
    entry carries its fields, results are exact (bucketing) or within the stated bound (compression)."""
    proc = bench_run("--benchmark", "-k", "overlap or bucket or compress", "--backend", "gloo,mpi", "--nproc", "2",
                     "--sizes", "4K,256K", "--rounds", "5", "--round-time", "0.005", "--hidden", "64", "--layers", "4",
                     "--buckets", "0,16K,128K,1M", "--ops", "all_reduce,all_gather,reduce_scatter",
                     target="benches/test_tuning.py")
    assert proc.returncode == 0, proc.output[-3000:]
    data = json.loads(next(bench_run.results.glob("*/results.json")).read_text())
    infos = [b["extra_info"] for b in data["benchmarks"]]
    overlap = [i for i in infos if i["bench"] == "overlap"]
    assert len(overlap) == 2 * 3 * 2 and all(0 <= i["overlap_efficiency"] <= 1 and i["t_both_us"] > 0 and
                                             i["t_comm_us"] > 0 and i["t_comp_us"] > 0 and i["wrong"] == 0
                                             for i in overlap)
    buckets = [i for i in infos if i["bench"] == "bucket"]
    assert {(i["backend"], i["bucket_bytes"]) for i in buckets} == {(b, s) for b in ("gloo", "mpi")
                                                                    for s in (0, 16 << 10, 128 << 10, 1 << 20)}
    assert all(i["wrong"] == 0 and i["calls"] >= 1 and i["step_us"] > 0 for i in buckets)
    per_tensor = {i["backend"]: i["calls"] for i in buckets if i["bucket_bytes"] == 0}
    assert per_tensor == {"gloo": 16, "mpi": 16}      # 4 blocks x (2 weights + 2 biases)
    compress = [i for i in infos if i["bench"] == "compress"]
    assert {(i["backend"], i["comm_dtype"]) for i in compress} == {("gloo", d) for d in
                                                                   ("float32", "bfloat16", "float16", "int8")} | \
        {("mpi", "float32"), ("mpi", "int8")}
    assert all(i["wrong"] == 0 and 0 <= i["max_rel_error"] <= i["error_bound"] for i in compress)
    errors = {i["comm_dtype"]: i["max_rel_error"] for i in compress if i["backend"] == "gloo"}
    assert errors["float32"] < errors["float16"] < errors["bfloat16"] and errors["int8"] > errors["float16"]
    assert "# overlap: all_reduce float32" in proc.stdout and "# best: " in proc.stdout
    assert "# compressed gradients:" in proc.stdout
    assert bench_run.leftovers() == []


@pytest.mark.slow
def test_a_knob_sweep_over_an_mpich_cvar_is_series_in_one_table_report_and_compare(bench_run, tmp_path):
    proc = bench_run("--backend", "mpi", "--ops", "all_reduce", "--sizes", "4K,64K,1M", "--benchmark", "--rounds", "5",
                     "--round-time", "0.005", "--repeat", "2",
                     "--knobs", "MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM=recursive_doubling,ring",
                     "--knobs", "MPIR_CVAR_DEVICE_COLLECTIVES=none", target="benches/test_collectives.py")
    assert proc.returncode == 0, proc.output[-3000:]
    for value in ("recursive_doubling", "ring"):
        assert f"# knobs: MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM={value} MPIR_CVAR_DEVICE_COLLECTIVES=none" in proc.stdout
    result = next(bench_run.results.glob("*/results.json"))
    data = json.loads(result.read_text())
    groups = data["hccl_bench"]["groups"].values()
    assert {g["env"]["MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM"] for g in groups} == {"recursive_doubling", "ring"}
    knobs = {b["extra_info"]["knobs"]["MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM"] for b in data["benchmarks"]}
    assert knobs == {"recursive_doubling", "ring"}
    cmp = run_cli("compare", result, "--knob", "MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM=recursive_doubling,ring")
    assert cmp.returncode in (0, 1, 6) and "# 3 cells:" in cmp.stdout, cmp.stdout + cmp.stderr
    rep = run_cli("report", result, "-o", tmp_path / "rep")
    html = (tmp_path / "rep" / "report.html").read_text()
    assert rep.returncode == 0 and "MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM=ring" in html
    assert bench_run.leftovers() == []


def _bucket_row(cap: int, step_ns: int, launch: int = 0) -> TuningRow:
    """A bucket case's row as the driver makes it, from what two bucketing ranks return."""
    from kinds.base import Ran
    from kinds.options import Options
    sizes = mlp_gradient_sizes(64, 4)
    calls = len(bucket_plan([4 * n for n in sizes], cap))
    ranks = [{"iters": 1, "round_ns": [step_ns + 1000 * i for i in range(5)], "calls": calls, "tensors": len(sizes),
              "model_bytes": 4 * sum(sizes), "wrong": 0} for _ in range(2)]
    case = bucket.BucketCase(backend="gloo", nranks=2, bucket_bytes=cap, launch=launch)
    return bucket.KIND.row(case, Options(), Ran(ranks, {"node1": 2}))


def test_bucket_fill_is_one_declaration_seen_in_the_table_compare_and_report(tmp_path):
    """bucket_fill (gradient bytes / (calls x cap)) is declared once in schema.results.TuningRow and
    computed where rows are made; table, compare JSON and report show it with no edit of theirs."""
    from reports import report_page, summary
    from reports.compare import compare
    model = 4 * sum(mlp_gradient_sizes(64, 4))
    assert _bucket_row(model, 10 ** 6).bucket_fill == 1.0          # one bucket, exactly full
    assert _bucket_row(2 * model, 10 ** 6).bucket_fill == 0.5      # one bucket, half full
    assert _bucket_row(0, 10 ** 6).bucket_fill is None             # one all_reduce per tensor: no bucket
    over = _bucket_row(100_000, 10 ** 6)                             # DDP closes a bucket once it holds the cap
    assert over.calls == 4 and over.bucket_fill == pytest.approx(model / 400_000) and over.bucket_fill > 1   # a block each
    text = bucket.KIND.table([_bucket_row(2 * model, 10 ** 6)])
    head = next(line for line in text.splitlines() if line.startswith("#      bucket"))
    assert head.split()[-3:] == ["fill", "#wrong", "launch"] and " 0.50 " in text
    runs = []
    for name, step in (("a", 10 ** 6), ("b", 2 * 10 ** 6)):
        rows = [_bucket_row(2 * model, step, launch) for launch in range(3)]
        entries = [bench_entry(f"{name}{r.launch}", r, [t / 1e9 for t in r.round_ns_per_rank[0]]) for r in rows]
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(result_file(entries, {"groups": {}})))
        runs.append(load(path))
    cells = summary.as_json(compare(*runs))["cells"]
    assert [c["metrics"]["bucket_fill"] for c in cells] == [[0.5, 0.5]]
    report_page.render(runs, tmp_path / "rep")
    html = (tmp_path / "rep" / "report.html").read_text()
    assert "<th>fill</th>" in html and "<td>0.50</td>" in html
