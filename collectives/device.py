"""The one place that touches accelerator APIs (no ``torch.cuda.*`` / ``torch.npu.*`` call lives
elsewhere): allocate, synchronise, time (docs/method.md, Time), memory, names."""
from __future__ import annotations

import contextlib
import ctypes
import inspect
import os
import platform
import re
import resource
import subprocess
import time
import warnings
from collections.abc import Callable, Mapping

GRAPHS = {"cuda": "CUDAGraph", "npu": "NPUGraph"}   # the graph class each device module has where it can capture
NVIDIA_DRIVER_FILE = "/proc/driver/nvidia/version"
GRAPH_NEEDS_DEVICE = "graph capture needs a device backend: nccl or hccl"
# torch CUDAGraph::capture_end's TORCH_WARN when cudaGraphGetNodes counts 0 nodes; the NPU text is what
# torch_npu's test_graph_warn_if_has_zero_nodes expects (its NPUGraph.cpp warns nothing today)
EMPTY_GRAPH = re.compile(r"The (CUDA|NPU) Graph is empty")


class DeviceUnavailable(RuntimeError):
    """The requested device cannot be used here; the message is one sentence saying why."""


def import_torch_npu():
    """Import torch_npu, turning its CANN-less failures into one clear sentence (docs/method.md, Device and library facts)."""
    try:
        import torch_npu  # noqa: F401
    except ModuleNotFoundError as exc:
        raise DeviceUnavailable("backend hccl needs torch_npu: it is not installed; install the torch_npu release made for "
                                "this host's torch and CANN (e.g. pip install torch-npu==<your torch version>)") from exc
    except (ImportError, OSError) as exc:
        raise DeviceUnavailable(f"backend hccl: torch_npu cannot load CANN ({str(exc).splitlines()[0]}); source the "
                                "toolkit's set_env.sh (e.g. /usr/local/Ascend/ascend-toolkit/set_env.sh)") from exc
    return torch_npu


def machine_id() -> str:
    """This kernel's boot id (network namespaces of one machine, emulated hosts, share it), else the host name."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as fh:
            return fh.read().strip()
    except OSError:
        return platform.node()


def cpu_name() -> str:
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as fh:
        for line in fh:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


class Device:
    """A rank's device: 'cpu', 'cuda' or 'npu' with a local index."""

    def __init__(self, kind: str, local_rank: int = 0):
        self.kind, self.index, self._mod = kind, local_rank, None
        if kind == "cpu":
            self.torch_device = "cpu"
            return
        if kind not in GRAPHS:
            raise DeviceUnavailable(f"unknown device kind {kind!r}: use cpu, cuda or npu")
        self._mod = _module(kind)
        if not self._mod.is_available() or self._mod.device_count() == 0:
            raise DeviceUnavailable(f"no {kind} device is visible to this process")
        self.index = local_rank % self._mod.device_count()
        self._mod.set_device(self.index)
        self.torch_device = f"{kind}:{self.index}"

    def synchronize(self) -> None:
        if self._mod is not None:
            self._mod.synchronize()

    def capture(self, loop: Callable[[int], None], k: int) -> Callable[[], None]:
        """Capture loop(k) once into a device graph; its replay (nccl-tests -G; docs/method.md, Graph capture)."""
        mod, reason = self._mod, graph_unsupported_on(self.kind, self._mod)
        if mod is None or reason:
            raise DeviceUnavailable(reason)
        side = mod.Stream()
        side.wait_stream(mod.current_stream())
        with mod.stream(side):
            loop(1)
        mod.current_stream().wait_stream(side)
        mod.synchronize()
        graph = getattr(mod, GRAPHS[self.kind])()
        # thread_local: the process group's watchdog thread may query its events while this thread captures
        thread_local = "capture_error_mode" in inspect.signature(mod.graph).parameters   # older torch_npu lacks it

        def record() -> None:
            with (mod.graph(graph, capture_error_mode="thread_local") if thread_local else mod.graph(graph)):
                loop(k)
        refusing_empty_graph(record)
        graph.replay()
        mod.synchronize()
        return graph.replay

    def name(self) -> str:
        return cpu_name() if self._mod is None else self._mod.get_device_name(self.index)

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
            out.update({k: v for k, v in (("cuda_driver", cuda_driver_version()),
                                          ("nvidia_driver", nvidia_driver_version())) if v})
        elif self.kind == "npu":
            import torch_npu  # this device's own API lives here and nowhere else
            for key, module in (("cann", "CANN"), ("hccl", "HCCL"), ("npu_driver", "DRIVER")):
                try:   # "" for a module it does not know; before CANN 8.1.RC1 "" or no such call
                    out[key] = torch_npu.npu.utils.get_cann_version(module) or ""
                except (AttributeError, RuntimeError, TypeError):
                    out[key] = ""
        return out


