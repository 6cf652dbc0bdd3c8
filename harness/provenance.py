"""Where a result came from: library versions, CANN, devices, hosts, environment, commit, command.

CANN's version comes from torch_npu (``get_cann_version``, empty before 8.1.RC1) or, failing
that, from the toolkit's own files: ``version.cfg`` (``runtime_running_version=[7.5.0.1.129:8.0.RC3]``),
``ascend_toolkit_install.info`` (``version=8.1.RC1``) and ``*/version.info`` (``version_dir=8.2.RC1``).
"""
from __future__ import annotations

import importlib.metadata
import os
import platform
import re
import socket
import subprocess
import sys
from collections import Counter
from pathlib import Path

ENV_PREFIXES = ("HCCL_", "NCCL_", "MPIR_CVAR_", "OMPI_MCA_", "GLOO_", "ASCEND_", "TORCH_DISTRIBUTED_", "CUDA_VISIBLE_DEVICES",
                "ASCEND_RT_VISIBLE_DEVICES", "OMP_NUM_THREADS")
TOOLKIT_HOMES = ("ASCEND_TOOLKIT_HOME", "ASCEND_HOME_PATH")
DEFAULT_TOOLKIT = "/usr/local/Ascend/ascend-toolkit/latest"


def _kv(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            out[key.strip()] = value.strip().strip('"')
    return out


def parse_version_cfg(text: str) -> str | None:
    """``hccl_running_version=[7.6.0.1.220:8.0.0]`` -> '8.0.0' (runtime's entry when hccl's is absent)."""
    kv = _kv(text)
    for key in ("hccl_running_version", "runtime_running_version", "toolkit_running_version"):
        m = re.match(r"\[([^:\]]*):([^\]]+)\]", kv.get(key, ""))
        if m:
            return m.group(2)
    return None


def parse_install_info(text: str) -> str | None:
    """ascend_toolkit_install.info: ``version=8.1.RC1``."""
    return _kv(text).get("version") or None


def parse_version_info(text: str) -> str | None:
    """``*/version.info``: the product version ``version_dir`` beats the component ``Version``."""
    kv = _kv(text)
    return kv.get("version_dir") or kv.get("Version") or None


def cann_version_from_toolkit(home: str | None = None) -> dict[str, str]:
    """{'cann': version, 'source': file} from the first toolkit file that names one."""
    roots = [home] if home else [os.environ[v] for v in TOOLKIT_HOMES if os.environ.get(v)] + [DEFAULT_TOOLKIT]
    for root in roots:
        base = Path(root)
        candidates = [(base / "version.cfg", parse_version_cfg)]
        candidates += [(p, parse_install_info) for p in sorted(base.glob("*/ascend_toolkit_install.info"))]
        candidates += [(base / "ascend_toolkit_install.info", parse_install_info)]
        candidates += [(base / sub / "version.info", parse_version_info)
                       for sub in ("hccl", "runtime", "toolkit", "compiler", "opp")]
        for path, parser in candidates:
            try:
                version = parser(path.read_text(errors="replace"))
            except OSError:
                continue
            if version:
                return {"cann": version, "source": str(path)}
    return {}


def _dist(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def mpi_library_version() -> str | None:
    try:
        import mpi4py
        mpi4py.rc.initialize = False
        from mpi4py import MPI
        return MPI.Get_library_version().strip().splitlines()[0]
    except Exception:
        return None


def git_commit() -> dict[str, str]:
    root = Path(__file__).resolve().parent.parent

    def git(*args):
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=10).stdout.strip()
    try:
        return {"commit": git("rev-parse", "HEAD"), "dirty": bool(git("status", "--porcelain", "--untracked-files=no"))}
    except (OSError, subprocess.SubprocessError):
        return {}


def relevant_env(env=os.environ) -> dict[str, str]:
    return {k: v for k, v in sorted(env.items()) if k.startswith(ENV_PREFIXES)}


def collect(argv: list[str] | None = None) -> dict:
    """The driver's view; ranks' hosts, devices and device-side versions are added per group."""
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "driver_host": socket.gethostname(),
        "packages": {name: _dist(name) for name in ("torch", "torch_npu", "mpi4py", "mpich", "numpy", "pytest-benchmark")},
        "mpi_library": mpi_library_version(),
        "cann": cann_version_from_toolkit(),
        "env": relevant_env(),
        "git": git_commit(),
        "command": " ".join(argv if argv is not None else sys.argv),
    }


def group_info(ranks: list[dict]) -> dict:
    """Hosts, ranks per host, devices and versions as reported by the ranks themselves."""
    per_host = Counter(r["host"] for r in ranks)
    versions: dict[str, set] = {}
    for r in ranks:
        for k, v in r.get("versions", {}).items():
            versions.setdefault(k, set()).add(v)
    return {"hosts": dict(per_host), "nranks": len(ranks),
            "devices": sorted({r["device"] for r in ranks}),
            "versions": {k: sorted(v) if len(v) > 1 else next(iter(v)) for k, v in versions.items()}}
