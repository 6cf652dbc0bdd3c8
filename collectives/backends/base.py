"""What every backend offers (``Backend``, the rank side: ``call`` returns a zero-argument callable issuing
one collective; the side channel is a CPU path) and declares (``BackendInfo``, the driver side)."""
from __future__ import annotations

import contextlib
import json
import mmap
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from collectives.capabilities import DeviceFacts, Target
from collectives.ops import OPS

PAGE = 4096


@dataclass(frozen=True)
class Unsupported:
    """Why an algorithm cannot be forced for an op on a backend (the case is skipped with it)."""
    reason: str


# (op, value, portable?, target or None, library variant) -> the environment forcing it, or why not
Switch = Callable[[Any, str, bool, "Target | None", str], "dict[str, str] | Unsupported"]


def no_switch(library: str, why: str) -> Switch:
    def switch(op, value, portable, target, variant):
        return Unsupported(f"{library} has no algorithm switch ({why})")
    return switch


@dataclass(frozen=True)
class BackendInfo:
    """One backend's declared capabilities, so that no code outside its module compares its name."""
    name: str
    family: str                          # the op modules' call family: "torch" or "mpi"
    device_kind: str                     # collectives.device kind: "cpu", "cuda", "npu"
    dtypes: tuple[str, ...]
    library: str                         # how messages name the library: "gloo", "NCCL", "HCCL", "MPI"
    api: str                             # the Python API the ranks call: "torch.distributed", "mpi4py"
    create: Callable[[str, int, int, int], Backend]   # (name, rank, world, local_rank) -> this rank's backend
    launcher: str = "spawn"              # "spawn": the driver starts local children; "mpiexec": the library's own
    rendezvous_store: bool = True        # ranks meet through a store the driver serves under a cluster launcher
    numpy_buffers: bool = False          # buffers are numpy arrays (else torch tensors)
    layers: bool = True                  # the layer benches can run on it (torch.distributed, on MPI through mpi_torch.py)
    dtensor: bool = True                 # DTensor runs on it (mpi_torch.py's group has no per-device c10d backend)
    one_rank_per_device: bool = False    # the library refuses two ranks on one device
    device_noun: str = ""                # "GPU", "NPU": how messages name one device
    rank_env: tuple[tuple[str, str], ...] = ()   # defaults every rank's environment gets
    switch: Switch = field(default=no_switch("this backend", "none declared"))
    switch_vars: tuple[str, ...] = ()    # regexes of the variables `switch` sets: one already set would force the default series
    switch_names: Callable[[str], tuple[str, ...]] = lambda op: ()   # op -> its name in a per-op variable ('allreduce')
    value_names: Callable[[str], dict[str, str]] = lambda op: {}    # op -> {value a variable holds: algorithm name}
    native_algos: tuple[str, ...] = ()   # BACKEND:VALUE names --algos accepts
    portable: dict[str, str] = field(default_factory=dict)   # ring/tree -> the library's name, where op-independent
    skip_reason: Callable[[Target, str, str, str, str], str] = lambda target, native, op, dtype, redop: ""
    requested_only: bool = False         # the library cannot say which algorithm ran: series say "(requested)"
    algo_ran: Callable[[str, str, int, int], str | None] | None = None   # (rank-0 log, op, nbytes, nranks)
    read_facts: Callable[[], DeviceFacts] | None = None     # this node's device facts (None: a CPU backend)
    probe: Callable[[], None] = lambda: None                 # raises DeviceUnavailable when it cannot run here
    variant: Callable[..., str] = lambda python="": ""      # (python="") -> the library build it loads: "mpich", "openmpi"
    build: str = ""                      # the library build this declaration is for (for_python)
    mpiexec_flags: Callable[[int], tuple[str, ...]] = lambda nproc: ()   # after `mpiexec -n N` for N local ranks
    packages: tuple[str, ...] = ()       # distributions whose versions provenance records

    def forms(self, op: str) -> frozenset[bool]:
        """Buffer forms this backend offers for `op`: True = in-place, False = out-of-place."""
        return OPS[op].forms.get(self.family, frozenset())

    @property
    def async_ops(self) -> tuple[str, ...]:
        return tuple(name for name, op in OPS.items() if op.has_async and self.family in op.calls)

    def facts(self) -> DeviceFacts:
        return self.read_facts() if self.read_facts else DeviceFacts(self.name)


class Backend(Protocol):
    """The rank side of a backend: buffers, the collective call, point to point, the side channel."""
    name: str
    rank: int
    world: int
    info: BackendInfo
    device: Any

    def from_numpy(self, values: np.ndarray, dtype: str) -> Any: ...
    def full(self, count: int, value: float, dtype: str) -> Any: ...
    def write(self, buf, values: np.ndarray) -> None: ...
    def view(self, buf, start: int, stop: int) -> Any: ...
    def to_numpy(self, buf) -> np.ndarray: ...
    def call(self, op: str, send, recv, redop: str, inplace: bool, asynchronous: bool = False) -> Callable[[], Any]: ...
    def copy(self, dst, src) -> None: ...
    def scale(self, buf, factor: float) -> None: ...
    def exchange(self, peer: int, send, recv) -> None: ...
    def send(self, peer: int, buf) -> None: ...
    def recv(self, peer: int, buf) -> None: ...
    def plain_all_reduce_loop(self, buf, redop: str) -> Callable[[int], None]: ...
    def barrier(self) -> None: ...
    def max_float(self, value: float) -> float: ...
    def bcast_json(self, obj=None) -> Any: ...
    def gather_json(self, obj) -> Any: ...
    def versions(self) -> dict[str, str]: ...
    def torch_world(self) -> None: ...   # torch.distributed's default group on this rank's communicator (the layer benches)
    def close(self) -> None: ...


def family_call(backend, op: str, send, recv, red, inplace: bool, asynchronous: bool):
    """The op module's call for this backend's family (what both families' ``call`` do)."""
    coll = OPS[op]
    if asynchronous and not coll.has_async:
        raise KeyError(f"{op} has no asynchronous form here")
    if backend.info.family not in coll.calls:
        raise KeyError(f"{op} has no {backend.info.api} call")
    return coll.calls[backend.info.family](backend, send, recv, red, inplace, asynchronous)


def page_aligned(nbytes: int) -> np.ndarray:
    """Zeroed host bytes of their own anonymous mapping, page-aligned and on base pages only, so every
    launch's buffers sit the same way (docs/method.md, Same cost in every case: Buffers)."""
    private = {"flags": mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS} if hasattr(mmap, "MAP_PRIVATE") else {}
    region = mmap.mmap(-1, max(nbytes, 1), **private)   # a process's own memory, as malloc's (not shared)
    if hasattr(mmap, "MADV_NOHUGEPAGE"):   # Linux: also where THP is "always"
        with contextlib.suppress(OSError):   # a kernel without THP (EINVAL): base pages are all it has
            region.madvise(mmap.MADV_NOHUGEPAGE)
    return np.frombuffer(region, np.uint8, count=nbytes)


def encode(obj) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()