class Timer:
    """Times a span with the device's own clock; ``stop`` synchronises first."""

    def __init__(self, device: Device):
        mod = device._mod
        self._events = None if mod is None else (mod.Event(enable_timing=True), mod.Event(enable_timing=True))

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


def nvidia_driver_version(path: str = NVIDIA_DRIVER_FILE) -> str | None:
    """The NVIDIA kernel module's version ("550.54.15") from /proc, None without the driver."""
    try:
        with open(path) as fh:
            head = fh.readline()
    except OSError:
        return None
    m = re.search(r"Kernel Module\b.*?\s(\d+\.\d+(?:\.\d+)?)\s", head)
    return m.group(1) if m else None


def cuda_driver_version() -> str | None:
    """The CUDA version the driver supports (cuDriverGetVersion: 12040 -> "12.4"); None without libcuda."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    version = ctypes.c_int(0)
    if lib.cuDriverGetVersion(ctypes.byref(version)) != 0 or version.value <= 0:
        return None
    return f"{version.value // 1000}.{version.value % 1000 // 10}"


class EmptyGraph(RuntimeError):
    """A capture recorded no device work: its replays would time nothing."""


def refusing_empty_graph(capture: Callable[[], None]) -> None:
    """capture(), with torch's empty-graph warning (EMPTY_GRAPH) raised as EmptyGraph once it returns
    (torch.cuda.graph.__exit__ restores the stream after capture_end); other warnings are issued again."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        capture()
    for w in caught:
        if EMPTY_GRAPH.search(str(w.message)):
            raise EmptyGraph(f"the captured graph is empty ({str(w.message).split('. ')[0]}): the library enqueued no device "
                             "work for these calls (NCCL enqueues none for an in-place collective on a one-rank "
                             "communicator), so its replays would time nothing")
    for w in caught:
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)


def graph_unsupported_on(kind: str, mod) -> str:
    """'' where this device module can capture and replay a graph, else why not."""
    if kind not in GRAPHS or mod is None:
        return GRAPH_NEEDS_DEVICE
    if not (hasattr(mod, GRAPHS[kind]) and hasattr(mod, "graph")):
        where = "torch_npu (NPUGraph needs torch_npu >= 7.0.0)" if kind == "npu" else "torch"
        return f"this {where} has no torch.{kind}.{GRAPHS[kind]}: graph capture is not available"
    return ""


def graph_env_unsupported(kind: str, env: Mapping[str, str]) -> str:
    """'' where `env` (the ranks inherit it) lets a device of `kind` capture collectives, else the skip
    reason: settings that fail every capture (sources: docs/method.md, Graph capture)."""
    def on(name: str) -> bool:
        return (env.get(name) or "").strip().lower() in ("1", "true")
    if kind == "npu" and (env.get("TASK_QUEUE_ENABLE") or "").strip() == "2" and not on("ASCEND_LAUNCH_BLOCKING"):
        return "TASK_QUEUE_ENABLE=2: torch_npu refuses to capture an NPU graph with it (set TASK_QUEUE_ENABLE=1 or 0 for --graph)"
    blocking = {"cuda": ("TORCH_NCCL_BLOCKING_WAIT", "NCCL_BLOCKING_WAIT"),
                "npu": ("TORCH_HCCL_BLOCKING_WAIT", "HCCL_BLOCKING_WAIT")}
    for name in blocking.get(kind, ()):
        if on(name):
            return f"{name}=1: wait() would spin in the capture on a collective that runs only at replay (unset it for --graph)"
    return ""


def graph_unsupported(kind: str, env: Mapping[str, str] | None = None) -> str:
    """At collection: '' where `kind` can replay captured graphs under the ranks' `env` (default: ours), else why not."""
    if kind == "cpu":
        return GRAPH_NEEDS_DEVICE
    if why := graph_env_unsupported(kind, os.environ if env is None else env):
        return why
    return graph_unsupported_on(kind, _module(kind))


def preload_mpi_library() -> None:
    """Load the MPI library (without MPI_Init) if mpi4py is installed. MPICH's library replaces the
    process's SIGHUP handler when it loads, so the driver loads it before installing its own."""
    with contextlib.suppress(ImportError, RuntimeError):   # no MPI here: the mpi backend's probe says so if asked for
        unstarted_mpi()


