"""The communication libraries behind one small interface: buffers, calls, side channel.

A backend owns the communicator of one rank. ``call(...)`` returns a zero-argument callable
that issues one collective on pre-allocated buffers (the timed loop does nothing else); the side
channel (barrier, max, JSON broadcast/gather) is a CPU path (gloo or MPI) that never carries
benchmark data.
"""
from __future__ import annotations

import datetime
import functools
import json
import os
import time

import numpy as np

from collectives.device import Device, local_device_kind
from collectives.ops import ROOT

# Which buffer forms each library offers: True = in-place, False = out-of-place.
TORCH_FORMS = {"all_reduce": {True}, "all_gather": {True, False}, "reduce_scatter": {True, False},
               "all_to_all": {False}, "broadcast": {True}, "reduce": {True}, "sendrecv": {False}}
MPI_FORMS = {"all_reduce": {True, False}, "all_gather": {True, False}, "reduce_scatter": {False},
             "all_to_all": {True, False}, "broadcast": {True}, "reduce": {False}, "sendrecv": {False}}
TORCH_BACKEND_DTYPES = ("float32", "float16", "bfloat16", "float64", "int32", "int64", "int8", "uint8")
MPI_DTYPES = ("float32", "float64", "int32", "int64", "int8", "uint8")
SPEC_TAG = 4242
PAGE = 4096


def page_aligned(nbytes: int) -> np.ndarray:
    """Zeroed host bytes starting on a page boundary, as device allocators hand out buffers.
    Where numpy's allocator happened to put a buffer otherwise decided the result: MPICH's
    intranode 256 KiB all_reduce took 240-260 us on buffers at a heap offset and 100-114 us on
    page-aligned ones in the same process (5 launches each)."""
    raw = np.zeros(nbytes + PAGE, np.uint8)
    start = -raw.ctypes.data % PAGE
    return raw[start:start + nbytes]


def forms(backend: str) -> dict[str, set[bool]]:
    return MPI_FORMS if backend == "mpi" else TORCH_FORMS


def dtypes(backend: str) -> tuple[str, ...]:
    return MPI_DTYPES if backend == "mpi" else TORCH_BACKEND_DTYPES


def _encode(obj) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


