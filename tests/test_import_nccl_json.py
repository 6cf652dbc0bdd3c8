"""nccl-tests / rccl-tests -J and rccl-tests' reporter, on samples written in the writers' own
formats (tests/data/importers/make_samples.py, SOURCES.md), and the rank count never guessed."""
import json
import statistics
from pathlib import Path

import pytest

from reports.compare import compare
from reports.importers import import_runs
from reports.result_files import load, run_from_rows
from reports.run_failures import RunFailed
from schema.results import CollectiveRow, ResultError
from schema.run_meta import RunMeta
from tests.conftest import run_cli

DATA = Path(__file__).parent / "data" / "importers"
HOSTS_2X8 = {"R6KD-CX8aaS-GPU-14": 8, "R6KD-CX8aaS-GPU-15": 8}


def one(path, **kw) -> dict:
    runs = import_runs(path, **kw)
    assert len(runs) == 1
    return runs[0]


def infos(data) -> list[dict]:
    return [b["extra_info"] for b in data["benchmarks"]]


def edited(tmp_path, name, edit, suffix=".json") -> Path:
    out = tmp_path / f"edited{suffix}"
    out.write_text(edit((DATA / name).read_text()))
    return out


# (file, format, ranks, hosts, cells, samples per cell, rounds, failed, complete)
SAMPLES = [
    ("nccl_tests_2.17.8_v1_2x8.json", "nccl-tests-json", 16, HOSTS_2X8, 16, 1, None, False, True),
    ("nccl_tests_2.19.2_v2_I_2x8.json", "nccl-tests-json", 16, HOSTS_2X8, 16, 20, 20, False, True),
    ("nccl_tests_2.19.6_v3_I_K2_2x8.json", "nccl-tests-json", 16, HOSTS_2X8, 16, 20, 20, False, True),
    ("nccl_tests_2.19.6_v3_N2_2x8.json", "nccl-tests-json", 16, HOSTS_2X8, 16, 2, None, False, True),
    ("nccl_tests_2.19.6_v3_o_all_2x8.json", "nccl-tests-json", 16, HOSTS_2X8, 80, 1, None, False, True),
    ("nccl_tests_2.19.6_v3_nwrong_2x8.json", "nccl-tests-json", 16, HOSTS_2X8, 16, 1, None, True, True),
    ("nccl_tests_2.19.6_v3_early_close_2x8.json", "nccl-tests-json", 16, HOSTS_2X8, 11, 1, None, False, False),
    ("nccl_tests_2.19.6_v3_killed_2x8.json", "nccl-tests-json", 16, HOSTS_2X8, 14, 20, 20, False, False),
    ("rccl_tests_J_hipevt_1x8.json", "rccl-tests-json", 8, {"R6KD-CX8aaS-GPU-14": 8}, 16, 1, None, False, True),
    ("rccl_tests_Z_json_list.json", "rccl-tests-reporter-json", 16, {}, 16, 1, None, False, True),
    ("rccl_tests_Z_json_lines.json", "rccl-tests-reporter-jsonl", 16, {}, 16, 1, None, False, True),
    ("rccl_tests_Z_json_lines_sorted_keys.json", "rccl-tests-reporter-jsonl", 16, {}, 16, 1, None, False, True),
    ("rccl_tests_Z_mpi.csv", "rccl-tests-csv", 16, {}, 16, 1, None, False, True),
    ("rccl_tests_Z_single.csv", "rccl-tests-csv", 8, {}, 16, 1, None, False, True),
]


@pytest.mark.parametrize("name, fmt, ranks, hosts, ncells, per_cell, rounds, failed, complete", SAMPLES)
def test_each_writer_sample_imports_with_its_facts(name, fmt, ranks, hosts, ncells, per_cell, rounds, failed, complete):
    data = one(DATA / name)
    meta = data["hccl_bench"]
    assert meta["format"] == fmt and {i["op"] for i in infos(data)} == {"all_reduce"}
    assert {i["nranks"] for i in infos(data)} == {ranks} and meta["groups"]["imported"]["hosts"] == hosts
    assert len(data["benchmarks"]) == ncells and len({b["name"] for b in data["benchmarks"]}) == ncells
    assert {len(b["stats"]["data"]) for b in data["benchmarks"]} == {per_cell}
    assert {i.get("rounds") for i in infos(data)} == {rounds}
    assert bool(meta["failed"]) == failed and meta["complete"] == complete


