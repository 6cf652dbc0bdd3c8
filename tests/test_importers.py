"""Importers on real nccl-tests and hccl_test outputs (tests/data/importers/SOURCES.md)."""
import json
import re
from pathlib import Path

import pytest

from reports.importers import import_file
from reports.run_failures import RunFailed
from schema.results import ResultError
from tests.conftest import run_cli

DATA = Path(__file__).parent / "data" / "importers"


def cells(data, inplace=False):
    return {b["extra_info"]["bytes"]: b["extra_info"] for b in data["benchmarks"] if b["extra_info"]["inplace"] == inplace}


def test_nccl_tests_old_header_generation():
    data = import_file(DATA / "nccl_tests_dgx1_error_header.txt", op="all_reduce")
    assert data["hccl_bench"]["format"] == "nccl-tests-text"
    oop, ip = cells(data), cells(data, True)
    assert len(oop) == len(ip) == 30 and min(oop) == 8 and max(oop) == 4294967296
    row = oop[1048576]
    assert row["nranks"] == 16 and row["time_us"] == 127.9   # 16 from busbw/algbw
    assert row["imported"]["header"].endswith("busbw_2 error_2")
    assert row["algbw_gbps"] == pytest.approx(8.20, abs=0.01) and row["busbw_gbps"] == pytest.approx(15.38, abs=0.01)
    assert ip[4294967296]["time_us"] == 167543


def test_nccl_tests_with_mpirun_prefixes_and_stray_log_lines():
    data = import_file(DATA / "nccl_tests_efa_mpirun_prefixed.txt", op="all_reduce")
    oop = cells(data)
    assert 0 not in oop and min(oop) == 4 and max(oop) == 1073741824 and len(oop) == 29
    assert oop[262144]["nranks"] == 2 and oop[262144]["time_us"] == 195.0 and oop[262144]["wrong"] == 0


def test_nccl_tests_json_output():
    data = import_file(DATA / "nccl_tests_h100x16.json")
    oop = cells(data)
    assert data["hccl_bench"]["format"] == "nccl-tests-json"
    assert oop[134217728]["op"] == "all_reduce" and oop[134217728]["nranks"] == 16
    assert oop[134217728]["busbw_gbps"] == pytest.approx(152.32, abs=0.01)


def test_hccl_test_documented_avg_time_header():
    data = import_file(DATA / "hccl_test_doc_avg_time.txt")
    rows = cells(data)
    assert data["hccl_bench"]["format"] == "hccl_test" and len(rows) == 14
    r = rows[8192]
    assert (r["op"], r["nranks"], r["dtype"], r["time_us"]) == ("all_reduce", 8, "float32", 764.55)
    # the documented sample prints GiB/s: 8192 B / 764.55 us = 0.00998 GiB/s = 0.01071 GB/s
    assert r["imported"]["reported_algbw"] == 0.00998 and r["algbw_gbps"] == pytest.approx(8192 / 764.55e-6 / 1e9)


def test_hccl_test_binary_aveg_time_header_and_per_rank_rows():
    one = cells(import_file(DATA / "hccl_test_aveg_time.txt"))[2097152]
    assert one["imported"]["time_column"] == "aveg_time(us)" and one["nranks"] == 16 and one["wrong"] == 0
    both = cells(import_file(DATA / "hccl_test_aveg_time_per_rank_rows.txt", op="all_reduce", nranks=2, dtype="float32"))
    # hccl_test prints its table on the root rank only: a size seen twice is a repeated run, two samples
    assert both[1073741824]["time_us"] == 5500.0 and both[1073741824]["imported"]["repeats"] == 2


def test_missing_facts_ask_for_the_flag():
    with pytest.raises(ResultError, match="cannot tell the collective from the log; pass --op"):
        import_file(DATA / "nccl_tests_dgx1_error_header.txt")
    with pytest.raises(ResultError, match="pass --nranks"):
        import_file(DATA / "hccl_test_aveg_time_per_rank_rows.txt", op="all_reduce")


