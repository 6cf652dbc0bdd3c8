"""Portable algorithm names -> each library's own switch (ARCHITECTURE.md, Algorithm switches).

``resolve(backend, algo, op, mpi_family)`` returns the environment a worker group needs before
its communicator exists, or an ``Unsupported`` reason. An algorithm a backend or op lacks is never
run as the default under another name.
"""
from __future__ import annotations

from dataclasses import dataclass

from collectives import capabilities
from collectives.capabilities import Target

PORTABLE = ("default", "ring", "tree")
BACKENDS = ("gloo", "mpi", "nccl", "hccl")


@dataclass(frozen=True)
class Unsupported:
    reason: str


# --- HCCL: HCCL_ALGO="<op>=level0:NA;level1:<algo>/..." (CANN env var reference, HCCL_ALGO). Which
# op has which algorithm on which product: collectives.capabilities.HCCL_ALGO_SUPPORT.
HCCL_OP = {"all_reduce": "allreduce", "all_gather": "allgather", "reduce_scatter": "reducescatter",
           "broadcast": "broadcast", "reduce": "reduce", "all_to_all": "alltoall"}
HCCL_NATIVE = ("ring", "H-D_R", "NHR", "NHR_V1", "NB", "pipeline", "pairwise", "AHC")
HCCL_PORTABLE = {"ring": "ring", "tree": "H-D_R"}  # HCCL has no tree; RHD is its logarithmic one

# --- NCCL: NCCL_ALGO applies to collectives; alltoall and send/recv are point-to-point. Which op
# has which algorithm: collectives.capabilities.NCCL_ALGO_OPS.
NCCL_NATIVE = tuple(capabilities.NCCL_ALGO_OPS)
NCCL_COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce")
NCCL_PORTABLE = {"ring": "Ring", "tree": "Tree"}

# --- MPICH: MPIR_CVAR_<OP>_INTRA_ALGORITHM; values as listed by `mpivars` of MPICH 4.x/5.0.
MPICH_CVAR = {"all_reduce": "ALLREDUCE", "all_gather": "ALLGATHER", "reduce_scatter": "REDUCE_SCATTER_BLOCK",
              "all_to_all": "ALLTOALL", "broadcast": "BCAST", "reduce": "REDUCE"}
MPICH_VALUES = {
    "all_reduce": ("nb", "smp", "recursive_doubling", "recursive_multiplying", "reduce_scatter_allgather",
                   "tree", "recexch", "ring", "k_reduce_scatter_allgather"),
    "all_gather": ("nb", "brucks", "k_brucks", "recursive_doubling", "ring", "recexch_doubling", "recexch_halving"),
    "reduce_scatter": ("nb", "noncommutative", "recursive_doubling", "pairwise", "recursive_halving"),
    "all_to_all": ("nb", "brucks", "k_brucks", "pairwise", "pairwise_sendrecv_replace", "scattered"),
    "broadcast": ("nb", "smp", "binomial", "scatter_recursive_doubling_allgather", "scatter_ring_allgather",
                  "pipelined_tree", "tree"),
    "reduce": ("nb", "smp", "binomial", "reduce_scatter_gather"),
}
MPICH_PORTABLE = {
    "ring": {"all_reduce": "ring", "all_gather": "ring", "broadcast": "scatter_ring_allgather"},
    "tree": {"all_reduce": "tree", "broadcast": "tree", "reduce": "binomial"},
}
MPICH_GUARDS = {"MPIR_CVAR_DEVICE_COLLECTIVES": "none", "MPIR_CVAR_COLLECTIVE_FALLBACK": "error"}

# --- Open MPI: coll_tuned dynamic rules, numeric ids (ompi_info --param coll tuned --level 9).
OMPI_IDS = {
    "all_reduce": {"basic_linear": 1, "nonoverlapping": 2, "recursive_doubling": 3, "ring": 4,
                   "segmented_ring": 5, "rabenseifner": 6},
    "all_gather": {"linear": 1, "bruck": 2, "recursive_doubling": 3, "ring": 4, "neighbor": 5, "two_proc": 6},
    "reduce_scatter": {"basic_linear": 1, "recursive_doubling": 2, "recursive_halving": 3, "butterfly": 4},
    "all_to_all": {"linear": 1, "pairwise": 2, "modified_bruck": 3, "linear_sync": 4, "two_proc": 5},
    "broadcast": {"basic_linear": 1, "chain": 2, "pipeline": 3, "split_binary_tree": 4, "binary_tree": 5,
                  "binomial": 6, "knomial": 7, "scatter_allgather": 8, "scatter_allgather_ring": 9},
    "reduce": {"linear": 1, "chain": 2, "pipeline": 3, "binary": 4, "binomial": 5, "in-order_binary": 6,
               "rabenseifner": 7},
}
OMPI_PARAM = {"all_reduce": "allreduce", "all_gather": "allgather", "reduce_scatter": "reduce_scatter_block",
              "all_to_all": "alltoall", "broadcast": "bcast", "reduce": "reduce"}
