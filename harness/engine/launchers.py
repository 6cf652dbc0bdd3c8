"""Command lines that start a worker group: local children, the MPI library's mpiexec, or a template:
the cluster's own launcher with ``{nproc}`` and optionally ``{cmd}``, the worker (appended when absent),
e.g. ``mpirun -np {nproc} -hostfile hosts``, ``torchrun --nproc-per-node {nproc} --no-python {cmd}``.
"""
from __future__ import annotations

import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from collectives.backends import for_python


def worker_cmd(python: str = "") -> list[str]:
    """The rank process; `python` runs it under another installed stack's interpreter (A/B)."""
    return [python or sys.executable, "-m", "harness.engine.worker"]


class LauncherError(ValueError):
    pass


@dataclass(frozen=True)
class LaunchPlan:
    """`commands` start one process each; `per_rank_env` is set when the harness itself assigns ranks."""
    commands: list[list[str]]
    per_rank_env: list[dict[str, str]]


def validate_template(template: str) -> str | None:
    if "{nproc}" not in template:
        return f"--launcher {template!r} must contain {{nproc}} (e.g. 'mpirun -np {{nproc}} -hostfile hosts')"
    try:
        shlex.split(template.replace("{nproc}", "1").replace("{cmd}", "x"))
    except ValueError as exc:
        return f"--launcher {template!r} cannot be parsed: {exc}"
    unknown = template.replace("{nproc}", "").replace("{cmd}", "")
    if "{" in unknown or "}" in unknown:
        return f"--launcher {template!r}: only {{nproc}} and {{cmd}} placeholders are allowed"
    return None


def from_template(template: str, nproc: int, python: str = "") -> LaunchPlan:
    worker = " ".join(shlex.quote(a) for a in worker_cmd(python))
    text = template.replace("{nproc}", str(nproc))
    text = text.replace("{cmd}", worker) if "{cmd}" in template else f"{text} {worker}"
    return LaunchPlan([shlex.split(text)], [{}])


def find_mpiexec(python: str = "") -> str:
    """The mpiexec that belongs to the MPI library mpi4py loads (the mpich wheel puts it beside python)."""
    beside = Path(python or sys.executable).parent / "mpiexec"
    if beside.exists():
        return str(beside)
    found = shutil.which("mpiexec")
    if not found:
        raise LauncherError("backend mpi needs an mpiexec: none beside the python interpreter or on PATH (pip install mpich)")
    return found


def local(backend: str, nproc: int, master_port: int, python: str = "", store: Path | None = None) -> LaunchPlan:
    """Ranks on this machine: MPI ranks bound one core each, gloo's unbound; torch backends meet
    through a FileStore at `store` when given (why: docs/clusters.md, "What ranks are given")."""
    declared = for_python(backend, python)   # the flags follow the library build that interpreter loads
    if declared.launcher == "mpiexec":
        return LaunchPlan([[find_mpiexec(python), "-n", str(nproc), *declared.mpiexec_flags(nproc), *worker_cmd(python)]], [{}])
    envs = [{"RANK": str(r), "WORLD_SIZE": str(nproc), "LOCAL_RANK": str(r), "LOCAL_WORLD_SIZE": str(nproc),
             "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(master_port),
             **({"HCCL_BENCH_STORE": str(store.absolute())} if store else {})} for r in range(nproc)]  # a URL path: absolute
    return LaunchPlan([worker_cmd(python) for _ in range(nproc)], envs)
