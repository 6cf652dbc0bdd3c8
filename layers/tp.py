"""Tensor-parallel linear layers with explicit autograd communication (Megatron-LM's f and g).

f = copy forward / all-reduce backward; g = all-reduce forward / copy backward. With sequence
parallelism the activations between blocks are sharded along the sequence (dim 0 here):
f becomes all-gather forward / reduce-scatter backward, g the reverse.
"""
from __future__ import annotations

import copy
import time

import torch
import torch.distributed as dist
from torch import nn


class CommTimer:
    """Adds up the wall time spent inside this module's collectives (device synchronised) while
    `on`: the syncs around each collective would stall a device's queue, so the timed loops run
    with it off and only the extra run that measures the share of communication turns it on."""

    def __init__(self, sync=lambda: None, on: bool = True):
        self.seconds, self.sync, self.on = 0.0, sync, on

    def run(self, fn):
        if not self.on:
            return fn()
        self.sync()
        t0 = time.perf_counter()
        out = fn()
        self.sync()
        self.seconds += time.perf_counter() - t0
        return out

    def share(self, loop, k: int, clock) -> float | None:
        """The share of one extra run of loop(k), timed on `clock`, spent in collectives (None: no time)."""
        self.seconds, self.on = 0.0, True
        clock.start()
        loop(k)
        elapsed = clock.stop() / 1e9
        self.on = False
        return self.seconds / elapsed if elapsed > 0 else None


NO_TIMER = CommTimer()


def _all_reduce(x, group, timer):
    if dist.get_world_size(group) == 1:  # tp=1: no communication, as in Megatron
        return x
    x = x.contiguous()
    timer.run(lambda: dist.all_reduce(x, group=group))
    return x


def _resized(x, group, timer, collective, rows):
    """all-gather / reduce-scatter along dim 0 into a new tensor of `rows(x rows, tp)` rows (tp=1: x itself)."""
    n = dist.get_world_size(group)
    if n == 1:
        return x
    x = x.contiguous()
    out = torch.empty((rows(x.shape[0], n), *x.shape[1:]), dtype=x.dtype, device=x.device)
    timer.run(lambda: collective(out, x, group=group))
    return out


def _all_gather(x, group, timer):
    call = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor   # torch 2.13's name first
    return _resized(x, group, timer, call, lambda rows, n: rows * n)


