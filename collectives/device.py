"""The one place that touches accelerator APIs: allocate, synchronise, time, memory, names.

cpu times with perf_counter_ns; cuda and npu time with their own events (DESIGN §4). No
``torch.cuda.*`` / ``torch.npu.*`` call lives anywhere else.
"""
from __future__ import annotations

import os
import platform
import resource
import time


class DeviceUnavailable(RuntimeError):
    """The requested device cannot be used here; the message is one sentence saying why."""


def import_torch_npu():
    """Import torch_npu, turning its CANN-less failures into one clear sentence (DESIGN §6)."""
    try:
        import torch_npu  # noqa: F401
    except ModuleNotFoundError as exc:
        raise DeviceUnavailable("backend hccl needs torch_npu: it is not installed (pip install 'hccl-bench[npu]' "
                                "with the torch_npu matching your torch and CANN)") from exc
    except (ImportError, OSError) as exc:
        raise DeviceUnavailable(f"backend hccl: torch_npu cannot load CANN ({str(exc).splitlines()[0]}); source the "
                                "toolkit's set_env.sh (e.g. /usr/local/Ascend/ascend-toolkit/set_env.sh)") from exc
    return torch_npu


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


class Device:
    """A rank's device: 'cpu', 'cuda' or 'npu' with a local index."""

    def __init__(self, kind: str, local_rank: int = 0):
        self.kind = kind
        self.index = local_rank
        self._mod = None
        if kind == "cpu":
            self.torch_device = "cpu"
            return
        import torch
        if kind == "npu":
            self._mod = _npu()
        elif kind == "cuda":
            self._mod = torch.cuda
        else:
            raise DeviceUnavailable(f"unknown device kind {kind!r}: use cpu, cuda or npu")
        if not self._mod.is_available() or self._mod.device_count() == 0:
            raise DeviceUnavailable(f"no {kind} device is visible to this process")
        self.index = local_rank % self._mod.device_count()
        self._mod.set_device(self.index)
        self.torch_device = f"{kind}:{self.index}"

    def synchronize(self) -> None:
        if self._mod is not None:
            self._mod.synchronize()

    def name(self) -> str:
        if self._mod is None:
            return cpu_name()
        return self._mod.get_device_name(self.index)

    def timer(self) -> Timer:
        return Timer(self)

    def reset_peak_memory(self) -> None:
        if self._mod is not None:
            self._mod.reset_peak_memory_stats(self.index)

    def peak_memory_bytes(self) -> int | None:
        """Peak allocated device memory; on cpu the process's peak RSS (ru_maxrss is KiB on Linux)."""
        if self._mod is not None:
            return int(self._mod.max_memory_allocated(self.index))
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    def library_versions(self) -> dict[str, str]:
        """Versions only a rank on this device can read (NCCL's, CANN's through torch_npu)."""
        out: dict[str, str] = {}
        if self.kind == "cuda":
            import torch
            v = torch.cuda.nccl.version()
            out["nccl"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
            out["cuda"] = str(torch.version.cuda)
        elif self.kind == "npu":
            import torch_npu  # this device's own API lives here and nowhere else
            try:
                out["cann"] = torch_npu.npu.utils.get_cann_version("CANN") or ""
            except (AttributeError, RuntimeError):   # torch_npu before CANN 8.1.RC1 has no such call
                out["cann"] = ""
        return out


class Timer:
    """Times a span with the device's own clock; ``elapsed_ns`` synchronises first."""

    def __init__(self, device: Device):
        self.device = device
        self._events = None
        if device._mod is not None:
            self._events = (device._mod.Event(enable_timing=True), device._mod.Event(enable_timing=True))

    def start(self) -> None:
        if self._events:
            self._events[0].record()
        else:
            self._t0 = time.perf_counter_ns()

    def stop(self) -> int:
        """Nanoseconds since start(), after the device has finished the span's work."""
        if self._events:
            self._events[1].record()
            self._events[1].synchronize()
            return int(self._events[0].elapsed_time(self._events[1]) * 1e6)
        return time.perf_counter_ns() - self._t0


def local_device_kind(backend: str) -> str:
    return {"gloo": "cpu", "mpi": "cpu", "nccl": "cuda", "hccl": "npu"}[backend]


def preload_mpi_library() -> None:
    """Load the MPI library (without MPI_Init) if mpi4py is installed. MPICH's library replaces the
    process's SIGHUP handler when it loads, so the driver loads it before installing its own."""
    try:
        import mpi4py
        mpi4py.rc.initialize = False
        from mpi4py import MPI  # noqa: F401
    except (ImportError, RuntimeError):
        return   # no MPI here: nothing to load; the mpi backend's probe says so if it is asked for


def probe_backend(backend: str) -> None:
    """Raise DeviceUnavailable with one sentence when `backend` cannot run on this machine."""
    if backend in ("gloo", "mpi"):
        if backend == "mpi":
            try:
                import mpi4py
                mpi4py.rc.initialize = False   # load the library without initialising MPI in the driver
                from mpi4py import MPI  # noqa: F401
            except (ImportError, RuntimeError) as exc:
                raise DeviceUnavailable("backend mpi needs mpi4py and an MPI library: "
                                        "pip install 'hccl-bench[mpi]' (mpi4py + the mpich wheel)") from exc
        return
    os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
    try:
        import torch
    except Exception as exc:  # torch_npu without CANN breaks even `import torch`
        raise DeviceUnavailable(f"backend {backend}: import torch failed ({str(exc).splitlines()[0]})") from exc
    if backend == "nccl":
        if not torch.cuda.is_available():
            raise DeviceUnavailable("backend nccl needs a CUDA GPU; torch.cuda.is_available() is False here")
        return
    if not _npu().is_available():
        raise DeviceUnavailable("backend hccl needs an Ascend NPU; torch.npu.is_available() is False here")


def _npu():
    """torch.npu, which torch_npu adds to torch when it is imported (torch's own stubs do not know it)."""
    import torch
    import_torch_npu()
    return getattr(torch, "npu")  # noqa: B009


def device_count(kind: str) -> int:
    import torch
    if kind == "npu":
        return _npu().device_count()
    return torch.cuda.device_count() if kind == "cuda" else 1
