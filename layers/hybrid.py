"""The hybrid step's parts that are not in layers.tp or layers.pipeline: DDP's bucketed, overlapped
gradient reduction (GradBuckets, as docs/layers.md `test_hybrid` says) and a part timer."""
from __future__ import annotations

import functools
import time

import torch
import torch.distributed as dist

from layers.memory import bucket_plan
from layers.tp import CommTimer, ParallelMLP


class _SwapBatchSeq(torch.autograd.Function):
    """(batch, seq, ...) <-> (seq, batch, ...) with the result and its gradient contiguous (gloo and HCCL
    refuse a non-contiguous pipeline receive: docs/layers.md, `sp`)."""

    @staticmethod
    def forward(ctx, x):
        return x.transpose(0, 1).contiguous()

    @staticmethod
    def backward(ctx, grad):
        return grad.transpose(0, 1).contiguous()


class SequenceParallelMLP(ParallelMLP):
    """layers.tp's ParallelMLP with sequence parallelism on (batch, seq / tp, hidden) activations, through
    the (seq, batch, hidden) view Megatron uses (docs/layers.md, `sp`)."""

    def __init__(self, full, group, timer):
        super().__init__(full, group, True, timer)

    def forward(self, x):
        return _SwapBatchSeq.apply(super().forward(_SwapBatchSeq.apply(x)))


class PartTimer(CommTimer):
    """Adds up the time of the calls it runs while `on` (wall clock on CPU, events on a device `mod`,
    `own_stream`: the call alone), or leaves them out (`skip`); why so: docs/layers.md (`tp`)."""

    def __init__(self, mod=None, own_stream: bool = False):
        super().__init__(on=False)
        self.mod, self.skip = mod, False
        self.stream = mod.Stream() if mod is not None and own_stream else None
        self.reset()

    def reset(self) -> None:
        self._wall = 0.0
        self._events: list[tuple] = []

    def run(self, fn):
        if self.skip:
            return None
        if not self.on:
            return fn()
        if self.mod is None:
            t0 = time.perf_counter()
            out = fn()
            self._wall += time.perf_counter() - t0
            return out
        start, end = self.mod.Event(enable_timing=True), self.mod.Event(enable_timing=True)
        if self.stream is None:
            start.record()
            out = fn()
            end.record()
        else:
            current = self.mod.current_stream()
            self.stream.wait_stream(current)
            with self.mod.stream(self.stream):
                start.record()
                out = fn()
                end.record()
            current.wait_stream(self.stream)
        self._events.append((start, end))
        return out

    def total(self) -> float:
        """Seconds inside the calls run while on, since the last reset."""
        if self._events:
            self._events[-1][1].synchronize()
        return self._wall + sum(s.elapsed_time(e) for s, e in self._events) / 1e3


class GradBuckets:
    """The dp group's overlapped, bucketed gradient reduction of `params` (module docstring);
    `accumulations`: how many backward passes a step adds into each gradient (its microbatches)."""

    def __init__(self, params: list[torch.nn.Parameter], group, cap_bytes: int, accumulations: int,
                 distributed: bool = False, reduce_dtype: torch.dtype | None = None):
        self.params, self.group, self.accumulations, self.distributed = list(params), group, accumulations, distributed
        self.size, self.index = dist.get_world_size(group), dist.get_rank(group)
        dtype = reduce_dtype or self.params[0].dtype
        self.plan = bucket_plan([p.numel() * dtype.itemsize for p in self.params], cap_bytes)
        # a distributed optimizer's bucket is padded to a multiple of dp (Megatron pads its buckets too)
        self.flats = [self.params[m[0]].new_zeros(self._padded(sum(self.params[i].numel() for i in m)), dtype=dtype)
                      for m in self.plan]
        self.shards = [f.new_empty(f.numel() // self.size) for f in self.flats] if distributed else []
        self.bucket_of = {i: b for b, members in enumerate(self.plan) for i in members}
        self.on = True   # off: the hooks do nothing (the step without dp reduction, the compute-alone loop)
        self._reset()
        for i, p in enumerate(self.params):
            p.register_post_accumulate_grad_hook(functools.partial(self._accumulated, i))

    def _padded(self, n: int) -> int:
        return -(-n // self.size) * self.size if self.distributed else n

    @property
    def nbytes(self) -> int:
        """Gradient bytes this rank reduces per step (the buckets, in the reduction's dtype)."""
        return sum(f.numel() * f.element_size() for f in self.flats)

    def shard_range(self, b: int) -> tuple[int, int]:
        """The elements of bucket b whose averaged gradient and weights this rank owns (distributed)."""
        n = self.flats[b].numel() // self.size
        return self.index * n, (self.index + 1) * n

    def _reset(self) -> None:
        self.seen = [0] * len(self.params)
        self.left = [len(m) for m in self.plan]
        self.started: list = []   # the started buckets' Work handles, in plan order

    def _accumulated(self, i: int, _param) -> None:
        if not self.on:
            return
        self.seen[i] += 1
        if self.seen[i] != self.accumulations:
            return
        self.left[self.bucket_of[i]] -= 1
        while len(self.started) < len(self.plan) and self.left[len(self.started)] == 0:
            self._start(len(self.started))

    def _views(self, b: int, flat: torch.Tensor | None = None):
        flat = self.flats[b] if flat is None else flat
        offset = 0
        for i in self.plan[b]:
            n = self.params[i].numel()
            yield self.params[i], flat[offset:offset + n]
            offset += n

    def _start(self, b: int) -> None:
        for p, view in self._views(b):
            view.copy_(p.grad.reshape(-1))
        if self.distributed:
            self.started.append(dist.reduce_scatter_tensor(self.shards[b], self.flats[b], group=self.group, async_op=True))
        else:
            self.started.append(dist.all_reduce(self.flats[b], group=self.group, async_op=True))

    def finish(self) -> None:
        """Wait for every bucket and write the averages back (a step whose backward left one unstarted is a bug);
        distributed: the averages stay in this rank's shards (`shards`), the gradients are left as they are."""
        if len(self.started) != len(self.plan):
            raise RuntimeError(f"{len(self.plan) - len(self.started)} of {len(self.plan)} gradient buckets never "
                               "became ready: a parameter got fewer gradients than the step's microbatches")
        for b, work in enumerate(self.started):
            work.wait()
            if self.distributed:
                self.shards[b].div_(self.size)
                continue
            self.flats[b].div_(self.size)
            for p, view in self._views(b):
                p.grad.copy_(view.view_as(p.grad))
        self._reset()

    @torch.no_grad()
    def sgd_step(self, lr: float) -> None:
        """The distributed optimizer's step after `finish`: SGD on this rank's shard of each bucket's
        weights (the flat buffer reused), then an all_gather of the updated weights into every replica."""
        for b in range(len(self.plan)):
            weights = self.flats[b].new_zeros(self.flats[b].numel(), dtype=self.params[0].dtype)   # the weights' dtype
            for p, view in self._views(b, weights):
                view.copy_(p.reshape(-1))
            lo, hi = self.shard_range(b)
            mine = weights[lo:hi].clone()
            mine.sub_(self.shards[b].to(mine.dtype), alpha=lr)
            dist.all_gather_into_tensor(weights, mine, group=self.group)
            for p, view in self._views(b, weights):
                p.copy_(view.view_as(p))