def _reduce_scatter(x, group, timer):
    call = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    return _resized(x, group, timer, call, lambda rows, n: rows // n)


def _identity(x, group, timer):
    return x.view_as(x)


def _reduce(x, group, timer):
    return _all_reduce(x.clone(), group, timer)  # a copy: autograd's input must not change in place


class _Comm(torch.autograd.Function):
    """One communication forward, its transpose backward."""

    @staticmethod
    def forward(ctx, x, fwd, bwd, group, timer):
        ctx.bwd, ctx.group, ctx.timer = bwd, group, timer
        return fwd(x, group, timer)

    @staticmethod
    def backward(ctx, grad):
        return ctx.bwd(grad, ctx.group, ctx.timer), None, None, None, None


def f(x, group, timer, sp: bool):
    """Enters a column-parallel layer: copy / all-reduce of the gradient, or with SP all-gather / reduce-scatter."""
    return _Comm.apply(x, *((_all_gather, _reduce_scatter) if sp else (_identity, _reduce)), group, timer)


def g(x, group, timer, sp: bool):
    """Leaves a row-parallel layer: all-reduce / copy, or with SP reduce-scatter / all-gather."""
    return _Comm.apply(x, *((_reduce_scatter, _all_gather) if sp else (_reduce, _identity)), group, timer)


def _shard(t: torch.Tensor, dim: int, rank: int, size: int) -> torch.Tensor:
    return t.chunk(size, dim=dim)[rank].detach().clone()


class _ShardedLinear(nn.Module):
    """A linear layer's weight split over the tp group along `dim` (0: output columns, 1: input rows)."""

    def __init__(self, full: nn.Linear, group, sequence_parallel: bool, timer: CommTimer, dim: int):
        super().__init__()
        self.group, self.sp, self.timer = group, sequence_parallel, timer
        rank, size = dist.get_rank(group), dist.get_world_size(group)
        name, features = ("out_features", full.out_features) if dim == 0 else ("in_features", full.in_features)
        if features % size:
            raise ValueError(f"{name} {features} is not divisible by tp {size}")
        self.weight = nn.Parameter(_shard(full.weight, dim, rank, size))
        self.tp_rank, self.tp_size = rank, size


class ColumnParallelLinear(_ShardedLinear):
    """Y_i = X A_i with A split by output columns; output stays sharded (feeds a row-parallel layer)."""

    def __init__(self, full: nn.Linear, group, sequence_parallel: bool = False, timer: CommTimer = NO_TIMER):
        super().__init__(full, group, sequence_parallel, timer, dim=0)
        self.bias = nn.Parameter(_shard(full.bias, 0, self.tp_rank, self.tp_size)) if full.bias is not None else None

    def forward(self, x):
        return nn.functional.linear(f(x, self.group, self.timer, self.sp), self.weight, self.bias)


class RowParallelLinear(_ShardedLinear):
    """Y = sum_i X_i A_i with A split by input rows; the partial sums meet in g (or reduce-scatter)."""

    def __init__(self, full: nn.Linear, group, sequence_parallel: bool = False, timer: CommTimer = NO_TIMER):
        super().__init__(full, group, sequence_parallel, timer, dim=1)
        self.bias = nn.Parameter(full.bias.detach().clone()) if full.bias is not None else None

    def forward(self, x):
        y = g(nn.functional.linear(x, self.weight), self.group, self.timer, self.sp)
        if self.bias is None:
            return y
        # with SP each rank adds the bias to its own sequence shard: its gradient is partial and
        # is all-reduced over tp in backward (Megatron all-reduces such "sequence parallel" grads too)
        return y + (f(self.bias, self.group, self.timer, sp=False) if self.sp else self.bias)


class MLP(nn.Module):
    """The reference block: Linear(h, 4h) -> GELU -> Linear(4h, h)."""

    def __init__(self, hidden: int, ffn: int | None = None):
        super().__init__()
        self.fc1 = nn.Linear(hidden, ffn or 4 * hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(ffn or 4 * hidden, hidden)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class ParallelMLP(nn.Module):
    """Column then row: one all-reduce forward and one backward (per Megatron), or SP's AG/RS pairs."""

    def __init__(self, full: MLP, group, sequence_parallel: bool = False, timer: CommTimer = NO_TIMER):
        super().__init__()
        self.fc1 = ColumnParallelLinear(full.fc1, group, sequence_parallel, timer)
        self.act = nn.GELU()
        self.fc2 = RowParallelLinear(full.fc2, group, sequence_parallel, timer)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


def dtensor_linear(full: nn.Linear, mesh, sequence_parallel: bool = False) -> nn.Module:
    """ColumnParallelLinear through DTensor (a deep copy is parallelised): its output stays sharded
    by columns, and with SP its input is the sequence shard, all-gathered."""
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module
    style = ColwiseParallel(input_layouts=Shard(0)) if sequence_parallel else ColwiseParallel()
    return parallelize_module(copy.deepcopy(full), mesh, style)


def dtensor_mlp(full: MLP, mesh, sequence_parallel: bool = False) -> nn.Module:
    """The same block through PyTorch's own DTensor tensor parallelism (a deep copy is parallelised)."""
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    plan = ({"fc1": ColwiseParallel(input_layouts=Shard(0)), "fc2": RowwiseParallel(output_layouts=Shard(0))}
            if sequence_parallel else {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()})
    return parallelize_module(copy.deepcopy(full), mesh, plan)