def unstarted_mpi():
    """mpi4py's MPI with the library loaded but not initialised (the driver never calls MPI_Init)."""
    import mpi4py
    mpi4py.rc.initialize = False
    from mpi4py import MPI
    return MPI


def probe_device(kind: str, backend: str) -> None:
    """Raise DeviceUnavailable, one sentence naming `backend`, when `kind`'s device cannot be used here."""
    if kind == "cpu":
        return
    os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
    try:
        import torch
    except Exception as exc:  # torch_npu without CANN breaks even `import torch`
        raise DeviceUnavailable(f"backend {backend}: import torch failed ({str(exc).splitlines()[0]})") from exc
    if not (torch.cuda if kind == "cuda" else _module("npu")).is_available():
        what = "a CUDA GPU" if kind == "cuda" else "an Ascend NPU"
        raise DeviceUnavailable(f"backend {backend} needs {what}; torch.{kind}.is_available() is False here")


def _module(kind: str):
    """torch.cuda, or torch.npu for "npu" (importing torch_npu adds it; torch's own stubs lack it)."""
    import torch
    if kind != "npu":
        return torch.cuda
    import_torch_npu()
    return getattr(torch, "npu")  # noqa: B009


def device_count(kind: str) -> int:
    return _module(kind).device_count() if kind in GRAPHS else 1


def hf32_matmuls() -> bool:
    """Whether float32 matmuls run as HF32 on an NPU (torch_npu's torch.npu.matmul.allow_hf32)."""
    import torch
    npu = getattr(torch, "npu", None)
    return bool(npu is not None and getattr(getattr(npu, "matmul", None), "allow_hf32", False))


def npu_smi_chip_name(text: str | None = None) -> str:
    """The first NPU's chip name from `npu-smi info` ("| 0     910B3     | OK ..." -> "Ascend910B3"),
    read without touching the device; '' where npu-smi is absent or prints no such row."""
    if text is None:
        try:
            text = subprocess.run(["npu-smi", "info"], capture_output=True, text=True, timeout=30).stdout
        except (OSError, subprocess.TimeoutExpired):
            return ""
    match = re.search(r"^\|\s*\d+\s+(\w[\w.-]*)\s+\|\s*(?:OK|Warning|Alarm|Critical|\w+)\s+\|", text, re.M)
    if not match:
        return ""
    return match.group(1) if match.group(1).startswith("Ascend") else f"Ascend{match.group(1)}"


def npu_chip(smi_name: str, runtime_name) -> str:
    """npu-smi's chip name, unless it is the bare "Ascend910" an Atlas A3 node prints (the old Atlas
    910's name; A3's capability table differs): then the runtime's name ("Ascend910_9392")."""
    return smi_name if smi_name and smi_name != "Ascend910" else runtime_name()


def accelerator_facts(kind: str) -> dict:
    """This node's accelerators for the capability table (first device's name and CUDA capability,
    count, NCCL's version), read without a GPU context (it would take GPU 0 from rank 0 in exclusive mode)."""
    if kind == "npu":
        npu = _module("npu")
        # npu.get_device_name initialises the runtime on NPU 0 in this process: npu-smi first
        name = npu_chip(npu_smi_chip_name(), lambda: str(npu.get_device_name(0)))
        return {"name": name, "devices": int(npu.device_count())}
    if kind != "cuda":
        return {}
    import torch
    v = torch.cuda.nccl.version()   # ncclGetVersion: no CUDA context
    version = tuple(v) if isinstance(v, tuple) else (v // 10000, v % 10000 // 100, v % 100) if v >= 10000 \
        else (v // 1000, v % 1000 // 100, v % 100)
    first = (os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0].strip()
    name, capability = "", (0, 0)
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,compute_cap", "--format=csv,noheader",
                              "-i", first if first.isdigit() else "0"], capture_output=True, text=True, timeout=30)
        if out.returncode == 0 and "," in out.stdout:
            name, cap = (s.strip() for s in out.stdout.splitlines()[0].rsplit(",", 1))
            major, _, minor = cap.partition(".")
            capability = (int(major), int(minor or 0)) if major.isdigit() else (0, 0)
    except (OSError, subprocess.TimeoutExpired, ValueError):
        pass   # name and capability unknown: the checks that need them are not made
    return {"name": name, "devices": int(torch.cuda.device_count()), "version": version, "capability": capability}