class TorchBackend:
    """gloo (CPU), nccl (CUDA) and hccl (NPU) through torch.distributed."""

    def __init__(self, name: str, rank: int, world: int, local_rank: int):
        if name == "hccl":
            os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
        import torch
        import torch.distributed as dist
        self.torch, self.dist = torch, dist
        self.name, self.rank, self.world = name, rank, world
        self.device = Device(local_device_kind(name), local_rank)
        timeout = datetime.timedelta(hours=6)
        store = os.environ.get("HCCL_BENCH_STORE")          # a local group: a file, no listening socket
        served = os.environ.get("HCCL_BENCH_TCP_STORE")     # a launcher's group: the driver serves the store
        if served:
            host, port = served.rsplit(":", 1)
            tcp = dist.TCPStore(host, int(port), world, is_master=False, timeout=datetime.timedelta(minutes=5))
            dist.init_process_group(backend=name, store=tcp, rank=rank, world_size=world, timeout=timeout)
        else:
            dist.init_process_group(backend=name, init_method=f"file://{os.path.abspath(store)}" if store else None,
                                    rank=rank, world_size=world, timeout=timeout)
        # gloo's own group doubles as the side channel; device backends get a CPU gloo group
        self.side = None if name == "gloo" else dist.new_group(backend="gloo")
        self.redops = {"sum": dist.ReduceOp.SUM, "prod": dist.ReduceOp.PRODUCT,
                       "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}

    # -- buffers
    def _dtype(self, name: str):
        return getattr(self.torch, name)

    def _empty(self, count: int, dtype: str):
        """Device memory from the device's allocator; host memory page-aligned (see page_aligned)."""
        torch, dt = self.torch, self._dtype(dtype)
        if self.device.kind != "cpu":
            return torch.empty((count,), dtype=dt, device=self.device.torch_device)
        return torch.from_numpy(page_aligned(count * dt.itemsize)).view(dt)

    def from_numpy(self, values: np.ndarray, dtype: str):
        buf = self._empty(values.size, dtype)
        buf.copy_(self.torch.from_numpy(values))
        return buf

    def full(self, count: int, value: float, dtype: str):
        return self._empty(count, dtype).fill_(value)

    def write(self, buf, values: np.ndarray) -> None:
        buf.copy_(self.torch.from_numpy(values))

    def view(self, buf, start: int, stop: int):
        return buf[start:stop]

    def to_numpy(self, buf) -> np.ndarray:
        return buf.to("cpu", self.torch.float64).numpy()

    # -- collectives
    def call(self, op: str, send, recv, redop: str, inplace: bool, asynchronous: bool = False):
        """asynchronous: async_op=True, the call returning a handle to wait() on."""
        d, red = self.dist, self.redops.get(redop)
        if asynchronous and op not in ("all_reduce", "all_gather", "reduce_scatter"):
            raise KeyError(f"{op} has no asynchronous form here")
        if op == "all_reduce":
            return functools.partial(d.all_reduce, recv, op=red, async_op=asynchronous)
        if op == "all_gather":
            return functools.partial(d.all_gather_into_tensor, recv, send, async_op=asynchronous)
        if op == "reduce_scatter":
            return functools.partial(d.reduce_scatter_tensor, recv, send, op=red, async_op=asynchronous)
        if op == "all_to_all":
            return functools.partial(d.all_to_all_single, recv, send)
        if op == "broadcast":
            return functools.partial(d.broadcast, recv, ROOT)
        if op == "reduce":
            return functools.partial(d.reduce, recv, ROOT, op=red)
        if op == "sendrecv":
            ops = [d.P2POp(d.isend, send, (self.rank + 1) % self.world),
                   d.P2POp(d.irecv, recv, (self.rank - 1) % self.world)]

            def sendrecv(batch=d.batch_isend_irecv, ops=ops):
                for req in batch(ops):
                    req.wait()
            return sendrecv
        raise KeyError(op)

    def copy(self, dst, src) -> None:
        """dst[:] = src, both 1-D buffers of this backend (gradient bucket copies)."""
        dst.copy_(src)

    def scale(self, buf, factor: float) -> None:
        """buf *= float32(factor): the same rounding as the mpi backend's numpy."""
        buf.mul_(float(np.float32(factor)))

    # -- point to point (the doctor's link measurements)
    def exchange(self, peer: int, send, recv) -> None:
        """Send to and receive from `peer` at once; both sides call it."""
        d = self.dist
        for req in d.batch_isend_irecv([d.P2POp(d.isend, send, peer), d.P2POp(d.irecv, recv, peer)]):
            req.wait()
        self.device.synchronize()

    def plain_all_reduce_loop(self, buf, redop: str):
        """The same library call written as a bare loop: the overhead bench's reference."""
        all_reduce, red = self.dist.all_reduce, self.redops[redop]

        def loop(k):
            for _ in range(k):
                all_reduce(buf, op=red)
        return loop

    # -- side channel
    def barrier(self) -> None:
        self.dist.barrier(group=self.side)

    def max_float(self, value: float) -> float:
        t = self.torch.tensor([value], dtype=self.torch.float64)
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX, group=self.side)
        return float(t.item())

    def bcast_json(self, obj=None):
        torch = self.torch
        data = _encode(obj) if self.rank == 0 else b""
        size = torch.tensor([len(data)], dtype=torch.int64)
        self.dist.broadcast(size, 0, group=self.side)
        buf = (torch.frombuffer(bytearray(data), dtype=torch.uint8) if self.rank == 0
               else torch.empty(int(size), dtype=torch.uint8))
        self.dist.broadcast(buf, 0, group=self.side)
        return json.loads(bytes(buf.numpy()).decode())

    def gather_json(self, obj):
        torch = self.torch
        data = _encode(obj)
        sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(self.world)]
        self.dist.all_gather(sizes, torch.tensor([len(data)], dtype=torch.int64), group=self.side)
        longest = max(int(s) for s in sizes)
        mine = torch.zeros(longest, dtype=torch.uint8)
        mine[:len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else mine[:0]
        bufs = [torch.empty(longest, dtype=torch.uint8) for _ in range(self.world)]
        self.dist.all_gather(bufs, mine, group=self.side)
        if self.rank != 0:
            return None
        return [json.loads(bytes(b[:int(s)].numpy()).decode()) for b, s in zip(bufs, sizes)]

    def versions(self) -> dict[str, str]:
        return {"torch": self.torch.__version__, **self.device.library_versions()}

    def close(self) -> None:
        self.dist.destroy_process_group()


class MpiBackend:
    """MPI through mpi4py on numpy buffers; started by the MPI library's own mpiexec."""

    def __init__(self, name: str, rank: int, world: int, local_rank: int):
        import mpi4py
        # mpi4py asks for MPI_THREAD_MULTIPLE unless told otherwise; a plain C MPI_Init gets SINGLE, and
        # some libraries' small-message paths differ between the two (--mpi-thread-level)
        if level := os.environ.get("HCCL_BENCH_MPI_THREAD_LEVEL"):
            mpi4py.rc.thread_level = level
        from mpi4py import MPI
        self.MPI = MPI
        self.comm = MPI.COMM_WORLD
        self.name, self.rank, self.world = name, self.comm.Get_rank(), self.comm.Get_size()
        if self.world != world:   # e.g. srun without --mpi=pmi2: every rank alone in a world of 1
            raise RuntimeError(f"MPI sees a world of {self.world} ranks but the launcher started {world}: the launcher "
                               "and the MPI library do not share a process manager (srun needs --mpi=pmi2 for "
                               "MPICH; or use the library's own mpiexec)")
        self.device = Device("cpu")
        self.redops = {"sum": MPI.SUM, "prod": MPI.PROD, "max": MPI.MAX, "min": MPI.MIN}

    def from_numpy(self, values: np.ndarray, dtype: str):
        buf = page_aligned(values.size * np.dtype(dtype).itemsize).view(dtype)
        buf[:] = values
        return buf

    def full(self, count: int, value: float, dtype: str):
        buf = page_aligned(count * np.dtype(dtype).itemsize).view(dtype)
        buf[:] = value
        return buf

    def write(self, buf, values: np.ndarray) -> None:
        buf[:] = values

    def view(self, buf, start: int, stop: int):
        return buf[start:stop]

    def to_numpy(self, buf) -> np.ndarray:
        return buf.astype(np.float64)

    def call(self, op: str, send, recv, redop: str, inplace: bool, asynchronous: bool = False):
        """asynchronous: MPI's non-blocking form (Iallreduce, ...), returning a request to wait() on."""
        c, MPI, red = self.comm, self.MPI, self.redops.get(redop, self.MPI.OP_NULL)   # OP_NULL: ops that do not reduce
        src = MPI.IN_PLACE if inplace else send
        if asynchronous and op not in ("all_reduce", "all_gather", "reduce_scatter"):
            raise KeyError(f"{op} has no non-blocking form here")
        mpi = (lambda name: getattr(c, "I" + name.lower())) if asynchronous else (lambda name: getattr(c, name))
        if op == "all_reduce":
            return functools.partial(mpi("Allreduce"), src, recv, red)
        if op == "all_gather":
            return functools.partial(mpi("Allgather"), src, recv)
        if op == "reduce_scatter":
            return functools.partial(mpi("Reduce_scatter_block"), send, recv, red)
        if op == "all_to_all":
            return functools.partial(c.Alltoall, src, recv)
        if op == "broadcast":
            return functools.partial(c.Bcast, recv, ROOT)
        if op == "reduce":
            return functools.partial(c.Reduce, send, recv, red, ROOT)
        if op == "sendrecv":
            return functools.partial(c.Sendrecv, send, (self.rank + 1) % self.world, 0,
                                     recv, (self.rank - 1) % self.world, 0)
        raise KeyError(op)

    def copy(self, dst, src) -> None:
        dst[:] = src

    def scale(self, buf, factor: float) -> None:
        buf *= np.float32(factor)

    def exchange(self, peer: int, send, recv) -> None:
        self.comm.Sendrecv(send, peer, 7, recv, peer, 7)

    def plain_all_reduce_loop(self, buf, redop: str):
        allreduce, in_place, red = self.comm.Allreduce, self.MPI.IN_PLACE, self.redops[redop]

        def loop(k):
            for _ in range(k):
                allreduce(in_place, buf, red)
        return loop

    def barrier(self) -> None:
        self.comm.Barrier()

    def max_float(self, value: float) -> float:
        return self.comm.allreduce(float(value), op=self.MPI.MAX)

    def bcast_json(self, obj=None):
        """Idle ranks wait here between cases, polling a point-to-point Irecv with a growing nap
        instead of spinning a core in MPI_Bcast (an idle A/B partner group shares the cores)."""
        data = _encode(obj) if self.rank == 0 else b""
        size = np.array([len(data)], dtype=np.int64)
        if self.rank == 0:
            self.MPI.Request.Waitall([self.comm.Isend(size, dest=r, tag=SPEC_TAG) for r in range(1, self.world)])
        else:
            req, nap = self.comm.Irecv(size, source=0, tag=SPEC_TAG), 0.0001
            while not req.Test():  # back off: an idle A/B partner group must not steal the cores
                time.sleep(nap)
                nap = min(nap * 2, 0.002)
        buf = np.frombuffer(data, dtype=np.uint8).copy() if self.rank == 0 else np.empty(int(size[0]), np.uint8)
        self.comm.Bcast(buf, root=0)
        return json.loads(buf.tobytes().decode())

    def gather_json(self, obj):
        data = np.frombuffer(_encode(obj), dtype=np.uint8)
        sizes = np.array(self.comm.gather(int(data.size), root=0) or [], dtype=np.int64)
        if self.rank == 0:
            out = np.empty(int(sizes.sum()), np.uint8)
            self.comm.Gatherv(data, [out, sizes.tolist()], root=0)
            offsets = np.concatenate([[0], np.cumsum(sizes)])
            return [json.loads(out[offsets[i]:offsets[i + 1]].tobytes().decode()) for i in range(self.world)]
        self.comm.Gatherv(data, None, root=0)
        return None

    def versions(self) -> dict[str, str]:
        import mpi4py
        levels = {self.MPI.THREAD_SINGLE: "single", self.MPI.THREAD_FUNNELED: "funneled",
                  self.MPI.THREAD_SERIALIZED: "serialized", self.MPI.THREAD_MULTIPLE: "multiple"}
        return {"mpi4py": mpi4py.__version__, "mpi_library": self.MPI.Get_library_version().strip().splitlines()[0],
                "mpi_thread_level": levels.get(self.MPI.Query_thread(), str(self.MPI.Query_thread()))}

    def close(self) -> None:
        """Finalize now, with every rank, not at interpreter exit: a host leader then waits for its
        followers to exit (harness.control.Watch.release), and a follower in MPI_Finalize waits
        for the leader's (the process manager's barrier): finalizing after that wait deadlocks."""
        from mpi4py import MPI
        if not MPI.Is_finalized():
            MPI.Finalize()


def create(name: str, rank: int, world: int, local_rank: int):
    cls = MpiBackend if name == "mpi" else TorchBackend
    return cls(name, rank, world, local_rank)