OMPI_PORTABLE = {
    "ring": {"all_reduce": "ring", "all_gather": "ring", "broadcast": "scatter_allgather_ring"},
    "tree": {"broadcast": "binary_tree", "reduce": "binomial"},
}


def split(algo: str) -> tuple[str | None, str]:
    """``'mpi:ring'`` -> ('mpi', 'ring'); ``'tree'`` -> (None, 'tree')."""
    if ":" in algo:
        backend, value = algo.split(":", 1)
        return backend, value
    return None, algo


def native_name(backend: str, algo: str) -> str:
    """The library's own name for `algo` on `backend` ('' for default or another backend's)."""
    owner, value = split(algo)
    if value == "default" or owner not in (None, backend):
        return ""
    if owner is None:
        return {"hccl": HCCL_PORTABLE, "nccl": NCCL_PORTABLE}.get(backend, {}).get(value, "")
    return value


def validate(algo: str) -> str | None:
    """An error message for a malformed or unknown --algos entry, else None."""
    backend, value = split(algo)
    if backend is None:
        if value in PORTABLE:
            return None
        return f"unknown algorithm {algo!r}: use default, ring, tree or BACKEND:NATIVE (e.g. mpi:recursive_doubling, hccl:NHR)"
    if backend not in BACKENDS:
        return f"unknown backend {backend!r} in algorithm {algo!r}: backends are {', '.join(BACKENDS)}"
    known = {"hccl": HCCL_NATIVE, "nccl": NCCL_NATIVE, "gloo": (),
             "mpi": sorted({v for vs in MPICH_VALUES.values() for v in vs}
                           | {v for ids in OMPI_IDS.values() for v in ids})}[backend]
    if value not in known:
        allowed = ", ".join(known) if known else "none (gloo has no algorithm switch)"
        return f"unknown {backend} algorithm {value!r}: allowed {allowed}"
    return None


def resolve(backend: str, algo: str, op: str, mpi_family: str = "mpich",
            target: Target | None = None) -> dict[str, str] | Unsupported:
    """Environment that forces `algo` for `op` on `backend`; {} for the library's own choice.
    With a `target` (the device facts and rank layout) nccl and hccl are checked against the
    capability table for that device; without one, only what the library lacks everywhere."""
    owner, value = split(algo)
    if owner is not None and owner != backend:
        return Unsupported(f"{algo} is a {owner} algorithm, not {backend}'s")
    if value == "default":
        return {}
    if op == "sendrecv":
        return Unsupported("sendrecv is point-to-point: no collective algorithm applies")
    portable = owner is None
    if backend == "gloo":
        return Unsupported("gloo has no algorithm switch (it runs its own ring/halving-doubling internally)")
    if backend == "hccl":
        native = HCCL_PORTABLE[value] if portable else value
        if op not in HCCL_OP:
            return Unsupported(f"HCCL_ALGO has no setting for {op}")
        if why := capabilities.hccl_algo_reason(native, op, target):
            return Unsupported(why)
        return {"HCCL_ALGO": f"{HCCL_OP[op]}=level0:NA;level1:{native}"}
    if backend == "nccl":
        native = NCCL_PORTABLE[value] if portable else value
        if op not in NCCL_COLLECTIVES:
            return Unsupported(f"NCCL_ALGO does not apply to {op} (point-to-point)")
        if why := capabilities.nccl_algo_reason(native, op, target, asked=value):
            return Unsupported(why)
        return {"NCCL_ALGO": native}
    if backend == "mpi" and mpi_family == "openmpi":
        name = OMPI_PORTABLE[value].get(op) if portable else value
        if name is None or name not in OMPI_IDS.get(op, {}):
            return Unsupported(f"Open MPI coll/tuned has no {value} algorithm for {op}")
        return {"OMPI_MCA_coll_tuned_use_dynamic_rules": "1",
                f"OMPI_MCA_coll_tuned_{OMPI_PARAM[op]}_algorithm": str(OMPI_IDS[op][name])}
    if backend == "mpi":
        name = MPICH_PORTABLE[value].get(op) if portable else value
        if name is None or name not in MPICH_VALUES.get(op, ()):
            return Unsupported(f"MPICH has no {value} algorithm for {op}")
        return {**MPICH_GUARDS, f"MPIR_CVAR_{MPICH_CVAR[op]}_INTRA_ALGORITHM": name}
    return Unsupported(f"unknown backend {backend}")


def merge_group_env(envs: list[dict[str, str]]) -> dict[str, str]:
    """One worker group serves every op of an algorithm: union the per-op settings.

    HCCL_ALGO's per-op entries are joined with '/', as its documentation specifies."""
    merged: dict[str, str] = {}
    hccl = []
    for env in envs:
        for key, value in env.items():
            if key == "HCCL_ALGO":
                if value not in hccl:
                    hccl.append(value)
            else:
                merged[key] = value
    if hccl:
        merged["HCCL_ALGO"] = "/".join(hccl)
    return merged
