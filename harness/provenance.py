"""Where a result came from: library versions, CANN, devices, hosts, environment, commit, command.

CANN's version from torch_npu (empty before 8.1.RC1), else the toolkit's files; what is absent is
left out or None. Each rank reports its device-side versions and adapter variables, per group.
"""
from __future__ import annotations

import importlib.metadata
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
from collections import Counter
from contextlib import suppress
from pathlib import Path

from collectives.backends import BACKENDS
from collectives.device import cuda_driver_version, nvidia_driver_version

# what torch_npu and torch's NCCL process group read besides the libraries' own HCCL_*/NCCL_*: every rank reports them
ADAPTER_ENV = ("TASK_QUEUE_ENABLE", "P2P_HCCL_BUFFSIZE", "TORCH_NCCL_", "TORCH_HCCL_", "PYTORCH_NPU_ALLOC_CONF",
               "CPU_AFFINITY_CONF", "HCCL_OP_EXPANSION_MODE")
ENV_PREFIXES = ("HCCL_", "NCCL_", "MPIR_CVAR_", "OMPI_MCA_", "GLOO_", "ASCEND_", "TORCH_DISTRIBUTED_", "CUDA_VISIBLE_DEVICES",
                "ASCEND_RT_VISIBLE_DEVICES", "OMP_NUM_THREADS", *ADAPTER_ENV)
PACKAGES = ("torch", "torch_npu", "numpy", "pytest-benchmark")   # besides each backend's own (BackendInfo.packages)
TOPOLOGY_COMMANDS = {"nvidia-smi topo -m": ["nvidia-smi", "topo", "-m"], "npu-smi info": ["npu-smi", "info"]}
TOPOLOGY_MAX_CHARS = 16_384   # an 8-GPU topo matrix is about 2 KB; npu-smi info for 16 NPUs about 6 KB
TOPOLOGY_TIMEOUT_S = 10
ASCEND_DRIVER_INFO = "/usr/local/Ascend/driver/version.info"
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
        if m := re.match(r"\[([^:\]]*):([^\]]+)\]", kv.get(key, "")):
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
    with suppress(importlib.metadata.PackageNotFoundError):
        return importlib.metadata.version(name)
    return None


def numpy_torch_problem(numpy: str | None = None, torch: str | None = None) -> str:
    """One line when numpy is 2 and torch older than 2.3 (built against numpy 1: torch.from_numpy raises
    "Numpy is not available"), else "". Versions not given are the installed distributions'."""
    numpy, torch = numpy or _dist("numpy"), torch or _dist("torch")

    def major_minor(version: str) -> tuple[int, ...]:
        return tuple(int(n) for n in re.findall(r"\d+", version)[:2])
    if numpy and torch and major_minor(numpy) >= (2,) and major_minor(torch) < (2, 3):
        return (f"numpy {numpy} does not work with torch {torch}, which was built against numpy 1 (torch < 2.3): "
                "pip install 'numpy<2'")
    return ""


def mpi_library_version() -> str | None:
    try:
        import mpi4py
        mpi4py.rc.initialize = False
        from mpi4py import MPI
        return MPI.Get_library_version().rstrip("\x00").strip().splitlines()[0]   # Open MPI's ends in a NUL
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


def adapter_env(env=os.environ) -> dict[str, str]:
    """The torch_npu / ProcessGroupNCCL variables as a rank sees them (a launcher may not pass the driver's on)."""
    return {k: v for k, v in sorted(env.items()) if k.startswith(ADAPTER_ENV)}


def topology(commands: dict[str, list[str]] = TOPOLOGY_COMMANDS, timeout_s: float = TOPOLOGY_TIMEOUT_S) -> dict[str, str]:
    """The device topology tools' output on this host, for those installed (none on a CPU host):
    at most TOPOLOGY_MAX_CHARS each, TOPOLOGY_TIMEOUT_S each; a failure is recorded as such."""
    out = {}
    for name, argv in commands.items():
        if shutil.which(argv[0]) is None:
            continue
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, errors="replace", timeout=timeout_s)
        except subprocess.TimeoutExpired:
            out[name] = f"(no answer within {timeout_s:g} s)"
        except OSError as exc:
            out[name] = f"(could not run: {exc.strerror})"
        else:
            text = proc.stdout.strip() if proc.returncode == 0 else f"(exit {proc.returncode}) {proc.stderr.strip()}"
            out[name] = text[:TOPOLOGY_MAX_CHARS] + (" ... (cut)" if len(text) > TOPOLOGY_MAX_CHARS else "")
    return out


def driver_versions() -> dict[str, str | None]:
    """This host's device drivers: NVIDIA's kernel module and the CUDA version it supports, Ascend's
    driver package (the file torch_npu's get_cann_version("DRIVER") reads). None where absent."""
    try:
        ascend = parse_version_info(Path(ASCEND_DRIVER_INFO).read_text(errors="replace"))
    except OSError:
        ascend = None
    return {"nvidia": nvidia_driver_version(), "cuda_driver": cuda_driver_version(), "ascend": ascend}


def collect(argv: list[str] | None = None) -> dict:
    """The driver's view; ranks' hosts, devices and device-side versions are added per group."""
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "driver_host": socket.gethostname(),
        "packages": {name: _dist(name) for name in dict.fromkeys((*PACKAGES, *(p for b in BACKENDS.values()
                                                                                for p in b.packages)))},
        "mpi_library": mpi_library_version(),
        "cann": cann_version_from_toolkit(),
        "drivers": driver_versions(),
        "topology": topology(),
        "env": relevant_env(),
        "git": git_commit(),
        "command": " ".join(argv if argv is not None else sys.argv),
    }


def group_info(ranks: list[dict]) -> dict:
    """Hosts, ranks per host, devices, versions and adapter variables as reported by the ranks themselves."""
    per_host = Counter(r["host"] for r in ranks)
    seen: dict[str, dict[str, set]] = {"versions": {}, "env": {}}
    for r in ranks:
        for what, values in seen.items():
            for k, v in (r.get(what) or {}).items():
                values.setdefault(k, set()).add(v)
    one = {what: {k: sorted(v) if len(v) > 1 else next(iter(v)) for k, v in values.items()} for what, values in seen.items()}
    return {"hosts": dict(per_host), "nranks": len(ranks), "devices": sorted({r["device"] for r in ranks}),
            "versions": one["versions"], "adapter_env": one["env"]}
