"""OSU micro-benchmarks output (tests/data/importers/osu_*, SOURCES.md): published files, read for
op, size, time, ranks and datatype; faults made from them at test time (a cut, warnings mid-table)."""
from pathlib import Path

import pytest

from reports.importers import import_runs
from reports.run_failures import RunFailed
from schema.results import ResultError
from tests.conftest import run_cli

DATA = Path(__file__).parent / "data" / "importers"
CPU_5 = DATA / "osu_allreduce_v5.6.2_alaska_no_ranks.txt"
ALLTOALL_5 = DATA / "osu_alltoall_v5.6.2_alaska_no_ranks.txt"
FULL_71 = DATA / "osu_allreduce_v7.1_full_float_8ranks.txt"
NCCL_CUDA = DATA / "osu_nccl_cuda_v7.5_a100_8_and_16_gpus.txt"
UCC_LOG = DATA / "osu_mpi_cuda_alltoall_v7.0_ucc_log_lines.txt"


def cells(data) -> dict[int, dict]:
    return {b["extra_info"]["bytes"]: b["extra_info"] for b in data["benchmarks"]}


def rows_of(path: Path) -> dict[int, list[float]]:
    """The file's own table, read here independently: size -> the numbers after it."""
    out = {}
    for line in path.read_text().splitlines():
        tokens = line.split()
        if tokens and tokens[0].isdigit() and len(tokens) >= 2 and tokens[1].replace(".", "", 1).isdigit():
            out[int(tokens[0])] = [float(t) for t in tokens[1:]]
    return out


def test_a_cpu_allreduce_log_imports_every_size_at_its_avg_latency():
    (data,) = import_runs(CPU_5, nranks=64)
    got, table = cells(data), rows_of(CPU_5)
    assert sorted(got) == sorted(table) and len(got) == 19
    for size, (avg,) in table.items():
        info = got[size]
        assert info["time_us"] == avg and info["op"] == "all_reduce" and info["nranks"] == 64
        assert info["redop"] == "sum" and info["dtype"] == "float32" and info["count"] == size // 4
    meta = data["hccl_bench"]
    assert meta["format"] == "osu-text" and meta["provenance"]["imported"]["version"] == "5.6.2"
    assert any("float32 assumed" in w for w in meta["warnings"])       # not printed before 7.1: said, not silent


def test_allgather_and_alltoall_sizes_are_per_peer_so_the_cell_holds_size_times_ranks():
    (data,) = import_runs(ALLTOALL_5, nranks=64)
    table = rows_of(ALLTOALL_5)
    got = {i["imported"]["osu_size"]: i for i in cells(data).values()}
    assert set(got) == set(table)
    for size, (avg,) in table.items():
        assert got[size]["bytes"] == size * 64 and got[size]["time_us"] == avg and got[size]["op"] == "all_to_all"
        assert got[size]["dtype"] == "int8" and got[size]["redop"] == "none"


def test_full_stats_keep_min_max_and_iterations_and_the_printed_datatype():
    (data,) = import_runs(FULL_71, nranks=8)
    table, got = rows_of(FULL_71), cells(data)
    for size, (avg, lo, hi, iters) in table.items():
        info = got[size]
        assert info["time_us"] == avg and info["imported"]["min_latency_us"] == lo
        assert info["imported"]["max_latency_us"] == hi and info["imported"]["iterations"] == iters
        assert info["dtype"] == "float32"                              # "# Datatype: MPI_FLOAT."
    assert not data["hccl_bench"]["warnings"]
    assert import_runs(FULL_71, nranks=8, dtype="int32")[0]["benchmarks"][0]["extra_info"]["dtype"] == "float32"


def test_gpu_tests_take_their_ranks_from_the_launcher_and_leave_point_to_point_out():
    runs = import_runs(NCCL_CUDA)
    assert [cells(r)[1073741824]["nranks"] for r in runs] == [8, 16]          # mpirun -n 8, then -n 16
    assert [cells(r)[1073741824]["time_us"] for r in runs] == [8955.18, 13482.19]
    assert {cells(r)[1073741824]["backend"] for r in runs} == {"osu-nccl"}
    assert runs[0]["hccl_bench"]["provenance"]["imported"]["device"] == "CUDA"
    assert any("OSU MPI-CUDA Latency Test" in w for w in runs[0]["hccl_bench"]["warnings"])   # pt2pt: named, left out
    again = import_runs(NCCL_CUDA, nranks=4)
    assert [r["benchmarks"][0]["extra_info"]["nranks"] for r in again] == [8, 16]
    assert any("--nranks 4 ignored" in w for w in again[0]["hccl_bench"]["warnings"])