def test_per_iteration_samples_are_rounds_and_process_rows_the_matrix():
    data = one(DATA / "nccl_tests_2.19.6_v3_I_K2_2x8.json")
    info, bench = infos(data)[0], data["benchmarks"][0]
    assert len(info["round_ns_per_rank"]) == 2 and {len(r) for r in info["round_ns_per_rank"]} == {20}
    assert info["iters_per_round"] == 1 and len(info["imported"]["skipped_us"]) == 2   # -K 2: kept aside
    assert min(info["imported"]["skipped_us"]) > max(bench["stats"]["data"]) * 1e6       # the slow warm ones
    raw = json.loads((DATA / "nccl_tests_2.19.6_v3_I_K2_2x8.json").read_text())["results"][0]["out_of_place_per_iter"]
    assert bench["stats"]["data"] == pytest.approx([t * 1e-6 for t in raw["times_us"][2:]], abs=1e-9)   # ns
    assert info["imported"]["printed_time_us"] == [61.09]      # the headline time as printed, kept
    assert info["time_us"] == pytest.approx(statistics.median(raw["times_us"][2:]), abs=1e-3)   # the rounds' median


def test_repeats_are_samples_and_reductions_their_own_cells():
    cycles = one(DATA / "nccl_tests_2.19.6_v3_N2_2x8.json")["benchmarks"][0]
    assert cycles["extra_info"]["imported"]["repeats"] == 2 and cycles["extra_info"]["imported"]["entries"] == [1, 9]
    reds = {(i["redop"], i["bytes"], i["inplace"]) for i in infos(one(DATA / "nccl_tests_2.19.6_v3_o_all_2x8.json"))}
    assert {r for r, _, _ in reds} == {"sum", "prod", "max", "min", "avg"} and len(reds) == 80


def test_v1_footer_spelling_and_the_string_booleans_decide_failure(tmp_path):
    v1 = "nccl_tests_2.17.8_v1_2x8.json"
    assert '"average_bus_bandwidith":{"bandwidith"' in (DATA / v1).read_text()
    bad_bw = one(edited(tmp_path, v1, lambda t: t.replace('"okay":"unchecked"', '"okay":"false"')))
    assert "average bus bandwidth" in bad_bw["hccl_bench"]["failed"]
    v3 = "nccl_tests_2.19.6_v3_N2_2x8.json"
    oob = one(edited(tmp_path, v3, lambda t: t.replace('"out_of_bounds":{"count":0,"okay":"true"}',
                                                      '"out_of_bounds":{"count":0,"okay":"false"}')))
    assert oob["hccl_bench"]["failed"].startswith("the file says: out_of_bounds")
    errs = one(edited(tmp_path, v3, lambda t: t.replace('"errors":[""]', '"errors":["NCCL WARN Cuda failure 700"]')))
    assert errs["hccl_bench"]["failed"] == "the file's errors: NCCL WARN Cuda failure 700"
    assert one(DATA / v3)["hccl_bench"]["failed"] is None            # errors [""] is the writer's "no error"
    nan = one(edited(tmp_path, v3, lambda t: t.replace('"time":61.090000', '"time":"nan"', 1)))
    first = next(b for b in nan["benchmarks"] if b["extra_info"]["bytes"] == 1024 and not b["extra_info"]["inplace"])
    assert len(first["stats"]["data"]) == 1 and any("'nan'" in w for w in nan["hccl_bench"]["warnings"])


def test_early_closed_and_killed_files_say_where_they_end():
    early = one(DATA / "nccl_tests_2.19.6_v3_early_close_2x8.json")["hccl_bench"]
    assert early["interrupted"].startswith("entry 6 (32768 B) ends before its in-place half; no footer")
    killed = one(DATA / "nccl_tests_2.19.6_v3_killed_2x8.json")["hccl_bench"]
    assert killed["interrupted"].startswith("entry 8 is cut off at byte ")
    assert "the 7 entries before it are kept" in killed["interrupted"]


def test_a_file_listing_half_its_processes_is_refused(tmp_path):
    def half(text):
        data = json.loads(text)
        data["config"]["devices"] = data["config"]["devices"][:1]
        return json.dumps(data)
    with pytest.raises(ResultError, match=r"config lists 1 processes x 8 GPUs = 8 ranks, but the printed bus_bw/alg_bw "
                                          r"fits only 16 ranks"):
        import_runs(edited(tmp_path, "nccl_tests_2.19.6_v3_N2_2x8.json", half))


