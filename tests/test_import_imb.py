"""IMB-MPI1 output (tests/data/importers/imb_*, SOURCES.md): published runs read per benchmark and
process count; faults made from them at test time (a cut, a dead job)."""
from pathlib import Path

import pytest

from reports.importers import import_runs
from reports.run_failures import RunFailed
from tests.conftest import run_cli

DATA = Path(__file__).parent / "data" / "importers"
OCI = DATA / "imb_mpi1_oci_alltoall_pingpong_allreduce.txt"
INTEL = DATA / "imb_mpi1_2021.2_intel_mpi_allreduce_144.txt"


def cells(data) -> dict[int, dict]:
    return {b["extra_info"]["bytes"]: b["extra_info"] for b in data["benchmarks"]}


def test_each_collective_block_is_a_result_with_its_op_processes_and_t_avg():
    alltoall, allreduce = import_runs(OCI)
    (a2a,) = cells(alltoall).values()
    assert a2a["op"] == "all_to_all" and a2a["nranks"] == 36 and a2a["time_us"] == 370325.94
    assert a2a["bytes"] == 33554432 * 36 and a2a["imported"]["imb_bytes"] == 33554432   # per peer: x processes
    assert a2a["dtype"] == "uint8" and a2a["redop"] == "none"                            # MPI_BYTE
    (ar,) = cells(allreduce).values()
    assert ar["op"] == "all_reduce" and ar["nranks"] == 144 and ar["bytes"] == 268435456 and ar["time_us"] == 422165.51
    assert ar["dtype"] == "float32" and ar["redop"] == "sum" and ar["count"] == 268435456 // 4   # for reductions
    assert (ar["imported"]["t_min_us"], ar["imported"]["t_max_us"], ar["imported"]["repetitions"]) == (403874.11,
                                                                                                      433311.53, 1)
    assert any("IMB PingPong" in w for w in alltoall["hccl_bench"]["warnings"])           # named, left out
    assert [r["hccl_bench"]["complete"] for r in (alltoall, allreduce)] == [True, True]
    assert allreduce["hccl_bench"]["provenance"]["imported"]["version"] == "2021.10"


def test_every_size_of_a_block_and_the_zero_byte_row_left_out():
    (data,) = import_runs(INTEL, nranks=144)
    assert {b: i["time_us"] for b, i in cells(data).items()} == {134217728: 105716.44, 268435456: 205992.71}
    assert data["hccl_bench"]["format"] == "imb-mpi1-text" and not data["hccl_bench"]["warnings"]


def test_a_run_cut_before_its_finalize_line_keeps_its_rows_and_says_so(tmp_path):
    text = INTEL.read_text()
    cut = tmp_path / "cut.txt"
    cut.write_text(text[:text.index("    268435456")])
    (data,) = import_runs(cut)
    assert list(cells(data)) == [134217728] and not data["hccl_bench"]["complete"]
    assert "without 'All processes entering MPI_Finalize'" in data["hccl_bench"]["interrupted"]


def test_a_job_that_died_before_its_rows_is_refused_as_failed_in_one_line(tmp_path):
    text = INTEL.read_text()
    dead = tmp_path / "dead.txt"
    dead.write_text(text[:text.index("            0         1000")]
                    + "Abort(805421583) on node 17 (rank 17 in comm 0): Fatal error in PMPI_Allreduce: Other MPI error\n")
    with pytest.raises(RunFailed, match="FAILED before its first result row"):
        import_runs(dead)
    proc = run_cli("import", dead)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def test_a_file_of_only_point_to_point_blocks_is_refused_naming_them(tmp_path):
    text = OCI.read_text()
    start = text.index("$ mpirun -n 2 -N 1")
    pingpong = tmp_path / "pingpong.txt"
    pingpong.write_text(text[start:text.index("$\n$ module load openmpi", start)])
    proc = run_cli("import", pingpong)
    assert proc.returncode == 2 and "IMB output with PingPong: no collective table" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_a_run_without_its_finalize_line_before_the_next_run_is_cut_and_the_next_complete(tmp_path):
    text = OCI.read_text()
    first_end = text.index("# All processes entering MPI_Finalize")
    joined = tmp_path / "joined.txt"
    joined.write_text(text[:first_end] + text[text.index("$ module load openmpi", first_end):])
    alltoall, allreduce = import_runs(joined)
    assert not alltoall["hccl_bench"]["complete"] and "MPI_Finalize" in alltoall["hccl_bench"]["interrupted"]
    assert allreduce["hccl_bench"]["complete"] and len(alltoall["benchmarks"]) == 1


def test_imb_3_banner_and_its_blocks_read_alike(tmp_path):
    old = tmp_path / "imb3.txt"
    old.write_text(INTEL.read_text().replace("#    Intel(R) MPI Benchmarks 2021.2, MPI-1 part",
                                             "#    Intel (R) MPI Benchmark Suite V3.2, MPI-1 part"))
    (data,) = import_runs(old)
    assert data["hccl_bench"]["provenance"]["imported"]["version"] == "3.2" and len(data["benchmarks"]) == 2


def test_osu_imb_and_nccl_tests_runs_in_one_log_each_read_in_file_order(tmp_path):
    osu = DATA / "osu_nccl_cuda_v7.5_a100_8_and_16_gpus.txt"
    nccl = DATA / "nccl_tests_2x8_two_cases.txt"
    log = tmp_path / "acceptance.log"
    log.write_text(INTEL.read_text() + osu.read_text() + nccl.read_text())
    runs = import_runs(log)
    assert [r["hccl_bench"]["format"] for r in runs] == ["imb-mpi1-text", "osu-text", "osu-text",
                                                         "nccl-tests-text", "nccl-tests-text"]
    alone = [*import_runs(INTEL), *import_runs(osu), *import_runs(nccl)]
    assert [[b["extra_info"]["time_us"] for b in r["benchmarks"]] for r in runs] == [
        [b["extra_info"]["time_us"] for b in r["benchmarks"]] for r in alone]