def test_library_log_lines_between_header_and_rows_are_skipped():
    (data,) = import_runs(UCC_LOG, nranks=4)
    (info,) = cells(data).values()
    assert info["imported"]["osu_size"] == 1048576 and info["bytes"] == 1048576 * 4 and info["time_us"] == 2586333.78


def test_warnings_mid_table_are_skipped_and_every_row_kept(tmp_path):
    """MVAPICH2's registration-cache warnings land between rows; the UCC log lines of the ucc sample
    are put between every row of the full-stats table."""
    noise = [line for line in UCC_LOG.read_text().splitlines() if "coll_ucc" in line][:2]
    lines = []
    for line in FULL_71.read_text().splitlines():
        lines.append(line)
        if line[:1].isdigit():
            lines += noise
    noisy = tmp_path / "noisy.txt"
    noisy.write_text("\n".join(lines) + "\n")
    def figures(path):
        return {size: (i["time_us"], i["imported"]["min_latency_us"], i["imported"]["max_latency_us"])
                for size, i in cells(import_runs(path, nranks=8)[0]).items()}
    assert figures(noisy) == figures(FULL_71) and len(figures(noisy)) == 19


def test_a_log_that_names_no_ranks_is_refused_in_one_line_asking_for_nranks(tmp_path):
    with pytest.raises(ResultError, match="pass --nranks N"):
        import_runs(CPU_5)
    proc = run_cli("import", CPU_5, "-o", tmp_path / "out.json")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip()) < 200 and not (tmp_path / "out.json").exists()


def test_a_file_cut_mid_row_keeps_its_rows_and_says_where(tmp_path):
    text = FULL_71.read_text()
    cut = tmp_path / "cut.txt"
    cut.write_text(text[:text.index("116.49") + 6])                   # inside the 32768 row
    (data,) = import_runs(cut, nranks=8)
    assert sorted(cells(data)) == [s for s in sorted(rows_of(FULL_71)) if s < 32768]
    assert not data["hccl_bench"]["complete"] and "row cut off (2 of 5 columns)" in data["hccl_bench"]["interrupted"]


def test_a_run_that_died_before_its_rows_says_failed_and_after_them_keeps_them(tmp_path):
    died = "MPI_ABORT was invoked on rank 3 in communicator MPI_COMM_WORLD"
    head = FULL_71.read_text().split("4    ")[0]
    early = tmp_path / "early.txt"
    early.write_text(head + died + "\n")
    with pytest.raises(RunFailed, match="FAILED before its first result row: line 5: MPI_ABORT was invoked on rank 3"):
        import_runs(early, nranks=8)
    late = tmp_path / "late.txt"
    late.write_text(FULL_71.read_text() + died + "\n")
    (data,) = import_runs(late, nranks=8)
    assert len(data["benchmarks"]) == 19 and "MPI_ABORT" in data["hccl_bench"]["failed"]


def test_only_point_to_point_tests_are_refused_saying_what_was_found(tmp_path):
    pt2pt = tmp_path / "latency.txt"
    pt2pt.write_text(NCCL_CUDA.read_text().split("$\n$ module load nvhpc openmpi omb")[0])
    proc = run_cli("import", pt2pt)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "OSU MPI-CUDA Latency Test v7.5: no collective test hccl-bench imports" in proc.stderr


def test_a_file_cut_after_a_row_s_size_says_so(tmp_path):
    text = FULL_71.read_text()
    cut = tmp_path / "cut.txt"
    cut.write_text(text[:text.index("1048576 ") + 7])                 # only the last row's size was written
    (data,) = import_runs(cut, nranks=8)
    assert len(data["benchmarks"]) == 18 and "row cut off (1 of 5 columns)" in data["hccl_bench"]["interrupted"]
