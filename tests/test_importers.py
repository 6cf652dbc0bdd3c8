"""Importers on real nccl-tests and hccl_test outputs (tests/data/importers/SOURCES.md)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from reports.cells import ResultError
from reports.importers import import_file
from tests.conftest import ROOT

DATA = Path(__file__).parent / "data" / "importers"


def cells(data, inplace=False):
    return {b["extra_info"]["bytes"]: b["extra_info"] for b in data["benchmarks"] if b["extra_info"]["inplace"] == inplace}


def test_nccl_tests_old_header_generation():
    data = import_file(DATA / "nccl_tests_dgx1_error_header.txt", op="all_reduce")
    assert data["hccl_bench"]["format"] == "nccl-tests-text"
    oop, ip = cells(data), cells(data, True)
    assert len(oop) == len(ip) == 30 and min(oop) == 8 and max(oop) == 4294967296
    row = oop[1048576]
    assert row["nranks"] == 16 and row["time_us"] == 127.9 and row["header"].endswith("busbw_2 error_2")  # 16 from busbw/algbw
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
    assert r["reported_algbw"] == 0.00998 and r["algbw_gbps"] == pytest.approx(8192 / 764.55e-6 / 1e9)


def test_hccl_test_binary_aveg_time_header_and_per_rank_rows():
    one = cells(import_file(DATA / "hccl_test_aveg_time.txt"))[2097152]
    assert one["time_column"] == "aveg_time(us)" and one["nranks"] == 16 and one["wrong"] == 0
    both = cells(import_file(DATA / "hccl_test_aveg_time_per_rank_rows.txt", op="all_reduce", nranks=2, dtype="float32"))
    # hccl_test prints its table on the root rank only: a size seen twice is a repeated run, two samples
    assert both[1073741824]["time_us"] == 5500.0 and both[1073741824]["repeats"] == 2


def test_missing_facts_ask_for_the_flag():
    with pytest.raises(ResultError, match="cannot tell the collective from the log; pass --op"):
        import_file(DATA / "nccl_tests_dgx1_error_header.txt")
    with pytest.raises(ResultError, match="pass --nranks"):
        import_file(DATA / "hccl_test_aveg_time_per_rank_rows.txt", op="all_reduce")


@pytest.mark.parametrize("name, flags", [("nccl_tests_dgx1_error_header.txt", ["--op", "all_reduce"]),
                                         ("nccl_tests_h100x16.json", []), ("hccl_test_doc_avg_time.txt", [])])
def test_an_imported_log_compared_with_itself_flags_nothing(tmp_path, name, flags):
    out = tmp_path / "imported.json"
    cli = [sys.executable, "-m", "harness.cli"]
    subprocess.run([*cli, "import", str(DATA / name), "-o", str(out), *flags], cwd=ROOT, check=True, capture_output=True)
    proc = subprocess.run([*cli, "compare", str(out), str(out)], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert " 0 regression, 0 improvement" in proc.stdout and "inconclusive" in proc.stdout
    assert json.loads(out.read_text())["benchmarks"]