@pytest.mark.parametrize("name, flags", [("nccl_tests_dgx1_error_header.txt", ["--op", "all_reduce"]),
                                         ("nccl_tests_h100x16.json", []), ("hccl_test_doc_avg_time.txt", [])])
def test_an_imported_log_compared_with_itself_flags_nothing(tmp_path, name, flags):
    out = tmp_path / "imported.json"
    assert run_cli("import", DATA / name, "-o", out, *flags).returncode == 0
    proc = run_cli("compare", out, out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert " 0 regression, 0 improvement" in proc.stdout and "inconclusive" in proc.stdout
    assert json.loads(out.read_text())["benchmarks"]


# ---- real logs with several runs, several ops, old headers, failures; and the faults real logs show,
# made from those logs at run time (a cut, a prefix, a lost section) so every number stays a real one

TWO_CASES = DATA / "nccl_tests_2x8_two_cases.txt"          # 2 runs x 16 ranks on 2 hosts, -npernode 8
THREE_OPS = DATA / "nccl_tests_dgx2_three_ops_old_headers.txt"   # all_gather (FAILED), all_reduce, broadcast (root)


def runs_of(path, **kw):
    from reports.importers import import_runs
    return import_runs(path, **kw)


def derived(tmp_path, source, edit, name="derived.txt"):
    path = tmp_path / name
    path.write_text(edit(source.read_text()))
    return path


def test_several_runs_in_one_log_are_several_results():
    runs = runs_of(TWO_CASES)
    assert len(runs) == 2
    for run in runs:
        meta = run["hccl_bench"]
        assert {b["extra_info"]["nranks"] for b in run["benchmarks"]} == {16}
        assert meta["groups"]["imported"]["hosts"] == {"R6KD-CX8aaS-GPU-14": 8, "R6KD-CX8aaS-GPU-15": 8}
        assert meta["groups"]["imported"]["devices"] == ["NVIDIA Graphics Device"] and meta["complete"] and not meta["failed"]
    assert [r["hccl_bench"]["imported_from"]["lines"][0] for r in runs] == [22, 97]
    first = cells(runs[0])[4194304]
    assert first["time_us"] == 638.57 and first["imported"]["printed_busbw"] == 12.32
    assert first["busbw_gbps"] == pytest.approx(12.32, abs=0.01)


def test_several_ops_and_old_headers_in_one_log():
    runs = runs_of(THREE_OPS)
    assert [r["benchmarks"][0]["extra_info"]["op"] for r in runs] == ["all_gather", "all_reduce", "broadcast"]
    assert all(b["extra_info"]["nranks"] == 12 for r in runs for b in r["benchmarks"])
    gather, reduce_, bcast = runs
    assert gather["hccl_bench"]["failed"] == "the log says: Out of bounds values : 4 FAILED"
    assert reduce_["hccl_bench"]["failed"] is None and bcast["hccl_bench"]["failed"] is None
    assert cells(bcast)[8589934592]["time_us"] == 70321 and cells(bcast)[8589934592]["redop"] == "none"
    assert cells(gather)[48]["wrong"] is None     # the old `error` column is a max error, not a count


def test_import_cli_writes_one_file_per_run_and_compare_reads_them(tmp_path):
    out = tmp_path / "campaign.json"
    proc = run_cli("import", THREE_OPS, TWO_CASES, "-o", out)
    assert proc.returncode == 0, proc.stderr
    written = sorted(p.name for p in tmp_path.iterdir())
    assert written == ["campaign.2.json", "campaign.3.json", "campaign.4.json", "campaign.5.json", "campaign.json"]
    assert "marked failed: the log says: Out of bounds values : 4 FAILED" in proc.stderr
    cmp = run_cli("compare", tmp_path / "campaign.4.json", tmp_path / "campaign.5.json")
    undecided = int(re.search(r"(\d+) inconclusive", cmp.stdout).group(1))   # one sample a side: often undecided
    assert cmp.returncode == (6 if undecided else 0) and "48 cells" in cmp.stdout, cmp.stdout + cmp.stderr
    assert (undecided == 0) == ("INCONCLUSIVE" not in cmp.stdout)
    table = run_cli("table", out)
    assert table.returncode == 0 and " N/A" in table.stdout and "marked failed" in table.stderr


def test_timestamp_prefixes_are_read_through(tmp_path):
    stamped = derived(tmp_path, TWO_CASES, lambda t: "".join(f"2026-04-19T11:20:{i % 60:02d}.123456789Z {line}\n"
                                                             for i, line in enumerate(t.splitlines())))
    assert [len(r["benchmarks"]) for r in runs_of(stamped)] == [48, 48]


def test_a_run_cut_off_mid_row_keeps_its_rows_and_says_where(tmp_path):
    text = TWO_CASES.read_text()
    cut = text.index("  3610.92")      # in the middle of the second run's 8th row
    runs = runs_of(derived(tmp_path, TWO_CASES, lambda t: t[:cut]))
    assert len(runs) == 2 and runs[0]["hccl_bench"]["complete"]
    last = runs[1]["hccl_bench"]
    assert not last["complete"] and last["interrupted"] == "line 128: row cut off (9 of 13 columns), ignored"
    assert len(runs[1]["benchmarks"]) == 7 * 2 and 131072 not in cells(runs[1])


def test_a_run_that_crashed_after_a_row_keeps_the_rows_before(tmp_path):
    crashed = derived(tmp_path, TWO_CASES, lambda t: t[:t.index("# Out of bounds values : 0 OK")])
    run = runs_of(crashed)[0]
    assert len(run["benchmarks"]) == 48 and not run["hccl_bench"]["complete"]
    assert "ended without its 'Out of bounds values' line" in run["hccl_bench"]["interrupted"]


def test_wrong_elements_mark_the_run_failed(tmp_path):
    row = "     1048576        262144     float     sum      -1   196.78    5.33    9.99       0"
    bad = derived(tmp_path, TWO_CASES, lambda t: t.replace(row, row[:-1] + "1024", 1))
    run = runs_of(bad)[0]
    assert run["hccl_bench"]["failed"].endswith("#wrong 1024 at 1048576 B") and cells(run)[1048576]["wrong"] == 1024


def test_rank_count_without_rank_lines_is_inferred_with_its_ambiguity_named(tmp_path):
    bare = derived(tmp_path, TWO_CASES, lambda t: "\n".join(line for line in t.splitlines() if "Rank " not in line))
    run = runs_of(bare)[0]
    assert run["benchmarks"][0]["extra_info"]["nranks"] == 16
    assert any(w.startswith("rank count 16 inferred from busbw/algbw on ") and "(only 16 fits" in w
               for w in run["hccl_bench"]["warnings"])
    with pytest.raises(ResultError, match=r"line 35: printed busbw 0.74 GB/s but 32768 B in 83.33 us gives 0.69 GB/s "
                                          r"for all_reduce on 8 ranks"):
        runs_of(bare, nranks=8)


def test_the_log_wins_over_flags_that_contradict_it():
    run = runs_of(TWO_CASES, nranks=8, op="all_gather")[0]
    assert run["benchmarks"][0]["extra_info"]["nranks"] == 16 and run["benchmarks"][0]["extra_info"]["op"] == "all_reduce"
    assert set(run["hccl_bench"]["warnings"]) == {"--nranks 8 ignored: the log says 16 ranks",
                                                  "--op all_gather ignored: the log says all_reduce"}


@pytest.mark.parametrize("name, op", [("all_reduce_perf_mpi", "all_reduce"), ("nccl_alltoall_perf", "all_to_all"),
                                      ("rccl_reduce_scatter_perf", "reduce_scatter"), ("alltoall_perf_mpi", "all_to_all")])
def test_binary_names_of_mpi_builds_and_forks(tmp_path, name, op):
    renamed = derived(tmp_path, TWO_CASES, lambda t: t.replace("all_reduce_perf", name))
    if op != "all_reduce":   # the rows are an all_reduce's: the cross-check must catch the wrong op
        with pytest.raises(ResultError, match="rank count or the op is wrong|disagree"):
            runs_of(renamed)
    else:
        assert runs_of(renamed)[0]["benchmarks"][0]["extra_info"]["op"] == op


def test_a_log_of_other_devices_is_not_compared_without_force(tmp_path):
    other = derived(tmp_path, TWO_CASES, lambda t: t.replace("NVIDIA Graphics Device", "NVIDIA H100 80GB HBM3"))
    for source, out in ((TWO_CASES, tmp_path / "a.json"), (other, tmp_path / "b.json")):
        assert run_cli("import", source, "-o", out).returncode == 0
    proc = run_cli("compare", tmp_path / "a.json", tmp_path / "b.json")
    assert proc.returncode == 2
    assert "devices: baseline ['NVIDIA Graphics Device'] vs candidate ['NVIDIA H100 80GB HBM3']" in proc.stderr


def test_nccl_tests_json_counts_every_gpu_of_every_process(tmp_path):
    data = json.loads((DATA / "nccl_tests_h100x16.json").read_text())
    data["config"]["ngpus"] = 8
    data["config"]["devices"] = data["config"]["devices"][:2]    # 2 processes with -g 8: 16 ranks
    path = tmp_path / "g8.json"
    path.write_text(json.dumps(data))
    run = runs_of(path)[0]
    assert run["benchmarks"][0]["extra_info"]["nranks"] == 16


def test_hccl_test_failed_rows_and_counts(tmp_path):
    failed = derived(tmp_path, DATA / "hccl_test_doc_avg_time.txt", lambda t: t.replace("success", "failed", 1))
    run = runs_of(failed)[0]
    assert run["hccl_bench"]["failed"].startswith("line ") and "check_result failed" in run["hccl_bench"]["failed"]
    assert cells(run)[8192]["count"] == 8192 // 4


def test_hccl_test_a_non_root_ranks_failed_check_fails_the_run(tmp_path):
    """hccl_test's root prints only its own check in the table; another rank that failed prints
    `local rank_id N, check result failed, SIZE | TIME | BW | failed` itself (oam-tools
    print_execution_time). The run is failed and that size counts the rank as wrong."""
    line = "local rank_id 3, check result failed, 16384             | 858.80         | 0.01777              | failed\n"
    failed = derived(tmp_path, DATA / "hccl_test_doc_avg_time.txt", lambda t: t.replace("16384 ", line + "16384 ", 1))
    run = runs_of(failed)[0]
    assert "rank 3's check failed at 16384 B" in run["hccl_bench"]["failed"]
    assert cells(run)[16384]["wrong"] == 1 and cells(run)[8192]["wrong"] == 0 and len(run["benchmarks"]) == 14


def test_hccl_test_command_line_names_the_reduction_and_not_its_iterations_as_ranks(tmp_path):
    """-o is the reduction; hccl_test's own -n is its iteration count, not mpirun's rank count."""
    cmd = "mpirun -n 8 ./bin/all_reduce_test -b 8K -e 64M -f 2 -d fp32 -o sum -p 8"
    maxed = derived(tmp_path, DATA / "hccl_test_doc_avg_time.txt", lambda t: t.replace(cmd, cmd.replace("-o sum", "-o max")))
    assert {c["redop"] for c in cells(runs_of(maxed)[0]).values()} == {"max"}
    hostfile = cmd.replace("mpirun -n 8", "mpirun -f hostfile").replace("-p 8", "-n 20 -p 8")
    iters = derived(tmp_path, DATA / "hccl_test_doc_avg_time.txt", lambda t: t.replace(cmd, hostfile), name="iters.txt")
    assert {c["nranks"] for c in cells(runs_of(iters)[0]).values()} == {8}
    bad = derived(tmp_path, DATA / "hccl_test_doc_avg_time.txt", lambda t: t.replace("-o sum", "-o avg"), name="bad.txt")
    proc = run_cli("import", bad)
    assert proc.returncode == 2 and "hccl_test -o 'avg'" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("content", ["", "# nThread 1 nGpus 1\n#  size count type\n  12", "\x00\xff" * 100,
                                     "{\"results\": 5}", "{" * 50_000, "data_size(Bytes): | aveg_time(us):\n8 | N"])
def test_no_input_makes_import_print_a_traceback(tmp_path, content):
    path = tmp_path / "junk.log"
    path.write_text(content, errors="surrogateescape") if isinstance(content, str) else None
    proc = run_cli("import", path, "--op", "all_reduce", "--nranks", "2", "--dtype", "float32")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_concatenated_hccl_test_outputs_split_into_their_runs(tmp_path):
    """Two real hccl_test outputs one after the other (a campaign script's log): two runs, each with
    its own op, rank count and rows."""
    both = tmp_path / "campaign.log"
    both.write_text((DATA / "hccl_test_doc_avg_time.txt").read_text()
                    + (DATA / "hccl_test_aveg_time.txt").read_text().replace("all_reduce_test", "reduce_scatter_test"))
    first, second = runs_of(both)
    assert (first["benchmarks"][0]["extra_info"]["op"], first["benchmarks"][0]["extra_info"]["nranks"]) == ("all_reduce", 8)
    info = second["benchmarks"][0]["extra_info"]
    assert (info["op"], info["nranks"]) == ("reduce_scatter", 16)
    assert len(first["benchmarks"]) == 14 and len(second["benchmarks"]) == 1


def test_rccl_tests_runs_with_their_own_ranks_hosts_and_devices():
    single, double = runs_of(DATA / "rccl_tests_mi300x_two_runs.txt")
    assert single["hccl_bench"]["groups"]["imported"]["nranks"] == 8
    assert double["hccl_bench"]["groups"]["imported"]["hosts"] == {"gpu-53": 8, "gpu-56": 8}
    assert single["hccl_bench"]["groups"]["imported"]["devices"] == ["AMD Instinct MI300X"]
    assert cells(double)[17179869184]["time_us"] == 90115 and not single["hccl_bench"]["warnings"]


def test_a_run_that_died_inside_its_first_row_is_refused_with_the_tools_error():
    with pytest.raises(RunFailed, match=r"the run FAILED before its first result row: line 27: node0: Test CUDA failure "
                                        r"common.cu:389 'an illegal memory access was encountered'$"):
        runs_of(DATA / "nccl_tests_alltoall_h800_crash.txt")


def test_without_rank_lines_the_launchers_own_count_is_used(tmp_path):
    """The rccl-tests log with its `# Rank` lines removed: each run's `mpirun -np N` (8, then 16)
    gives the rank count, with no ratio guess and no warning."""
    bare = derived(tmp_path, DATA / "rccl_tests_mi300x_two_runs.txt",
                   lambda t: "\n".join(line for line in t.splitlines() if "Rank " not in line))
    runs = runs_of(bare)
    assert [r["benchmarks"][0]["extra_info"]["nranks"] for r in runs] == [8, 16]
    assert [r["hccl_bench"]["warnings"] for r in runs] == [[], []]


# ---- a run that died says FAILED and quotes the tool's own error line (SOURCES.md: real logs)

@pytest.mark.parametrize("name, said", [
    ("nccl_tests_cuda_failure_before_rows.txt", "line 5: test: Test CUDA failure common.cu:941 'system not yet initialized'"),
    ("nccl_tests_mpirun_invalid_device_ordinal.txt",
     "line 5: majidnc24MPTXTH: Test CUDA failure common.cu:892 'invalid device ordinal'"),
    ("nccl_tests_mpirun_invalid_number_of_gpus.txt", "line 7: Invalid number of GPUs: 297 requested but only 8 were found."),
    ("nccl_tests_old_unhandled_system_error.txt", "line 6: NCCL failure common.cu:921 'unhandled system error'"),
    ("rccl_tests_mi210_nccl_failure.txt",
     "line 8: sharbox-ultra: Test NCCL failure common.cu:1285 'internal error - please report this issue to the NCCL "
     "developers'"),
    ("hccl_test_retcode_7.txt", "line 2: hccl interface return errreturn err ./common/src/hccl_test_common.cc:538, retcode: 7"),
])
def test_a_run_that_died_before_its_first_row_says_failed_with_its_error(name, said):
    with pytest.raises(RunFailed) as err:
        runs_of(DATA / name)
    assert str(err.value) == f"{DATA / name}: the run FAILED before its first result row: {said}"
    proc = run_cli("import", DATA / name)
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "FAILED" in proc.stderr and said in proc.stderr


# nccl-tests issue #322: the lines a run printed when NCCLCHECK failed after its rows (two of its ranks)
DIED_AFTER_ROWS = ("HCA-128: Test NCCL failure common.cu:1204 'unhandled cuda error (run with NCCL_DEBUG=INFO for details) / '\n"
                   " .. HCA-128 pid 757466: Test failure common.cu:915\n"
                   "HCA-108: Test NCCL failure common.cu:1204 'unhandled cuda error (run with NCCL_DEBUG=INFO for details) / '\n")


def test_a_run_that_died_after_its_rows_keeps_them_and_is_marked_failed(tmp_path):
    died = derived(tmp_path, TWO_CASES, lambda t: t.replace("# Out of bounds values : 0 OK\n", DIED_AFTER_ROWS, 1))
    first, second = runs_of(died)
    meta = first["hccl_bench"]
    assert len(first["benchmarks"]) == 48 and not meta["complete"]
    assert meta["failed"].endswith(": HCA-128: Test NCCL failure common.cu:1204 'unhandled cuda error (run with "
                                   "NCCL_DEBUG=INFO for details) / '")
    assert second["hccl_bench"]["failed"] is None and second["hccl_bench"]["complete"]


def test_an_error_after_a_runs_summary_stays_with_that_run(tmp_path):
    """nccl-tests tears its communicators down after '# Avg bus bandwidth': an error there is said
    with the run it followed, whose rows stand; the next run, clean, is not charged with it."""
    teardown = "HCA-128: Test NCCL failure common.cu:1100 'unhandled system error (run with NCCL_DEBUG=INFO for details) / '\n"
    both = derived(tmp_path, TWO_CASES, lambda t: t.replace("# Avg bus bandwidth    : 17.8413 \n",
                                                            "# Avg bus bandwidth    : 17.8413 \n" + teardown, 1))
    first, second = runs_of(both)
    assert first["hccl_bench"]["failed"] is None and len(first["benchmarks"]) == 48
    assert any("an error after its summary" in w and "common.cu:1100" in w for w in first["hccl_bench"]["warnings"])
    assert second["hccl_bench"]["failed"] is None and second["hccl_bench"]["complete"]


def test_a_later_run_that_died_before_its_rows_is_named_not_dropped(tmp_path):
    both = derived(tmp_path, TWO_CASES, lambda t: t + (DATA / "nccl_tests_cuda_failure_before_rows.txt").read_text())
    runs = runs_of(both)
    assert len(runs) == 2
    assert any("FAILED before its first result row" in w and "Test CUDA failure common.cu:941 'system not yet initialized'"
               in w for w in runs[1]["hccl_bench"]["warnings"])


# ---- rows split by NCCL's own log lines (NCCL_DEBUG=INFO with NCCL_DEBUG_SUBSYS=COLL or TUNING): nccl-tests
# prints a row in three printf calls without a newline (preamble, out-of-place, in-place) and NCCL's lines
# land between them, the first glued to the row's end. Lines quoted from NVIDIA/nccl#1453 (TUNING, under
# MPICH's "[0] " tag, as that log shows it) and NVIDIA/nccl#203 (COLL); the rows are TWO_CASES' own.
TUNING = "h100clust-worker-1:497888:497888 [0] NCCL INFO 4096 Bytes -> Algo 0 proto 0 time 25.874907"
COLL = ("gpu1:13135:13922 [0] NCCL INFO AllReduce: opCount 1a sendbuff 0x10048f82700 recvbuff 0x10048f82800 count 64 "
        "datatype 7 op 0 root 0 comm 0x7f0c741162f0 [nranks=2] stream 0x7f0c74002f00")
ROW = re.compile(r"^(\s*(?:\S+\s+){4}\S+)(\s+(?:\S+\s+){3}\S+)(\s+.*)$")


def split_rows(text: str, info: str, tag: str) -> str:
    out = []
    for line in text.splitlines():
        tokens = line.split()
        m = ROW.match(line) if len(tokens) == 13 and tokens[0].isdigit() else None
        if m is None:
            out.append(tag + line)
            continue
        pre, oop, ip = m.groups()
        out += [tag + pre + tag + info, tag + info, tag + oop + tag + info, tag + info, tag + ip]
    return "\n".join(out) + "\n"


@pytest.mark.parametrize("info, tag", [(COLL, ""), (TUNING, "[0] ")])
def test_rows_split_by_nccl_log_lines_are_joined_again(tmp_path, info, tag):
    split = derived(tmp_path, TWO_CASES, lambda t: split_rows(t, info, tag))
    assert f"-1{tag}{info}" in split.read_text()
    runs, plain = runs_of(split), runs_of(TWO_CASES)
    assert len(runs) == 2
    for got, want in zip(runs, plain):
        assert got["hccl_bench"]["complete"] and not got["hccl_bench"]["failed"]
        assert {k: v["time_us"] for k, v in cells(got).items()} == {k: v["time_us"] for k, v in cells(want).items()}
        assert {k: v["time_us"] for k, v in cells(got, True).items()} == {k: v["time_us"] for k, v in cells(want, True).items()}


# ---- old alltoall tables: no redop printed under a header that names one (nccl-tests src/alltoall.cu and
# common.cu at 119a0ec, v2.10-2.12: "%12li  %12li  %6s  %6s" with opName "", header without root; at
# 51af557, v2.13.0-2.13.1: "%12li  %12li  %8s  %6s  %6s" with opName "" and root -1), made from the
# published H20 rows (nccl-tests issue #314)

ALLTOALL = DATA / "nccl_tests_alltoall_h20_8gpu_first_rows.txt"


def v2_13_0(text: str) -> str:
    return text.replace("    none", " " * 8)


def v2_10(text: str) -> str:
    out = []
    for line in text.splitlines():
        tokens = line.split()
        if tokens[:1] == ["#"] and tokens[1:4] == ["size", "count", "type"]:
            line = "# %10s  %12s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s" % (  # noqa: UP031 (the writer's printf)
                "size", "count", "type", "redop", "time", "algbw", "busbw", "error", "time", "algbw", "busbw", "error")
        elif len(tokens) == 13 and tokens[0].isdigit():
            line = "%12s  %12s  %6s  %6s" % (tokens[0], tokens[1], tokens[2], "") + line[line.index(" -1") + 3:]  # noqa: UP031
        out.append(line)
    return "\n".join(out) + "\n"


@pytest.mark.parametrize("edit", [v2_13_0, v2_10])
def test_old_alltoall_tables_without_a_redop_import(tmp_path, edit):
    old = derived(tmp_path, ALLTOALL, edit)
    assert " none " not in old.read_text()
    run = runs_of(old)[0]
    want = runs_of(ALLTOALL)[0]
    assert {i["op"] for i in (b["extra_info"] for b in run["benchmarks"])} == {"all_to_all"}
    assert run["hccl_bench"]["groups"]["imported"]["nranks"] == 8 and len(run["benchmarks"]) == 6
    assert {k: v["time_us"] for k, v in cells(run).items()} == {1048576: 58.14, 2097152: 58.94, 4194304: 59.35}
    assert [b["extra_info"]["time_us"] for b in run["benchmarks"]] == [b["extra_info"]["time_us"] for b in want["benchmarks"]]