def test_environment_whitelisted_and_timing_meaning_kept(tmp_path):
    data = one(DATA / "nccl_tests_2.19.6_v3_I_K2_2x8.json")
    prov = data["hccl_bench"]["provenance"]["imported"]
    assert prov["env"] == {"NCCL_IB_HCA": "mlx5_2,mlx5_3", "NCCL_DEBUG": "WARN", "UCX_TLS": "ib", "OMPI_COMM_WORLD_SIZE": "2",
                           "SLURM_JOB_ID": "4242", "CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"}
    assert "not-a-real-secret" not in json.dumps(data) and prov["json_version"] == 3 and prov["library_version"] == 23003
    assert prov["timing"]["per_iter_skip"] == 2 and "first 2 kept aside" in prov["timing"]["rounds"]
    slowest = one(edited(tmp_path, "nccl_tests_2.19.6_v3_N2_2x8.json", lambda t: t.replace('"-N","2"', '"-N","2","-a","3"')))
    assert slowest["hccl_bench"]["provenance"]["imported"]["timing"]["headline"].startswith("the slowest process's per-op")
    cpu = one(edited(tmp_path, "nccl_tests_2.19.6_v3_N2_2x8.json",
                     lambda t: t.replace('"time":', '"cpu_time":').replace('"-N","2"', '"-N","2","-C","1"')))
    assert cpu["hccl_bench"]["provenance"]["imported"]["timing"]["headline"].startswith("host time to enqueue")


def test_rccl_tests_own_fields_are_kept():
    data = one(DATA / "rccl_tests_J_hipevt_1x8.json")
    info = infos(data)[0]
    assert info["backend"] == "rccl-tests" and info["imported"]["hip_event_time_us"] == [pytest.approx(61.09 * 0.97)]
    assert data["hccl_bench"]["provenance"]["imported"]["library_version"] == 23003
    csv = {i["bytes"]: i for i in infos(one(DATA / "rccl_tests_Z_mpi.csv")) if not i["inplace"]}
    assert csv[4096]["wrong"] is None and csv[8192]["wrong"] == 0      # "N/A": not checked


def test_a_crashed_rccl_run_s_empty_file_is_refused_in_one_line(tmp_path):
    empty = tmp_path / "rccl.csv"
    empty.write_text("")
    proc = run_cli("import", empty)
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0 and "empty" in proc.stderr


# ---- the rank count: the log's words, else what the printed precision pins down, else refused

LOG128 = DATA / "nccl_tests_128gpu_no_rank_lines.txt"


def test_the_128_gpu_log_without_rank_lines_reads_128_never_112(tmp_path):
    assert {i["nranks"] for i in infos(one(LOG128, op="all_reduce"))} == {128}
    rows = LOG128.read_text().splitlines()
    table_end = next(i for i, line in enumerate(rows) if line.startswith("# Out of bounds"))
    few = rows[:14] + rows[table_end:]            # 3 rows only: 2 decimals no longer pin 128 down
    titled = tmp_path / "few.txt"
    titled.write_text("\n".join(few) + "\n")
    run = one(titled)
    assert {i["nranks"] for i in infos(run)} == {128}
    assert any(w.startswith("rank count 128 from the log's words ('128 GPU all reduce") for w in run["hccl_bench"]["warnings"])
    bare = tmp_path / "bare.txt"
    bare.write_text("\n".join(few[1:]) + "\n")
    with pytest.raises(ResultError, match=r"names no ranks and busbw/algbw fits ([\d, ]+|\d+\.\.\d+) ranks at its printed "
                                          r"precision; pass --nranks N") as err:
        import_runs(bare)
    named = [int(n) for n in str(err.value).split("fits ")[1].split(" ranks")[0].split(", ")]
    assert 128 in named and 112 not in named and len(named) > 1      # the candidates, named
    assert {i["nranks"] for i in infos(one(bare, nranks=128))} == {128}
    with pytest.raises(ResultError, match=r"--nranks 112 does not fit the printed busbw/algbw \(it fits 126, 127, 128"):
        import_runs(bare, nranks=112)


@pytest.mark.parametrize("content", ['{"version":3,"args":["x"],"results":[{"size":', "numCycle,collective,gpus\nx,y,z\n",
                                     '[{"numCycle":0}]', '{"header":{"id":1}}\n'])
def test_every_refusal_is_one_line_and_exit_2(tmp_path, content):
    path = tmp_path / "bad.json"
    path.write_text(content)
    proc = run_cli("import", path, "-o", tmp_path / "out.json")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr, proc.stderr


# ---- an imported -J -I pair is judged with the statistics of a native pair

