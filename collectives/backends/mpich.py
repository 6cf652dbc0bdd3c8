"""The "mpi" backend: MPI through mpi4py (mpi_ranks.py), started by the MPI library's own mpiexec.
MPICH is the default build and switches algorithms through one CVAR per op (its table here); under
an interpreter whose mpi4py loads Open MPI the same backend switches through Open MPI's coll/tuned
(openmpi.py)."""
from __future__ import annotations

from dataclasses import dataclass, field

from collectives.backends import openmpi
from collectives.backends.base import BackendInfo, Unsupported
from collectives.backends.mpi_ranks import declare
from collectives.capabilities import Target
from collectives.device import DeviceUnavailable, unstarted_mpi


@dataclass(frozen=True)
class Cvar:
    """An op's MPIR_CVAR_<name>_INTRA_ALGORITHM and the values it takes."""
    name: str
    values: tuple[str, ...]                                      # as `mpivars` of MPICH 4.x/5.0 lists them
    portable: dict[str, str] = field(default_factory=dict)      # ring/tree -> MPICH value


# An op not listed has no CVAR (sendrecv is point-to-point).
MPICH_CVARS = {
    "all_reduce": Cvar("ALLREDUCE", ("nb", "smp", "recursive_doubling", "recursive_multiplying", "reduce_scatter_allgather",
                                     "tree", "recexch", "ring", "k_reduce_scatter_allgather"),
                       {"ring": "ring", "tree": "tree"}),
    "all_gather": Cvar("ALLGATHER", ("nb", "brucks", "k_brucks", "recursive_doubling", "ring", "recexch_doubling",
                                     "recexch_halving"), {"ring": "ring"}),
    "reduce_scatter": Cvar("REDUCE_SCATTER_BLOCK", ("nb", "noncommutative", "recursive_doubling", "pairwise",
                                                    "recursive_halving")),
    "all_to_all": Cvar("ALLTOALL", ("nb", "brucks", "k_brucks", "pairwise", "pairwise_sendrecv_replace", "scattered")),
    "all_to_all_v": Cvar("ALLTOALLV", ("nb", "pairwise_sendrecv_replace", "scattered")),   # mpivars, MPICH 4.x
    "broadcast": Cvar("BCAST", ("nb", "smp", "binomial", "scatter_recursive_doubling_allgather", "scatter_ring_allgather",
                                "pipelined_tree", "tree"), {"ring": "scatter_ring_allgather", "tree": "tree"}),
    "reduce": Cvar("REDUCE", ("nb", "smp", "binomial", "reduce_scatter_gather"), {"tree": "binomial"}),
}
# these make a forced algorithm fail instead of falling back silently
MPICH_GUARDS = {"MPIR_CVAR_DEVICE_COLLECTIVES": "none", "MPIR_CVAR_COLLECTIVE_FALLBACK": "error"}


def probe() -> None:
    try:
        unstarted_mpi()
    except (ImportError, RuntimeError) as exc:
        raise DeviceUnavailable("backend mpi needs mpi4py and an MPI library: "
                                "pip install 'hccl-bench[mpi]' (mpi4py + the mpich wheel)") from exc


def switch(op, value: str, portable: bool, target: Target | None, library: str):
    if library == "openmpi":
        return openmpi.coll_tuned(op, value, portable)
    cvar = MPICH_CVARS.get(op.name, Cvar("", ()))
    name = cvar.portable.get(value) if portable else value
    if name not in cvar.values:
        return Unsupported(f"MPICH has no {value} algorithm for {op.name}")
    return {**MPICH_GUARDS, f"MPIR_CVAR_{cvar.name}_INTRA_ALGORITHM": name}


NATIVE = tuple(sorted({v for c in MPICH_CVARS.values() for v in c.values} | set(openmpi.NATIVE)))
BACKENDS: dict[str, BackendInfo] = {
    "mpi": declare("mpi", "MPI", "mpich", layers=True, dtensor=False, switch=switch, native_algos=NATIVE, probe=probe,
                   switch_vars=(r"MPIR_CVAR_\w+_INTRA_ALGORITHM", r"OMPI_MCA_coll_tuned_\w+_algorithm"),
                   switch_names=lambda op: (MPICH_CVARS[op].name,) if op in MPICH_CVARS else (),
                   mpiexec_flags=lambda nproc: ("-bind-to", "core")),
}
