"""Rank discovery across launchers and launcher templates."""
import sys

from harness.engine.launchers import from_template, validate_template
from harness.engine.worker import launcher_rank


def test_rank_from_each_launcher_family():
    assert launcher_rank({"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1"}) == (3, 8, 1)
    ompi = {"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "16", "OMPI_COMM_WORLD_LOCAL_RANK": "5"}
    assert launcher_rank(ompi) == (5, 16, 5)
    assert launcher_rank({"PMI_RANK": "2", "PMI_SIZE": "4", "MPI_LOCALRANKID": "0"}) == (2, 4, 0)
    assert launcher_rank({"SLURM_PROCID": "7", "SLURM_NTASKS": "8", "SLURM_LOCALID": "3"}) == (7, 8, 3)
    assert launcher_rank({}) == (0, 1, 0)
    # srun --mpi=pmi2 sets PMI_RANK/PMI_SIZE but not Hydra's MPI_LOCALRANKID: the local rank is Slurm's
    slurm = {"SLURM_PROCID": "5", "SLURM_NTASKS": "16", "SLURM_LOCALID": "5"}
    assert launcher_rank({"PMI_RANK": "5", "PMI_SIZE": "16", **slurm}) == (5, 16, 5)
    assert launcher_rank({"PMIX_RANK": "5", **slurm}) == (5, 16, 5)   # Slurm's pmix sets no PMIX_SIZE


def test_templates():
    assert validate_template("mpirun -np {nproc} -hostfile h") is None
    assert "{nproc}" in validate_template("mpirun -np 4")
    assert "placeholders" in validate_template("srun -n {nproc} {oops}")
    plan = from_template("torchrun --nproc-per-node {nproc} --no-python {cmd} --x", 4)
    assert plan.commands[0] == ["torchrun", "--nproc-per-node", "4", "--no-python", sys.executable, "-m",
                                "harness.engine.worker", "--x"]
    assert from_template("srun -n {nproc}", 2).commands[0][-2:] == ["-m", "harness.engine.worker"]


def test_a_side_b_rank_gets_its_stacks_path_and_unsets_but_the_cases_own_switch(tmp_path, monkeypatch):
    """Side B's ranks: the repository, then the PYTHONPATH its stack sets (not the driver's); what
    the stack unsets is gone; the case's forced algorithm wins over the stack's environment."""
    import os

    from harness.engine.groups import REPO_ROOT, WorkerGroup
    from schema.group_key import GroupKey
    monkeypatch.setenv("PYTHONPATH", "/opt/this-stack/site-packages")
    monkeypatch.setenv("HCCL_BENCH_GONE", "1")
    key = GroupKey("gloo", 2, env=(("HCCL_ALGO", "level0:NA;level1:ring"),), side="B",
                   side_env=(("HCCL_ALGO", None), ("HCCL_BENCH_GONE", None), ("PYTHONPATH", "/opt/previous/site-packages")))
    env = WorkerGroup(key, tmp_path)._rank_env("token", 1, 2)
    assert env["PYTHONPATH"] == os.pathsep.join([str(REPO_ROOT), "/opt/previous/site-packages"])
    assert "HCCL_BENCH_GONE" not in env and env["HCCL_ALGO"] == "level0:NA;level1:ring"


def test_an_mpich_rank_under_slurms_pmi2_takes_ofi_unless_told():
    """srun --mpi=pmi2 (SLURM_MPI_TYPE, PMI_FD, PMI_JOBID): UCX's business card overflows Slurm's
    1,024-byte PMI-1 reads (tests/test_cluster.py shows the limit on a real Slurm). hydra sets no
    PMI_JOBID; a user's netmod or PMI version wins."""
    from collectives.backends.mpi_ranks import slurm_pmi1_netmod
    srun = {"SLURM_MPI_TYPE": "pmi2", "PMI_FD": "11", "PMI_JOBID": "8.0", "PMI_RANK": "0", "PMI_SIZE": "4"}
    assert slurm_pmi1_netmod(srun) == "ofi"
    assert slurm_pmi1_netmod({**srun, "MPIR_CVAR_CH4_NETMOD": "ucx"}) == ""
    assert slurm_pmi1_netmod({**srun, "MPIR_CVAR_PMI_VERSION": "2"}) == ""
    assert slurm_pmi1_netmod({**srun, "MPIR_CVAR_PMI_VERSION": "1"}) == "ofi"
    hydra_in_slurm = {k: v for k, v in srun.items() if k != "PMI_JOBID"}
    assert slurm_pmi1_netmod(hydra_in_slurm) == ""
    assert slurm_pmi1_netmod({**srun, "SLURM_MPI_TYPE": "none"}) == ""
    assert slurm_pmi1_netmod({}) == ""


def test_torch_ranks_meet_at_torchruns_agent_store_where_it_serves_one():
    from collectives.backends.torch_dist import agent_store
    torchrun = {"TORCHELASTIC_USE_AGENT_STORE": "True", "MASTER_ADDR": "node1", "MASTER_PORT": "29500"}
    assert agent_store(torchrun)
    assert not agent_store({**torchrun, "TORCHELASTIC_USE_AGENT_STORE": "False"})
    assert not agent_store({k: v for k, v in torchrun.items() if k != "MASTER_PORT"})
    assert not agent_store({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"})   # the harness's own defaults