def slower(text: str, factor: float) -> str:
    data = json.loads(text)
    for r in data["results"]:
        for key in ("out_of_place", "in_place"):
            r[key]["time"] *= factor
            r[key]["alg_bw"] /= factor
            r[key]["bus_bw"] /= factor
            per = r[key + "_per_iter"]
            per["times_us"] = [t * factor for t in per["times_us"]]
            per["per_process_max_times_us"] = [[t * factor for t in row] for row in per["per_process_max_times_us"]]
    return json.dumps(data)


def native(run):
    """The same rounds as hccl-bench's own rows: a rank x round matrix, K = 1."""
    rows = [CollectiveRow(backend=c.row.backend, algo="default", op=c.row.op, dtype=c.row.dtype, redop=c.row.redop,
                          inplace=c.row.inplace, nranks=c.row.nranks, bytes=c.size, round_ns_per_rank=c.row.round_ns_per_rank,
                          iters_per_round=1) for c in run.cells.values()]
    return run_from_rows(rows, "", "native", RunMeta())


def test_an_imported_per_iteration_pair_compares_like_a_native_pair(tmp_path):
    name = "nccl_tests_2.19.2_v2_I_2x8.json"
    paths = []
    for side, factor in (("base", 1.0), ("cand", 1.25)):
        out = tmp_path / f"{side}.json"
        source = edited(tmp_path, name, lambda t, f=factor: slower(t, f))
        out.write_text(json.dumps(one(source)))
        paths.append(out)
    base, cand = load(paths[0]), load(paths[1])
    imported, own = compare(base, cand), compare(native(base), native(cand))
    assert len(imported.cells) == len(own.cells) == 16
    for a, b in zip(imported.cells, own.cells):
        assert (a.samples, a.n_base, a.n_cand) == (b.samples, b.n_base, b.n_cand) == ("rounds", 20, 20)
        assert (a.ratio, a.low, a.high, a.p) == pytest.approx((b.ratio, b.low, b.high, b.p))
        assert a.ratio == pytest.approx(1.25, rel=1e-3) and a.outcome == b.outcome


# ---- a -J file the writer closed after the run failed (jsonOutputFinalize: no footer, no result) says FAILED

@pytest.mark.parametrize("name, stage", [
    ("nccl_tests_2.19.6_v3_died_in_config_2x8.json", "inside 'config', before its devices (e.g. 'Invalid number of GPUs')"),
    ("nccl_tests_2.19.6_v3_died_in_first_size_2x8.json", "inside its first size (1024 B)")])
def test_a_J_file_closed_after_a_failure_says_the_run_failed(tmp_path, name, stage):
    with pytest.raises(RunFailed) as err:
        import_runs(DATA / name)
    assert str(err.value) == (f"{DATA / name}: the run FAILED before its first result: nccl-tests closed its -J file {stage}; "
                              "the error line is in the run's output, not in the -J file")
    proc = run_cli("import", DATA / name, "-o", tmp_path / "out.json")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and "FAILED" in proc.stderr, proc.stderr


def test_rccl_reporter_json_lines_are_the_older_writers_records():
    """The older Reporter::addResult wrote each record as it came, "name" first and no numCycle, one
    a line and no list around them (ROCm/rccl-tests src/common.cu); writeFile's list puts numCycle first."""
    first = (DATA / "rccl_tests_Z_json_lines.json").read_text().splitlines()[0]
    assert first.startswith('{"name":"AllReduce", "nodes":2, "ranks":16,') and '"numCycle"' not in first
    assert one(DATA / "rccl_tests_Z_json_lines.json")["hccl_bench"]["format"] == "rccl-tests-reporter-jsonl"


def test_rccl_reporter_records_with_sorted_keys_read_like_the_writer_s_own():
    """The CSV's records as JSON lines with their keys sorted (nlohmann::json's default): "#wrong"
    first, the CSV header's names and case; read by key, they give the CSV's cells exactly."""
    name = "rccl_tests_Z_json_lines_sorted_keys.json"
    assert (DATA / name).read_text().startswith('{"#wrong":"0","algbw":')
    def cells(file):
        return {(i["bytes"], i["inplace"]): (i["time_us"], i["wrong"], i["dtype"], i["redop"], i["nranks"])
                for i in infos(one(DATA / file))}
    sorted_keys, csv = cells(name), cells("rccl_tests_Z_mpi.csv")
    assert sorted_keys == csv and len(csv) == 16
    assert sorted_keys[(4096, False)][1] is None and sorted_keys[(8192, False)] == (csv[(8192, False)][0], 0, "float32",
                                                                                    "sum", 16)
