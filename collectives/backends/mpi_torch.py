"""torch.distributed over the MPI library mpi4py loads, so the layer benches run on MPI too: a Python
process group (`Backend.register_backend`) whose every collective is one non-blocking MPI call on the
CPU tensors' own memory, each torch group an MPI communicator of its members (docs/method.md, MPI
under torch.distributed)."""
from __future__ import annotations

import datetime
import os
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.futures import Future

NAME = "mpi4py"
DTYPES = {torch.float32, torch.float64, torch.int32, torch.int64, torch.int8, torch.uint8}


def _array(t: torch.Tensor) -> np.ndarray:
    """The tensor's memory as a flat numpy array (what MPI reads and writes)."""
    if t.device.type != "cpu":
        raise RuntimeError(f"the MPI process group moves CPU tensors only, not {t.device}")
    if t.dtype not in DTYPES:
        raise RuntimeError(f"the MPI process group has no {t.dtype} (allowed: "
                           f"{', '.join(sorted(str(d) for d in DTYPES))})")
    if not t.is_contiguous():
        raise RuntimeError("the MPI process group needs contiguous tensors")
    return t.detach().numpy().reshape(-1)


class MpiWork(dist._Work):
    """MPI requests, and what to do with the data once they complete (unpacking a gathered list)."""

    def __init__(self, requests: list, result: Any, then=None):
        super().__init__()
        self.requests, self.output, self.then, self.finished = requests, result, then, False

    def wait(self, timeout: datetime.timedelta | None = None) -> bool:
        if not self.finished:
            from mpi4py import MPI
            MPI.Request.Waitall(self.requests)
        return self.is_completed()   # completed requests test true: `then` runs once, there

    def is_completed(self) -> bool:
        if not self.finished:
            from mpi4py import MPI
            if MPI.Request.Testall(self.requests):
                if self.then:
                    self.then()
                self.finished = True
        return self.finished

    def get_future(self) -> Future:
        """Completed at once (it waits): the harness's buckets call wait(); a caller that chains on the
        future (torch DDP's Reducer) gets no overlap from this group."""
        self.wait()
        future: Future = Future()
        future.set_result(self.output)
        return future


