"""NCCL Inspector logs as field data: one job's per-process files read together, never judged
against a benchmark without --force, drawn beside the benchmark's curve in the report."""
import json
from pathlib import Path

from reports.importers import import_all, import_runs
from reports.report_page import render
from reports.result_files import load
from tests.conftest import run_cli

DATA = Path(__file__).parent / "data" / "importers"
LOGS = DATA / "nccl_inspector_8ranks"
BENCH = DATA / "rccl_tests_J_hipevt_1x8.json"     # all_reduce on 8 ranks: the same op and rank count


def test_per_process_files_are_one_job_and_collectives_its_samples():
    files = sorted(str(p) for p in LOGS.glob("*.log"))
    assert len(files) == 8
    from_dir, from_files = import_runs(LOGS), import_all(files)
    assert len(from_dir) == len(from_files) == 1
    data = from_dir[0]
    meta, infos = data["hccl_bench"], [b["extra_info"] for b in data["benchmarks"]]
    assert meta["format"] == "nccl-inspector" and meta["source"] == "field" and {i["source"] for i in infos} == {"field"}
    assert [i["bytes"] for i in infos] == [8192 << (2 * k) for k in range(6)]      # nothing under 8 KiB recorded
    assert {i["nranks"] for i in infos} == {8} and meta["groups"]["imported"]["hosts"] == {"node-a": 8}
    assert {len(b["stats"]["data"]) for b in data["benchmarks"]} == {10}           # 10 collectives per size
    assert {len(i["round_ns_per_rank"]) for i in infos} == {8}                     # rank x collective matrix
    first = json.loads((LOGS / "node-a-pid438770.log").read_text().splitlines()[0])
    slowest = max(json.loads(p.read_text().splitlines()[0])["coll_perf"]["coll_exec_time_us"] for p in LOGS.glob("*.log"))
    assert data["benchmarks"][0]["stats"]["data"][0] == slowest * 1e-6 and first["coll_perf"]["coll_sn"] == 101
    assert any(w.startswith("field data (NCCL Inspector): kernel execution time only") and "1 us resolution" in w
               and "8 KiB" in w for w in meta["warnings"])
    assert "8 p2p records (Send/Recv) not imported" in meta["warnings"]


def test_a_missing_process_file_is_said(tmp_path):
    for p in sorted(LOGS.glob("*.log"))[:7]:
        (tmp_path / p.name).write_text(p.read_text())
    meta = import_runs(tmp_path)[0]["hccl_bench"]
    assert any(w.startswith("60 collectives were logged by fewer ranks") for w in meta["warnings"])


def test_compare_refuses_field_against_benchmark_without_force(tmp_path):
    field, bench, again = tmp_path / "field.json", tmp_path / "bench.json", tmp_path / "again.json"
    assert run_cli("import", LOGS, "-o", field).returncode == 0
    assert run_cli("import", LOGS, "-o", again).returncode == 0
    assert run_cli("import", BENCH, "-o", bench).returncode == 0
    proc = run_cli("compare", bench, field)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "source: baseline ['benchmark'] vs candidate ['field'] (field data is what a production job saw" in proc.stderr
    forced = run_cli("compare", bench, field, "--force")
    assert "source:" not in forced.stderr                              # --force gets past the source refusal
    same = run_cli("compare", field, again)                            # field against field: judged
    assert same.returncode in (0, 6) and "6 cells" in same.stdout, same.stdout + same.stderr


def test_the_report_draws_field_data_beside_the_benchmark_curve(tmp_path):
    field, bench = tmp_path / "field.json", tmp_path / "bench.json"
    run_cli("import", LOGS, "-o", field)
    run_cli("import", BENCH, "-o", bench)
    alone = render([load(bench)], tmp_path / "alone")
    both = render([load(bench), load(field)], tmp_path / "both")
    html = Path(both["html"]).read_text()
    assert "Field data beside the benchmark curves (x marks): field data (NCCL Inspector)" in html
    assert both["figures"] == alone["figures"]                         # points on the same figure, not one of their own
    assert both["field_points"] == 12 and alone["field_points"] == 0  # the 6 sizes beside out-of-place and in-place
    lone = Path(render([load(field)], tmp_path / "lone")["html"]).read_text()
    assert lone.count("data:image/png") == 1 and "Field data beside" in lone
