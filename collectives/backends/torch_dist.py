"""gloo (CPU), nccl (CUDA) and hccl (NPU) through torch.distributed: the rank side and one BackendInfo
each. What NCCL and HCCL are (their switch per op, their capability tables) is in nccl.py and hccl.py."""
from __future__ import annotations

import datetime
import json
import os

import numpy as np

from collectives.backends import hccl, nccl
from collectives.backends.base import BackendInfo, encode, family_call, no_switch, page_aligned
from collectives.capabilities import ALL, DeviceFacts
from collectives.device import Device, accelerator_facts, probe_device
from collectives.ops import OPS


def agent_store(env) -> bool:
    """Whether torchrun's leader agent serves these ranks a TCPStore at MASTER_ADDR:MASTER_PORT
    (TORCHELASTIC_USE_AGENT_STORE): they meet there, not at the driver's, whose sockets grow with ranks."""
    return env.get("TORCHELASTIC_USE_AGENT_STORE") == "True" and bool(env.get("MASTER_ADDR")) and bool(env.get("MASTER_PORT"))


class TorchBackend:
    """One rank of a torch.distributed process group."""

    def __init__(self, name: str, rank: int, world: int, local_rank: int):
        self.info = BACKENDS[name]
        for key, value in self.info.rank_env:
            os.environ.setdefault(key, value)
        import torch
        import torch.distributed as dist
        self.torch, self.dist = torch, dist
        self.name, self.rank, self.world = name, rank, world
        self.device = Device(self.info.device_kind, local_rank)
        timeout = datetime.timedelta(hours=6)
        store = os.environ.get("HCCL_BENCH_STORE")          # a local group: a file, no listening socket
        served = os.environ.get("HCCL_BENCH_TCP_STORE")     # a launcher's group: the driver serves the store
        if agent_store(os.environ):   # torchrun's: its leader agent serves one; the driver's sockets stay O(hosts)
            dist.init_process_group(backend=name, init_method="env://", rank=rank, world_size=world, timeout=timeout)
        elif served:
            host, port = served.rsplit(":", 1)
            tcp = dist.TCPStore(host, int(port), world, is_master=False, timeout=datetime.timedelta(minutes=5))
            dist.init_process_group(backend=name, store=tcp, rank=rank, world_size=world, timeout=timeout)
        else:
            dist.init_process_group(backend=name, init_method=f"file://{os.path.abspath(store)}" if store else None,
                                    rank=rank, world_size=world, timeout=timeout)
        # a CPU backend's own group doubles as the side channel; device backends get a CPU gloo group
        self.side = None if self.info.device_kind == "cpu" else dist.new_group(backend="gloo")
        self.redops = {"sum": dist.ReduceOp.SUM, "prod": dist.ReduceOp.PRODUCT,
                       "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}
        if self.info.device_kind != "cpu":
            # NCCL/HCCL make the default group's communicator at its first call, with every rank: here,
            # not at the doctor's first pair exchange (ranks 0 and 1 only), which would wait for the rest
            op = OPS[nccl.warmup_op(os.environ)]
            send, recv = (torch.zeros(1 if per_rank else world, device=self.device.torch_device)
                          for per_rank in (op.send_per_rank, op.recv_per_rank))
            self.call(op.name, send, recv, "sum", inplace=False)()
            self.device.synchronize()

    # -- buffers
    def _empty(self, count: int, dtype: str):
        """Device memory from the device's allocator; host memory page-aligned (see page_aligned)."""
        torch, dt = self.torch, getattr(self.torch, dtype)
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
        return family_call(self, op, send, recv, self.redops.get(redop), inplace, asynchronous)

    def copy(self, dst, src) -> None:
        """dst[:] = src, both 1-D buffers of this backend (gradient bucket copies)."""
        dst.copy_(src)

    def scale(self, buf, factor: float) -> None:
        """buf *= float32(factor): the same rounding as the mpi backend's numpy."""
        buf.mul_(float(np.float32(factor)))

    # -- point to point (the doctor's link measurements), always batched: a bare send/recv makes a
    # 2-rank communicator per pair (docs/method.md, Point to point on torch.distributed)
    def _p2p(self, *ops) -> None:
        """Run (isend|irecv, buffer, peer) triples as one batch and wait for them."""
        d = self.dist
        for req in d.batch_isend_irecv([d.P2POp(getattr(d, kind), buf, peer) for kind, buf, peer in ops]):
            req.wait()
        self.device.synchronize()

    def exchange(self, peer: int, send, recv) -> None:
        """Send to and receive from `peer` at once; both sides call it."""
        self._p2p(("isend", send, peer), ("irecv", recv, peer))

    def send(self, peer: int, buf) -> None:
        """Blocking point to point (the doctor's ping-pong latency: one message in flight)."""
        self._p2p(("isend", buf, peer))

    def recv(self, peer: int, buf) -> None:
        self._p2p(("irecv", buf, peer))

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
        data = encode(obj) if self.rank == 0 else b""
        size = torch.tensor([len(data)], dtype=torch.int64)
        self.dist.broadcast(size, 0, group=self.side)
        buf = (torch.frombuffer(bytearray(data), dtype=torch.uint8) if self.rank == 0
               else torch.empty(int(size), dtype=torch.uint8))
        self.dist.broadcast(buf, 0, group=self.side)
        return json.loads(bytes(buf.numpy()).decode())

    def gather_json(self, obj):
        torch = self.torch
        data = encode(obj)
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

    def torch_world(self) -> None:
        """Made in __init__: this backend is torch.distributed."""

    def close(self) -> None:
        self.dist.destroy_process_group()


def _torch(name: str, device_kind: str, library: str, **declared) -> BackendInfo:
    return BackendInfo(name, family="torch", device_kind=device_kind, dtypes=ALL, library=library,
                       api="torch.distributed", create=TorchBackend, **declared)


def _device(name: str, kind: str, library: str, noun: str, **declared) -> BackendInfo:
    """A device backend: one rank per device, probed and its facts read (CollNet for CUDA's NCCL)."""
    def read() -> DeviceFacts:
        got = accelerator_facts(kind)
        return DeviceFacts(name, name=got.get("name", ""), devices=got.get("devices", 0), version=got.get("version", ()),
                           capability=got.get("capability", (0, 0)),
                           collnet=kind == "cuda" and os.environ.get("NCCL_COLLNET_ENABLE") == "1")
    return _torch(name, kind, library, one_rank_per_device=True, device_noun=noun, read_facts=read,
                  probe=lambda: probe_device(kind, name), **declared)


BACKENDS = {
    "gloo": _torch("gloo", "cpu", "gloo", switch=no_switch("gloo", "it runs its own ring/halving-doubling internally")),
    "nccl": _device("nccl", "cuda", "NCCL", "GPU", switch=nccl.switch, switch_vars=(r"NCCL_ALGO",),
                    native_algos=nccl.NCCL_ALGOS, portable=nccl.NCCL_PORTABLE, skip_reason=nccl.skip_reason,
                    algo_ran=nccl.nccl_algo_ran),
    # rank_env: docs/method.md, Device and library facts
    "hccl": _device("hccl", "npu", "HCCL", "NPU", rank_env=(("TORCH_DEVICE_BACKEND_AUTOLOAD", "0"),),
                    switch=hccl.switch, switch_vars=(r"HCCL_ALGO",), native_algos=hccl.HCCL_NATIVE,
                    portable=hccl.HCCL_PORTABLE, skip_reason=hccl.skip_reason, switch_names=hccl.switch_names,
                    requested_only=True),
}