class MpiProcessGroup(dist.ProcessGroup):
    """One torch group on one MPI communicator (the module docstring)."""

    def __init__(self, comm, name: str):
        super().__init__(comm.Get_rank(), comm.Get_size())   # type: ignore[call-arg]  # (rank, size): torch's stub lists one overload
        from mpi4py import MPI
        self.comm, self.MPI, self._name = comm, MPI, name
        self.redops = {dist.ReduceOp.SUM: MPI.SUM, dist.ReduceOp.PRODUCT: MPI.PROD,
                       dist.ReduceOp.MAX: MPI.MAX, dist.ReduceOp.MIN: MPI.MIN}

    @property
    def group_name(self) -> str:   # type: ignore[override]  # functional collectives find a group by its name
        return self._name

    def getBackendName(self) -> str:
        return NAME

    def size(self) -> int:
        return self.comm.Get_size()

    def _op(self, opts):
        red = getattr(opts.reduceOp, "op", opts.reduceOp)
        if red not in self.redops:
            raise RuntimeError(f"the MPI process group reduces with sum, product, max or min, not {red}")
        return self.redops[red]

    def allreduce(self, tensors, opts):
        red = self._op(opts)
        return MpiWork([self.comm.Iallreduce(self.MPI.IN_PLACE, _array(t), red) for t in tensors], tensors)

    def _allgather_base(self, out, tensor, opts):
        send, recv = _apart(_array(tensor), _array(out))
        return MpiWork([self.comm.Iallgather(send, recv)], out)

    def all_gather_single(self, out, tensor, opts):
        return self._allgather_base(out, tensor, opts)

    def allgather(self, outs, tensors, opts):
        reqs, flats = [], []
        for olist, t in zip(outs, tensors):
            flat = torch.empty(t.numel() * len(olist), dtype=t.dtype)
            reqs.append(self.comm.Iallgather(_array(t), _array(flat)))
            flats.append((flat, olist, t.numel()))

        def unpack():
            for flat, olist, n in flats:
                _unpack(flat, olist, n)
        return MpiWork(reqs, outs, unpack)

    def _reduce_scatter_base(self, out, tensor, opts):
        send, recv = _apart(_array(tensor), _array(out))
        return MpiWork([self.comm.Ireduce_scatter_block(send, recv, self._op(opts))], out)

    reduce_scatter_single = _reduce_scatter_base

    def reduce_scatter(self, outs, inputs, opts):
        red = self._op(opts)
        return MpiWork([self.comm.Ireduce_scatter_block(_array(torch.cat([i.reshape(-1) for i in ins])), _array(out), red)
                        for out, ins in zip(outs, inputs)], outs)

    def alltoall_base(self, out, tensor, out_splits, in_splits, opts):
        n = self.size()
        rows_out, rows_in = (out.shape[0] if out.dim() else 1), (tensor.shape[0] if tensor.dim() else 1)
        per_out, per_in = out.numel() // max(rows_out, 1), tensor.numel() // max(rows_in, 1)
        out_counts = [s * per_out for s in (list(out_splits) or [rows_out // n] * n)]
        in_counts = [s * per_in for s in (list(in_splits) or [rows_in // n] * n)]
        out_at, in_at = np.cumsum([0, *out_counts[:-1]]).tolist(), np.cumsum([0, *in_counts[:-1]]).tolist()
        return MpiWork([self.comm.Ialltoallv([_array(tensor), in_counts, in_at, None],
                                             [_array(out), out_counts, out_at, None])], out)

    def all_to_all_single(self, out, tensor, out_splits, in_splits, opts):
        return self.alltoall_base(out, tensor, out_splits, in_splits, opts)

    def scatter(self, outs, inputs, opts):
        root = opts.rootRank
        send = _array(torch.cat([t.reshape(-1) for t in inputs[0]])) if self.rank() == root else None
        return MpiWork([self.comm.Iscatter(send, _array(outs[0]), root=root)], outs)

    def gather(self, outs, inputs, opts):
        root, t = opts.rootRank, inputs[0]
        flat = torch.empty(t.numel() * self.size(), dtype=t.dtype) if self.rank() == root else None

        def unpack():
            if flat is not None:
                _unpack(flat, outs[0], t.numel())
        return MpiWork([self.comm.Igather(_array(t), None if flat is None else _array(flat), root=root)], outs, unpack)

    def broadcast(self, tensors, opts):
        return MpiWork([self.comm.Ibcast(_array(t), root=opts.rootRank) for t in tensors], tensors)

    def send(self, tensors, dst: int, tag: int):
        return MpiWork([self.comm.Isend(_array(t), dst, tag) for t in tensors], tensors)

    def recv(self, tensors, src: int, tag: int):
        return MpiWork([self.comm.Irecv(_array(t), src, tag) for t in tensors], tensors)

    def barrier(self, opts):
        return MpiWork([self.comm.Ibarrier()], [])

    def shutdown(self) -> None:
        """destroy_process_group calls it on every rank in the same order: the communicator goes too."""
        if self.comm != self.MPI.COMM_NULL and not self.MPI.Is_finalized():
            self.comm.Free()


def _unpack(flat: torch.Tensor, outs, n: int) -> None:
    """A gathered flat tensor's n-element parts into `outs`, in order."""
    for i, o in enumerate(outs):
        o.copy_(flat[i * n:(i + 1) * n].view_as(o))


def _apart(send: np.ndarray, recv: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """MPI forbids a send buffer inside the receive buffer (an all_gather into its own shard): copy it out."""
    return (send.copy() if np.shares_memory(send, recv) else send), recv


def _create(backend_opts, pg_options) -> MpiProcessGroup:
    """torch's group -> an MPI communicator of its members (only members get here)."""
    from mpi4py import MPI
    world = MPI.COMM_WORLD
    ranks = list(backend_opts.global_ranks_in_group)
    if not ranks or ranks == list(range(world.Get_size())):
        comm = world.Dup()
    else:
        everyone = world.Get_group()
        members = everyone.Incl(ranks)
        comm = world.Create_group(members)
        members.Free()
        everyone.Free()
    return MpiProcessGroup(comm, backend_opts.group_id)


def init_world(rank: int, world: int) -> None:
    """torch.distributed's default group on COMM_WORLD, once per process (a local store: ranks met through MPI)."""
    if dist.is_initialized():
        return
    # torch's store-based barrier after each new group would wait on a store no other rank sees
    os.environ["TORCH_DIST_INIT_BARRIER"] = "0"
    if NAME.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(NAME, _create, extended_api=True, devices=["cpu"])
    dist.init_process_group(NAME, store=dist.HashStore(), rank=rank, world_size=world)
